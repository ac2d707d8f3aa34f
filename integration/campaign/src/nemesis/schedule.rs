//! The schedule generator: the lanes of faults each backend draws from,
//! and the steps drawn from them. Pure (it never looks at the world): with
//! the executor's draws, made whatever happens, a seed replays the schedule.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Fault, Nemesis, DISTANT_CUT};
use fencing_harness::namespaced::Kind;

/// Partitions between members come up most often: they are what leases
/// get wrong. The last [`ETCD_ONLY`] entries are left out on ZooKeeper: its
/// maintenance here is the leader change, and its members all share one
/// tick.
const MEMBER_FAULTS: [Fault; 14] = [
    Fault::PartitionFollower,
    Fault::PartitionFollower,
    Fault::PartitionFollower,
    Fault::PartitionLeader,
    Fault::DeposeLeader,
    Fault::PartitionBridge,
    Fault::PauseMember,
    Fault::PauseLeader,
    Fault::DeleteHolders,
    Fault::KillMember,
    Fault::KillLeader,
    Fault::KillCluster,
    Fault::CompactDefrag,
    Fault::DeposeDistantLeader,
];
const ETCD_ONLY: usize = 2;
/// Kubernetes: the faults of its etcd (a crash of the etcd leader or of
/// all its members, its maintenance), of the apiserver, and Lease deletion.
const KUBE_FAULTS: [Fault; 10] = [
    Fault::PartitionFollower,
    Fault::PartitionLeader,
    Fault::KillLeader,
    Fault::KillCluster,
    Fault::PauseMember,
    Fault::CompactDefrag,
    Fault::KillApiserver,
    Fault::PauseApiserver,
    Fault::DeleteLeases,
    Fault::DeleteLeases,
];
/// A local source has no server: its second lane is client faults too.
const LOCAL_FAULTS: [Fault; 2] = [Fault::PauseClient, Fault::KillClient];

/// The faults of the cluster lane of `kind`.
fn cluster_lane(kind: Kind) -> &'static [Fault] {
    match kind {
        Kind::Local => &LOCAL_FAULTS,
        Kind::Zk(_) => &MEMBER_FAULTS[..MEMBER_FAULTS.len() - ETCD_ONLY],
        Kind::Etcd(_) => &MEMBER_FAULTS,
        Kind::Kube => &KUBE_FAULTS,
    }
}

/// The first three need no clock of their own; the others put the client
/// on a faked clock, one client at a time.
const CLIENT_FAULTS: [Fault; 7] = [
    Fault::PartitionClient,
    Fault::PauseClient,
    Fault::KillClient,
    Fault::ClockSlow,
    Fault::ClockFast,
    Fault::WallJumpForward,
    Fault::WallJumpBack,
];

/// A third lane, in one step of four: the storage's faults.
const STORAGE_FAULTS: [Fault; 4] = [
    Fault::KillStorage,
    Fault::PauseStorage,
    Fault::KillPostgres,
    Fault::PausePostgres,
];

/// One step of the schedule.
#[derive(Clone, Debug)]
pub struct Step {
    pub cluster: Fault,
    pub client: Fault,
    /// Starts `storage_at` into the step and ends with it (first).
    pub storage: Option<Fault>,
    pub storage_at: Duration,
    pub duration: Duration,
    pub gap: Duration,
}

impl Nemesis {
    /// Every kind this schedule can draw (its three lanes) that it has not
    /// drawn yet.
    pub fn undrawn(&self) -> Vec<Fault> {
        let first = usize::from(self.kind == Kind::Local);
        let lanes = [
            cluster_lane(self.kind),
            &CLIENT_FAULTS[first..],
            &STORAGE_FAULTS[..self.storage_faults],
        ];
        let all: BTreeSet<Fault> = lanes.into_iter().flatten().copied().collect();
        all.difference(&self.drawn).copied().collect()
    }

    /// One of `lane`, a kind not drawn yet while there is one (uniform
    /// among them), else by the lane's weights.
    fn draw(&mut self, lane: &[Fault]) -> Fault {
        let fresh: Vec<Fault> = lane
            .iter()
            .filter(|f| !self.drawn.contains(f))
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let fault = match fresh.is_empty() {
            true => *self.rng.pick(lane),
            false => *self.rng.pick(&fresh),
        };
        self.drawn.insert(fault);
        fault
    }

