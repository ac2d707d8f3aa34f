//! The controller of one campaign: a cluster in network namespaces, client
//! processes in namespaces of their own, a seeded nemesis, and the recorded
//! history checked and drawn at the end.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, Pid, Signal};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};

use super::checker::{self, Report};
use super::client::{monotonic_ns, ClientLine, Reply};
use super::history::{self, Event, EventKind, WriteOutcome, NEMESIS};
use super::kube::AdminAction;
use super::members::{Cluster, Kind, Tuning};
use super::nemesis::{kube_admin, Fault, Nemesis};
use super::pg_storage::{self, PgStore};
use super::rng::Rng;
use super::storage::{self, Storage};
use super::timeline;
use crate::etcd::cluster::EtcdVersion;
use crate::net::netns::{Host, Network};

/// The most locks a campaign spreads its clients over (one letter each).
pub const MAX_LOCKS: usize = 26;

/// The names of the `n` locks the clients contend for (`campaign-a`,
/// `campaign-b`, ...; at least one, at most [`MAX_LOCKS`]). Client `i`
/// takes lock `i % n`: with two, the default, each lock still changes hands
/// often and the grants per minute double; a soak spreads more clients over
/// more locks to make more grants per hour.
pub fn lock_names(n: usize) -> Vec<String> {
    (b'a'..=b'z')
        .take(n.clamp(1, MAX_LOCKS))
        .map(|letter| format!("campaign-{}", char::from(letter)))
        .collect()
}
/// In the lock workload, this client ignores its grant's loss and writes
/// through its whole hold (see [`checker::CARELESS_PREFIX`]); the others
/// stop at `lost()`, so only this one makes sure the gates see late writes.
const CARELESS_CLIENT: usize = 2;
/// libfaketime for multi-threaded programs (Debian's `faketime` package):
/// it scales the wall and the monotonic clock, and sleeps, of the process.
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
/// Namespaces of a campaign start with this (leftovers are removed).
const NS_PREFIX: &str = "fcamp-";

/// What the clients do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Take the lock, write through the gates, release.
    Lock,
    /// Campaign as `LeaderElector` candidates (`LeaderElector::run` with
    /// gated work).
    Elect,
    /// Run `fence run`, whose command writes with `FENCING_TOKEN`
    /// ([`super::fence_run`]).
    FenceRun,
}

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
}

impl Config {
    /// Client `i`'s name (also its namespace's): `c1`, `c2`, ..., the
    /// anchor `go<N>` (etcd), `curator<N>` (ZooKeeper) or `clientgo<N>`
    /// (Kubernetes).
    fn client_name(&self, i: usize) -> String {
        if self.anchor && i + 1 == self.clients {
            let [go, curator, client_go] = checker::ANCHOR_PREFIXES;
            let prefix = match self.kind {
                Kind::Zk(_) => curator,
                Kind::Kube => client_go,
                Kind::Etcd(_) | Kind::Local => go,
            };
            format!("{prefix}{}", i + 1)
        } else if self.workload == Workload::Lock && i == CARELESS_CLIENT {
            format!("{}{}", checker::CARELESS_PREFIX, i + 1)
        } else {
            format!("c{}", i + 1)
        }
    }
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
    /// The wall-clock (UTC) time of the history's first event, as the
    /// members' logs write time.
    pub history_starts: String,
    pub timeline: PathBuf,
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

/// Every event of the run, stamped on one clock, also streamed to a file
/// so a killed run still leaves its history.
pub struct Recorder {
    /// [`monotonic_ns`] when the run began: stamps count from it.
    origin_ns: u64,
    /// The wall clock at that moment.
    wall_origin: k8s_openapi::jiff::Timestamp,
    events: Mutex<Vec<Event>>,
    file: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl Recorder {
    fn create(path: &std::path::Path) -> std::io::Result<Recorder> {
        Ok(Recorder {
            origin_ns: monotonic_ns(),
            wall_origin: k8s_openapi::jiff::Timestamp::now(),
            events: Mutex::new(Vec::new()),
            file: Mutex::new(std::io::BufWriter::new(std::fs::File::create(path)?)),
        })
    }

    pub fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.origin_ns)
    }

    /// The stamp of a line read at `read_at` that a client stamped
    /// `client_ns` ([`monotonic_ns`]): the client's, unless it is missing
    /// or implausible (after the read, or a second before it).
    fn client_stamp(&self, client_ns: Option<u64>, read_at: u64) -> u64 {
        client_ns
            .and_then(|ns| ns.checked_sub(self.origin_ns))
            .filter(|&at| at <= read_at && read_at - at <= 1_000_000_000)
            .unwrap_or(read_at)
    }

    pub fn record_at(&self, at_ns: u64, client: &str, kind: EventKind) {
        let event = Event::new(at_ns, client, kind);
        let _ = history::write_line(&mut *self.file.lock().unwrap(), &event);
        self.events.lock().unwrap().push(event);
    }

