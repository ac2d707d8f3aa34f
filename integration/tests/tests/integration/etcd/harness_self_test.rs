//! Tests of the real-cluster harness itself, on etcd 3.4 and 3.6: a
//! 3-member cluster serves through every member, survives a killed leader
//! and a paused follower, a proxy partitions a client, and a TLS cluster
//! with client-certificate auth tells clients with and without a
//! certificate apart.
//!
//! The binaries come from `scripts/install/etcd.sh`; without them these
//! tests fail with a message saying to run `scripts/test.sh`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use fencing_harness::etcd::cluster::{ClusterOptions, EtcdCluster, EtcdVersion, HarnessError};
use fencing_harness::fixture::started;
use fencing_harness::member::MemberCluster;
use fencing_harness::net::proxy::Proxy;
use fencing_harness::pki::make_tls;

/// A bound for any single client call in these tests.
const CALL: Duration = Duration::from_secs(5);

async fn start(version: EtcdVersion) -> EtcdCluster {
    let what = format!("{version}: 3-member cluster");
    started(what, EtcdCluster::start(version, 3)).await
}

async fn connect(endpoints: &[String], options: ConnectOptions) -> Client {
    tokio::time::timeout(CALL, Client::connect(endpoints, Some(options)))
        .await
        .expect("connect timed out")
        .expect("connect")
}

fn quick_options(timeout: Duration) -> ConnectOptions {
    ConnectOptions::new()
        .with_timeout(timeout)
        .with_connect_timeout(timeout)
}

async fn put(client: &mut Client, key: &str, value: &str) {
    tokio::time::timeout(CALL, client.put(key, value, None))
        .await
        .unwrap_or_else(|_| panic!("put {key} timed out"))
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

async fn get(client: &mut Client, key: &str) -> Option<String> {
    let resp = tokio::time::timeout(CALL, client.get(key, None))
        .await
        .unwrap_or_else(|_| panic!("get {key} timed out"))
        .unwrap_or_else(|e| panic!("get {key}: {e}"));
    resp.kvs()
        .first()
        .map(|kv| kv.value_str().expect("utf-8 value").to_string())
}

async fn three_members_serve_through_every_endpoint(version: EtcdVersion) {
    let cluster = start(version).await;
    assert_eq!(cluster.member_count(), 3);
    assert_eq!(cluster.endpoints().len(), 3);
    for i in 0..3 {
        let mut client = cluster.member_client(i).await.unwrap();
        put(&mut client, &format!("key-{i}"), &format!("value-{i}")).await;
    }
    for i in 0..3 {
        let mut client = cluster.member_client(i).await.unwrap();
        for k in 0..3 {
            assert_eq!(
                get(&mut client, &format!("key-{k}")).await.as_deref(),
                Some(format!("value-{k}").as_str()),
                "key-{k} read through member {i}"
            );
        }
    }
}

async fn killed_leader_is_replaced_and_restarts_with_its_data(version: EtcdVersion) {
    let mut cluster = start(version).await;
    let mut client = cluster.client().await.unwrap();
    put(&mut client, "before", "kill").await;

    let old = cluster.leader().await.unwrap();
    let t = Instant::now();
    cluster.kill(old);
    assert!(!cluster.is_running(old));
    let new = cluster.leader().await.unwrap();
    eprintln!(
        "{version}: leader {old} killed, member {new} leads after {:?}",
        t.elapsed()
    );
    assert_ne!(new, old, "a killed member cannot lead");

    // The two survivors are a quorum: writes go on.
    let survivors: Vec<String> = (0..3)
        .filter(|&i| i != old)
        .map(|i| cluster.endpoint(i))
        .collect();
    let mut client = connect(&survivors, cluster.connect_options().unwrap()).await;
    put(&mut client, "during", "outage").await;

    let t = Instant::now();
    cluster.restart(old).await.unwrap();
    eprintln!(
        "{version}: member {old} restarted and healthy after {:?}",
        t.elapsed()
    );
    let mut client = cluster.member_client(old).await.unwrap();
    assert_eq!(get(&mut client, "before").await.as_deref(), Some("kill"));
    assert_eq!(get(&mut client, "during").await.as_deref(), Some("outage"));
}

async fn paused_follower_does_not_stop_the_cluster(version: EtcdVersion) {
    let cluster = start(version).await;
    let leader = cluster.leader().await.unwrap();
    let follower = (leader + 1) % 3;
    cluster.pause(follower);
    assert!(cluster.is_paused(follower));

    let others: Vec<String> = (0..3)
        .filter(|&i| i != follower)
        .map(|i| cluster.endpoint(i))
        .collect();
    let mut client = connect(&others, cluster.connect_options().unwrap()).await;
    for n in 0..5 {
        put(&mut client, "counter", &n.to_string()).await;
    }
    assert_eq!(get(&mut client, "counter").await.as_deref(), Some("4"));

    // A paused member answers nothing.
    let mut stalled = connect(
        &[cluster.endpoint(follower)],
        quick_options(Duration::from_millis(500)),
    )
    .await;
    assert!(
        tokio::time::timeout(CALL, stalled.status())
            .await
            .expect("bounded")
            .is_err(),
        "a stopped member answered"
    );

    cluster.resume(follower);
    cluster.wait_healthy().await.unwrap();
    let mut client = cluster.member_client(follower).await.unwrap();
    assert_eq!(get(&mut client, "counter").await.as_deref(), Some("4"));
}

async fn proxy_blackhole_partitions_a_client(version: EtcdVersion) {
    let cluster = start(version).await;
    let target: SocketAddr = cluster.endpoint(0).parse().unwrap();
    let proxy = Proxy::start(target).await.unwrap();
    let mut client = connect(&[proxy.endpoint()], quick_options(Duration::from_secs(1))).await;
    put(&mut client, "via", "proxy").await;
    assert_eq!(get(&mut client, "via").await.as_deref(), Some("proxy"));

    proxy.set_blackhole(true);
    assert!(proxy.is_blackholed());
    let t = Instant::now();
    let result = tokio::time::timeout(CALL, client.get("via", None))
        .await
        .expect("the client's own 1 s timeout must fire first");
    assert!(result.is_err(), "a get through a blackhole succeeded");
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "failed after {waited:?}, not by timing out"
    );
    // A fresh connection through the blackhole fares no better.
    let mut fresh = connect(&[proxy.endpoint()], quick_options(Duration::from_secs(1))).await;
    assert!(tokio::time::timeout(CALL, fresh.get("via", None))
        .await
        .expect("bounded")
        .is_err());

    proxy.set_blackhole(false);
    // Bytes lost in the blackhole may have broken the old HTTP/2
    // connection; the client reconnects, so allow a few attempts.
    let deadline = Instant::now() + Duration::from_secs(10);
    let healed = loop {
        match tokio::time::timeout(CALL, client.get("via", None)).await {
            Ok(Ok(resp)) => break resp,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            other => panic!("no answer after the blackhole was lifted: {other:?}"),
        }
    };
    assert_eq!(healed.kvs()[0].value_str().unwrap(), "proxy");
    eprintln!("{version}: proxy healed after {:?}", t.elapsed());
}

