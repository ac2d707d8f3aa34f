//! The Rust side of one point, run as `held-bench child ...`: one source,
//! `--count` locks `--in-flight` at a time, speaking the events and stdin
//! lines of the anchors' `held` subcommands.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_bench::{bounded, BoxError};
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_harness::scenarios;
use fencing_zookeeper::{ZkConfig, ZkSource};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::cluster::Backend;
use super::measure::{cpu_micros, rss_kb, HostTicks};
use super::{EVENT_LIMIT, OP_LIMIT, RELEASE_IN_FLIGHT, TTL_SECS};

#[derive(clap::Parser)]
pub struct ChildArgs {
    #[arg(long, value_enum)]
    backend: Backend,
    #[arg(long)]
    endpoints: String,
    #[arg(long)]
    prefix: String,
    #[arg(long)]
    count: NonZeroUsize,
    #[arg(long = "in-flight")]
    in_flight: NonZeroUsize,
    /// Take, hold and release the locks this many times on one source.
    #[arg(long, default_value = "1")]
    cycles: NonZeroUsize,
}

pub async fn child(a: ChildArgs) -> Result<(), BoxError> {
    let started = Instant::now();
    let endpoints = a.endpoints.split(',').map(str::to_owned);
    let request_timeout = Duration::from_secs(5);
    let ttl = Duration::from_secs(TTL_SECS);
    match a.backend {
        Backend::Etcd => {
            let cfg = EtcdConfig::new(endpoints, a.prefix.as_str())?
                .ttl(ttl)
                .request_timeout(request_timeout);
            let source = Arc::new(bounded("connect", EtcdSource::connect(cfg)).await??);
            hold(source.clone(), &a, started).await?;
            bounded("close", source.close()).await??;
        }
        Backend::Zk => {
            let cfg = ZkConfig::new(endpoints, a.prefix.as_str())?
                .ttl(ttl)
                .request_timeout(request_timeout);
            let source = Arc::new(bounded("connect", ZkSource::connect(cfg)).await??);
            // Dropping the source closes its session.
            hold(source, &a, started).await?;
        }
    }
    Ok(())
}

/// Takes, holds and releases the locks `--cycles` times.
async fn hold<S: FencingSource + 'static>(
    source: Arc<S>,
    a: &ChildArgs,
    started: Instant,
) -> Result<(), BoxError> {
    let (n, in_flight) = (a.count.get(), a.in_flight.get());
    let opts = AcquireOptions::new().wait(Duration::from_secs(60));
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    // The session (its lease) starts with the first grant: take one before
    // timing, as the anchors open their sessions before they start the
    // clock.
    let warm_up = ResourceName::new("warm-up")?;
    bounded("warm-up acquire", source.acquire(&warm_up, &opts))
        .await??
        .release()
        .await?;
    emit(json!({"event": "connected"}));
    for _ in 0..a.cycles.get() {
        let before = rss_kb();
        let host_before = HostTicks::read();
        let cpu_before = cpu_micros();
        let t0 = Instant::now();
        let grants = tokio::time::timeout(
            EVENT_LIMIT,
            scenarios::acquire_many(source.clone(), n, in_flight, &opts),
        )
        .await
        .map_err(|_| format!("{n} acquires took over {EVENT_LIMIT:?}"))??;
        let seconds = t0.elapsed().as_secs_f64();
        let cpu_us_acquire = cpu_micros() - cpu_before;
        let host_busy_pct = HostTicks::read().busy_pct_since(&host_before);
        // A grant's own-key watch (etcd) starts 100 ms after it: weigh the
        // held grants with their watches.
        tokio::time::sleep(Duration::from_millis(300)).await;
        emit(json!({"event": "held", "count": n, "seconds": seconds,
            "rss_kb_before": before, "rss_kb_held": rss_kb(), "host_busy_pct": host_busy_pct,
            "cpu_us_acquire": cpu_us_acquire}));
        loop {
            let line = stdin
                .next_line()
                .await?
                .ok_or("stdin closed before the release line")?;
            if line.trim() != "cpu" {
                break;
            }
            emit(json!({"event": "cpu", "cpu_us": cpu_micros(),
                "wall_us": started.elapsed().as_micros() as u64}));
        }
        release_all(grants).await?;
        emit(json!({"event": "released", "rss_kb_after": rss_kb()}));
    }
    Ok(())
}

/// Releases every grant, [`RELEASE_IN_FLIGHT`] at a time.
async fn release_all(grants: Vec<fencing::Grant>) -> Result<(), BoxError> {
    let mut chunks: Vec<Vec<fencing::Grant>> = (0..RELEASE_IN_FLIGHT).map(|_| Vec::new()).collect();
    for (i, g) in grants.into_iter().enumerate() {
        chunks[i % RELEASE_IN_FLIGHT].push(g);
    }
    let mut workers = tokio::task::JoinSet::new();
    for chunk in chunks {
        workers.spawn(async move {
            for g in chunk {
                tokio::time::timeout(OP_LIMIT, g.release())
                    .await
                    .map_err(|_| format!("release: no answer within {OP_LIMIT:?}"))?
                    .map_err(|e| format!("release: {e}"))?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    Ok(())
}

/// One event line on stdout (Rust's stdout flushes at each newline).
pub fn emit(v: Value) {
    println!("{v}");
}