    pub fn record(&self, client: &str, kind: EventKind) -> u64 {
        let at = self.now_ns();
        self.record_at(at, client, kind);
        at
    }

    fn events(&self) -> Vec<Event> {
        use std::io::Write;
        let _ = self.file.lock().unwrap().flush();
        self.events.lock().unwrap().clone()
    }

    /// The member the latest grant's client is pinned to (client `i` of the
    /// first `members` talks to member `i` only), if it is pinned.
    pub fn holder_member(&self, members: usize) -> Option<usize> {
        let events = self.events.lock().unwrap();
        let last = events
            .iter()
            .rev()
            .find(|e| matches!(e.kind, EventKind::Grant { .. }))?;
        let index: usize = last.client.strip_prefix('c')?.parse().ok()?;
        (index >= 1 && index <= members).then(|| index - 1)
    }

    /// The clients that hold a grant now, as far as their reports go, with
    /// how long they have held it (ns), longest first.
    pub fn holders(&self) -> Vec<(String, u64)> {
        let events = self.events.lock().unwrap();
        let mut since: HashMap<&str, Option<u64>> = HashMap::new();
        for e in events.iter() {
            let held = match e.kind {
                EventKind::Grant { .. } => Some(e.at_ns),
                EventKind::Release { .. } | EventKind::Lost { .. } | EventKind::Crash {} => None,
                _ => continue,
            };
            since.insert(e.client.as_str(), held);
        }
        let now = self.now_ns();
        let mut held: Vec<(String, u64)> = since
            .into_iter()
            .filter_map(|(c, at)| Some((c.to_owned(), now.saturating_sub(at?))))
            .collect();
        held.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        held
    }

    /// How many grants the clients reported so far.
    pub fn grants(&self) -> usize {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Grant { .. }))
            .count()
    }

    /// Whether any client was granted the lock after `since_ns`.
    pub fn granted_since(&self, since_ns: u64) -> bool {
        self.events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.at_ns > since_ns && matches!(e.kind, EventKind::Grant { .. }))
    }
}

/// Where a client's answers go (`None` once it stopped).
type ClientStdin = Arc<tokio::sync::Mutex<Option<ChildStdin>>>;

/// One client process and where it runs.
pub struct ClientProc {
    pub name: String,
    pub host: Option<Host>,
    child: Option<Child>,
    stdin: ClientStdin,
    generation: u64,
    /// The faked clock of the next start, if any.
    pub clock: Option<Clock>,
    /// Where libfaketime reads the wall-clock offset of a `Clock::WallFile`
    /// start (re-read every second).
    clock_file: PathBuf,
    /// The relays of this client's starts: each ends when its process's
    /// output does, after its storage writes in flight are answered.
    relays: Vec<tokio::task::JoinHandle<()>>,
}

/// A client's faked clock (libfaketime preloaded into the client).
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    /// Wall and monotonic clocks (and sleeps) run at this rate ("x0.5").
    Rate(&'static str),
    /// The monotonic clock is real; the wall clock's offset is read from
    /// the client's clock file, so it can jump while the client runs.
    WallFile,
}

impl ClientProc {
    pub fn pid(&self) -> Option<Pid> {
        self.child
            .as_ref()?
            .id()
            .and_then(|p| Pid::from_raw(p as i32))
    }

    /// Signals the client's process group: the client and, in the `fence
    /// run` workload, `fence run` itself (its command and watchdog have
    /// groups of their own, as in production).
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            let _ = kill_process_group(pid, signal);
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Moves the wall clock of a client started on `Clock::WallFile` by
    /// `secs` from the real one (libfaketime notices within a second).
    pub fn jump_wall_clock(&self, secs: i64) -> Result<(), String> {
        std::fs::write(&self.clock_file, format!("{secs:+}\n")).map_err(|e| e.to_string())
    }

    /// SIGKILL and reap.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        }
        *self.stdin.lock().await = None;
    }
}

/// Everything the nemesis acts on.
pub struct World {
    pub network: Option<Network>,
    pub cluster: Option<Cluster>,
    pub clients: Vec<ClientProc>,
    pub recorder: Arc<Recorder>,
    /// The storage process the clients write to.
    pub storage: Arc<Storage>,
    /// The PostgreSQL server they also write to, with `--postgres`.
    pub postgres: Option<Arc<PgStore>>,
    spawner: Spawner,
}

/// Starts client processes (again, after a kill).
struct Spawner {
    exe: PathBuf,
    urls: Vec<String>,
    /// Client `i` takes `locks[i % locks.len()]`.
    locks: Vec<String>,
    gate: &'static str,
    ttl: Duration,
    seed: u64,
    workload: Workload,
    log_dir: PathBuf,
    /// The Go anchor's binary, when the last client is one.
    anchor: Option<PathBuf>,
}

