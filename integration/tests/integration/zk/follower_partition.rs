//! A ZooKeeper follower cut off from its leader by a real partition
//! (network namespaces, iptables), while its client still reaches it.
//!
//! Client A holds a lock through the follower; client B waits through the
//! other follower. Once the follower is cut off, the leader stops hearing
//! of A's session, expires it after the 1 s session timeout and grants the
//! lock to B; the cut-off follower goes on answering A for syncLimit x
//! tickTime (5 s here). A must learn of its loss before B is granted, and
//! the ZkGate must refuse A's write through that follower once B's token
//! was admitted. Both failed before renewals and gate equality were
//! confirmed through the leader (issue 12, items 1 and 2).

use std::sync::mpsc;
use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, Gate, ResourceName};
use fencing_integration::campaign::members::{Cluster, Kind};
use fencing_integration::net::netns::{self, Network};
use fencing_integration::zk::ensemble::ZkVersion;
use fencing_zookeeper::ZkSource;
use tokio::time::Instant;

/// 25 ticks of 200 ms: the follower answers for 5 s after the cut.
const SYNC_LIMIT: u64 = 25;
const SESSION: Duration = Duration::from_secs(1);

/// What client A and B saw, in ms after the cut.
#[derive(Debug)]
struct Seen {
    a_lost_ms: Option<u128>,
    b_granted_ms: u128,
    /// A's write through the cut-off follower after B's was admitted.
    a_write_after_b: Result<(), String>,
}

async fn clients(
    url_a: String,
    url_b: String,
    ready: mpsc::Sender<()>,
    cut: tokio::sync::oneshot::Receiver<()>,
) -> Seen {
    let lock = ResourceName::new("follower-partition").unwrap();
    let opts = AcquireOptions::new()
        .ttl(SESSION)
        .timeout(Duration::from_secs(30));
    let a = ZkSource::from_url(&url_a).await.expect("client A connects");
    let b = ZkSource::from_url(&url_b).await.expect("client B connects");
    let (gate_a, gate_b) = (
        a.gate("/gates").await.unwrap(),
        b.gate("/gates").await.unwrap(),
    );
    let held = a.acquire(&lock, &opts).await.expect("A acquires");
    gate_a
        .admit(&lock, held.token())
        .await
        .expect("A's first write");
    let waiting = tokio::spawn(async move {
        let grant = b
            .acquire(&lock, &opts)
            .await
            .expect("B is granted after A's session expires");
        (grant, b)
    });
    // B is queued behind A before the cut.
    tokio::time::sleep(Duration::from_millis(500)).await;
    ready.send(()).unwrap();
    cut.await.unwrap();
    let started = Instant::now();
    let mut a_lost_ms = None;
    let mut waiting = std::pin::pin!(waiting);
    let (grant_b, _b) = loop {
        tokio::select! {
            _ = held.lost(), if a_lost_ms.is_none() => {
                a_lost_ms = Some(started.elapsed().as_millis());
            }
            done = &mut waiting => break done.unwrap(),
        }
    };
    let b_granted_ms = started.elapsed().as_millis();
    let lock = grant_b.resource().clone();
    gate_b
        .admit(&lock, grant_b.token())
        .await
        .expect("B's write through the leader's side");
    let a_write_after_b =
        match tokio::time::timeout(Duration::from_secs(3), gate_a.admit(&lock, held.token())).await
        {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("timed out".into()),
        };
    if a_lost_ms.is_none() && !held.is_live() {
        a_lost_ms = Some(started.elapsed().as_millis());
    }
    Seen {
        a_lost_ms,
        b_granted_ms,
        a_write_after_b,
    }
}

#[test]
fn a_cut_off_follower_neither_renews_a_lease_nor_admits_a_stale_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut net =
        Network::create("fzkp-", 214).expect("network namespaces (root, iproute2, iptables)");
    let members: Vec<_> = (1..=3)
        .map(|i| net.add_host(&format!("m{i}")).unwrap())
        .collect();
    let client = net.add_host("c").unwrap();
    let cluster =
        Cluster::start_with_sync_limit(Kind::Zk(ZkVersion::V3_9), &members, dir.path(), SYNC_LIMIT)
            .expect("ensemble starts");
    let started = std::time::Instant::now();
    let leader = loop {
        if let Some(l) = cluster.leader() {
            break l;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no leader");
        std::thread::sleep(Duration::from_millis(200));
    };
    let follower = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let (url_a, url_b) = (
        cluster.url(&[follower], SESSION),
        cluster.url(&[other], SESSION),
    );

    let (ready_tx, ready_rx) = mpsc::channel();
    let (cut_tx, cut_rx) = tokio::sync::oneshot::channel();
    let run = netns::spawn_in(&client, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(clients(url_a, url_b, ready_tx, cut_rx))
    });
    ready_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("clients ready");
    let isolated = &cluster.members[follower].host;
    let rest = [&cluster.members[leader].host, &cluster.members[other].host];
    net.split(&[isolated], &rest).unwrap();
    cut_tx.send(()).unwrap();
    let seen = run
        .join()
        .expect("client thread")
        .expect("entering the namespace");
    net.heal().unwrap();
    println!("{seen:?}");

    let lost = seen
        .a_lost_ms
        .unwrap_or_else(|| panic!("A never learned of its loss: {seen:?}"));
    assert!(
        lost <= seen.b_granted_ms,
        "A still believed it held the lock when B was granted: {seen:?}"
    );
    assert!(
        seen.a_write_after_b.is_err(),
        "the gate admitted A's stale write through the cut-off follower: {seen:?}"
    );
}
