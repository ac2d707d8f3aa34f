//! Riding through single-member faults with quorum intact: every member of
//! a 3-member etcd 3.6 cluster and a 3-server ZooKeeper 3.9 ensemble in
//! turn is killed, paused and restarted, three rounds (27 faults), while
//! one client holds a lock and four wait. A healthy quorum must cost no
//! lease and no waiter; the figures are printed for the notes.

use std::time::Duration;

use fencing_integration::etcd_cluster::EtcdVersion;
use fencing_integration::etcd_fixture::EtcdFixture;
use fencing_integration::scenarios::{self, RideThrough};
use fencing_integration::zk_ensemble::ZkVersion;
use fencing_integration::zk_fixture::ZkFixture;

const ROUNDS: usize = 3;
const DOWN: Duration = Duration::from_secs(2);

fn report(name: &str, seen: &RideThrough) {
    let mut ms: Vec<u128> = seen.renewal_ms.iter().flatten().copied().collect();
    ms.sort_unstable();
    let lost = seen.renewal_ms.iter().filter(|m| m.is_none()).count();
    let median = ms.get(ms.len() / 2).copied().unwrap_or_default();
    let max = ms.last().copied().unwrap_or_default();
    eprintln!(
        "{name}: {} faults, {lost} leases lost, {} waiters gave up, renewal after a fault: median {median} ms, max {max} ms",
        seen.faults, seen.waiters_gave_up
    );
    assert_eq!(lost, 0, "{name}: leases lost to single-member faults");
    assert_eq!(seen.waiters_gave_up, 0, "{name}: waiters gave up early");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_rides_through_member_faults() {
    let mut f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let ttl = Duration::from_secs(5);
    let holder = f.source().await;
    let mut waiters = Vec::new();
    for _ in 0..4 {
        waiters.push(f.source().await);
    }
    let seen =
        scenarios::ride_through_member_faults(&mut f.cluster, holder, waiters, ttl, ROUNDS, DOWN)
            .await;
    report("etcd 3.6", &seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_rides_through_member_faults() {
    let mut f = ZkFixture::start(ZkVersion::V3_9).await;
    let ttl = Duration::from_secs(4);
    let holder = f.source().await;
    let mut waiters = Vec::new();
    for _ in 0..4 {
        waiters.push(f.source().await);
    }
    let seen =
        scenarios::ride_through_member_faults(&mut f.ensemble, holder, waiters, ttl, ROUNDS, DOWN)
            .await;
    report("ZooKeeper 3.9", &seen);
}

fn handover_report(name: &str, mut ms: Vec<u128>) {
    eprintln!("{name}: hand-overs in order (ms): {ms:?}");
    ms.sort_unstable();
    let median = ms[ms.len() / 2];
    eprintln!(
        "{name}: release to next grant with one member dead, {} hand-overs: median {median} ms, max {} ms",
        ms.len(),
        ms[ms.len() - 1]
    );
    assert!(median < 100, "{name}: median hand-over {median} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_hands_over_with_a_member_dead() {
    let mut f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let (a, b) = (f.source().await, f.source().await);
    let ms =
        scenarios::handover_with_a_member_dead(&mut f.cluster, a, b, Duration::from_secs(5), 5)
            .await;
    handover_report("etcd 3.6", ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_hands_over_with_a_member_dead() {
    let mut f = ZkFixture::start(ZkVersion::V3_9).await;
    let (a, b) = (f.source().await, f.source().await);
    let ms =
        scenarios::handover_with_a_member_dead(&mut f.ensemble, a, b, Duration::from_secs(4), 5)
            .await;
    handover_report("ZooKeeper 3.9", ms);
}
