//! A candidate in its own process, for the election tests' kill and
//! resign scenarios.
//!
//! Usage: `campaigner URL ELECTION IDENTITY LEASE_MS RENEW_MS RETRY_MS`
//! (URL: anything `fencing::connect` opens; the three timings are the
//! election's lease_duration, renew_deadline and retry_period in
//! milliseconds).
//!
//! It campaigns and, once elected, prints `LEADER <token>`; then it holds
//! leadership until
//! - it is killed (the lease then runs out at the coordinator),
//! - its stdin closes or reads a line: it resigns and prints `RESIGNED`
//!   (exit 0), or
//! - leadership may be lost: it prints `LOST <reason>` (exit 3).
//!
//! Bad arguments or a failed campaign: a message on stderr, exit 2.

use std::time::Duration;

use fencing::ResourceName;
use fencing_election::{ElectionConfig, LeaderElector};
use tokio::sync::oneshot;

type Failure = Box<dyn std::error::Error>;

fn usage() -> Failure {
    "usage: campaigner URL ELECTION IDENTITY LEASE_MS RENEW_MS RETRY_MS".into()
}

fn millis(arg: &str, name: &str) -> Result<Duration, Failure> {
    let ms: u64 = arg
        .parse()
        .map_err(|e| format!("{name} {arg:?} is not a number of milliseconds: {e}"))?;
    Ok(Duration::from_millis(ms))
}

async fn elector(args: &[String]) -> Result<LeaderElector, Failure> {
    let [url, election, identity, lease, renew, retry] = args else {
        return Err(usage());
    };
    let config = ElectionConfig::new(identity.as_str())
        .lease_duration(millis(lease, "LEASE_MS")?)
        .renew_deadline(millis(renew, "RENEW_MS")?)
        .retry_period(millis(retry, "RETRY_MS")?);
    let source = fencing::connect(url).await?;
    Ok(LeaderElector::new(
        source,
        ResourceName::new(election.as_str())?,
        config,
    )?)
}

/// Resolves when stdin reaches its end or yields a line. Read on a thread
/// of its own: the read blocks, and must not block the runtime.
fn stdin_closed() -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        let _ = tx.send(());
    });
    rx
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let elector = match elector(&args).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("campaigner: {e}");
            std::process::exit(2);
        }
    };
    let leadership = match elector.campaign().await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("campaigner: campaign failed: {e}");
            std::process::exit(2);
        }
    };
    println!("LEADER {}", leadership.token());
    let stdin = stdin_closed();
    tokio::select! {
        reason = leadership.lost() => {
            println!("LOST {reason}");
            std::process::exit(3);
        }
        _ = stdin => {
            match leadership.resign().await {
                Ok(()) => println!("RESIGNED"),
                Err(e) => {
                    eprintln!("campaigner: resign failed: {e}");
                    std::process::exit(2);
                }
            }
        }
    }
}
