//! Apache Curator's InterProcessMutex (the `curator-mutex repro`
//! subcommand) against `ZkSource`, under the same fault.

use std::time::{Duration, Instant};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_harness::cache::cached_bin;
use fencing_harness::etcd::fixture::Partition;
use fencing_harness::fixture::Fixture;
use fencing_harness::zk::ensemble::ZkVersion;
use fencing_harness::zk::fixture::ZkFixture;
use fencing_zookeeper::ZkSource;
use tokio::process::Command;

use super::driver::{flag, text, verdict_not_reproduced, Stepped};

/// Longer than the anchor's whole failed release (its repro client: a 2 s
/// request timeout, one retry bounded by a 1 s connection timeout), so the
/// session outlives the outage, as a user's production session does, and
/// only the release's own handling can remove the node.
const SESSION: Duration = Duration::from_secs(20);

/// CURATOR-678: `release()` drops the thread's lock data even when the
/// delete of its node failed, so a node left behind in a live session
/// would block the lock for good. On the anchor's Curator 5.9.0 the delete
/// is a guaranteed one: a delete that failed with a retryable code
/// (ConnectionLoss here, when ZooKeeper's request timeout drops the
/// connection) is queued
/// and redone once the connection is back, so the node goes and the lock
/// is free again. The test asserts exactly that (the bug does not
/// reproduce on the pinned version; docs/anchor-bugs.md), and that ours
/// frees the lock after the same outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_release_during_connection_loss() {
    let f = ZkFixture::start_with(ZkVersion::V3_9, 1).await;
    let jar = cached_bin("curator-mutex.jar");
    assert!(
        jar.exists(),
        "{} is missing: run scripts/install/curator-interop.sh",
        jar.display()
    );

    // The anchor: blackholed while it releases.
    let (partition, through) = Partition::around(f.ensemble.endpoints()).await;
    let mut java = Stepped::spawn(
        Command::new("java")
            .arg("-jar")
            .arg(&jar)
            .args(["repro", "--case", "release-during-loss"])
            .args(["--connect", &through.join(",")])
            .args(["--direct", &f.ensemble.connect_string()])
            .args(["--path", "/anchor-bugs/curator"])
            .args(["--session-timeout-ms", &SESSION.as_millis().to_string()]),
    );
    let limit = Duration::from_secs(90);
    java.expect("step", limit).await;
    partition.set(true);
    let blackholed = Instant::now();
    java.next().await;
    let released = java.expect("released", limit).await;
    java.expect("step", limit).await;
    partition.cut_connections();
    partition.set(false);
    java.next().await;
    let v = java.expect("verdict", limit).await;
    java.finish(Duration::from_secs(10)).await;
    let outage = blackholed.elapsed();
    // The bug would leave the node in the kept session and the lock
    // blocked; 5.9.0's guaranteed delete removes it.
    let anchor_fixed = !text(&released, "error").is_empty()
        && flag(&v, "session_kept")
        && !flag(&v, "node_left")
        && flag(&v, "reacquired")
        && flag(&v, "other_acquired");

    // Ours: the same session length, the same outage during a release.
    let (partition, hosts) = Partition::around(f.ensemble.endpoints()).await;
    let source = ZkSource::connect(f.config(hosts).ttl(SESSION))
        .await
        .expect("connect via proxies");
    let lock = ResourceName::new("ours-release").unwrap();
    let opts = AcquireOptions::new()
        .ttl(SESSION)
        .wait(Duration::from_secs(3));
    let grant = source.acquire(&lock, &opts).await.unwrap();
    partition.set(true);
    let release = tokio::spawn(grant.release());
    tokio::time::sleep(outage).await;
    partition.cut_connections();
    partition.set(false);
    let released_ours = tokio::time::timeout(Duration::from_secs(15), release).await;
    let observer = f.source().await.client().await.unwrap();
    let dir = format!("{}/ours-release", f.path);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = usize::MAX;
    while Instant::now() < deadline {
        left = observer.list_children(&dir).await.map_or(0, |c| c.len());
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other = f.source().await;
    let other_acquired = match other.acquire(&lock, &opts).await {
        Ok(g) => g.release().await.is_ok(),
        Err(_) => false,
    };
    let reacquired = match source.acquire(&lock, &opts).await {
        Ok(g) => g.release().await.is_ok(),
        Err(_) => false,
    };
    let ours = left == 0 && other_acquired && reacquired;

    verdict_not_reproduced(
        "CURATOR-678 release during a connection loss",
        anchor_fixed,
        ours,
        &format!(
            "anchor: outage {outage:?}, {released} {v}; ours: release {released_ours:?}, nodes left {left}, \
             other acquired {other_acquired}, reacquired {reacquired}"
        ),
    );
}
