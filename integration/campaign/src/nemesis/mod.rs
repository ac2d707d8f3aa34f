//! The seeded fault schedule. Each step runs one cluster fault and one
//! client fault at the same time, holds them, heals them, and waits a gap.
//!
//! [`schedule`] draws the steps from the seed alone (pure: a seed replays
//! the same schedule); [`executor`] applies each fault to the
//! [`World`](super::run::World) and undoes it.

mod executor;
mod schedule;

use std::collections::BTreeSet;
use std::time::Duration;

use super::rng::Rng;
use fencing_harness::namespaced::Kind;

pub use executor::{kube_admin, Started};
pub use schedule::{lane_kinds, parse_faults, Step};

/// One fault. Members and clients are chosen when the fault starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// A follower cut off from the other members; its clients still reach it.
    PartitionFollower,
    /// The leader cut off from the other members.
    PartitionLeader,
    /// The leader cut off, and the other members restarted at once: they
    /// elect a new leader while the old one, still counting the ticks (or
    /// election timeout) it waits for a quorum, believes it leads.
    /// ZooKeeper's isolated leader answers `sync` alone in that window.
    DeposeLeader,
    /// etcd: leadership moved to the distant member (the one with a long
    /// election timeout, [`DISTANT`]), once its pinned client holds a lock,
    /// and that member cut off for at least [`DISTANT_CUT`]: the others
    /// elect a leader within about a second while it leads on (CheckQuorum
    /// counts its own, longer, timeout) and answers keep-alives alone.
    ///
    /// [`DISTANT`]: fencing_harness::namespaced::DISTANT
    DeposeDistantLeader,
    /// Two members cut from each other; the third reaches both.
    PartitionBridge,
    /// One client cut off from every member.
    PartitionClient,
    PauseMember,
    /// The leader stopped (SIGSTOP) for the step: on ZooKeeper, shorter
    /// than syncLimit it is ridden out without an election, and leases
    /// that ran out meanwhile must still free their locks at the server.
    PauseLeader,
    KillMember,
    /// The holders' lock keys or nodes deleted by an administrator: each
    /// holder must hear of it and stop (`fence run` at once).
    DeleteHolders,
    /// The leader killed (and restarted): a leader change.
    KillLeader,
    /// Every member SIGKILLed at once, all started again at the end of the
    /// step: the tokens after it must go on above every token before it.
    KillCluster,
    /// etcd maintenance on one member: the history compacted up to now,
    /// then the member defragmented (it stalls while it rewrites its file).
    CompactDefrag,
    PauseClient,
    KillClient,
    /// A client restarted with its clocks (wall and monotonic) at half speed.
    ClockSlow,
    /// A client restarted with its clocks at double speed.
    ClockFast,
    /// kube-apiserver killed (and started again at the end of the step).
    KillApiserver,
    /// kube-apiserver stopped (SIGSTOP): connections open, no answers.
    PauseApiserver,
    /// The campaign's Leases deleted by an admin while held: the clients
    /// create them again, and a holder must notice it is no longer named.
    DeleteLeases,
    /// A client restarted on a wall clock that then jumps 10 minutes
    /// forward (its monotonic clock untouched). Not an excuse for a late
    /// loss: leases are timed on the monotonic clock.
    WallJumpForward,
    /// The same, 10 minutes back.
    WallJumpBack,
    /// The storage process SIGKILLed (and started again at the end of the
    /// step): its gate's marks and acknowledged values must survive.
    KillStorage,
    /// SIGKILL of every PostgreSQL server process, then crash recovery
    /// (with `--postgres`).
    KillPostgres,
    /// The storage process stopped (SIGSTOP): writes in flight wait, and
    /// are applied late.
    PauseStorage,
    /// SIGSTOP of every PostgreSQL server process (with `--postgres`).
    PausePostgres,
    /// The PostgreSQL primary SIGKILLed and its standby promoted; the old
    /// primary rebuilt as the new one's standby before the fault ends. The
    /// tokens after it must go on above every token before it.
    PromoteStandby,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::PartitionFollower => "partition-follower",
            Fault::PartitionLeader => "partition-leader",
            Fault::DeposeLeader => "depose-leader",
            Fault::DeposeDistantLeader => "depose-distant-leader",
            Fault::PartitionBridge => "partition-bridge",
            Fault::PartitionClient => "partition-client",
            Fault::PauseMember => "pause-member",
            Fault::PauseLeader => "pause-leader",
            Fault::DeleteHolders => "delete-holders",
            Fault::KillMember => "kill-member",
            Fault::KillLeader => "kill-leader",
            Fault::KillCluster => "kill-cluster",
            Fault::CompactDefrag => "compact-defrag",
            Fault::PauseClient => "pause-client",
            Fault::KillClient => "kill-client",
            Fault::ClockSlow => "clock-slow",
            Fault::ClockFast => "clock-fast",
            Fault::WallJumpForward => "wall-jump-forward",
            Fault::WallJumpBack => "wall-jump-back",
            Fault::KillApiserver => "kill-apiserver",
            Fault::PauseApiserver => "pause-apiserver",
            Fault::DeleteLeases => "delete-leases",
            Fault::KillStorage => "kill-storage",
            Fault::PauseStorage => "pause-storage",
            Fault::KillPostgres => "kill-postgres",
            Fault::PausePostgres => "pause-postgres",
            Fault::PromoteStandby => "promote-standby",
        }
    }
}

