//! The reference's pause with real processes, for any backend: a holder
//! process frozen past its lease sends a write after a second holder wrote;
//! the storage (this process) refuses it through the backend's own gate and
//! a FileGate, and the newer holder's retry passes.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fencing::{
    AcquireOptions, Error, FencingSource, FencingToken, FileGate, Gate, Grant, ResourceName,
};
use fencing_testkit::History;
use rustix::process::Signal;

use crate::Reaped;

/// Runs the scenario. `url` is what the holder process connects to; `b` is
/// the second client, `gate` the backend's gate (held by the storage).
pub async fn frozen_holder_is_fenced(
    holder_bin: &Path,
    url: &str,
    b: &dyn FencingSource,
    gate: &dyn Gate,
) {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let holder = Reaped::spawn(Command::new(holder_bin).args([url, "frozen"]).arg(&go)).unwrap();
    let line = || {
        holder
            .next_line(Duration::from_secs(30))
            .expect("holder output")
    };
    let token = |l: String, prefix: &str| -> FencingToken {
        l.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("expected {prefix}..., got {l:?}"))
            .parse()
            .unwrap()
    };
    let t1 = token(line(), "GRANTED ");
    let file_gate = FileGate::open(dir.path().join("file.gate")).unwrap();
    let gates: [&dyn Gate; 2] = [gate, &file_gate];
    let history = History::new();
    let lock = ResourceName::new("frozen").unwrap();
    history.granted(0, t1).await;
    assert_eq!(token(line(), "WRITE "), t1);
    for g in gates {
        history
            .write(g, &lock, 0, t1)
            .await
            .expect("holder's first write");
    }
    assert_eq!(line(), "READY");

    holder.signal(Signal::STOP);
    let gb: Grant = b
        .acquire(&lock, &AcquireOptions::new().wait(Duration::from_secs(30)))
        .await
        .unwrap();
    // No release of token t1 is recorded: the frozen holder still believes
    // it holds (that is the point), so only the gate's verdicts are checked.
    history.granted(1, gb.token()).await;
    for g in gates {
        history
            .write(g, &lock, 1, gb.token())
            .await
            .expect("new holder's write");
    }

    holder.signal(Signal::CONT);
    std::fs::write(&go, b"go").unwrap();
    assert_eq!(
        token(line(), "WRITE "),
        t1,
        "the resumed holder writes with its old token"
    );
    for g in gates {
        match history.write(g, &lock, 0, t1).await {
            Err(Error::Stale { presented, highest }) => {
                assert_eq!((presented, highest), (t1, gb.token()))
            }
            other => panic!("stale write from the resumed holder was not refused: {other:?}"),
        }
        history
            .write(g, &lock, 1, gb.token())
            .await
            .expect("retry with the current token");
    }
    history.check_writes().await.unwrap();
    gb.release().await.unwrap();
    dropped_then_closed_leaves_the_lock_free(holder_bin, url, b).await;
}

/// A process that drops its grant, closes its source and exits at once
/// leaves nothing holding the lock: the next holder is granted by its
/// first attempt, not a TTL later (issue 55: the release of a dropped
/// grant ran in a task the exiting runtime killed, and `close()` did not
/// wait for it).
pub async fn dropped_then_closed_leaves_the_lock_free(
    holder_bin: &Path,
    url: &str,
    b: &dyn FencingSource,
) {
    let lock = ResourceName::new("dropped").unwrap();
    let mut holder =
        Reaped::spawn(Command::new(holder_bin).args([url, lock.as_str(), "--drop-and-close"]))
            .unwrap();
    let granted = holder.next_line(Duration::from_secs(30));
    assert!(
        granted
            .as_deref()
            .is_some_and(|l| l.starts_with("GRANTED ")),
        "the holder took the lock: {granted:?}"
    );
    let exited = std::time::Instant::now();
    while holder.try_wait().is_none() {
        assert!(
            exited.elapsed() < Duration::from_secs(30),
            "the holder did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let next = b.try_acquire(&lock, &AcquireOptions::new()).await.unwrap();
    let next = next.expect("the lock is free once the holder exited");
    next.release().await.unwrap();
}
