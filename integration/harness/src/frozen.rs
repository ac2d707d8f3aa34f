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
        .acquire(
            &lock,
            &AcquireOptions::new().timeout(Duration::from_secs(30)),
        )
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
}