pub struct Nemesis {
    rng: Rng,
    clients: usize,
    kind: Kind,
    /// How many of [`STORAGE_FAULTS`] apply: the PostgreSQL ones only with
    /// a server.
    ///
    /// [`STORAGE_FAULTS`]: schedule::STORAGE_FAULTS
    storage_faults: usize,
    /// The longest step: well past a lease, so that a holder cut off or
    /// paused for a whole step is taken over while it still believes.
    longest: Duration,
    next_id: u64,
    /// A clock fault outlives its step (a restarted client needs time to
    /// connect and hold on its odd clock): its id, client, and how much of
    /// the schedule's time it has left. Counted in scheduled step time, not
    /// on the clock, so that when it ends (and with it which faults the
    /// next steps may draw) replays with the seed.
    clock: Option<(u64, usize, Duration)>,
    /// The kinds drawn so far: each lane draws the kinds it has not drawn
    /// yet first, so that a short run meets every fault of its lanes.
    drawn: BTreeSet<Fault>,
    /// `--faults`: the only kinds the lanes draw (all of them if `None`).
    allowed: Option<BTreeSet<Fault>>,
}

/// The shortest cut of [`Fault::DeposeDistantLeader`]: past the new
/// leader's election (about 1.5 s) and its lessor's grace for the leases it
/// takes over (one election timeout + the 2 s TTL), so that it revokes the
/// holder's lease and grants the lock to the next client during the cut.
const DISTANT_CUT: Duration = Duration::from_secs(6);

impl Nemesis {
    pub fn new(rng: Rng, clients: usize, kind: Kind, ttl: Duration, postgres: bool) -> Self {
        Nemesis {
            rng,
            clients,
            kind,
            storage_faults: if postgres { 4 } else { 2 },
            longest: (ttl * 5 / 2).max(Duration::from_millis(2500)),
            next_id: 0,
            clock: None,
            drawn: BTreeSet::new(),
            allowed: None,
        }
    }

    /// Draws only the kinds of `allowed` (`--faults`), each lane from its
    /// own; `None` keeps every kind.
    pub fn only(mut self, allowed: Option<BTreeSet<Fault>>) -> Self {
        self.allowed = allowed;
        self
    }

    /// How many faults have started.
    pub fn started(&self) -> u64 {
        self.next_id
    }
}
