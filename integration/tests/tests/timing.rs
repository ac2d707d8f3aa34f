//! Riding through single-member faults with quorum intact: every member of
//! a 3-member etcd 3.6 cluster and a 3-server ZooKeeper 3.9 ensemble in
//! turn is killed, paused and restarted, three rounds (27 faults), while
//! one client holds a lock and four wait. A healthy quorum must cost no
//! lease and no waiter; the figures are printed for the notes.
//!
//! A test binary of its own, and its tests one at a time: they measure
//! renewal and hand-over times under faults, which another cluster test
//! sharing the two cores would stretch (a ZooKeeper ride-through lost its
//! session once while it ran beside the main binary's ZooKeeper tests).
//! Cargo runs test binaries one after another, so nothing else runs beside
//! these.

use std::time::Duration;

use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::etcd::fixture::EtcdFixture;
use fencing_harness::fixture::Fixture;
use fencing_harness::scenarios::{self, RideThrough};
use fencing_harness::zk::ensemble::ZkVersion;
use fencing_harness::zk::fixture::ZkFixture;

/// Held by each test for its whole run, so the tests of this binary never
/// overlap.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _alone = ALONE.lock().await;
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
    let _alone = ALONE.lock().await;
    let mut f = ZkFixture::start(ZkVersion::V3_9).await;
    let ttl = Duration::from_secs(6);
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
    let _alone = ALONE.lock().await;
    let mut f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let (a, b) = (f.source().await, f.source().await);
    let ms =
        scenarios::handover_with_a_member_dead(&mut f.cluster, a, b, Duration::from_secs(5), 5)
            .await;
    handover_report("etcd 3.6", ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_hands_over_with_a_member_dead() {
    let _alone = ALONE.lock().await;
    let mut f = ZkFixture::start(ZkVersion::V3_9).await;
    let (a, b) = (f.source().await, f.source().await);
    let ms =
        scenarios::handover_with_a_member_dead(&mut f.ensemble, a, b, Duration::from_secs(4), 5)
            .await;
    handover_report("ZooKeeper 3.9", ms);
}

/// Kubernetes has one apiserver here, so "a member" is the apiserver or its
/// etcd: each restarted three times in turn while one client holds a Lease
/// (client-go's default timings: lease 15 s, renew deadline 10 s, retry
/// 2 s) and four wait. No lease may be lost and no waiter may give up on
/// the refused connections of a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_rides_through_restarts() {
    let _alone = ALONE.lock().await;
    use fencing::{AcquireOptions, FencingSource, ResourceName};
    use fencing_harness::kubernetes::cluster::KubeUser;
    use fencing_harness::kubernetes::fixture::KubeFixture;
    let mut f = KubeFixture::start().await;
    let connect = |f: &KubeFixture| {
        let options = f
            .options()
            .lease_duration(Duration::from_secs(15))
            .renew_deadline(Duration::from_secs(10))
            .retry_period(Duration::from_secs(2));
        fencing_kube::KubeLeaseSource::connect(f.config(KubeUser::LeaseUser).options(options))
    };
    let lock = ResourceName::new("ride-through").unwrap();
    let holder = connect(&f).await.unwrap();
    let held = holder
        .acquire(&lock, &AcquireOptions::new().wait(Duration::from_secs(30)))
        .await
        .unwrap();
    let mut queue = Vec::new();
    for _ in 0..4 {
        let (w, lock) = (connect(&f).await.unwrap(), lock.clone());
        queue.push(tokio::spawn(async move {
            let wait = AcquireOptions::new().wait(Duration::from_secs(3600));
            w.acquire(&lock, &wait).await?.release().await
        }));
    }
    let mut renewal_ms = Vec::new();
    for bounce in 0..6 {
        let at = tokio::time::Instant::now();
        if bounce % 2 == 0 {
            f.cluster_mut().restart_apiserver().await.unwrap();
        } else {
            f.cluster_mut().restart_etcd().await.unwrap();
        }
        let restarted = at.elapsed();
        scenarios::first_renewal_after(held.lease().clone(), at + restarted)
            .await
            .unwrap_or_else(|| panic!("lease lost to restart {bounce}"));
        let ms = at.elapsed().as_millis();
        eprintln!("restart {bounce} took {restarted:?}; renewed {ms} ms after it began");
        renewal_ms.push(ms);
    }
    held.release().await.unwrap();
    for waiter in queue {
        let granted = tokio::time::timeout(Duration::from_secs(60), waiter).await;
        granted
            .expect("granted after the release")
            .unwrap()
            .expect("a waiter gave up during the restarts");
    }
    renewal_ms.sort_unstable();
    eprintln!(
        "Kubernetes 1.36: 6 restarts, 0 leases lost, 0 waiters gave up, renewed after a restart began: median {} ms, max {} ms",
        renewal_ms[3], renewal_ms[5]
    );
}
