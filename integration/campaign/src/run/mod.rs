//! The controller of one campaign: a cluster in network namespaces, client
//! processes in namespaces of their own, a seeded nemesis, and the recorded
//! history checked and drawn at the end.
//!
//! Split the way Jepsen splits a test: the world the run acts on
//! ([`world`]: the cluster, the storage, the client processes), the relay
//! of each client's lines into the history ([`relay`], [`recorder`]), what
//! the clients do ([`workload`], with the lock workload's [`anchor`]
//! client), the fault schedule and its executor
//! ([`nemesis`](super::nemesis)) and the checker
//! ([`checker`](super::checker)); here the entry point, [`run`], and the
//! loop that drives the nemesis.

mod anchor;
mod member_exits;
mod recorder;
mod relay;
mod workload;
mod world;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::checker::{self, Report};
use super::history::{EventKind, NEMESIS};
use super::nemesis::{Fault, Nemesis};
use super::rng::Rng;
use super::timeline;
use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::namespaced::Kind;
use world::{finish, setup};

pub use recorder::Recorder;
pub use workload::{lock_names, Workload, MAX_LOCKS};
pub use world::{blocking, heal_everything, ClientProc, Clock, World};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub kind: Kind,
    /// How long faults are injected; with `until_floors`, the longest.
    pub duration: Duration,
    /// Stop injecting faults as soon as the run has reached `min_grants`,
    /// `min_faults` and drawn every fault kind of its lanes: a run sized by
    /// what it proves, not by minutes (a slower machine takes longer).
    pub until_floors: bool,
    pub seed: u64,
    pub clients: usize,
    /// How many locks the clients are spread over ([`lock_names`]).
    pub locks: usize,
    pub out: PathBuf,
    /// The clients' session or lease length.
    pub ttl: Duration,
    /// Fewer grants or faults than these make the run fail: a campaign that
    /// exercised too little proves too little.
    pub min_grants: usize,
    pub min_faults: usize,
    /// What the clients do.
    pub workload: Workload,
    /// The last client is an anchor instead (lock workload only): Go's
    /// `concurrency.Mutex` on etcd, Curator's `InterProcessMutex` on
    /// ZooKeeper, client-go's leader election on Kubernetes.
    pub anchor: bool,
    /// Every storage write also goes to a PostgreSQL server through a
    /// fence column, and the nemesis crashes and pauses that server.
    pub postgres: bool,
    /// `--faults`: the nemesis draws only these kinds (every kind of its
    /// lanes if `None`; see [`parse_faults`](super::nemesis::parse_faults)).
    pub faults: Option<BTreeSet<Fault>>,
}

/// What a run found.
pub struct Outcome {
    pub report: Report,
    /// Locks still held at the coordinator after every client stopped.
    pub leftover_holder: Option<String>,
    /// Minimums of the configuration that the run fell short of: too
    /// little exercised, which is not a broken property.
    pub shortfalls: Vec<String>,
    /// How long faults were injected.
    pub faulted: Duration,
    pub history: PathBuf,
    /// The wall-clock (UTC) times, as the members' logs write them, of the
    /// report's t = 0 (the history's first event) and of the history file's
    /// `at_ns` = 0.
    pub clock_origins: (String, String),
    pub timeline: PathBuf,
    /// Members that exited by themselves, one line each.
    pub member_exits: Vec<String>,
}

impl Outcome {
    /// Every property held and nothing was left behind.
    pub fn held(&self) -> bool {
        self.report.passed() && self.leftover_holder.is_none()
    }

    pub fn passed(&self) -> bool {
        self.held() && self.shortfalls.is_empty()
    }
}

