//! One EtcdSource holding thousands of locks at once on members that allow
//! only 100 concurrent gRPC streams per connection (a common server or
//! proxy limit): every held grant stays live, the watches of all grants
//! share a stream or two, and releasing or losing one grant leaves the
//! others alone.

use std::sync::Arc;
use std::time::Duration;

use fencing::{AcquireOptions, Grant};
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_harness::etcd::cluster::{ClusterOptions, EtcdCluster, EtcdVersion};
use fencing_harness::scenarios;

const LOCKS: usize = 5_000;
const IN_FLIGHT: usize = 64;
const HOLD: Duration = Duration::from_secs(30);
const PREFIX: &str = "/many-locks";

async fn start(version: EtcdVersion) -> EtcdCluster {
    let opts = ClusterOptions::new(version, 3).with_arg("--max-concurrent-streams=100");
    EtcdCluster::start_with(opts)
        .await
        .unwrap_or_else(|e| panic!("start {version}: {e}"))
}

/// Acquires `LOCKS` distinct locks, `IN_FLIGHT` at a time.
async fn acquire_all(source: Arc<EtcdSource>) -> Vec<Grant> {
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(30));
    scenarios::acquire_many(source, LOCKS, IN_FLIGHT, &opts)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn keys_held(client: &mut etcd_client::Client) -> i64 {
    let count = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    client.get(PREFIX, Some(count)).await.unwrap().count()
}

async fn metric(cluster: &EtcdCluster, name: &str) -> f64 {
    cluster.metric(name).await.unwrap()
}

fn lost_count(grants: &[Grant]) -> usize {
    grants.iter().filter(|g| !g.is_live()).count()
}

async fn thousands_of_held_locks_stay_live_under_a_stream_cap(version: EtcdVersion) {
    let cluster = start(version).await;
    let cfg = EtcdConfig::new(cluster.endpoints(), PREFIX)
        .unwrap()
        .request_timeout(Duration::from_secs(5));
    let source = Arc::new(EtcdSource::connect(cfg).await.expect("connect"));
    let mut observer = cluster.client().await.unwrap();

    let started = std::time::Instant::now();
    let mut grants = acquire_all(source.clone()).await;
    println!("{LOCKS} locks acquired in {:?}", started.elapsed());
    // A grant's own watch starts 100 ms after it (OWN_KEY_WATCH_DELAY).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut watchers = metric(&cluster, "etcd_debugging_mvcc_watcher_total").await;
    while watchers < LOCKS as f64 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        watchers = metric(&cluster, "etcd_debugging_mvcc_watcher_total").await;
    }
    let streams = metric(&cluster, "etcd_debugging_mvcc_watch_stream_total").await;
    println!("held: {streams} watch streams, {watchers} watchers at the members");
    assert!(
        streams <= 4.0,
        "{streams} watch streams for {LOCKS} held locks: grants must share them"
    );
    assert!(
        watchers >= LOCKS as f64,
        "only {watchers} watchers for {LOCKS} held locks: some grant does not watch its key"
    );

    tokio::time::sleep(HOLD).await;
    assert_eq!(
        lost_count(&grants),
        0,
        "grants lost while held for {HOLD:?}"
    );
    assert_eq!(keys_held(&mut observer).await, LOCKS as i64);

    // One release; one key deleted behind its holder's back.
    let released = grants.pop().unwrap();
    released.release().await.expect("release");
    let victim = grants.pop().unwrap();
    observer.delete(victim.key(), None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), victim.lost())
        .await
        .expect("a grant whose key was deleted must be lost");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        lost_count(&grants),
        0,
        "one release or loss disturbed others"
    );
    assert_eq!(keys_held(&mut observer).await, LOCKS as i64 - 2);

    for g in grants {
        g.release().await.expect("release");
    }
    drop(victim);
    assert_eq!(keys_held(&mut observer).await, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let watchers = metric(&cluster, "etcd_debugging_mvcc_watcher_total").await;
        if watchers == 0.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{watchers} watchers left at the members after every release"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_6_thousands_of_held_locks_stay_live_under_a_stream_cap() {
    thousands_of_held_locks_stay_live_under_a_stream_cap(EtcdVersion::V3_6).await;
}
