//! waiter-bench: how a hand-over's cost grows with the queue, on one real
//! 3-member etcd 3.6 cluster, ours beside Go's `concurrency.Mutex`.
//!
//! For each W in `--counts`, a holder takes the lock, W waiters (each its
//! own session: a source each on our side, a session each on one Go client)
//! queue behind it, and the holder releases. The lock then passes down the
//! queue, each waiter releasing as soon as it holds. Reported per side and
//! W: the median gap between consecutive grants (the first measured from
//! the holder's release), and the gRPC messages the members received per
//! hand-over, read from `grpc_server_msg_received_total` just before the
//! release and after the last grant. Both should stay flat as W grows: a
//! release wakes only the next waiter. Figures are printed, not asserted.

use std::io::Write as _;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_etcd::etcd_client::GetOptions;
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_integration::bench::{main_with, next_event, BoxError};
use fencing_integration::cache::cached_bin;
use fencing_integration::etcd::cluster::{EtcdCluster, EtcdVersion};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const TTL: Duration = Duration::from_secs(60);
const OP_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds queueing W waiters, and the whole chain of W hand-overs.
const PHASE_LIMIT: Duration = Duration::from_secs(120);
/// After the queue is complete, so every waiter's watch is in etcd's
/// synced group before the release (an unsynced one is served every 100 ms).
const SETTLE: Duration = Duration::from_millis(300);
const METRIC: &str = "grpc_server_msg_received_total";

