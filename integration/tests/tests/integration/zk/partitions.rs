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

use fencing_harness::namespaced::{Kind, Tuning};
use fencing_harness::zk::ensemble::ZkVersion;

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