impl World {
    /// The campaign binary (run inside namespaces for helper jobs).
    pub fn exe(&self) -> &std::path::Path {
        &self.spawner.exe
    }

    /// The locks the clients contend for.
    pub fn locks(&self) -> &[String] {
        &self.spawner.locks
    }

    /// Starts client `i` (a new process with a new seed after a kill).
    pub async fn start_client(&mut self, i: usize) -> Result<(), String> {
        // Two faults may both restart one client; the process replaced here
        // is killed, and its holds must end in the history with it.
        if self.clients[i].is_running() {
            self.clients[i].kill().await;
            let name = self.clients[i].name.clone();
            self.recorder.record(&name, EventKind::Crash {});
        }
        let proc = &mut self.clients[i];
        proc.generation += 1;
        let s = &self.spawner;
        let seed = s.seed ^ ((i as u64 + 1) << 32) ^ proc.generation;
        let anchor = match s.anchor.as_ref().filter(|_| checker::is_anchor(&proc.name)) {
            Some(binary) => Some(anchor_args(
                binary,
                &proc.name,
                &s.urls[i],
                &s.locks[i % s.locks.len()],
                s.ttl,
                seed,
            )?),
            None => None,
        };
        let program = anchor.as_ref().map_or(&s.exe, |(program, _)| program);
        let mut cmd = match &proc.host {
            Some(host) => host.command(program),
            None => std::process::Command::new(program),
        };
        // libfaketime preloaded into the client itself (the faketime
        // wrapper would fork, and signals would miss the client).
        match proc.clock {
            Some(Clock::Rate(rate)) => {
                cmd.env("LD_PRELOAD", FAKETIME_LIB)
                    .env("FAKETIME", format!("+0 {rate}"));
            }
            Some(Clock::WallFile) => {
                proc.jump_wall_clock(0)?;
                cmd.env("LD_PRELOAD", FAKETIME_LIB)
                    .env("FAKETIME_TIMESTAMP_FILE", &proc.clock_file)
                    .env("FAKETIME_CACHE_DURATION", "1")
                    .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
            }
            None => {}
        }
        if let Some((_, args)) = anchor {
            cmd.args(args);
        } else {
            cmd.arg("client")
                .args([
                    "--name", &proc.name, "--source", &s.urls[i], "--gate", s.gate,
                ])
                .args(["--lock", &s.locks[i % s.locks.len()]])
                .args(["--ttl-ms", &s.ttl.as_millis().to_string()])
                .args(["--seed", &seed.to_string()]);
            match s.workload {
                Workload::Lock if checker::is_careless(&proc.name) => {
                    cmd.arg("--careless");
                }
                Workload::Lock => {}
                Workload::Elect => {
                    cmd.arg("--elect");
                }
                Workload::FenceRun => {
                    cmd.arg("--fence-run");
                }
            }
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(s.log_dir.join(format!("{}.log", proc.name)))
            .map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .process_group(0);
        crate::process::die_with_parent(&mut cmd, Signal::KILL);
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting client {}: {e}", proc.name))?;
        let stdout = child.stdout.take().expect("piped");
        *proc.stdin.lock().await = child.stdin.take();
        proc.child = Some(child);
        proc.relays.retain(|r| !r.is_finished());
        proc.relays.push(tokio::spawn(relay(
            proc.name.clone(),
            stdout,
            proc.stdin.clone(),
            self.recorder.clone(),
            (self.storage.clone(), self.postgres.clone()),
        )));
        Ok(())
    }
}

/// The anchor's binary (a jar for Curator), checked to exist, if the
/// campaign has one: Go's `concurrency.Mutex` on etcd, Curator's
/// `InterProcessMutex` on ZooKeeper, client-go's leader election on
/// Kubernetes.
fn anchor_binary(cfg: &Config) -> Result<Option<PathBuf>, String> {
    if !cfg.anchor {
        return Ok(None);
    }
    if cfg.workload != Workload::Lock {
        return Err("an anchor client runs only with the lock workload".into());
    }
    let (name, installer) = match cfg.kind {
        Kind::Etcd(_) => ("etcd-mutex", "go-interop.sh"),
        Kind::Zk(_) => ("curator-mutex.jar", "curator-interop.sh"),
        Kind::Kube => ("client-go-elector", "client-go-interop.sh"),
        Kind::Local => {
            return Err("an anchor client runs only on etcd, ZooKeeper or Kubernetes".into())
        }
    };
    let binary = crate::cache::cached_bin(name);
    if !binary.is_file() {
        return Err(format!(
            "{} is missing (the anchor client): run scripts/install/{installer}",
            binary.display()
        ));
    }
    Ok(Some(binary))
}

/// The program and arguments of the anchor `binary` (see [`anchor_binary`])
/// named `name` on the lock of the source `url`: its `campaign` subcommand.
fn anchor_args(
    binary: &std::path::Path,
    name: &str,
    url: &str,
    lock: &str,
    ttl: Duration,
    seed: u64,
) -> Result<(PathBuf, Vec<String>), String> {
    let wrong = || {
        format!(
            "the anchor {} cannot use the source {url}",
            binary.display()
        )
    };
    // scheme://target?query, the target split at its first '/'.
    let (scheme, rest) = url.split_once("://").ok_or_else(wrong)?;
    let (target, query) = rest.split_once('?').unwrap_or((rest, ""));
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    // Go's rand takes an int64 seed; so does java.util.Random.
    let seed = (seed >> 1).to_string();
    let is_jar = binary.extension().is_some_and(|e| e == "jar");
    let (program, mut args): (PathBuf, Vec<String>) = match (scheme, is_jar) {
        ("etcd", false) => {
            let (hosts, prefix) = target.split_once('/').ok_or_else(wrong)?;
            let ttl = ttl.as_secs().max(1).to_string();
            let args = [
                "campaign",
                "--endpoints",
                hosts,
                "--prefix",
                &format!("/{prefix}"),
                "--lock",
                lock,
                "--ttl",
                &ttl,
            ];
            (binary.into(), args.map(str::to_owned).to_vec())
        }
        ("zk", true) => {
            // ZkSource's lock node parent: PATH/RESOURCE.
            let (hosts, path) = target.split_once('/').ok_or_else(wrong)?;
            let session = ttl.as_millis().max(1).to_string();
            let jvm = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx128m"];
            let jar = binary.to_str().ok_or_else(wrong)?;
            let args = [
                "-jar",
                jar,
                "campaign",
                "--connect",
                hosts,
                "--path",
                &format!("/{path}/{lock}"),
                "--lock",
                lock,
                "--session-timeout-ms",
                &session,
            ];
            let args = jvm.into_iter().chain(args).map(str::to_owned).collect();
            ("java".into(), args)
        }
        ("kube", false) => {
            // The Lease is the lock's name in the URL's namespace; the TTL
            // is whole seconds, as KubeLeaseSource writes it.
            let kubeconfig = param("kubeconfig").ok_or_else(wrong)?;
            let timeout = param("timeout")
                .and_then(|t| t.parse::<f64>().ok())
                .map_or(Duration::from_secs(1), Duration::from_secs_f64);
            let lease = Duration::from_secs(ttl.as_secs().max(1));
            let args = [
                "campaign",
                "--kubeconfig",
                kubeconfig,
                "--namespace",
                target.trim_end_matches('/'),
                "--lock",
                lock,
                "--name",
                name,
                "--ttl-ms",
                &lease.as_millis().to_string(),
                "--timeout-ms",
                &timeout.as_millis().max(1).to_string(),
            ];
            (binary.into(), args.map(str::to_owned).to_vec())
        }
        _ => return Err(wrong()),
    };
    let long_hold = (ttl * 5 / 2)
        .max(Duration::from_secs(3))
        .as_millis()
        .to_string();
    args.extend(
        ["--seed", &seed]
            .into_iter()
            // Long holds four times as often as a Rust client's: only a
            // hold that outlasts its lease shows what an anchor gets wrong.
            .chain(["--long-hold-ms", &long_hold, "--long-percent", "20"])
            .map(str::to_owned),
    );
    Ok((program, args))
}

/// How long, in fault-free time, a lock someone is acquiring may go
/// without a grant after a fault heals: the longest hold a client makes
/// (the waiter may be queued behind it; a holder that died or was cut off
/// keeps the lock for its lease, which is shorter), plus one acquire's wait
/// bound (a waiter whose session or watch died in the fault learns of it
/// then, and queues again), plus what the servers need to serve again: a
/// ZooKeeper follower has initLimit x tickTime (50 x 200 ms) to join a new
/// leader; etcd elects within twice its longest election timeout (2 x 5 s,
/// the distant member); the apiserver gets the same 10 s to start. A local
/// source has no server.
pub fn heal_bound(kind: Kind, ttl: Duration) -> Duration {
    let longest_hold = (ttl * 5 / 2).max(Duration::from_secs(3));
    let acquire_wait = Duration::from_secs(5);
    let servers = match kind {
        Kind::Local => Duration::ZERO,
        Kind::Zk(_) | Kind::Etcd(_) | Kind::Kube => Duration::from_secs(10),
    };
    longest_hold + acquire_wait + servers
}

/// The storages a client's writes go to.
type Stores = (Arc<Storage>, Option<Arc<PgStore>>);

/// Turns one client's lines into events; passes its writes to the storage.
async fn relay(
    name: String,
    stdout: tokio::process::ChildStdout,
    stdin: ClientStdin,
    recorder: Arc<Recorder>,
    stores: Stores,
) {
    let mut lines = BufReader::new(stdout).lines();
    let mut started: HashMap<u64, (u64, ClientLine)> = HashMap::new();
    // Storage writes run beside the reading: a paused storage must not
    // delay the stamps of the client's next lines (its loss above all).
    let mut writes = tokio::task::JoinSet::new();
    while let Ok(Some(line)) = lines.next_line().await {
        while writes.try_join_next().is_some() {}
        let mut at = recorder.now_ns();
        let Ok(parsed) = serde_json::from_str::<ClientLine>(&line) else {
            continue;
        };
        let kind = match parsed {
            ClientLine::AcquireStart { resource } => EventKind::AcquireStart { resource },
            ClientLine::Grant {
                resource,
                token,
                at_ns,
            } => {
                at = recorder.client_stamp(at_ns, at);
                EventKind::Grant { resource, token }
            }
            ClientLine::Lost {
                resource,
                token,
                reason,
                at_ns,
            } => {
                at = recorder.client_stamp(at_ns, at);
                EventKind::Lost {
                    resource,
                    token,
                    reason,
                }
            }
            ClientLine::Release {
                resource,
                token,
                id,
            } => {
                recorder.record_at(at, &name, EventKind::Release { resource, token });
                answer(&stdin, &Reply { id, accepted: true }).await;
                continue;
            }
            start @ ClientLine::WriteStart { id, .. } => {
                started.insert(id, (at, start));
                continue;
            }
            ClientLine::WriteEnd { id, outcome } => {
                let Some((
                    start_ns,
                    ClientLine::WriteStart {
                        gate,
                        resource,
                        token,
                        value,
                        ..
                    },
                )) = started.remove(&id)
                else {
                    continue;
                };
                EventKind::Write {
                    resource,
                    token,
                    gate,
                    start_ns,
                    outcome,
                    value,
                }
            }
            ClientLine::MemWrite {
                id,
                resource,
                token,
                value,
            } => {
                let write = (stores.clone(), recorder.clone(), stdin.clone());
                writes.spawn(store(write, name.clone(), at, id, resource, token, value));
                continue;
            }
        };
        recorder.record_at(at, &name, kind);
    }
    // The process is gone, but the writes it sent are still in the storage's
    // hands (each bounded by its answer limit): their outcomes are history.
    while writes.join_next().await.is_some() {}
}

/// One write through the storage (and PostgreSQL), recorded, and answered
/// to the client.
async fn store(
    ((storage, postgres), recorder, stdin): (Stores, Arc<Recorder>, ClientStdin),
    client: String,
    start_ns: u64,
    id: u64,
    resource: String,
    token: u64,
    value: u64,
) {
    let write = |gate: &str, outcome| EventKind::Write {
        resource: resource.clone(),
        token,
        gate: gate.into(),
        start_ns,
        outcome,
        value,
    };
    let file = async {
        let outcome = match storage.write(&resource, token, value).await {
            Some(true) => WriteOutcome::Accepted,
            Some(false) => WriteOutcome::Refused,
            None => WriteOutcome::Unknown,
        };
        recorder.record(&client, write(storage::GATE, outcome));
        outcome
    };
    let pg = |gate: &'static str| {
        let (postgres, client, resource, recorder, write) =
            (&postgres, &client, &resource, &recorder, &write);
        async move {
            if let Some(pg) = postgres {
                let outcome = pg.write(gate, client, resource, token, value).await;
                recorder.record(client, write(gate, outcome));
            }
        }
    };
    let (outcome, (), ()) = tokio::join!(file, pg(pg_storage::GATE), pg(pg_storage::TABLE_GATE));
    let accepted = outcome == WriteOutcome::Accepted;
    answer(&stdin, &Reply { id, accepted }).await;
}