/// How long, in fault-free time, a lock someone is acquiring may go
/// without a grant after a fault heals: the longest hold a client makes
/// (the waiter may be queued behind it; a holder that died or was cut off
/// keeps the lock for its lease, which is shorter), plus one acquire's wait
/// bound (a waiter whose session or watch died in the fault learns of it
/// then, and queues again), plus what the servers need to serve again: on
/// ZooKeeper a leader round that fails for want of synced followers
/// (initLimit x tickTime, 30 x 200 ms) and the election after it (members
/// retry at least every 2 s: two rounds of notifications); etcd elects
/// within twice its longest election timeout (2 x 5 s, the distant member);
/// the apiserver gets the same 10 s to start. A local source has no server.
pub fn heal_bound(kind: Kind, ttl: Duration) -> Duration {
    let longest_hold = (ttl * 5 / 2).max(Duration::from_secs(3));
    let acquire_wait = Duration::from_secs(5);
    let servers = match kind {
        Kind::Local => Duration::ZERO,
        Kind::Zk(_) | Kind::Etcd(_) | Kind::Kube => Duration::from_secs(10),
        // A promotion is over when its fault ends (the old primary rebuilt
        // as the new one's standby): a restarted server's crash recovery
        // and a standby's reconnection are left.
        Kind::Pg => Duration::from_secs(5),
    };
    longest_hold + acquire_wait + servers
}

/// [`heal_bound`] for `workload`: coordinated election adds the
/// apiserver's election controller, which picks every holder
/// ([`COORDINATED_CONTROLLER`]).
pub fn heal_bound_of(kind: Kind, ttl: Duration, workload: Workload) -> Duration {
    let plain = heal_bound(kind, ttl);
    match workload {
        Workload::Coordinated => plain + COORDINATED_CONTROLLER,
        _ => plain,
    }
}

/// What the election controller adds to a wait: it looks at a Lease when
/// it changes or every 5 s, and pings the candidates that have not renewed
/// for 5 s, waiting up to 5 s for their answers before it names one (a
/// better candidate that joins between its naming of another and that
/// one's take costs the same again: the named one does not take a Lease
/// whose `preferredHolder` names another, so the naming runs out first,
/// 5 s, and the next look elects); after an apiserver kill it runs again
/// once the restarted apiserver has elected itself (within its 2 s retry:
/// the campaign deletes the dead one's Lease, see
/// `AdminAction::ReleaseDeadController`).
const COORDINATED_CONTROLLER: Duration = Duration::from_secs(12);

/// Runs a whole campaign and checks it.
pub async fn run(cfg: Config) -> Result<Outcome, String> {
    std::fs::create_dir_all(&cfg.out).map_err(|e| e.to_string())?;
    let history_path = cfg.out.join("history.jsonl");
    let recorder = Arc::new(Recorder::create(&history_path).map_err(|e| e.to_string())?);
    let mut world = setup(&cfg, recorder.clone()).await?;
    let result = campaign(&cfg, &mut world).await;
    let leftover = finish(&mut world).await;
    let member_exits = world.member_exits.lines();
    let mut stored = world.storage.finish().await;
    if let (Ok(stored), Some(pg)) = (&mut stored, &world.postgres) {
        stored.marks.extend(pg.fences().await?);
    }
    let (faulted, undrawn) = result?;
    let events = recorder.events();
    let coordinated = cfg.workload == Workload::Coordinated;
    let bugs = checker::BackendFacts {
        resumed_leader_revokes_leases: matches!(cfg.kind, Kind::Etcd(EtcdVersion::V3_4)),
        // The election controller, not the candidates, judges expiry in
        // coordinated election: a candidate's fast clock excuses nothing.
        candidates_judge_expiry_on_their_clocks: cfg.kind == Kind::Kube && !coordinated,
        own_next_grant_counts: coordinated,
        heal_bound: Some(heal_bound_of(cfg.kind, cfg.ttl, cfg.workload)),
    };
    let report = checker::check_with_stored(&events, &stored?, bugs);
    let title = format!("{:?} campaign, seed {}", cfg.kind, cfg.seed);
    // A window page of an earlier run in the same folder would mislead.
    for old in std::fs::read_dir(&cfg.out)
        .map_err(|e| e.to_string())?
        .flatten()
    {
        let name = old.file_name().to_string_lossy().into_owned();
        if name.starts_with("timeline-") && name.ends_with(".html") {
            let _ = std::fs::remove_file(old.path());
        }
    }
    for page in timeline::render_pages(&events, &report, &title) {
        std::fs::write(cfg.out.join(&page.file), page.html).map_err(|e| e.to_string())?;
    }
    let timeline_path = cfg.out.join("timeline.html");
    let grants = report.figures.grants;
    let faults: usize = report.figures.faults_by_kind.values().sum();
    let mut shortfalls = Vec::new();
    if grants < cfg.min_grants {
        shortfalls.push(format!("{grants} grants, fewer than {}", cfg.min_grants));
    }
    if faults < cfg.min_faults {
        shortfalls.push(format!("{faults} faults, fewer than {}", cfg.min_faults));
    }
    if cfg.until_floors && !undrawn.is_empty() {
        let names: Vec<&str> = undrawn.iter().map(|f| f.name()).collect();
        shortfalls.push(format!("never drawn: {}", names.join(", ")));
    }
    let first_event = std::time::Duration::from_nanos(report.origin_ns);
    let report_starts = recorder
        .wall_origin
        .checked_add(first_event)
        .map_or_else(|_| "?".to_owned(), |t| t.to_string());
    let clock_origins = (report_starts, recorder.wall_origin.to_string());
    Ok(Outcome {
        clock_origins,
        report,
        leftover_holder: leftover,
        shortfalls,
        faulted,
        history: history_path,
        timeline: timeline_path,
        member_exits,
    })
}

