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

use std::time::Duration;

use fencing_integration::campaign::members::{Kind, Tuning};
use fencing_integration::etcd::cluster::{self, EtcdVersion};
use fencing_integration::net::netns;

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
    let moved = netns::spawn_in(&p.client, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(cluster::move_leader(&leader, &name))
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