async fn tls_cluster_requires_the_client_certificate(version: EtcdVersion) {
    let certs = tempfile::tempdir().unwrap();
    let files = make_tls(certs.path()).unwrap();
    let t = Instant::now();
    let cluster =
        EtcdCluster::start_with(ClusterOptions::new(version, 3).with_tls(files.clone(), true))
            .await
            .unwrap_or_else(|e| panic!("{version} TLS cluster did not start: {e}"));
    eprintln!(
        "{version}: 3-member TLS cluster healthy after {:?}",
        t.elapsed()
    );
    assert!(cluster.client_urls()[0].starts_with("https://"));

    let with_cert = quick_options(Duration::from_secs(2)).with_tls(files.client_options().unwrap());
    let mut client = connect(&cluster.endpoints(), with_cert).await;
    put(&mut client, "secure", "yes").await;
    assert_eq!(get(&mut client, "secure").await.as_deref(), Some("yes"));

    let without_cert = quick_options(Duration::from_secs(2))
        .with_tls(files.client_options_without_identity().unwrap());
    let mut anonymous = connect(&cluster.endpoints(), without_cert).await;
    let refused = tokio::time::timeout(CALL, anonymous.get("secure", None))
        .await
        .expect("bounded");
    match refused {
        Ok(_) => panic!("a client without a certificate was served"),
        Err(e) => eprintln!("{version}: client without a certificate refused: {e}"),
    }
    // Refused for the missing certificate, not for something else.
    let deadline = Instant::now() + CALL;
    while !(0..3).any(|i| cluster.log_tail(i).contains("didn't provide a certificate")) {
        assert!(
            Instant::now() < deadline,
            "no member logged the missing client certificate:\n{}",
            cluster.log_tail(0)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Plain HTTP is not served at all.
    let mut plain = connect(&cluster.endpoints(), quick_options(Duration::from_secs(2))).await;
    assert!(tokio::time::timeout(CALL, plain.get("secure", None))
        .await
        .expect("bounded")
        .is_err());
}

/// Whether process `pid` still exists (a zombie counts as gone).
fn process_exists(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn a_panicking_test_leaves_no_member_behind(version: EtcdVersion) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let cluster = EtcdCluster::start(version, 3).await.unwrap();
        cluster.pause(1);
        let pids: Vec<u32> = (0..3).map(|i| cluster.pid(i).unwrap()).collect();
        tx.send(pids).unwrap();
        panic!("a test failing with a live cluster (expected)");
    });
    assert!(task.await.unwrap_err().is_panic());
    let pids = rx.await.unwrap();
    for pid in pids {
        assert!(
            !process_exists(pid),
            "member process {pid} outlived the panic"
        );
    }
}

fencing_harness::on_both_etcd_versions!(
    three_members_serve_through_every_endpoint,
    killed_leader_is_replaced_and_restarts_with_its_data,
    paused_follower_does_not_stop_the_cluster,
    proxy_blackhole_partitions_a_client,
    tls_cluster_requires_the_client_certificate,
    a_panicking_test_leaves_no_member_behind,
);

#[test]
fn a_missing_binary_says_how_to_install_it() {
    let empty = tempfile::tempdir().unwrap();
    let err = EtcdVersion::V3_6.binary_in(empty.path()).unwrap_err();
    assert!(matches!(err, HarnessError::MissingBinary { .. }));
    assert!(err.to_string().contains("scripts/test.sh"), "{err}");
}
