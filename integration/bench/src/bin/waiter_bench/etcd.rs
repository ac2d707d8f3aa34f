//! `--backend etcd`: EtcdSource (one per waiter, so a session each) vs Go's
//! `concurrency.Mutex` (`etcd-mutex waiters`: one client, a session per
//! waiter) on a 3-member etcd 3.6 cluster. Requests per hand-over: the gRPC
//! messages the members received (`grpc_server_msg_received_total`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_bench::BoxError;
use fencing_etcd::etcd_client::GetOptions;
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_harness::cache::cached_bin;
use fencing_harness::etcd::cluster::{EtcdCluster, EtcdVersion};

use super::{
    anchor_side, figures, measure, pass_down, Figures, Report, OP_TIMEOUT, PHASE_LIMIT, RESOURCE,
    SETTLE,
};

const TTL: Duration = Duration::from_secs(60);
const METRIC: &str = "grpc_server_msg_received_total";

pub(super) async fn run(counts: &[usize], report: &mut Report) -> Result<(), BoxError> {
    let go = cached_bin("etcd-mutex");
    if !go.exists() {
        return Err(format!(
            "{} is missing: run bash scripts/install/go-interop.sh",
            go.display()
        )
        .into());
    }
    let cluster = EtcdCluster::start(EtcdVersion::V3_6, 3).await?;
    report.title("etcd 3.6, 3 members, EtcdSource vs Go concurrency.Mutex");
    for &w in counts {
        let (go, cluster) = (&go, &cluster);
        measure(
            report,
            w,
            || go_side(go, cluster, w),
            || rust_side(cluster, w),
        )
        .await?;
    }
    Ok(())
}

async fn messages(cluster: &EtcdCluster) -> Result<f64, BoxError> {
    Ok(cluster.metric(METRIC).await?)
}

async fn rust_side(cluster: &EtcdCluster, w: usize) -> Result<Figures, BoxError> {
    let prefix = format!("/waiters-rust-{w}");
    let cfg = EtcdConfig::new(cluster.endpoints(), prefix.as_str())?
        .ttl(TTL)
        .request_timeout(OP_TIMEOUT);
    let resource = ResourceName::new(RESOURCE)?;
    let opts = AcquireOptions::new().wait(PHASE_LIMIT);
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
    wait_queued(&holder, &format!("{prefix}/{RESOURCE}/"), w + 1).await?;
    tokio::time::sleep(SETTLE).await;

    let before = messages(cluster).await?;
    let granted_us = pass_down(w, async { Ok(held.release().await?) }, &mut queue).await?;
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
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(["waiters", "--endpoints", &cluster.endpoints().join(",")])
        .args(["--prefix", &format!("/waiters-go-{w}/{RESOURCE}")])
        .args([
            "--count",
            &w.to_string(),
            "--ttl",
            &TTL.as_secs().to_string(),
        ]);
    anchor_side(cmd, "etcd-mutex", w, OP_TIMEOUT * 4, || messages(cluster)).await
}
