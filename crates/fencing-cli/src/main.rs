//! `fence`: command-line tools for fencing-token locks and gates.

mod demo;
mod failure;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use failure::Failure;

#[derive(Parser, Debug)]
#[command(
    name = "fence",
    version,
    about = "Locks and leases whose grants carry fencing tokens, and the storage gates that refuse stale ones",
    after_help = demo::EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay the paused-client timeline with real processes: a holder frozen
    /// past its lease writes late, first into blind storage, then through a gate
    #[command(after_help = demo::EXAMPLES)]
    Demo(demo::DemoArgs),

    /// One lock holder of `fence demo` (started by it, not by hand)
    #[command(hide = true)]
    DemoClient(demo::client::ClientArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_failure(e),
    };
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(&Failure::runtime(format!("cannot start the tokio runtime: {e}"))),
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => {
                let outcome = tokio::select! {
                    r = demo::run(args) => r,
                    // Returning drops the demo's child guards, which kill the children.
                    _ = tokio::signal::ctrl_c() => Err(Failure { code: 130, message: "interrupted".into() }),
                };
                match outcome {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(f) => fail(&f),
                }
            }
            Command::DemoClient(args) => ExitCode::from(demo::client::run(args).await),
        }
    });
    // Blocking-pool threads (stdin readers) must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

fn fail(f: &Failure) -> ExitCode {
    eprintln!("fence: {}", f.one_line());
    ExitCode::from(f.code)
}

/// Help and version print as clap renders them; every other parse error is
/// cut to its first line so scripts can rely on one line per error.
fn clap_failure(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(e.exit_code().clamp(0, 255) as u8)
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid command line");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            fail(&Failure::usage(format!("{first} (see fence --help)")))
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
