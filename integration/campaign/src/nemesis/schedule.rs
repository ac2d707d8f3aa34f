//! The schedule generator: the lanes of faults each backend draws from,
//! and the steps drawn from them. Pure (it never looks at the world): with
//! the executor's draws, made whatever happens, a seed replays the schedule.
//! `--faults` narrows the lanes to the kinds it names ([`parse_faults`]);
//! without it every lane draws as it always did.

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
/// PostgreSQL: the primary and its synchronous standby. A promotion comes
/// up most often; a cut between them, or a standby down, stops every
/// commit (leases run out), as a primary down does.
const PG_FAULTS: [Fault; 8] = [
    Fault::PromoteStandby,
    Fault::PromoteStandby,
    Fault::KillLeader,
    Fault::PauseLeader,
    Fault::PartitionLeader,
    Fault::KillMember,
    Fault::PauseMember,
    Fault::KillCluster,
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
        Kind::Pg => &PG_FAULTS,
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

/// The three lanes of `kind`: cluster, client, and the first
/// `storage_faults` of the storage lane.
fn lanes(kind: Kind, storage_faults: usize) -> [&'static [Fault]; 3] {
    let first = usize::from(kind == Kind::Local);
    [
        cluster_lane(kind),
        &CLIENT_FAULTS[first..],
        &STORAGE_FAULTS[..storage_faults],
    ]
}

/// Every kind the lanes of `kind` can draw (with a PostgreSQL server or
/// without).
pub fn lane_kinds(kind: Kind, postgres: bool) -> BTreeSet<Fault> {
    let storage = if postgres { 4 } else { 2 };
    lanes(kind, storage)
        .into_iter()
        .flatten()
        .copied()
        .collect()
}

/// The fault kind called `name` ([`Fault::name`]), on any backend (the
/// Kubernetes lanes hold every client and storage kind).
fn by_name(name: &str) -> Option<Fault> {
    let members = MEMBER_FAULTS.iter().chain(&PG_FAULTS).copied();
    members
        .chain(lane_kinds(Kind::Kube, true))
        .find(|f| f.name() == name)
}

/// `--faults KIND[,KIND...]`: the named kinds, each of which a lane of
/// `kind` must hold; otherwise why not, with the valid names.
pub fn parse_faults(list: &str, kind: Kind, postgres: bool) -> Result<BTreeSet<Fault>, String> {
    let valid = lane_kinds(kind, postgres);
    let listing = || {
        let names: BTreeSet<&str> = valid.iter().map(|f| f.name()).collect();
        names.into_iter().collect::<Vec<_>>().join(", ")
    };
    let mut allowed = BTreeSet::new();
    for name in list.split(',').map(str::trim) {
        match by_name(name) {
            Some(f) if valid.contains(&f) => allowed.insert(f),
            _ => {
                return Err(format!(
                    "{}; valid: {}",
                    refusal(name, list, kind),
                    listing()
                ))
            }
        };
    }
    Ok(allowed)
}

/// Why `name`, of `--faults list`, is no kind of `kind`'s lanes.
fn refusal(name: &str, list: &str, kind: Kind) -> String {
    match by_name(name) {
        _ if name.is_empty() => format!("an empty name in `{list}`"),
        Some(f) if lane_kinds(kind, true).contains(&f) => format!("`{name}` needs --postgres"),
        Some(_) => format!("`{name}` is not drawn by the {kind:?} backend"),
        None => format!("`{name}` is no fault kind"),
    }
}

/// One step of the schedule. A lane that `--faults` left without a kind
/// draws nothing.
#[derive(Clone, Debug)]
pub struct Step {
    pub cluster: Option<Fault>,
    pub client: Option<Fault>,
    /// Starts `storage_at` into the step and ends with it (first).
    pub storage: Option<Fault>,
    pub storage_at: Duration,
    pub duration: Duration,
    pub gap: Duration,
}

impl Nemesis {
    /// Every kind this schedule can draw (its three lanes, narrowed by
    /// `--faults`) that it has not drawn yet.
    pub fn undrawn(&self) -> Vec<Fault> {
        let lanes = lanes(self.kind, self.storage_faults);
        let all: BTreeSet<Fault> = lanes.into_iter().flatten().copied().collect();
        all.difference(&self.drawn)
            .copied()
            .filter(|&f| self.allows(f))
            .collect()
    }

    /// Whether `--faults` lets the schedule draw `fault` (all do without).
    fn allows(&self, fault: Fault) -> bool {
        self.allowed.as_ref().is_none_or(|a| a.contains(&fault))
    }

    /// One of `lane` (narrowed by `--faults`; nothing if that leaves none),
    /// a kind not drawn yet while there is one (uniform among them), else
    /// by the lane's weights. Unnarrowed, the same draws as ever.
    fn draw(&mut self, lane: &[Fault]) -> Option<Fault> {
        let lane: Vec<Fault> = lane.iter().copied().filter(|&f| self.allows(f)).collect();
        if lane.is_empty() {
            return None;
        }
        let fresh: Vec<Fault> = lane
            .iter()
            .filter(|f| !self.drawn.contains(f))
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let fault = match fresh.is_empty() {
            true => *self.rng.pick(&lane),
            false => *self.rng.pick(&fresh),
        };
        self.drawn.insert(fault);
        Some(fault)
    }

    /// The step's storage fault: a storage that forgets its marks in a
    /// crash is caught only by a holder frozen across the restart, whose
    /// writes arrive after it (late in the step, once the next holder has
    /// written): so half of the pauses get a storage crash (none if
    /// `--faults` leaves it out); otherwise one step in four draws the
    /// storage lane.
    fn storage_fault(&mut self, client: Option<Fault>) -> Option<Fault> {
        if client == Some(Fault::PauseClient) && self.rng.below(2) == 0 {
            // With a PostgreSQL server, its crash as often as the file
            // storage's (no draw without one: old seeds replay as before).
            let pg = self.storage_faults > 2 && self.rng.below(2) == 0;
            let crash = if pg {
                Fault::KillPostgres
            } else {
                Fault::KillStorage
            };
            if !self.allows(crash) {
                return None;
            }
            self.drawn.insert(crash);
            Some(crash)
        } else {
            let faults = &STORAGE_FAULTS[..self.storage_faults];
            (self.rng.below(4) == 0)
                .then(|| self.draw(faults))
                .flatten()
        }
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
        let storage = self.storage_fault(client);
        let duration = self.rng.duration(Duration::from_millis(800), self.longest);
        let cluster = self.draw(cluster_lane(self.kind));
        let duration = match cluster {
            Some(Fault::DeposeDistantLeader) => duration.max(DISTANT_CUT),
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
            .filter_map(|_| nemesis.next_step().cluster.map(Fault::name))
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
        assert_eq!(drawn(Kind::Pg, 2000), names(&PG_FAULTS));
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

    /// A digest of `steps` steps of a seeded schedule (every field of each).
    fn digest(nemesis: &mut Nemesis, steps: usize) -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for _ in 0..steps {
            let s = nemesis.next_step();
            let line = format!(
                "{} {} {:?} {} {} {}\n",
                s.cluster.map_or("-", Fault::name),
                s.client.map_or("-", Fault::name),
                s.storage.map(Fault::name),
                s.storage_at.as_millis(),
                s.duration.as_millis(),
                s.gap.as_millis()
            );
            for b in line.bytes() {
                hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
        hash
    }

    #[test]
    fn without_faults_a_seed_replays_the_schedule_it_gave_before_the_option() {
        // Digests of 500 steps of seed 1206 taken with the generator as it
        // was before `--faults` (commit bc57c02).
        for (kind, pg, before) in [
            (Kind::Zk(ZkVersion::V3_9), true, 0x57cb_947f_ac13_786b),
            (Kind::Etcd(EtcdVersion::V3_6), false, 0x4b87_e4a8_320d_9711),
            (Kind::Local, false, 0x6e84_2dec_2d9c_3587),
            (Kind::Kube, true, 0x2b2f_d30e_77da_5e98),
        ] {
            let new = || Nemesis::new(Rng::new(1206), 16, kind, Duration::from_secs(1), pg);
            assert_eq!(digest(&mut new(), 500), before, "{kind:?}");
            assert_eq!(digest(&mut new().only(None), 500), before, "{kind:?}");
        }
        // The first steps of the ZooKeeper one, spelled out.
        let kind = Kind::Zk(ZkVersion::V3_9);
        let mut zk = Nemesis::new(Rng::new(1206), 16, kind, Duration::from_secs(1), true);
        let first: Vec<_> = (0..3)
            .map(|_| {
                let s = zk.next_step();
                let name = |f: Option<Fault>| f.map(Fault::name);
                (name(s.cluster), name(s.client), name(s.storage))
            })
            .collect();
        assert_eq!(
            first,
            [
                (
                    Some("delete-holders"),
                    Some("wall-jump-back"),
                    Some("pause-postgres")
                ),
                (Some("partition-bridge"), Some("clock-fast"), None),
                (Some("pause-member"), Some("kill-client"), None),
            ]
        );
    }

    #[test]
    fn faults_narrow_each_lane_and_empty_lanes_draw_nothing() {
        let kind = Kind::Zk(ZkVersion::V3_9);
        let list = "depose-leader, partition-leader,kill-leader";
        let allowed = parse_faults(list, kind, true).unwrap();
        let mut nemesis = Nemesis::new(Rng::new(1206), 16, kind, Duration::from_secs(1), true)
            .only(Some(allowed.clone()));
        assert_eq!(nemesis.undrawn().len(), 3);
        let mut seen = BTreeSet::new();
        for step in (0..500).map(|_| nemesis.next_step()) {
            assert!(step.client.is_none() && step.storage.is_none(), "{step:?}");
            seen.insert(step.cluster.expect("a cluster fault every step"));
        }
        assert_eq!(seen, allowed);
        assert!(nemesis.undrawn().is_empty());
        // A client kind alone: no cluster fault, and no storage crash with
        // the pauses.
        let allowed = parse_faults("pause-client", kind, true).unwrap();
        let mut nemesis =
            Nemesis::new(Rng::new(3), 16, kind, Duration::from_secs(1), true).only(Some(allowed));
        for step in (0..500).map(|_| nemesis.next_step()) {
            assert_eq!(step.client, Some(Fault::PauseClient));
            assert!(step.cluster.is_none() && step.storage.is_none(), "{step:?}");
        }
    }

    #[test]
    fn faults_of_no_lane_of_the_backend_are_refused_by_name() {
        let zk = Kind::Zk(ZkVersion::V3_9);
        let err = parse_faults("depose-leader,compact-defrag", zk, true).unwrap_err();
        assert!(err.contains("`compact-defrag` is not drawn by the Zk(V3_9) backend"));
        assert!(err.contains("valid: clock-fast, clock-slow, delete-holders, depose-leader"));
        assert!(!err.contains("valid: compact-defrag") && !err.contains(", compact-defrag"));
        let err = parse_faults("kill-postgres", zk, false).unwrap_err();
        assert!(
            err.starts_with("`kill-postgres` needs --postgres; valid: "),
            "{err}"
        );
        let err = parse_faults("depose-lead", zk, false).unwrap_err();
        assert!(
            err.starts_with("`depose-lead` is no fault kind; valid: "),
            "{err}"
        );
        assert!(parse_faults("kill-leader,", zk, false).is_err());
        assert!(parse_faults("partition-client", Kind::Local, false).is_err());
        let kube = parse_faults("delete-leases,pause-apiserver", Kind::Kube, false);
        assert_eq!(kube.unwrap().len(), 2);
    }
}
