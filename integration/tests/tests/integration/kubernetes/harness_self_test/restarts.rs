//! Leases survive an apiserver restart and an etcd crash under it, with resource versions that keep growing.

use super::*;

/// VmRSS and VmHWM (peak) of a process, in MiB, for the printed figures.
fn rss_mib(pid: Option<u32>) -> String {
    let Some(pid) = pid else {
        return "(not running)".into();
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or("?".to_string(), |kib| (kib / 1024).to_string())
    };
    format!("RSS {} MiB, peak {} MiB", field("VmRSS:"), field("VmHWM:"))
}

/// Creates the Lease `name` (holder `before`) before a fault.
async fn lease_survives(before: &Api<Lease>, name: &str) -> Lease {
    call(
        "create",
        before.create(&PostParams::default(), &lease(name, "before")),
    )
    .await
    .expect("create before the fault")
}

/// Checks through `after` (a client made before the fault) that the Lease
/// is unchanged and that a new write gets a numerically greater
/// resourceVersion.
async fn check_after(after: &Api<Lease>, written: &Lease) {
    let name = written.metadata.name.clone().expect("a name");
    // The first requests after a restart may meet closed pooled
    // connections; a client retries, so the test does too (bounded).
    let mut read = None;
    for _ in 0..20 {
        match call("get after", after.get(&name)).await {
            Ok(l) => {
                read = Some(l);
                break;
            }
            Err(e) => {
                eprintln!("get after the fault: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    let read = read.expect("the Lease is readable after the fault");
    assert_eq!(rv(&read), rv(written), "the Lease is unchanged");
    assert_eq!(holder(&read), Some("before"));
    let next = take(after, &read, "after")
        .await
        .expect("update after the fault");
    assert!(
        rv(&next) > rv(written),
        "resourceVersion {} after the fault is not above {} before",
        rv(&next),
        rv(written)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_survives_an_apiserver_restart() {
    let mut cluster = start().await;
    eprintln!(
        "apiserver after start: {}",
        rss_mib(cluster.apiserver_pid())
    );
    let api = leases(&cluster, KubeUser::LeaseUser, TEST_NAMESPACE).await;
    let written = lease_survives(&api, "survives-apiserver").await;
    let old_pid = cluster.apiserver_pid();
    let t = Instant::now();
    cluster
        .restart_apiserver()
        .await
        .expect("restart the apiserver");
    eprintln!(
        "apiserver restart (graceful stop + ready) took {:?}",
        t.elapsed()
    );
    assert_ne!(cluster.apiserver_pid(), old_pid, "a new process");
    check_after(&api, &written).await;
    eprintln!(
        "apiserver after restart and writes: {}",
        rss_mib(cluster.apiserver_pid())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_survives_an_etcd_crash_under_the_apiserver() {
    let mut cluster = start().await;
    let api = leases(&cluster, KubeUser::LeaseUser, TEST_NAMESPACE).await;
    let written = lease_survives(&api, "survives-etcd").await;
    let apiserver = cluster.apiserver_pid();
    let t = Instant::now();
    cluster.kill_etcd();
    // With etcd gone, requests that need storage fail (or time out); they
    // must not succeed from some cache pretending to be authoritative.
    let mut attempt = written.clone();
    attempt
        .spec
        .get_or_insert_with(LeaseSpec::default)
        .holder_identity = Some("during".into());
    let during = tokio::time::timeout(
        Duration::from_secs(5),
        api.replace("survives-etcd", &PostParams::default(), &attempt),
    )
    .await;
    assert!(
        !matches!(during, Ok(Ok(_))),
        "an update succeeded while etcd was down: {during:?}"
    );
    cluster.start_etcd().await.expect("start etcd again");
    eprintln!(
        "etcd kill + restart until the apiserver is ready: {:?}",
        t.elapsed()
    );
    assert_eq!(
        cluster.apiserver_pid(),
        apiserver,
        "the apiserver kept running"
    );
    check_after(&api, &written).await;

    let t = Instant::now();
    cluster.restart_etcd().await.expect("restart etcd");
    eprintln!("restart_etcd took {:?}", t.elapsed());
    let again = call("get", api.get("survives-etcd"))
        .await
        .expect("get after restart_etcd");
    assert_eq!(holder(&again), Some("after"));
}
