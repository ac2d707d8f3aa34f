//! `fence run` against real clusters: the child is stopped once `fence` was
//! frozen past its lease, and FENCING_TOKEN is the cluster's token.

mod common;

use fencing_integration::etcd_cluster::EtcdVersion;
use fencing_integration::etcd_fixture::EtcdFixture;
use fencing_integration::zk_ensemble::ZkVersion;
use fencing_integration::zk_fixture::ZkFixture;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_frozen_fence_run_stops_its_child() {
    let f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let url = format!("etcd://{}{}", f.cluster.endpoints().join(","), f.prefix);
    common::frozen_fence_run_stops_its_child(&url, "2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_frozen_fence_run_stops_its_child() {
    let f = ZkFixture::start(ZkVersion::V3_9).await;
    // The ZooKeeper lease is the session: its timeout plays the TTL.
    let url = format!(
        "zk://{}{}?session_timeout=2&ensemble={}",
        f.ensemble.connect_string(),
        f.path,
        f.name
    );
    common::frozen_fence_run_stops_its_child(&url, "2").await;
}
