//! The `fence` commands against real clusters, started by the integration
//! harness: `fence demo --source URL` must fence the stale write on every
//! backend, and `fence run` must stop its child once `fence` was frozen past
//! its lease, with FENCING_TOKEN being the cluster's token.

mod common;

use std::time::Duration;

use fencing::{AcquireOptions, ResourceName};

use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::etcd::fixture::EtcdFixture;
use fencing_harness::fixture::Fixture;
use fencing_harness::kubernetes::cluster::KubeUser;
use fencing_harness::kubernetes::fixture::KubeFixture;
use fencing_harness::zk::ensemble::ZkVersion;
use fencing_harness::zk::fixture::ZkFixture;

fn etcd_url(f: &EtcdFixture) -> String {
    format!("etcd://{}{}", f.cluster.endpoints().join(","), f.prefix)
}

/// The ZooKeeper lease is the session: its timeout plays the TTL.
fn zk_url(f: &ZkFixture) -> String {
    format!(
        "zk://{}{}?ttl=2&ensemble={}",
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

/// A loss the server reported leaves no lease time to spend: the lock key
/// is deleted (as `etcdctl del` would) while a second `fence run` waits, and
/// the first command, which ignores SIGTERM and has a 5 s grace, must write
/// nothing after the second command started. With SIGTERM and the grace it
/// went on writing for 4,979 ms after; with SIGKILL at once its last write
/// came 15-19 ms before (both `fence`s hear of the same delete: the first
/// needs one kill, the second a grant and two execs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lock_deleted_at_the_server_kills_the_command_at_once() {
    let f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let url = etcd_url(&f);
    let dir = tempfile::tempdir().unwrap();
    let (seen, stamps, started) = (
        dir.path().join("seen"),
        dir.path().join("stamps"),
        dir.path().join("started"),
    );
    let stubborn = format!(
        "trap '' TERM; echo $$ > {}; {}",
        seen.display(),
        common::stamp_loop(&stamps)
    );
    let lock = ["--source", &url, "--lock", "ledger", "--ttl", "15"];
    let first = common::Running::start(
        &[
            &["run"],
            &lock[..],
            &["--grace", "5", "--", "sh", "-c", &stubborn],
        ]
        .concat(),
    );
    let child: i32 = common::wait_for_file(&seen, Duration::from_secs(30))
        .trim()
        .parse()
        .unwrap();
    let _cleanup = common::KillOnDrop(vec![child]);
    let next = format!("date +%s%N > {}", started.display());
    let second =
        common::Running::start(&[&["run"], &lock[..], &["--", "sh", "-c", &next]].concat());

    let mut etcd = f.cluster.client().await.unwrap();
    let queue = etcd_client::GetOptions::new().with_prefix().with_sort(
        etcd_client::SortTarget::Create,
        etcd_client::SortOrder::Ascend,
    );
    let dir_key = format!("{}/ledger/", f.prefix);
    let queued = tokio::time::Instant::now() + Duration::from_secs(10);
    let keys = loop {
        let keys = etcd
            .get(dir_key.as_str(), Some(queue.clone()))
            .await
            .unwrap();
        if keys.kvs().len() >= 2 {
            break keys;
        }
        assert!(
            tokio::time::Instant::now() < queued,
            "the second fence run never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let held = keys.kvs()[0].key().to_vec();
    etcd.delete(held, None).await.unwrap();

    let (code, stderr) = tokio::task::spawn_blocking(move || first.finish(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(code, Some(common::LOST), "{stderr}");
    assert!(stderr.contains("deleted at the server"), "{stderr}");
    let started_at: u128 = common::wait_for_file(&started, Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap();
    let last = common::last_stamp(&stamps);
    assert!(
        last < started_at,
        "the first command wrote {} ms after the second one started",
        (last - started_at) / 1_000_000
    );
    eprintln!(
        "the first command's last write came {} ms before the second one started",
        (started_at - last) / 1_000_000
    );
    let (code, stderr) =
        tokio::task::spawn_blocking(move || second.finish(Duration::from_secs(10)))
            .await
            .unwrap();
    assert_eq!(code, Some(0), "{stderr}");
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

/// PostgreSQL: `fence schema` creates the lock table (twice is fine), then
/// the demo and the frozen `fence run` behave as on the other backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_schema_demo_and_frozen_run() {
    let server = fencing_harness::postgres::server::PgServer::start()
        .await
        .unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?table=cli_locks&ttl=2",
        server.port()
    );
    for _ in 0..2 {
        let stdout = common::fence_schema(&url);
        assert!(stdout.contains("cli_locks"), "{stdout}");
    }
    let printed = common::fence()
        .args(["schema", "--print", "--source", &url])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&printed.stdout)
        .contains("CREATE TABLE IF NOT EXISTS \"cli_locks\""));
    demo_fences_the_stale_write(url.clone()).await;
    common::frozen_fence_run_stops_its_child(&url, "2").await;
    a_clock_ahead_cannot_take_a_held_lock(&url).await;
}

/// libfaketime (Debian's `faketime`, installed by scripts/install/netns.sh).
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// A lock's expiry is judged on the server's clock: a `fence run` whose
/// wall clock is 10 minutes ahead waits for a lock held on a true clock,
/// as every other client does (on its own clock, every lease it sees would
/// have run out long ago).
async fn a_clock_ahead_cannot_take_a_held_lock(url: &str) {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "{FAKETIME_LIB} is missing: run scripts/install/netns.sh"
    );
    let source = fencing::connect(url).await.unwrap();
    let name = ResourceName::new("clock-ahead").unwrap();
    let held = source
        .acquire(&name, &AcquireOptions::new().ttl(Duration::from_secs(8)))
        .await
        .unwrap();
    let url = url.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        common::fence()
            .args(["run", "--source", &url, "--lock", "clock-ahead"])
            .args(["--wait", "3", "--", "true"])
            .env("LD_PRELOAD", FAKETIME_LIB)
            .env("FAKETIME", "+600")
            .output()
            .expect("run fence")
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a client 10 minutes ahead must wait for the held lock, and give up after --wait: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(held.is_live(), "the holder lost its lock to a fast clock");
    held.release().await.unwrap();
}
