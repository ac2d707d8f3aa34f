//! An etcd leader cut off from its peers (the harness and its checks:
//! `crate::cut_off`). etcd answers a lease keep-alive on the leader without
//! a quorum round (3.4 checks nothing; 3.6's `ensureLeadership` passes while
//! the member still ticks), so an isolated leader renews leases until
//! CheckQuorum makes it step down, one to two of *its* election timeouts
//! after the cut. Meanwhile the other two elect a leader, whose lessor
//! gives every lease one election timeout + TTL from its promotion, then
//! revokes A's and deletes the lock key. A, whose keep-alives reach only
//! the old leader, must not count those renewals.
//!
//! The old leader runs with `--election-timeout 5000` and its peers with
//! 1000 (as operators set it for a distant member), so the majority elects
//! a new leader seconds before the old one steps down. Before renewals were
//! vouched for by a quorum read, A heard of its loss 8-9 s after B was
//! granted on both versions.
//!
//! Last, a follower cut off under a waiter's watch: the waiter must be
//! granted through another member, not when the partition heals.

use std::sync::mpsc;
use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_etcd::EtcdSource;
use fencing_harness::etcd::cluster::{self, EtcdVersion};
use fencing_harness::namespaced::{Kind, Tuning};
use fencing_harness::net::netns;

use crate::cut_off::{
    a_is_told_before_b_is_granted, report_new_leader, wait_for, Partitioned, Sessions,
};

/// A's lease; B's is longer, so that B rides through the election.
const SESSIONS: Sessions = Sessions {
    a: Duration::from_secs(2),
    b: Duration::from_secs(10),
};

/// The member that will lead and be cut off.
const OLD: usize = 0;

fn start(version: EtcdVersion, prefix: &str, subnet: u8) -> Partitioned {
    let tuning = Tuning {
        election_timeouts_ms: vec![5000, 1000, 1000],
        ..Tuning::default()
    };
    let mut p = Partitioned::start(Kind::Etcd(version), prefix, subnet, &tuning);
    if p.leader != OLD {
        move_leader(&p, OLD);
        p.leader = wait_for(Duration::from_secs(20), || {
            p.cluster.leader().filter(|&l| l == OLD)
        })
        .expect("leadership moved to the member with the long election timeout");
    }
    p
}

/// Asks the leader to hand leadership to member `to` (from the clients'
/// host, which reaches every member).
fn move_leader(p: &Partitioned, to: usize) {
    let leader = p.cluster.endpoint(p.leader);
    let name = format!("m{}", to + 1);
    let moved = netns::spawn_in(&p.client, move || async move {
        cluster::move_leader(&leader, &name).await
    });
    moved
        .join()
        .expect("mover thread")
        .expect("entering the namespace")
        .expect("move-leader");
}

fn an_isolated_leader_renews_no_lease(version: EtcdVersion, prefix: &str, subnet: u8) {
    let p = start(version, prefix, subnet);
    let peers = [(OLD + 1) % 3, (OLD + 2) % 3];
    a_is_told_before_b_is_granted(
        p,
        SESSIONS,
        &[OLD],
        &peers,
        |p| p.isolate(OLD),
        |p| report_new_leader(p, OLD),
    );
}

#[test]
fn an_isolated_leader_of_etcd_3_6_neither_renews_a_lease_nor_admits_a_stale_write() {
    an_isolated_leader_renews_no_lease(EtcdVersion::V3_6, "fetl-", 216);
}

#[test]
fn an_isolated_leader_of_etcd_3_4_neither_renews_a_lease_nor_admits_a_stale_write() {
    an_isolated_leader_renews_no_lease(EtcdVersion::V3_4, "fetk-", 217);
}

/// A waiter whose watch sits on a member cut off from its leader: that
/// member never sees the holder's release, so without require-leader on
/// the watch stream the waiter waits until the partition heals while the
/// rest of the cluster moves on. With it, the member ends the stream after
/// three election timeouts without a leader, and the waiter watches again
/// through the other member it knows, from the revision it had seen.
#[test]
fn a_waiter_watching_through_a_member_cut_off_from_its_leader_is_granted_through_another() {
    let p = Partitioned::start(
        Kind::Etcd(EtcdVersion::V3_6),
        "fetw-",
        218,
        &Tuning::default(),
    );
    let (cut_off, other) = ((p.leader + 1) % 3, (p.leader + 2) % 3);
    let session = Duration::from_secs(15);
    let holder = p.cluster.url(&[p.leader], session);
    // Its request timeout is also its gRPC keep-alive interval: at 6 s,
    // more than etcd's --grpc-keepalive-min-time (5 s), the member does not
    // close the connection for pinging too often, which would move the
    // watch elsewhere by chance and hide what this tests.
    let waiter = p
        .cluster
        .url(&[cut_off, other], session)
        .replace("timeout=1", "timeout=6");
    // The waiter reaches only `cut_off` while it queues, so its watch
    // stream is there.
    let other_host = p.cluster.members[other].host.clone();
    p.net.cut(&p.client, &other_host).unwrap();
    let (queued_tx, queued_rx) = mpsc::channel();
    let (cut_tx, cut_rx) = tokio::sync::oneshot::channel();
    let run = netns::spawn_in(&p.client, move || {
        release_while_the_waiter_is_cut_off(holder, waiter, queued_tx, cut_rx)
    });
    queued_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the waiter queued");
    p.net.heal().unwrap();
    p.isolate(cut_off);
    cut_tx.send(()).unwrap();
    let granted = run
        .join()
        .expect("client thread")
        .expect("entering the namespace");
    p.net.heal().unwrap();
    let granted_ms = granted.expect("the waiter was granted while its first member was cut off");
    println!("the waiter was granted {granted_ms} ms after the release");
}

/// The holder takes the lock, the waiter queues, and once the test has
/// cut the waiter's member off the holder releases. Returns when the
/// waiter was granted (ms after the release), or None after 20 s.
async fn release_while_the_waiter_is_cut_off(
    holder: String,
    waiter: String,
    queued: mpsc::Sender<()>,
    cut: tokio::sync::oneshot::Receiver<()>,
) -> Option<u128> {
    let lock = ResourceName::new("watched").unwrap();
    let opts = AcquireOptions::new();
    let holder = EtcdSource::from_url(&holder)
        .await
        .expect("holder connects");
    let waiter = EtcdSource::from_url(&waiter)
        .await
        .expect("waiter connects");
    let held = holder.acquire(&lock, &opts).await.expect("holder acquires");
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { waiter.acquire(&lock, &AcquireOptions::new()).await }
    });
    // Time to put its key and open its watch.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    queued.send(()).unwrap();
    cut.await.unwrap();
    held.release().await.expect("release through the leader");
    let released = tokio::time::Instant::now();
    match tokio::time::timeout(Duration::from_secs(20), waiting).await {
        Ok(granted) => {
            let grant = granted.unwrap().expect("the waiter's acquire");
            let ms = released.elapsed().as_millis();
            grant.release().await.ok();
            Some(ms)
        }
        Err(_) => None,
    }
}
