//! The gates kept in a coordinator keep the gate rules and bind their
//! marks to that coordinator: a token named as another source's is
//! refused, however high, and the mark is unchanged. One cluster per backend (run under the cluster lock).

use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, Gate, ResourceName};
use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::etcd::fixture::EtcdFixture;
use fencing_harness::fixture::Fixture;
use fencing_harness::zk::ensemble::ZkVersion;
use fencing_harness::zk::fixture::ZkFixture;
use fencing_testkit::{gate_keeps_the_rules, gate_survives_racing_admits, Binding};

/// The gate rules (fencing-testkit), from a real grant's token upwards;
/// a token naming no source counts as the gate's own source's.
async fn keeps_the_rules(gate: &dyn Gate, source: &dyn FencingSource) {
    let r = ResourceName::new("orders").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    let grant = source.acquire(&r, &opts).await.unwrap();
    gate_keeps_the_rules(gate, &r, source.identity(), grant.token(), Binding::Fixed).await;
    grant.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_gate_keeps_the_rules() {
    let f = EtcdFixture::start(EtcdVersion::V3_4).await;
    let source = f.source().await;
    let gate = source.gate("/fencing-test-gate").unwrap();
    keeps_the_rules(&gate, &source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_gate_keeps_the_rules() {
    let f = ZkFixture::start(ZkVersion::V3_8).await;
    let source = f.source().await;
    let gate = source.gate("/fencing-test-gate").unwrap();
    keeps_the_rules(&gate, &source).await;
}

/// Four writers race admits through two gates of one coordinator (two
/// sessions, two connections): the mark never goes back, and ends at the
/// highest token admitted (a raise must be conditional on the mark it
/// read; a ZooKeeper gate raising by path alone fails this).
async fn survives_racing_admits(a: &dyn Gate, b: &dyn Gate, source: &dyn FencingSource) {
    let r = ResourceName::new("raced").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    let grant = source.acquire(&r, &opts).await.unwrap();
    gate_survives_racing_admits(&[a, b], &r, source.identity(), grant.token(), 25).await;
    grant.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_gate_survives_racing_admits() {
    let f = ZkFixture::start(ZkVersion::V3_9).await;
    let (a, b) = (f.source().await, f.source().await);
    let gate = |s: &fencing_zookeeper::ZkSource| s.gate("/fencing-test-gate").unwrap();
    survives_racing_admits(&gate(&a), &gate(&b), &a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_gate_survives_racing_admits() {
    let f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let (a, b) = (f.source().await, f.source().await);
    let gate = |s: &fencing_etcd::EtcdSource| s.gate("/fencing-test-gate").unwrap();
    survives_racing_admits(&gate(&a), &gate(&b), &a).await;
}
