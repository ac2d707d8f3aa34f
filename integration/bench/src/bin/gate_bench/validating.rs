//! The price of asking the source before a raise: `ValidatingGate` over a
//! `MemoryGate` with a `LocalSource`, against the plain `MemoryGate`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::{
    AcquireOptions, FencingSource, Gate, GrantInfo, LocalSource, MemoryGate, ResourceName,
    ValidatingGate,
};
use fencing_bench::median;

use crate::Res;

/// Grants whose first admit is timed on each gate.
const GRANTS: usize = 300;
/// Retries at the mark timed on each gate.
const RETRIES: u32 = 200_000;
/// Bounds the section: the local source's file locks and fsyncs are local,
/// yet a stalled disk must end the run, not hang it.
const SECTION_LIMIT: Duration = Duration::from_secs(120);

/// Median first admit of a grant and mean retry, on both gates.
pub async fn run() -> Res<()> {
    tokio::time::timeout(SECTION_LIMIT, measure())
        .await
        .map_err(|_| format!("the ValidatingGate section took over {SECTION_LIMIT:?}"))?
}

async fn measure() -> Res<()> {
    let dir = tempfile::tempdir()?;
    let source = Arc::new(LocalSource::open(dir.path())?);
    let plain = MemoryGate::new();
    let validating = ValidatingGate::new(MemoryGate::new(), source.clone());
    let r = ResourceName::new("bench")?;
    let (mut plain_raises, mut validating_raises) = (Vec::new(), Vec::new());
    for _ in 0..GRANTS {
        let grant = source.acquire(&r, &AcquireOptions::new()).await?;
        plain_raises.push(timed(plain.admit_grant(grant.info())).await?);
        validating_raises.push(timed(validating.admit_grant(grant.info())).await?);
        grant.release().await?;
    }
    let grant = source.acquire(&r, &AcquireOptions::new()).await?;
    plain.admit_grant(grant.info()).await?;
    validating.admit_grant(grant.info()).await?;
    let plain_retry = time_retries(&plain, grant.info()).await?;
    let validating_retry = time_retries(&validating, grant.info()).await?;
    grant.release().await?;
    let (p, v) = (median(plain_raises), median(validating_raises));
    println!(
        "gate-bench: ValidatingGate(MemoryGate, LocalSource) first admit of a grant {v:.1} µs vs plain MemoryGate {p:.2} µs (median of {GRANTS}); retry at the mark {validating_retry:.0} ns vs {plain_retry:.0} ns per call",
    );
    Ok(())
}

/// µs one admit took.
async fn timed(admit: impl std::future::Future<Output = fencing::Result<()>>) -> Res<f64> {
    let started = Instant::now();
    admit.await?;
    Ok(started.elapsed().as_secs_f64() * 1e6)
}

/// ns per retried admit of the same grant.
async fn time_retries(gate: &dyn Gate, grant: &GrantInfo) -> Res<f64> {
    let started = Instant::now();
    for _ in 0..RETRIES {
        gate.admit_grant(black_box(grant)).await?;
    }
    Ok(started.elapsed().as_nanos() as f64 / f64::from(RETRIES))
}
