//! Real partitions inside a ZooKeeper ensemble (the harness and its checks:
//! `crate::cut_off`): the ensemble expires A's session and grants the lock
//! to B while the server A talks to still answers it.
//!
//! - A cut-off follower goes on answering for syncLimit x tickTime.
//!   Renewals and gate equality answered by that follower alone broke this
//!   (issue 12, items 1 and 2).
//! - An isolated leader goes on answering until it counts syncLimit ticks
//!   without a quorum, and it answers a `sync` on its own. When its
//!   followers restart they elect a new leader at once, which expires A's
//!   session a session timeout later, while A, connected to the old leader,
//!   still renews through it. Renewals confirmed by a `sync` broke this;
//!   the 70-minute campaign soak (seed 1206) caught it twice after
//!   `partition-leader` faults, by 30-60 ms.

use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_harness::namespaced::{Kind, Tuning};
use fencing_harness::net::netns;
use fencing_harness::zk::ensemble::ZkVersion;
use fencing_zookeeper::ZkSource;

use crate::cut_off::{a_is_told_before_b_is_granted, report_new_leader, Partitioned, Sessions};

/// 25 ticks of 200 ms: a cut-off member answers for 5 s after the cut.
const SYNC_LIMIT: u64 = 25;
/// A's session; B's is longer, so that B rides through member restarts.
const SESSIONS: Sessions = Sessions {
    a: Duration::from_secs(1),
    b: Duration::from_secs(10),
};

fn ensemble(prefix: &str, subnet: u8) -> Partitioned {
    let tuning = Tuning {
        sync_limit: SYNC_LIMIT,
        ..Tuning::default()
    };
    Partitioned::start(Kind::Zk(ZkVersion::V3_9), prefix, subnet, &tuning)
}

#[test]
fn a_cut_off_follower_neither_renews_a_lease_nor_admits_a_stale_write() {
    let ens = ensemble("fzkp-", 214);
    let follower = (ens.leader + 1) % 3;
    let other = (ens.leader + 2) % 3;
    a_is_told_before_b_is_granted(
        ens,
        SESSIONS,
        &[follower],
        &[other],
        |ens| ens.isolate(follower),
        |_| {},
    );
}

#[test]
fn an_isolated_leader_neither_renews_a_lease_nor_admits_a_stale_write() {
    let ens = ensemble("fzkl-", 215);
    let leader = ens.leader;
    let followers = [(leader + 1) % 3, (leader + 2) % 3];
    a_is_told_before_b_is_granted(
        ens,
        SESSIONS,
        &[leader],
        &followers,
        |ens| {
            ens.isolate(leader);
            // Restarted, the followers elect a new leader at once, while the
            // old one leads on for syncLimit ticks.
            for f in followers {
                ens.cluster.members[f].restart().expect("follower restarts");
            }
        },
        |ens| report_new_leader(ens, leader),
    );
}

/// Client A goes quiet (its runtime stalls, as a starved process does) for
/// 0.95 s of its 2 s session, right after a read through its follower
/// (just under the client's own 1 s limit for a silent connection, after
/// which it would reconnect, and the new server would touch the session at
/// the leader). Then it sends its overdue heartbeat, and the follower is
/// cut off from the leader 30 ms later: the leader applies the heartbeat's
/// transaction, but the
/// follower's next ping answer, the only way the leader hears of A, never
/// comes, so the leader expires A's session from the read before the
/// stall. Counted from that heartbeat's send time, A's lease ran past B's
/// grant (issue 54, item 9: the campaign's overlaps of 4-65 ms); counted
/// from a heartbeat the leader is known to have heard of, it ends first.
#[test]
fn a_heartbeat_the_leader_answered_but_never_heard_of_renews_nothing() {
    const SESSION: Duration = Duration::from_secs(2);
    let ens = ensemble("fzkq-", 216);
    let follower = (ens.leader + 1) % 3;
    let other = (ens.leader + 2) % 3;
    let a_url = ens.cluster.url(&[follower], SESSION);
    let b_url = ens.cluster.url(&[other], SESSION);
    let lock = || ResourceName::new("quiet").unwrap();
    let opts = || {
        AcquireOptions::new()
            .ttl(SESSION)
            .wait(Duration::from_secs(60))
    };
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stall_tx, mut stall_rx) = tokio::sync::mpsc::unbounded_channel::<Duration>();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let a = netns::spawn_in(&ens.client, move || async move {
        let source = ZkSource::from_url(&a_url).await.expect("A connects");
        let held = source.acquire(&lock(), &opts()).await.expect("A acquires");
        ready_tx.send(()).unwrap();
        loop {
            tokio::select! {
                Some(stall) = stall_rx.recv() => {
                    assert!(source.validate(&held).await.unwrap(), "A holds before the stall");
                    std::thread::sleep(stall);
                }
                _ = held.lost() => break,
            }
        }
        held.lease().lost_at().expect("lost").into_std()
    });
    ready_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("A holds");
    let b = netns::spawn_in(&ens.client, move || async move {
        let source = ZkSource::from_url(&b_url).await.expect("B connects");
        let grant = source
            .acquire(&lock(), &opts())
            .await
            .expect("B is granted");
        let at = std::time::Instant::now();
        grant.release().await.unwrap();
        at
    });
    // B is queued behind A.
    std::thread::sleep(Duration::from_millis(500));
    let stall = Duration::from_millis(950);
    stall_tx.send(stall).unwrap();
    std::thread::sleep(stall + Duration::from_millis(30));
    ens.isolate(follower);
    let b_granted = b.join().unwrap().expect("B's namespace");
    let a_lost = a.join().unwrap().expect("A's namespace");
    ens.net.heal().unwrap();
    let by = |x: std::time::Instant, y: std::time::Instant| {
        x.checked_duration_since(y).unwrap_or_default().as_millis()
    };
    println!(
        "A lost {} ms before B's grant, {} ms after",
        by(b_granted, a_lost),
        by(a_lost, b_granted)
    );
    assert!(
        a_lost <= b_granted,
        "A still counted on its lease {} ms after B was granted",
        by(a_lost, b_granted)
    );
}
