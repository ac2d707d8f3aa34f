//! The CLI against clusters you run yourself, e.g. the repository's
//! docker-compose.yml (docs/deploying.md, "Clusters with Docker Compose"). Ignored by
//! default; run with `-- --ignored` and the FENCING_*_URL variables set.
//! A requested test whose variable is missing fails rather than passing
//! without having checked anything.

mod common;

use std::process::Command;

fn url(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| panic!("set {var} to the cluster's fencing URL"))
}

fn demo_passes(url: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_fence"))
        .args(["demo", "--source", url])
        .output()
        .expect("run fence demo");
    assert_eq!(
        out.status.code(),
        Some(0),
        "fence demo --source {url}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn check(var: &str, ttl: &str) {
    let url = url(var);
    demo_passes(&url);
    common::frozen_fence_run_stops_its_child(&url, ttl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs FENCING_ETCD_URL (see docs/deploying.md)"]
async fn external_etcd() {
    check("FENCING_ETCD_URL", "2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs FENCING_ZK_URL (see docs/deploying.md)"]
async fn external_zookeeper() {
    check("FENCING_ZK_URL", "4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs FENCING_KUBE_URL (see docs/deploying.md)"]
async fn external_kubernetes() {
    check("FENCING_KUBE_URL", "4").await;
}

/// PostgreSQL: the lock table is made first, as `fence schema` would for
/// an operator (idempotent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs FENCING_PG_URL (see docs/deploying.md)"]
async fn external_postgres() {
    common::fence_schema(&url("FENCING_PG_URL"));
    check("FENCING_PG_URL", "2").await;
}
