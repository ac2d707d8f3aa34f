//! `--backend zk`: ZkSource (one per waiter, so a session each) vs Apache
//! Curator's `InterProcessMutex` (`curator-mutex.jar waiters`: one
//! CuratorFramework client, so one session, per waiter, each acquiring in
//! its own thread) on a 3-server ZooKeeper 3.9 ensemble. Requests per
//! hand-over: the packets the servers received from clients
//! (`zk_packets_received` of the four-letter word `mntr`, summed over the
//! servers, less the packets the readings' own `mntr` exchanges added).
//!
//! Both sides first run the same chain once unreported, on the same
//! sessions (`WARMUP`): a fresh JVM per W would otherwise measure Curator
//! in the interpreter.
//!
//! Both sides ask for a 30 s session timeout: a client pings after a third
//! of it without traffic, so with W idle sessions queued the pings that
//! fall into a chain stay few next to the hand-overs' own requests.
//! The servers run with `maxClientCnxns=0`: ZooKeeper's default of 60
//! connections per address and server would refuse 257 loopback sessions.

use std::time::{Duration, Instant};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_bench::BoxError;
use fencing_harness::cache::cache_dir;
use fencing_harness::zk::ensemble::{ZkEnsemble, ZkOptions, ZkVersion};
use fencing_zookeeper::{ZkConfig, ZkSource};

use super::{
    anchor_side, figures, measure, pass_down, Figures, Report, OP_TIMEOUT, PHASE_LIMIT, RESOURCE,
    SETTLE,
};

const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// Unreported chains before the reported one, on both sides, with the
/// same sessions: the JVM's JIT has then compiled Curator's paths.
const WARMUP: usize = 1;

pub(super) async fn run(counts: &[usize], report: &mut Report) -> Result<(), BoxError> {
    let jar = cache_dir().join("bin").join("curator-mutex.jar");
    if !jar.is_file() {
        return Err(format!(
            "{} is missing: run bash scripts/install/curator-interop.sh",
            jar.display()
        )
        .into());
    }
    let options = ZkOptions::new(ZkVersion::V3_9, 3).max_client_cnxns(0);
    let servers = ZkEnsemble::start_with(options).await?;
    report.title(&format!(
        "ZooKeeper {}, 3 servers, ZkSource vs Curator InterProcessMutex (a session per waiter on both sides)",
        servers.version().release()
    ));
    for &w in counts {
        let (jar, servers) = (&jar, &servers);
        measure(
            report,
            w,
            || java_side(jar, servers, w),
            || rust_side(servers, w),
        )
        .await?;
    }
    Ok(())
}

/// The packets the servers received from clients so far.
async fn packets(servers: &ZkEnsemble) -> Result<f64, BoxError> {
    Ok(servers.client_packets().await?)
}

async fn connect(cfg: &ZkConfig) -> Result<ZkSource, BoxError> {
    let source = tokio::time::timeout(OP_TIMEOUT * 2, ZkSource::connect(cfg.clone()))
        .await
        .map_err(|_| "ZkSource::connect timed out")??;
    Ok(source)
}

async fn rust_side(servers: &ZkEnsemble, w: usize) -> Result<Figures, BoxError> {
    let path = format!("/waiters-rust-{w}");
    let cfg = ZkConfig::new(servers.endpoints(), path.as_str())?
        .ttl(SESSION_TIMEOUT)
        .request_timeout(OP_TIMEOUT);
    // Every session first, then the chains, as the Java side does.
    let holder = connect(&cfg).await?;
    let mut sources = Vec::with_capacity(w);
    for _ in 0..w {
        sources.push(connect(&cfg).await?);
    }
    let zk = holder.client().await?;
    let dir = format!("{path}/{RESOURCE}");
    for _ in 0..WARMUP {
        chain(&holder, &sources, &zk, &dir, None).await?;
    }
    let wakeups_before: u64 = sources.iter().map(ZkSource::waiter_wakeups).sum();
    let (granted_us, requests) = chain(&holder, &sources, &zk, &dir, Some(servers)).await?;
    let wakeups = sources.iter().map(ZkSource::waiter_wakeups).sum::<u64>() - wakeups_before;
    if wakeups > w as u64 {
        println!("waiter-bench: note: W={w}: {wakeups} waiter wake-ups for {w} hand-overs");
    }
    // Dropping the sources closes their sessions, outside the counted window.
    drop((zk, sources, holder));
    Ok(figures(granted_us, requests))
}

/// One hand-over chain: `holder` takes the lock, every source in `waiters`
/// queues behind it, and once all are queued (and settled) the holder
/// releases; each waiter releases as soon as it holds. Returns the grant
/// times (µs after the release) and, with `count`, the packets the servers
/// received from just before the release to the last grant.
async fn chain(
    holder: &ZkSource,
    waiters: &[ZkSource],
    zk: &zookeeper_client::Client,
    dir: &str,
    count: Option<&ZkEnsemble>,
) -> Result<(Vec<f64>, f64), BoxError> {
    let w = waiters.len();
    let resource = ResourceName::new(RESOURCE)?;
    let opts = AcquireOptions::new().wait(PHASE_LIMIT);
    let held = holder.acquire(&resource, &opts).await?;
    let mut queue = tokio::task::JoinSet::new();
    for source in waiters {
        let (source, resource, opts) = (source.clone(), resource.clone(), opts.clone());
        queue.spawn(async move {
            let grant = source.acquire(&resource, &opts).await?;
            let at = Instant::now();
            grant.release().await?;
            Ok::<_, BoxError>(at)
        });
    }
    wait_queued(zk, dir, w + 1).await?;
    let before = match count {
        Some(servers) => {
            tokio::time::sleep(SETTLE).await;
            packets(servers).await?
        }
        None => 0.0,
    };
    let granted_us = pass_down(w, async { Ok(held.release().await?) }, &mut queue).await?;
    let requests = match count {
        Some(servers) => packets(servers).await? - before,
        None => 0.0,
    };
    Ok((granted_us, requests))
}

/// Polls until `dir` has `n` lock nodes.
async fn wait_queued(zk: &zookeeper_client::Client, dir: &str, n: usize) -> Result<(), BoxError> {
    let deadline = Instant::now() + PHASE_LIMIT;
    loop {
        let found = tokio::time::timeout(OP_TIMEOUT, zk.list_children(dir))
            .await??
            .len();
        if found >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("only {found} of {n} contenders queued on {dir}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn java_side(
    jar: &std::path::Path,
    servers: &ZkEnsemble,
    w: usize,
) -> Result<Figures, BoxError> {
    let mut cmd = tokio::process::Command::new("java");
    cmd.arg("-jar")
        .arg(jar)
        .args(["waiters", "--connect", &servers.connect_string()])
        .args(["--path", &format!("/waiters-java-{w}/{RESOURCE}")])
        .args(["--count", &w.to_string()])
        .args(["--warmup", &WARMUP.to_string()])
        .args([
            "--session-timeout-ms",
            &SESSION_TIMEOUT.as_millis().to_string(),
        ]);
    // Closing W clients, each a closeSession round trip.
    let exit_limit = OP_TIMEOUT * 4 + Duration::from_millis(50) * u32::try_from(w)?;
    anchor_side(cmd, "curator-mutex", w, exit_limit, || packets(servers)).await
}
