//! `fence`: command-line tools for fencing-token locks and gates.

mod demo;
mod elect;
mod events;
mod failure;
mod run;
mod schema;
mod source_arg;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use rustix::process::Signal;

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

    /// How log lines on stderr look: `text` for people (coloured only on a
    /// terminal without NO_COLOR), `json` for log collectors. RUST_LOG picks
    /// what is logged (default: fence's own messages, errors of libraries)
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay the paused-client timeline with real processes: a holder frozen
    /// past its lease writes late, first into blind storage, then through a gate
    #[command(after_help = demo::EXAMPLES)]
    Demo(demo::DemoArgs),

    /// Hold a lock while a command runs; stop the command if the lock is lost
    #[command(after_help = run::EXAMPLES)]
    Run(run::RunArgs),

    /// Campaign for leadership; print a JSON line each time this candidate is elected or loses
    #[command(after_help = elect::ELECT_EXAMPLES)]
    Elect(elect::ElectArgs),

    /// Print the current leader of an election and each change as JSON lines
    #[command(after_help = elect::OBSERVE_EXAMPLES)]
    Observe(elect::ObserveArgs),

    /// Create the lock table of a postgres:// source (or print its SQL)
    #[command(after_help = schema::EXAMPLES)]
    Schema(schema::SchemaArgs),

    /// One lock holder of `fence demo` (started by it, not by hand)
    #[command(hide = true)]
    DemoClient(demo::client::ClientArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_failure(e),
    };
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(&Failure::runtime(format!(
                "cannot start the tokio runtime: {e}"
            )))
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => {
                let outcome = tokio::select! {
                    r = demo::run(args) => r,
                    // Returning drops the demo's child guards (which kill the
                    // children) and its temp dir.
                    f = interrupted() => Err(f),
                };
                match outcome {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(f) => fail(&f),
                }
            }
            Command::Run(args) => match run::run(args).await {
                Ok(code) => ExitCode::from(code),
                Err(f) => fail(&f),
            },
            Command::Elect(args) => exit(elect::elect(args).await),
            Command::Observe(args) => exit(elect::observe(args).await),
            Command::Schema(args) => exit(schema::schema(args).await),
            Command::DemoClient(args) => ExitCode::from(demo::client::run(args).await),
        }
    });
    // Blocking-pool threads (stdin readers) must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Resolves on SIGINT or SIGTERM with the conventional 128+signal code.
pub(crate) async fn interrupted() -> Failure {
    run::interrupted(stop_signal().await)
}

/// The first SIGINT or SIGTERM sent to `fence`.
pub(crate) async fn stop_signal() -> Signal {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without handlers the default actions still stop us, and the
        // children die with us through their parent-death signal.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => Signal::INT,
        _ = term.recv() => Signal::TERM,
    }
}

fn exit(outcome: failure::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => fail(&f),
    }
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
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(e.exit_code().clamp(0, 255) as u8)
        }
        _ => {
            // The message may continue on indented lines (a list of missing
            // arguments); it ends at the first blank line.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.is_empty())
                .collect();
            let message = message.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            fail(&Failure::usage(format!("{message} (see fence --help)")))
        }
    }
}

/// Our own crates' messages from `info` up, other libraries' errors only: a
/// member failover is routine for us, not a warning from a client library.
/// kube's client logs each failed request as an error that it also returns
/// to us, and we report it in our own words.
const DEFAULT_LOG_FILTER: &str = "error,kube_client=off,fence=info,fencing=info,\
     fencing_core=info,fencing_etcd=info,fencing_zookeeper=info,fencing_kube=info,\
     fencing_election=info";

fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder
            .with_ansi(colour_wanted(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR"),
            ))
            .try_init(),
    };
}

/// Colour only on a terminal, and never when NO_COLOR is set to anything
/// but the empty string (no-color.org).
fn colour_wanted(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_wanted(true, None));
        assert!(colour_wanted(true, Some("".into())));
        assert!(!colour_wanted(true, Some("1".into())));
        assert!(!colour_wanted(false, None));
    }

    #[test]
    fn the_default_filter_parses() {
        tracing_subscriber::EnvFilter::try_new(DEFAULT_LOG_FILTER).unwrap();
    }
}
