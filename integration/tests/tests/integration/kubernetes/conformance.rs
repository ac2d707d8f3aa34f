//! KubeLeaseSource passes the conformance suite on a real kube-apiserver
//! (the KUBERNETES_VERSION of versions.env, on etcd 3.6). Each client reaches the apiserver through its own
//! proxy, so "stall" is a real network partition. Lease 3 s, renew
//! deadline 2 s, retry period 0.5 s.

use fencing_harness::kubernetes::fixture::KubeFixture;

async fn harness() -> KubeFixture {
    KubeFixture::start().await
}

fencing_testkit::conformance_suite!(harness);
