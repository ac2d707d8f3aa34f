//! EtcdSource against clusters with auth and with TLS client certificates,
//! on etcd 3.4 and 3.6.

use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, ResourceName};
use fencing_etcd::etcd_client::Permission;
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_harness::etcd::cluster::{ClusterOptions, EtcdCluster, EtcdVersion};
use fencing_harness::pki::make_tls;

const PREFIX: &str = "/fencing-test";

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(10))
}

async fn round_trip(source: &EtcdSource) -> Result<(), Error> {
    let g = source
        .acquire(&ResourceName::new("secured").unwrap(), &opts())
        .await?;
    assert!(source.validate(&g).await?);
    g.release().await
}

/// A user with read-write on the prefix works; a wrong password and a
/// read-only user get `PermissionDenied`, not a hang.
async fn auth(version: EtcdVersion) {
    let cluster = EtcdCluster::start(version, 1).await.unwrap();
    let mut admin = cluster.client().await.unwrap();
    admin.user_add("root", "root-pw", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.role_add("locker").await.unwrap();
    admin
        .role_grant_permission("locker", Permission::read_write(PREFIX).with_prefix())
        .await
        .unwrap();
    admin.user_add("fencer", "secret", None).await.unwrap();
    admin.user_grant_role("fencer", "locker").await.unwrap();
    admin.role_add("watcher").await.unwrap();
    admin
        .role_grant_permission("watcher", Permission::read(PREFIX).with_prefix())
        .await
        .unwrap();
    admin.user_add("reader", "pw", None).await.unwrap();
    admin.user_grant_role("reader", "watcher").await.unwrap();
    admin.auth_enable().await.unwrap();

    let cfg = |user: &str, pw: &str| {
        EtcdConfig::new(cluster.endpoints(), PREFIX)
            .unwrap()
            .request_timeout(Duration::from_secs(3))
            .auth(user, pw)
    };
    let fencer = EtcdSource::connect(cfg("fencer", "secret"))
        .await
        .expect("fencer connects");
    round_trip(&fencer).await.expect("fencer locks");

    match EtcdSource::connect(cfg("fencer", "wrong")).await {
        Err(Error::PermissionDenied(msg)) => assert!(msg.contains("connect"), "{msg}"),
        other => panic!("wrong password: {other:?}"),
    }
    let reader = EtcdSource::connect(cfg("reader", "pw"))
        .await
        .expect("reader connects");
    match round_trip(&reader).await {
        Err(Error::PermissionDenied(_)) => {}
        other => panic!("read-only user locked: {other:?}"),
    }
}

/// `etcds://` with CA and client certificate works against a cluster that
/// requires client certificates; without the certificate it fails fast.
async fn tls(version: EtcdVersion) {
    let dir = tempfile::tempdir().unwrap();
    let files = make_tls(dir.path()).unwrap();
    let cluster =
        EtcdCluster::start_with(ClusterOptions::new(version, 1).with_tls(files.clone(), true))
            .await
            .unwrap();
    let ep = cluster.endpoints().join(",");
    let ca = files.ca_cert.display();
    let with_cert = format!(
        "etcds://{ep}{PREFIX}?ca={ca}&cert={}&key={}&domain=localhost&request_timeout=3",
        files.client_cert.display(),
        files.client_key.display()
    );
    let source = EtcdSource::from_url(&with_cert).await.expect("TLS connect");
    round_trip(&source).await.expect("lock over TLS");

    let started = tokio::time::Instant::now();
    let without = format!("etcds://{ep}{PREFIX}?ca={ca}&domain=localhost&request_timeout=3");
    let refused = match EtcdSource::from_url(&without).await {
        Ok(s) => round_trip(&s).await,
        Err(e) => Err(e),
    };
    assert!(refused.is_err(), "a client without certificate was served");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "refusal took {:?}",
        started.elapsed()
    );
    let plain = format!("etcd://{ep}{PREFIX}?request_timeout=2");
    assert!(
        EtcdSource::from_url(&plain).await.is_err(),
        "plain HTTP to a TLS cluster was served"
    );
}

fencing_harness::on_both_etcd_versions!(auth, tls);
