//! The source identity is the ensemble's own id, whatever servers a
//! client lists (issue 55, item 4: it was the sorted host list, so adding
//! a member to the list, or naming a server by another address, made every
//! bound gate refuse every write with `ForeignSource`).

use std::time::Duration;

use fencing::zookeeper::{ZkConfig, ZkSource};
use fencing::{AcquireOptions, FencingSource, Gate, MemoryGate};
use fencing_harness::fixture::{resource as r, Fixture};
use fencing_harness::zk::ensemble::ZkVersion;
use fencing_harness::zk::fixture::ZkFixture;

async fn connect(hosts: &[String], path: &str) -> ZkSource {
    ZkSource::connect(ZkConfig::new(hosts.to_vec(), path).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_follows_the_ensemble_not_the_host_list() {
    let f = ZkFixture::start(ZkVersion::V3_9).await;
    let hosts = f.ensemble.endpoints();
    let two = connect(&hosts[..2], &f.path).await;
    let all = connect(&hosts, &f.path).await;
    let reversed: Vec<String> = hosts.iter().rev().cloned().collect();
    let again = connect(&reversed, &f.path).await;
    assert!(
        two.identity().as_str().starts_with("zk:"),
        "{}",
        two.identity()
    );
    assert_eq!(two.identity(), all.identity(), "a member added to the list");
    assert_eq!(
        all.identity(),
        again.identity(),
        "the same servers in another order"
    );

    // A gate bound to the two-server client's grants admits the grants of
    // a client that lists a third server.
    let gate = MemoryGate::new();
    let lock = r("identity");
    let opts = AcquireOptions::new().wait(Duration::from_secs(10));
    for source in [&two, &all] {
        let grant = source.acquire(&lock, &opts).await.unwrap();
        gate.admit_grant(grant.info()).await.unwrap();
        grant.release().await.unwrap();
    }

    // A name set explicitly wins; another ensemble has another id.
    let named = ZkConfig::new(hosts.clone(), f.path.clone())
        .unwrap()
        .ensemble("prod");
    let named = ZkSource::connect(named).await.unwrap();
    assert_eq!(named.identity().as_str(), "zk:prod");
    let other = ZkFixture::start_with(ZkVersion::V3_9, 1).await;
    let elsewhere = connect(&other.ensemble.endpoints(), &other.path).await;
    assert_ne!(elsewhere.identity(), all.identity());
    for source in [two, all, again, named, elsewhere] {
        source.close().await.unwrap();
    }
}