#[derive(clap::Parser)]
#[command(about = "Hand-over down a queue of W waiters on one etcd lock, ours beside Go's Mutex")]
struct Args {
    /// The queue lengths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256")]
    counts: Vec<NonZeroUsize>,
    /// Also write one CSV row per W and side here.
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// What one side measured for one W.
struct Figures {
    /// Median gap between consecutive grants, in µs.
    gap_us: f64,
    /// Release of the holder to the last grant, in ms.
    chain_ms: f64,
    /// gRPC messages received by the members per hand-over.
    requests: f64,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    main_with("waiter-bench", run(args))
}

async fn run(args: Args) -> Result<(), BoxError> {
    let go = cached_bin("etcd-mutex");
    if !go.exists() {
        return Err(format!(
            "{} is missing: run bash scripts/install/go-interop.sh",
            go.display()
        )
        .into());
    }
    let cluster = EtcdCluster::start(EtcdVersion::V3_6, 3).await?;
    println!("waiter-bench: etcd 3.6, 3 members, EtcdSource vs Go concurrency.Mutex");
    println!(
        "{:>5} {:>5} {:>12} {:>10} {:>14}",
        "W", "side", "gap µs", "chain ms", "requests/hand"
    );
    let mut csv = args.csv.as_ref().map(std::fs::File::create).transpose()?;
    if let Some(f) = csv.as_mut() {
        writeln!(f, "waiters,side,gap_us,chain_ms,requests_per_handover")?;
    }
    for w in args.counts.iter().map(|w| w.get()) {
        let go_fig = go_side(&go, &cluster, w).await?;
        let rust = rust_side(&cluster, w).await?;
        for (side, fig) in [("go", &go_fig), ("rust", &rust)] {
            println!(
                "{w:>5} {side:>5} {:>12.0} {:>10.1} {:>14.2}",
                fig.gap_us, fig.chain_ms, fig.requests
            );
            if let Some(f) = csv.as_mut() {
                writeln!(
                    f,
                    "{w},{side},{:.0},{:.1},{:.2}",
                    fig.gap_us, fig.chain_ms, fig.requests
                )?;
            }
        }
        println!(
            "waiter-bench: W={w} gap ratio {:.2}, requests ratio {:.2} (rust / go)",
            rust.gap_us / go_fig.gap_us,
            rust.requests / go_fig.requests
        );
    }
    Ok(())
}

async fn messages(cluster: &EtcdCluster) -> Result<f64, BoxError> {
    Ok(cluster.metric(METRIC).await?)
}

/// Median gap between consecutive grant times (µs after the release).
fn figures(mut granted_us: Vec<f64>, requests: f64) -> Figures {
    granted_us.sort_by(f64::total_cmp);
    let mut gaps: Vec<f64> = granted_us
        .iter()
        .scan(0.0, |last, &t| {
            let gap = t - *last;
            *last = t;
            Some(gap)
        })
        .collect();
    gaps.sort_by(f64::total_cmp);
    let n = granted_us.len().max(1) as f64;
    Figures {
        gap_us: gaps.get(gaps.len() / 2).copied().unwrap_or(0.0),
        chain_ms: granted_us.last().copied().unwrap_or(0.0) / 1000.0,
        requests: requests / n,
    }
}

async fn rust_side(cluster: &EtcdCluster, w: usize) -> Result<Figures, BoxError> {
    let prefix = format!("/waiters-rust-{w}");
    let cfg = EtcdConfig::new(cluster.endpoints(), prefix.as_str())?
        .ttl(TTL)
        .request_timeout(OP_TIMEOUT);
    let resource = ResourceName::new("bench")?;
    let opts = AcquireOptions::new().timeout(PHASE_LIMIT);
    let holder = EtcdSource::connect(cfg.clone()).await?;
    let held = holder.acquire(&resource, &opts).await?;

    let mut queue = tokio::task::JoinSet::new();
    let mut sources = Vec::with_capacity(w);
    for _ in 0..w {
        let source = Arc::new(EtcdSource::connect(cfg.clone()).await?);
        sources.push(source.clone());
        let (resource, opts) = (resource.clone(), opts.clone());
        queue.spawn(async move {
            let grant = source.acquire(&resource, &opts).await?;
            let at = Instant::now();
            grant.release().await?;
            Ok::<_, BoxError>(at)
        });
    }
    wait_queued(&holder, &format!("{prefix}/bench/"), w + 1).await?;
    tokio::time::sleep(SETTLE).await;

    let before = messages(cluster).await?;
    let t0 = Instant::now();
    held.release().await?;
    let mut granted_us = Vec::with_capacity(w);
    let chain = async {
        while let Some(done) = queue.join_next().await {
            granted_us.push(done??.duration_since(t0).as_micros() as f64);
        }
        Ok::<_, BoxError>(())
    };
    tokio::time::timeout(PHASE_LIMIT, chain)
        .await
        .map_err(|_| format!("W={w}: the queue did not drain within {PHASE_LIMIT:?}"))??;
    let requests = messages(cluster).await? - before;
    for s in sources.iter().chain([&Arc::new(holder)]) {
        tokio::time::timeout(OP_TIMEOUT, s.close()).await??;
    }
    Ok(figures(granted_us, requests))
}

/// Polls until `n` keys are queued under `dir`.
async fn wait_queued(source: &EtcdSource, dir: &str, n: usize) -> Result<(), BoxError> {
    let deadline = Instant::now() + PHASE_LIMIT;
    let mut client = source.client();
    loop {
        let only_count = GetOptions::new().with_prefix().with_count_only();
        let found = tokio::time::timeout(OP_TIMEOUT, client.get(dir, Some(only_count)))
            .await??
            .count();
        if usize::try_from(found)? >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("only {found} of {n} contenders queued on {dir}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn go_side(
    program: &std::path::Path,
    cluster: &EtcdCluster,
    w: usize,
) -> Result<Figures, BoxError> {
    let mut child = tokio::process::Command::new(program)
        .args(["waiters", "--endpoints", &cluster.endpoints().join(",")])
        .args(["--prefix", &format!("/waiters-go-{w}/bench")])
        .args([
            "--count",
            &w.to_string(),
            "--ttl",
            &TTL.as_secs().to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    next_event(&mut lines, "etcd-mutex", "queued", PHASE_LIMIT).await?;
    tokio::time::sleep(SETTLE).await;
    let before = messages(cluster).await?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    stdin.write_all(b"release\n").await?;
    let done = next_event(&mut lines, "etcd-mutex", "done", PHASE_LIMIT).await?;
    let requests = messages(cluster).await? - before;
    // Its sessions are closed only now, outside the counted window.
    stdin.write_all(b"exit\n").await?;
    tokio::time::timeout(OP_TIMEOUT * 4, child.wait()).await??;
    let granted_us: Vec<f64> = done["granted_us"]
        .as_array()
        .ok_or("no granted_us in the done event")?
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    if granted_us.len() != w {
        return Err(format!(
            "etcd-mutex reported {} grants for {w} waiters",
            granted_us.len()
        )
        .into());
    }
    Ok(figures(granted_us, requests))
}