    pub fn next_step(&mut self) -> Step {
        // One client on a faked clock at a time; no network to cut a local
        // client from.
        let clocks = if self.clock.is_some() {
            3
        } else {
            CLIENT_FAULTS.len()
        };
        let first = usize::from(self.kind == Kind::Local);
        let client = self.draw(&CLIENT_FAULTS[first..clocks]);
        // A storage that forgets its marks in a crash is caught only by a
        // holder frozen across the restart, whose writes arrive after it
        // (late in the step, once the next holder has written): so half of
        // the pauses get a storage crash.
        let storage = if client == Fault::PauseClient && self.rng.below(2) == 0 {
            // With a PostgreSQL server, its crash as often as the file
            // storage's (no draw without one: old seeds replay as before).
            let pg = self.storage_faults > 2 && self.rng.below(2) == 0;
            let crash = if pg {
                Fault::KillPostgres
            } else {
                Fault::KillStorage
            };
            self.drawn.insert(crash);
            Some(crash)
        } else {
            let faults = &STORAGE_FAULTS[..self.storage_faults];
            (self.rng.below(4) == 0).then(|| self.draw(faults))
        };
        let duration = self.rng.duration(Duration::from_millis(800), self.longest);
        let cluster = self.draw(cluster_lane(self.kind));
        let duration = match cluster {
            Fault::DeposeDistantLeader => duration.max(DISTANT_CUT),
            _ => duration,
        };
        let storage_at = duration.mul_f64(0.5 + self.rng.below(46) as f64 / 100.0);
        let gap = self
            .rng
            .duration(Duration::from_millis(300), Duration::from_millis(800));
        if let Some((_, _, left)) = &mut self.clock {
            *left = left.saturating_sub(duration + gap);
        }
        Step {
            cluster,
            client,
            storage,
            storage_at,
            duration,
            gap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use fencing_harness::etcd::cluster::EtcdVersion;
    use fencing_harness::zk::ensemble::ZkVersion;
    use std::collections::BTreeSet;

    /// The cluster faults a seeded schedule of `steps` steps draws.
    fn drawn(kind: Kind, steps: usize) -> BTreeSet<&'static str> {
        let mut nemesis = Nemesis::new(Rng::new(7), 4, kind, Duration::from_secs(1), true);
        (0..steps)
            .map(|_| nemesis.next_step().cluster.name())
            .collect()
    }

    fn names(faults: &[Fault]) -> BTreeSet<&'static str> {
        faults.iter().map(|f| f.name()).collect()
    }

    #[test]
    fn each_backend_draws_every_fault_of_its_lane_and_nothing_else() {
        let etcd = drawn(Kind::Etcd(EtcdVersion::V3_6), 2000);
        assert_eq!(etcd, names(&MEMBER_FAULTS));
        assert!(etcd.contains("depose-leader") && etcd.contains("kill-cluster"));
        assert!(etcd.contains("depose-distant-leader") && etcd.contains("compact-defrag"));
        let zk = drawn(Kind::Zk(ZkVersion::V3_9), 2000);
        let mut expected = names(&MEMBER_FAULTS);
        expected.remove("compact-defrag");
        expected.remove("depose-distant-leader");
        assert_eq!(zk, expected);
        assert_eq!(drawn(Kind::Kube, 2000), names(&KUBE_FAULTS));
        assert_eq!(drawn(Kind::Local, 2000), names(&LOCAL_FAULTS));
    }

    /// How many steps a schedule takes until it has drawn every kind of
    /// its three lanes.
    fn steps_to_cover(kind: Kind, postgres: bool, seed: u64) -> usize {
        let mut nemesis = Nemesis::new(Rng::new(seed), 4, kind, Duration::from_secs(1), postgres);
        (1..=1000)
            .find(|_| {
                nemesis.next_step();
                nemesis.undrawn().is_empty()
            })
            .expect("every kind drawn within 1000 steps")
    }

    #[test]
    fn a_schedule_draws_every_kind_of_its_lanes_early() {
        let all = |nemesis: &Nemesis| nemesis.undrawn().len();
        let etcd = Nemesis::new(
            Rng::new(1),
            4,
            Kind::Etcd(EtcdVersion::V3_6),
            Duration::from_secs(1),
            true,
        );
        // 12 cluster kinds, 7 client kinds, 4 storage kinds.
        assert_eq!(all(&etcd), 23);
        let local = Nemesis::new(Rng::new(1), 4, Kind::Local, Duration::from_secs(1), false);
        // Both lanes are client faults (no partition), and no PostgreSQL.
        assert_eq!(all(&local), 8);
        for seed in 0..50 {
            for (kind, pg) in [
                (Kind::Etcd(EtcdVersion::V3_6), true),
                (Kind::Zk(ZkVersion::V3_9), true),
                (Kind::Kube, true),
                (Kind::Local, false),
            ] {
                // Uniform draws (a kind of 1 in 12, the storage lane one
                // step in four) took 47 steps on etcd with seed 2.
                let steps = steps_to_cover(kind, pg, seed);
                assert!(steps <= 40, "{kind:?} seed {seed}: {steps} steps");
            }
        }
    }

    #[test]
    fn a_seed_replays_the_same_schedule() {
        let schedule = |seed| {
            let kind = Kind::Zk(ZkVersion::V3_9);
            let mut nemesis = Nemesis::new(Rng::new(seed), 4, kind, Duration::from_secs(1), false);
            (0..200)
                .map(|_| {
                    let s = nemesis.next_step();
                    (s.cluster, s.client, s.storage, s.duration, s.gap)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(schedule(12), schedule(12));
        assert_ne!(schedule(12), schedule(13));
    }
}
