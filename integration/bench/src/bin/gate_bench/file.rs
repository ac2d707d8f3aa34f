//! `FileGate` admits per second: raises, which persist, and retries at the
//! mark, which do not.

use std::time::{Duration, Instant};

use fencing::{FencingToken, FileGate, Gate, ResourceName};

use crate::Res;

/// Fewest raises timed, so a tiny `--iterations` still averages a few
/// dozen fsyncs.
pub const MIN_RAISES: u64 = 20;
/// Bounds each timed loop: a disk that stalls ends the run with an error
/// instead of hanging it.
const LOOP_LIMIT: Duration = Duration::from_secs(120);

/// Times `raises` raises and then `retries` retries on one resource of a
/// fresh gate file in a temporary directory; returns the CSV rows
/// `kind,admits_per_s`.
pub async fn run(raises: u64, retries: u64) -> Res<Vec<String>> {
    let dir = tempfile::tempdir()?;
    let gate = FileGate::open(dir.path().join("bench.gate"))?;
    let r = ResourceName::new("bench")?;
    // Creates the file: the timed raises all rewrite an existing one.
    gate.admit_any_source(&r, FencingToken::new(1)).await?;
    let raise = admits_per_s(&gate, &r, raises, |i| 2 + i).await?;
    let mark = 1 + raises;
    let retry = admits_per_s(&gate, &r, retries, |_| mark).await?;
    println!(
        "gate-bench: FileGate on {} (one resource, unbound admits): raise {raise:.0} admits/s ({:.0} µs each; each fsyncs: the rewritten file, then its directory after the rename), retry at the mark {retry:.0} admits/s ({:.1} µs each; no fsync, no I/O) ({raises} raises, {retries} retries)",
        dir.path().display(),
        1e6 / raise,
        1e6 / retry,
    );
    Ok(vec![
        format!("raise,{raise:.1}"),
        format!("retry,{retry:.1}"),
    ])
}

/// Admits `token(i)` for i in 0..n, one after the other; admits per second.
async fn admits_per_s(
    gate: &FileGate,
    r: &ResourceName,
    n: u64,
    token: impl Fn(u64) -> u64,
) -> Res<f64> {
    let started = Instant::now();
    let admits = async {
        for i in 0..n {
            gate.admit_any_source(r, FencingToken::new(token(i)))
                .await?;
        }
        Ok::<_, fencing::Error>(())
    };
    tokio::time::timeout(LOOP_LIMIT, admits)
        .await
        .map_err(|_| format!("{n} FileGate admits took over {LOOP_LIMIT:?}"))??;
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
