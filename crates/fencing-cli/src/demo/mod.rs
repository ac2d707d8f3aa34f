//! `fence demo`: the paused-client timeline from the fencing-token problem
//! statement, replayed with real processes, once without and once with a
//! gate in the storage.
//!
//! This process owns the storage (a Unix socket server) and plays the
//! scheduler: it freezes C1 with SIGSTOP and thaws it with SIGCONT. C1 and C2
//! are separate `fence demo-client` processes that share a LocalSource
//! directory, so the lease really expires while C1 is frozen.

pub mod client;
mod process;
mod protocol;
mod run;
mod storage;

use std::sync::Arc;
use std::time::Duration;

use fencing::{Error, FencingSource, ResourceName};

use crate::failure::{Failure, Result};
use protocol::Reply;

pub const EXAMPLES: &str = "\
Examples:
  fence demo                                  # fresh local source in a temp dir
  fence demo --ttl-ms 800                     # shorter leases, faster demo
  fence demo --source local://./fence-state   # keep the source directory

Exit status: 0 when the gated run refused the stale write and kept value=100,
1 on any other outcome or runtime failure, 2 on a usage or configuration error.";

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Where C1 and C2 take their lease: local://DIR, etcd://..., etcds://..., zk://..., kube://..., postgres://...
    /// [default: a fresh local:// directory in the demo's temp dir]
    #[arg(long, value_name = "URL")]
    source: Option<String>,

    /// Lease length in milliseconds; the demo waits a little longer than
    /// this while C1 is frozen
    #[arg(long, value_name = "MS", default_value_t = 1500,
          value_parser = clap::value_parser!(u64).range(300..=10_000))]
    ttl_ms: u64,
}

/// What every run shares.
pub struct Setup {
    tmp: tempfile::TempDir,
    source: String,
    /// The parent's own view of the source, to check claims about leases.
    coordinator: Arc<dyn FencingSource>,
    lock: ResourceName,
    ttl: Duration,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let tmp = tempfile::Builder::new()
        .prefix("fence-demo-")
        .tempdir()
        .map_err(|e| Failure::runtime(format!("cannot create a temp dir: {e}")))?;
    let given = args.source.is_some();
    let source = args
        .source
        .unwrap_or_else(|| format!("local://{}", tmp.path().join("source").display()));
    // Open the source once here so a bad URL is reported before any child
    // starts, as the user's mistake rather than as a child's failure.
    let coordinator = match fencing::connect(&source).await {
        Ok(c) => c,
        Err(Error::Config(msg)) if given => {
            return Err(Failure::usage(format!("--source {source}: {msg}")))
        }
        Err(e) => return Err(Failure::runtime(format!("source {source}: {e}"))),
    };
    let lock = ResourceName::new("ledger").map_err(|e| Failure::runtime(e.to_string()))?;
    let setup = Setup {
        tmp,
        source,
        coordinator,
        lock,
        ttl: Duration::from_millis(args.ttl_ms),
    };

    println!("fence demo: a lock holder frozen past its lease, without and with a fencing gate");
    println!(
        "source {}  lock {:?}  ttl {} ms",
        setup.source,
        setup.lock.as_str(),
        args.ttl_ms
    );
    println!("C1 and C2 are separate processes; this one owns the storage socket and freezes C1 with SIGSTOP.");

    println!("\n--- gate OFF (storage writes blindly) ---");
    let off = run::run(&setup, false).await?;
    match (&off.late_write, off.final_value.as_deref()) {
        (Reply::Ok, Some("1")) => println!(
            "verdict: LOST UPDATE - storage accepted a write from an expired lease holder; C2's value=100 is gone"
        ),
        (reply, value) => {
            println!("verdict: no lost update this time (late write: {reply}, final value {value:?})");
            println!("note: an ungated store is expected to lose C2's value here; only the gated run decides the exit code");
        }
    }

    println!("\n--- gate ON (FileGate) ---");
    let on = run::run(&setup, true).await?;
    match (&on.late_write, on.final_value.as_deref()) {
        (Reply::Rejected { presented, highest }, Some("100")) => {
            println!("verdict: SAFE - the gate refused stale token {presented} (highest {highest}); C2's value=100 survives");
        }
        (reply, value) => {
            println!("verdict: FAILED - late write got {reply}, final value {value:?}");
            return Err(Failure::runtime(format!(
                "the gated run did not fence the stale write (late write: {reply}, final value: {value:?})"
            )));
        }
    }
    println!("\nresult: PASS - fencing turned a silent lost update into a visible rejection");
    Ok(())
}
