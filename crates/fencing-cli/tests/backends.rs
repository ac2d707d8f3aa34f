//! The `fence` commands against real clusters, started by the integration
//! harness: `fence demo --source URL` must fence the stale write on every
//! backend, and `fence run` must stop its child once `fence` was frozen past
//! its lease, with FENCING_TOKEN being the cluster's token.

mod common;

use fencing_integration::etcd::cluster::EtcdVersion;
use fencing_integration::etcd::fixture::EtcdFixture;
use fencing_integration::kubernetes::cluster::KubeUser;
use fencing_integration::kubernetes::fixture::KubeFixture;
use fencing_integration::zk::ensemble::ZkVersion;
use fencing_integration::zk::fixture::ZkFixture;

fn etcd_url(f: &EtcdFixture) -> String {
    format!("etcd://{}{}", f.cluster.endpoints().join(","), f.prefix)
}

/// The ZooKeeper lease is the session: its timeout plays the TTL.
fn zk_url(f: &ZkFixture) -> String {
    format!(
        "zk://{}{}?session_timeout=2&ensemble={}",
        f.ensemble.connect_string(),
        f.path,
        f.name
    )
}

/// The demo runs its own processes against `url`; it exits 0 only when the
/// gated run refused the frozen client's late write.
async fn demo_fences_the_stale_write(url: String) {
    let out = tokio::task::spawn_blocking(move || {
        common::fence()
            .args(["demo", "--source", &url, "--ttl-ms", "2000"])
            .output()
            .expect("run fence demo")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("result: PASS"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_demo_and_frozen_run() {
    let f = EtcdFixture::start(EtcdVersion::V3_6).await;
    demo_fences_the_stale_write(etcd_url(&f)).await;
    common::frozen_fence_run_stops_its_child(&etcd_url(&f), "2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_demo_and_frozen_run() {
    let f = ZkFixture::start(ZkVersion::V3_9).await;
    demo_fences_the_stale_write(zk_url(&f)).await;
    common::frozen_fence_run_stops_its_child(&zk_url(&f), "2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_demo_and_frozen_run_as_the_least_privileged_user() {
    let f = KubeFixture::start().await;
    let url = f.url(KubeUser::LeaseUser);
    demo_fences_the_stale_write(url.clone()).await;
    common::frozen_fence_run_stops_its_child(&url, "3").await;
}

#[test]
fn kubernetes_url_mistakes_are_usage_errors() {
    for (url, names) in [
        ("kube://", "namespace is missing"),
        ("kube://Bad_NS", "Bad_NS"),
        (
            "kube://ns?kubeconfig=/nonexistent/kubeconfig",
            "/nonexistent/kubeconfig",
        ),
        ("kube://ns?ttl=abc", "ttl"),
    ] {
        common::assert_usage_error(
            &["run", "--source", url, "--lock", "l", "--", "true"],
            names,
        );
    }
}