/// The fault schedule: two lanes (cluster faults, client faults; either
/// may be empty under `--faults`) until the duration ends (or, with
/// `until_floors`, the floors are reached), then healing and a recovery
/// window. Returns how long faults were injected and the fault kinds never
/// drawn.
async fn campaign(cfg: &Config, world: &mut World) -> Result<(Duration, Vec<Fault>), String> {
    let began = Instant::now();
    let deadline = began + cfg.duration;
    let mut nemesis = Nemesis::new(
        Rng::new(cfg.seed),
        world.clients.len(),
        cfg.kind,
        cfg.ttl,
        cfg.postgres,
    )
    .only(cfg.faults.clone());
    // Let the clients take their first grants before the first fault.
    tokio::time::sleep(Duration::from_secs(2)).await;
    while Instant::now() < deadline {
        let reached = world.recorder.grants() >= cfg.min_grants
            && nemesis.started() >= cfg.min_faults as u64
            && nemesis.undrawn().is_empty();
        if cfg.until_floors && reached {
            break;
        }
        let step = nemesis.next_step();
        let faults: Vec<Fault> = [step.cluster, step.client].into_iter().flatten().collect();
        let started = nemesis.start(world, &faults).await?;
        tokio::time::sleep(step.storage_at).await;
        let storage = nemesis.start(world, step.storage.as_slice()).await?;
        tokio::time::sleep(step.duration - step.storage_at).await;
        // The storage first: a paused client's first write after its
        // resumption reaches the restarted storage.
        nemesis.end(world, storage).await?;
        nemesis.end(world, started).await?;
        world.look_for_member_exits();
        tokio::time::sleep(step.gap).await;
    }
    let faulted = began.elapsed();
    nemesis.finish(world).await?;
    heal_everything(world).await?;
    let healed = world
        .recorder
        .record(NEMESIS, EventKind::FaultEnd { id: u64::MAX });
    // Liveness: a grant after the last fault healed, within a bound (in
    // coordinated election, the election controller's too).
    let bound = match cfg.workload {
        Workload::Coordinated => heal_bound_of(cfg.kind, cfg.ttl, cfg.workload),
        _ => Duration::from_secs(20),
    };
    let started = Instant::now();
    while !world.recorder.granted_since(healed) && started.elapsed() < bound {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((faulted, nemesis.undrawn()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_coordinated_workload_waits_for_the_election_controller() {
        let ttl = Duration::from_secs(2);
        let plain = heal_bound(Kind::Kube, ttl);
        assert_eq!(plain, Duration::from_secs(20));
        for w in [Workload::Lock, Workload::Elect, Workload::FenceRun] {
            assert_eq!(heal_bound_of(Kind::Kube, ttl, w), plain, "{w:?}");
        }
        let coordinated = heal_bound_of(Kind::Kube, ttl, Workload::Coordinated);
        assert_eq!(coordinated, plain + COORDINATED_CONTROLLER);
    }
}
