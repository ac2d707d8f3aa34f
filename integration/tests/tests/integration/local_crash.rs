//! kill -9 in the middle of granting never lets a LocalSource token repeat
//! or go backwards, and leaves the directory readable.
//!
//! SIGKILL keeps the page cache, so that test alone would pass with every
//! fsync removed. A power loss keeps only what was made durable: the second
//! test traces the grant loop's syscalls and checks that every state file
//! was fsynced before its rename, and its directory after it, before each
//! token was printed (see `fencing_harness::durability`).

use std::process::Command;
use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, FencingToken, LocalSource, ResourceName};
use fencing_harness::Reaped;

const KILLS: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_granting_never_repeats_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_grant-loop");
    let mut handed_out: Vec<FencingToken> = Vec::new();
    for round in 0..KILLS {
        // Two processes contend so the directory lock is exercised too.
        let procs: Vec<Reaped> = (0..2)
            .map(|_| Reaped::spawn(Command::new(bin).arg(dir.path()).arg("crash")).expect("spawn"))
            .collect();
        // Vary the moment of the kill so it lands at different steps.
        tokio::time::sleep(Duration::from_millis(40 + 23 * round as u64)).await;
        for p in procs {
            for line in p.kill_and_collect() {
                handed_out.push(
                    line.parse()
                        .unwrap_or_else(|e| panic!("bad line {line:?}: {e}")),
                );
            }
        }
    }
    assert!(
        handed_out.len() > KILLS,
        "the loop granted too little to test anything"
    );
    let mut sorted = handed_out.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        handed_out.len(),
        "a token was handed out twice"
    );

    let source = LocalSource::open(dir.path()).expect("directory readable after kills");
    let r = ResourceName::new("crash").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(10));
    let next = source
        .acquire(&r, &opts)
        .await
        .expect("acquire after kills");
    let highest = *sorted.last().unwrap();
    assert!(
        next.token() > highest,
        "token {} after {highest} was handed out",
        next.token()
    );
    eprintln!(
        "{} grants across {KILLS} kills; highest handed out {highest}, next {}",
        handed_out.len(),
        next.token()
    );
    next.release().await.unwrap();
}

/// The grant loop's syscalls, traced, with `args` after its directory.
fn traced_grant_loop(args: &[&str]) -> Vec<fencing_harness::durability::Call> {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    let state = dir.path().join("state");
    let status = Command::new("strace")
        .args(["-f", "-qq", "-s", "0", "-o"])
        .arg(&trace)
        .args([
            "-e",
            "trace=openat,write,pwrite64,writev,fsync,fdatasync,rename,renameat,renameat2,close",
        ])
        .arg(env!("CARGO_BIN_EXE_grant-loop"))
        .arg(&state)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("strace is installed by scripts/install/netns.sh");
    assert!(status.success(), "traced grant loop {args:?}: {status}");
    fencing_harness::durability::parse(&std::fs::read_to_string(&trace).unwrap())
}

/// The same for a FileGate: each admit returns only once the raised mark
/// is durable.
#[test]
fn every_gate_mark_is_durable_before_admit_returns() {
    let calls = traced_grant_loop(&["traced", "20", "--gate"]);
    let announced = fencing_harness::durability::check(&calls).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(announced, 20, "one stdout write per admit");
}

#[test]
fn every_token_is_durable_before_it_is_handed_out() {
    let calls = traced_grant_loop(&["traced", "20"]);
    let renames = calls
        .iter()
        .filter(|c| matches!(c, fencing_harness::durability::Call::Rename { .. }))
        .count();
    let announced = fencing_harness::durability::check(&calls).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{announced} tokens announced after {renames} durable replaces");
    assert_eq!(announced, 20, "one stdout write per token");
    assert!(
        renames >= 20,
        "only {renames} renames: is the state still replaced by rename?"
    );
}

/// A process that drops its grant and closes its source right before it
/// exits leaves the lock free: the release that the drop started is
/// finished by `close()` (issue 55: the exiting runtime killed it, and the
/// lock stayed held for the TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_dropped_before_close_is_released_before_the_process_exits() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("local://{}?ttl=60", dir.path().display());
    let holder = std::path::Path::new(env!("CARGO_BIN_EXE_holder"));
    let b = fencing::connect(&url).await.unwrap();
    fencing_harness::frozen::dropped_then_closed_leaves_the_lock_free(holder, &url, &b).await;
}