async fn answer(stdin: &tokio::sync::Mutex<Option<ChildStdin>>, reply: &Reply) {
    let mut line = serde_json::to_string(reply).expect("replies serialise");
    line.push('\n');
    if let Some(stdin) = stdin.lock().await.as_mut() {
        let _ = stdin.write_all(line.as_bytes()).await;
    }
}

/// Runs a whole campaign and checks it.
pub async fn run(cfg: Config) -> Result<Outcome, String> {
    std::fs::create_dir_all(&cfg.out).map_err(|e| e.to_string())?;
    let history_path = cfg.out.join("history.jsonl");
    let recorder = Arc::new(Recorder::create(&history_path).map_err(|e| e.to_string())?);
    let mut world = setup(&cfg, recorder.clone()).await?;
    let result = campaign(&cfg, &mut world).await;
    let leftover = finish(&mut world).await;
    let mut stored = world.storage.finish().await;
    if let (Ok(stored), Some(pg)) = (&mut stored, &world.postgres) {
        stored.marks.extend(pg.fences().await?);
    }
    let (faulted, undrawn) = result?;
    let events = recorder.events();
    let bugs = checker::BackendFacts {
        resumed_leader_revokes_leases: matches!(cfg.kind, Kind::Etcd(EtcdVersion::V3_4)),
        candidates_judge_expiry_on_their_clocks: cfg.kind == Kind::Kube,
        heal_bound: Some(heal_bound(cfg.kind, cfg.ttl)),
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
    let history_starts = recorder
        .wall_origin
        .checked_add(first_event)
        .map_or_else(|_| "?".to_owned(), |t| t.to_string());
    Ok(Outcome {
        history_starts,
        report,
        leftover_holder: leftover,
        shortfalls,
        faulted,
        history: history_path,
        timeline: timeline_path,
    })
}

async fn setup(cfg: &Config, recorder: Arc<Recorder>) -> Result<World, String> {
    if !std::path::Path::new(FAKETIME_LIB).exists() {
        return Err(format!(
            "{FAKETIME_LIB} is missing (clock faults): run scripts/install/netns.sh"
        ));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let fence = exe.with_file_name("fence");
    if cfg.workload == Workload::FenceRun && !fence.exists() {
        return Err(format!(
            "{} is missing (the fence-run workload runs it): \
             cargo build --release -p fencing-cli",
            fence.display()
        ));
    }
    let (network, cluster, client_hosts, urls) = if cfg.kind == Kind::Local {
        // Clients share a state directory; none needs a network.
        let state = cfg.out.join("state");
        let url = format!("local://{}?ttl={}", state.display(), cfg.ttl.as_secs_f64());
        (None, None, vec![None; cfg.clients], vec![url; cfg.clients])
    } else {
        let (network, cluster, hosts) = start_cluster(cfg)?;
        let urls = (0..cfg.clients)
            .map(|i| cluster.client_url(i, cfg.ttl))
            .collect();
        (Some(network), Some(cluster), hosts, urls)
    };
    let gate = match cfg.kind {
        Kind::Zk(_) => "zk",
        Kind::Etcd(_) => "etcd",
        // Only the storage's file gate.
        Kind::Local | Kind::Kube => "none",
    };
    let clients = client_hosts
        .into_iter()
        .enumerate()
        .map(|(i, host)| ClientProc {
            name: cfg.client_name(i),
            host,
            child: None,
            stdin: Arc::new(tokio::sync::Mutex::new(None)),
            generation: 0,
            clock: None,
            clock_file: cfg.out.join(format!("{}.faketime", cfg.client_name(i))),
            relays: Vec::new(),
        })
        .collect();
    let storage = Arc::new(Storage::start(&exe, &cfg.out.join("storage")).await?);
    let locks = lock_names(cfg.locks);
    let postgres = match cfg.postgres {
        true => Some(Arc::new(PgStore::start(&locks).await?)),
        false => None,
    };
    let mut world = World {
        network,
        cluster,
        clients,
        recorder,
        storage,
        postgres,
        spawner: Spawner {
            exe,
            urls,
            locks,
            gate,
            ttl: cfg.ttl,
            seed: cfg.seed,
            workload: cfg.workload,
            log_dir: cfg.out.clone(),
            anchor: anchor_binary(cfg)?,
        },
    };
    wait_for_leader(&world, Duration::from_secs(60)).await?;
    if cfg.kind == Kind::Kube {
        wait_for_apiserver(&world, Duration::from_secs(90)).await?;
        let granted = kube_admin(&world, AdminAction::GrantClients).await;
        if granted != "granted" {
            return Err(format!("binding the clients' RBAC: {granted}"));
        }
    }
    for i in 0..world.clients.len() {
        world.start_client(i).await?;
    }
    Ok(world)
}

/// The network, its members started, and one host per client.
fn start_cluster(cfg: &Config) -> Result<(Network, Cluster, Vec<Option<Host>>), String> {
    let mut network = Network::create(NS_PREFIX, 213).map_err(|e| e.to_string())?;
    let mut add = |name: String| network.add_host(&name).map_err(|e| e.to_string());
    let member_hosts = (1..=cfg.kind.members())
        .map(|i| add(format!("m{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let client_hosts = (1..=cfg.clients)
        .map(|i| add(cfg.client_name(i - 1)).map(Some))
        .collect::<Result<Vec<_>, _>>()?;
    let cluster = Cluster::start_tuned(
        cfg.kind,
        &member_hosts,
        &cfg.out,
        &Tuning::campaign(cfg.kind),
    )?;
    Ok((network, cluster, client_hosts))
}

async fn wait_for_leader(world: &World, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    let Some(cluster) = &world.cluster else {
        return Ok(());
    };
    while started.elapsed() < limit {
        if cluster.leader().is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let tails: Vec<String> = cluster.members.iter().map(|m| m.log_tail()).collect();
    Err(format!(
        "no leader within {limit:?}:\n{}",
        tails.join("\n---\n")
    ))
}

/// Waits until the apiserver's `/readyz` says ok.
async fn wait_for_apiserver(world: &World, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < limit {
        last = kube_admin(world, AdminAction::Ready).await;
        if last == "ready" {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let tail = world
        .cluster
        .as_ref()
        .and_then(|c| c.members.last())
        .map(|m| m.log_tail())
        .unwrap_or_default();
    Err(format!(
        "kube-apiserver not ready within {limit:?} ({last}):\n{tail}"
    ))
}

/// The fault schedule: two lanes (cluster faults, client faults) until the
/// duration ends (or, with `until_floors`, the floors are reached), then
/// healing and a recovery window. Returns how long faults were injected
/// and the fault kinds never drawn.
async fn campaign(cfg: &Config, world: &mut World) -> Result<(Duration, Vec<Fault>), String> {
    let began = Instant::now();
    let deadline = began + cfg.duration;
    let mut nemesis = Nemesis::new(
        Rng::new(cfg.seed),
        world.clients.len(),
        cfg.kind,
        cfg.ttl,
        cfg.postgres,
    );
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
        let started = nemesis.start(world, &[step.cluster, step.client]).await?;
        tokio::time::sleep(step.storage_at).await;
        let storage = nemesis.start(world, step.storage.as_slice()).await?;
        tokio::time::sleep(step.duration - step.storage_at).await;
        // The storage first: a paused client's first write after its
        // resumption reaches the restarted storage.
        nemesis.end(world, storage).await?;
        nemesis.end(world, started).await?;
        tokio::time::sleep(step.gap).await;
    }
    let faulted = began.elapsed();
    nemesis.finish(world).await?;
    heal_everything(world).await?;
    let healed = world
        .recorder
        .record(NEMESIS, EventKind::FaultEnd { id: u64::MAX });
    // Liveness: a grant after the last fault healed, within a bound.
    let bound = Duration::from_secs(20);
    let started = Instant::now();
    while !world.recorder.granted_since(healed) && started.elapsed() < bound {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((faulted, nemesis.undrawn()))
}

/// No fault may outlive the run: links healed, pauses ended, dead members,
/// storage and clients started again, clients on a faked clock back on the real one.
pub async fn heal_everything(world: &mut World) -> Result<(), String> {
    if let Some(network) = &world.network {
        network.heal().map_err(|e| e.to_string())?;
    }
    if let Some(cluster) = &mut world.cluster {
        cluster.resume_all();
        cluster.restart_dead().map_err(|e| e.to_string())?;
    }
    world.storage.signal(Signal::CONT).await;
    world.storage.restart().await?;
    if let Some(pg) = &world.postgres {
        pg.signal(Signal::CONT).await;
        pg.restart().await?;
    }
    for i in 0..world.clients.len() {
        world.clients[i].signal(Signal::CONT);
        if world.clients[i].clock.take().is_some() {
            world.clients[i].kill().await;
            let name = world.clients[i].name.clone();
            world.recorder.record(&name, EventKind::Crash {});
        }
        if !world.clients[i].is_running() {
            world.start_client(i).await?;
        }
    }
    Ok(())
}

/// Stops the clients (closing stdin asks them to release and exit), then
/// asks the coordinator whether any lock is left behind.
async fn finish(world: &mut World) -> Option<String> {
    let _ = heal_everything(world).await;
    for c in &world.clients {
        *c.stdin.lock().await = None;
    }
    for c in &mut world.clients {
        if let Some(child) = c.child.as_mut() {
            let limit = super::client::STOP_LIMIT + Duration::from_secs(5);
            let _ = tokio::time::timeout(limit, child.wait()).await;
        }
        c.kill().await;
        for relay in c.relays.drain(..) {
            // A write's answer limit is 1.5 s; more means a bug, not history.
            let abort = relay.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), relay)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
    let leftover = leftover_holder(world).await;
    let names: Vec<String> = world.clients.iter().map(|c| c.name.clone()).collect();
    super::fence_run::remove_sockets(&names);
    world.clients.clear();
    world.cluster = None;
    world.network = None;
    leftover
}

/// The holder the coordinator still reports once every client stopped and
/// their sessions had time to expire, asked from a client namespace by
/// `campaign inspect` (the controller is not on the campaign network).
async fn leftover_holder(world: &World) -> Option<String> {
    let url = world.spawner.urls.last()?.clone();
    let exe = &world.spawner.exe;
    let mut cmd = match world.network.as_ref().and_then(|n| n.hosts().last()) {
        Some(host) => host.command(exe),
        None => std::process::Command::new(exe),
    };
    // A killed client's session or lease lives on until it expires.
    let within = world.spawner.ttl * 3 + Duration::from_secs(2);
    cmd.args([
        "inspect",
        "--source",
        &url,
        "--within-ms",
        &within.as_millis().to_string(),
        "--locks",
        &world.locks().len().to_string(),
    ]);
    let out = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .output();
    // inspect retries failed reads for 20 s past `within`.
    match tokio::time::timeout(within + Duration::from_secs(45), out).await {
        Ok(Ok(out)) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (text != "none").then_some(text)
        }
        Ok(Ok(out)) => Some(format!(
            "inspect failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        other => Some(format!("inspect failed: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_stamp_counts_unless_missing_or_implausible() {
        let dir = tempfile::tempdir().unwrap();
        let recorder = Recorder::create(&dir.path().join("history.jsonl")).unwrap();
        let read_at = recorder.now_ns() + 5_000_000_000;
        let client = |at: u64| Some(recorder.origin_ns + at);
        // Stamped 2 ms before the controller read the line: the client's.
        let two_ms_early = read_at - 2_000_000;
        assert_eq!(
            recorder.client_stamp(client(two_ms_early), read_at),
            two_ms_early
        );
        assert_eq!(recorder.client_stamp(client(read_at), read_at), read_at);
        // An anchor's line has none; a stamp after the read, more than a
        // second before it, or before the run began cannot be right.
        assert_eq!(recorder.client_stamp(None, read_at), read_at);
        assert_eq!(recorder.client_stamp(client(read_at + 1), read_at), read_at);
        let too_early = read_at - 1_000_000_001;
        assert_eq!(recorder.client_stamp(client(too_early), read_at), read_at);
        assert_eq!(recorder.client_stamp(Some(0), read_at), read_at);
    }

    #[test]
    fn grant_and_loss_lines_carry_a_stamp_that_anchors_may_leave_out() {
        let anchor: ClientLine =
            serde_json::from_str(r#"{"grant":{"resource":"campaign-a","token":7}}"#).unwrap();
        assert_eq!(
            anchor,
            ClientLine::Grant {
                resource: "campaign-a".into(),
                token: 7,
                at_ns: None
            }
        );
        let lost = ClientLine::Lost {
            resource: "campaign-a".into(),
            token: 7,
            reason: "expired".into(),
            at_ns: Some(monotonic_ns()),
        };
        let text = serde_json::to_string(&lost).unwrap();
        assert!(text.contains("\"at_ns\":"), "{text}");
        assert_eq!(serde_json::from_str::<ClientLine>(&text).unwrap(), lost);
    }

    #[test]
    fn lock_names_are_distinct_resource_names_within_bounds() {
        assert_eq!(lock_names(2), ["campaign-a", "campaign-b"]);
        assert_eq!(lock_names(0), ["campaign-a"]);
        let all = lock_names(MAX_LOCKS + 5);
        assert_eq!(all.len(), MAX_LOCKS);
        assert_eq!(all.last().map(String::as_str), Some("campaign-z"));
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), MAX_LOCKS);
        for name in &all {
            assert!(fencing::ResourceName::new(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn anchor_args_follow_each_source() {
        let ttl = Duration::from_secs(1);
        let (program, args) = anchor_args(
            "/c/bin/curator-mutex.jar".as_ref(),
            "curator4",
            "zk://10.0.0.1:2181,10.0.0.2:2181/campaign?session_timeout=1&timeout=1",
            "campaign-b",
            ttl,
            6,
        )
        .unwrap();
        assert_eq!(program, PathBuf::from("java"));
        let joined = args.join(" ");
        assert!(
            joined.contains(
                "-jar /c/bin/curator-mutex.jar campaign --connect 10.0.0.1:2181,10.0.0.2:2181 \
                 --path /campaign/campaign-b --lock campaign-b --session-timeout-ms 1000 --seed 3"
            ),
            "{joined}"
        );

        let (program, args) = anchor_args(
            "/c/bin/client-go-elector".as_ref(),
            "clientgo4",
            "kube://default?kubeconfig=/o/kubeconfig.yaml&ttl=2&timeout=1",
            "campaign-b",
            Duration::from_secs(2),
            6,
        )
        .unwrap();
        assert_eq!(program, PathBuf::from("/c/bin/client-go-elector"));
        assert_eq!(
            args.join(" "),
            "campaign --kubeconfig /o/kubeconfig.yaml --namespace default --lock campaign-b \
             --name clientgo4 --ttl-ms 2000 --timeout-ms 1000 --seed 3 --long-hold-ms 5000 \
             --long-percent 20"
        );

        let (_, args) = anchor_args(
            "/c/bin/etcd-mutex".as_ref(),
            "go4",
            "etcd://10.0.0.1:2379/campaign?ttl=2&timeout=1",
            "campaign-b",
            Duration::from_secs(2),
            6,
        )
        .unwrap();
        assert_eq!(
            args.join(" "),
            "campaign --endpoints 10.0.0.1:2379 --prefix /campaign --lock campaign-b --ttl 2 \
             --seed 3 --long-hold-ms 5000 --long-percent 20"
        );

        // A binary on another backend's source is refused.
        assert!(anchor_args(
            "/c/bin/etcd-mutex".as_ref(),
            "go4",
            "zk://h:2181/campaign",
            "campaign-b",
            ttl,
            6
        )
        .is_err());
    }
}
