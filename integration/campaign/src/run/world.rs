//! The world a campaign acts on: the network and the cluster in it (or a
//! local state directory), the storage process, PostgreSQL, and the client
//! processes; set up, healed, and torn down.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, Pid, Signal};
use tokio::process::Child;

use super::anchor::{anchor_args, anchor_binary};
use super::member_exits::MemberExits;
use super::relay::{relay, ClientStdin};
use super::{lock_names, Config, Recorder, Workload};
use crate::history::EventKind;
use crate::kube::AdminAction;
use crate::nemesis::kube_admin;
use crate::pg_storage::PgStore;
use crate::storage::Storage;
use crate::{checker, coordinated};
use fencing_harness::namespaced::{Cluster, Kind, Tuning};
use fencing_harness::net::netns::{Host, Network};

/// libfaketime for multi-threaded programs (Debian's `faketime` package):
/// it scales the wall and the monotonic clock, and sleeps, of the process.
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
/// Namespaces of a campaign start with this (leftovers are removed).
const NS_PREFIX: &str = "fcamp-";

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
    /// The processes of this client that were killed (not stopped).
    killed: Vec<u32>,
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

    /// SIGKILL and reap (a process that already exited is only reaped).
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `id` is gone once the child was reaped: it stopped on its own.
            self.killed.extend(child.id());
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
    /// Members whose process ended by itself.
    pub member_exits: MemberExits,
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
    /// Notes the members that exited by themselves since the last look.
    pub fn look_for_member_exits(&mut self) {
        if let Some(cluster) = &self.cluster {
            self.member_exits.look(cluster);
        }
    }

    /// The campaign binary (run inside namespaces for helper jobs).
    pub fn exe(&self) -> &std::path::Path {
        &self.spawner.exe
    }

    /// The locks the clients contend for.
    pub fn locks(&self) -> &[String] {
        &self.spawner.locks
    }

    /// What the clients do.
    pub fn workload(&self) -> Workload {
        self.spawner.workload
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
                Workload::Coordinated => {
                    let locks = coordinated::election_locks(i, &s.locks)
                        .ok_or("the coordinated workload needs two locks")?;
                    cmd.args(["--coordinated", &locks[1]]);
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
        fencing_harness::process::die_with_parent(&mut cmd, Signal::KILL);
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

pub(super) async fn setup(cfg: &Config, recorder: Arc<Recorder>) -> Result<World, String> {
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
        let (network, cluster, hosts) = blocking(|| start_cluster(cfg))?;
        if cfg.kind == Kind::Pg {
            let host = network.hosts().last().ok_or("no client host")?;
            create_pg_schema(host, cluster.client_url(0, cfg.ttl)).await?;
        }
        let urls = (0..cfg.clients)
            .map(|i| match cfg.workload {
                Workload::Coordinated => {
                    coordinated::candidate_url(&cluster.client_url(i, cfg.ttl), i)
                }
                _ => cluster.client_url(i, cfg.ttl),
            })
            .collect();
        (Some(network), Some(cluster), hosts, urls)
    };
    let gate = match cfg.kind {
        Kind::Zk(_) => "zk",
        Kind::Etcd(_) => "etcd",
        // Only the storage's file gate.
        Kind::Local | Kind::Kube | Kind::Pg => "none",
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
            killed: Vec::new(),
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
        member_exits: MemberExits::default(),
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
    if cfg.workload == Workload::Coordinated {
        prepare_coordinated(&world).await?;
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
    let tuning = Tuning {
        coordinated_election: cfg.workload == Workload::Coordinated,
        ..Tuning::campaign(cfg.kind)
    };
    let cluster = Cluster::start_tuned(cfg.kind, &member_hosts, &cfg.out, &tuning)?;
    Ok((network, cluster, client_hosts))
}

/// The lock table, created once by the campaign as an operator would
/// (`fence schema`), from a client's namespace.
async fn create_pg_schema(host: &Host, url: String) -> Result<(), String> {
    let create = async move {
        let config = fencing_postgres::PgConfig::from_url(&url)?;
        fencing_postgres::PgSource::create_schema(&config).await
    };
    let thread = fencing_harness::net::netns::spawn_in(host, move || async move {
        tokio::time::timeout(Duration::from_secs(20), create).await
    });
    match blocking(|| thread.join()) {
        Ok(Ok(Ok(Ok(())))) => Ok(()),
        Ok(Ok(Ok(Err(e)))) => Err(format!("creating the lock table: {e}")),
        Ok(Ok(Err(_))) => Err("creating the lock table took over 20 s".into()),
        Ok(Err(e)) => Err(format!("entering {}: {e}", host.ns)),
        Err(_) => Err("the schema thread panicked".into()),
    }
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

/// What a coordinated candidate needs besides the lock workload's RBAC:
/// `rbac-coordinated.yaml` bound to the clients' user, and the apiserver's
/// election controller running (it starts once `kube-system` exists).
async fn prepare_coordinated(world: &World) -> Result<(), String> {
    let granted = kube_admin(world, AdminAction::GrantCandidates).await;
    if granted != "granted" {
        return Err(format!("binding the candidates' RBAC: {granted}"));
    }
    let system = kube_admin(world, AdminAction::StartElectionController).await;
    if !system.starts_with("created") && !system.ends_with("exists") {
        return Err(format!("starting the election controller: {system}"));
    }
    Ok(())
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

/// Process control of a member waits on the kernel (a SIGSTOP taking hold
/// in every thread, a killed JVM reaped, a fork): done off the runtime's
/// other tasks, whose relays stamp the history as lines arrive.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// No fault may outlive the run: links healed, pauses ended, dead members,
/// storage and clients started again, clients on a faked clock back on the real one.
pub async fn heal_everything(world: &mut World) -> Result<(), String> {
    if let Some(network) = &world.network {
        network.heal().map_err(|e| e.to_string())?;
    }
    // Reaps members that exited by themselves, so they are started too.
    world.look_for_member_exits();
    if let Some(cluster) = &mut world.cluster {
        blocking(|| {
            cluster.resume_all();
            cluster.restart_dead()
        })
        .map_err(|e| e.to_string())?;
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
pub(super) async fn finish(world: &mut World) -> Option<String> {
    let _ = heal_everything(world).await;
    for c in &world.clients {
        *c.stdin.lock().await = None;
    }
    for c in &mut world.clients {
        if let Some(child) = c.child.as_mut() {
            let limit = crate::client::STOP_LIMIT + Duration::from_secs(5);
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
    let leftover = match world.spawner.workload {
        Workload::Coordinated => coordinated_leftovers(world).await,
        _ => leftover_holder(world).await,
    };
    let names: Vec<String> = world.clients.iter().map(|c| c.name.clone()).collect();
    crate::fence_run::remove_sockets(&names);
    world.clients.clear();
    world.cluster = None;
    world.network = None;
    leftover
}

/// What the coordinated election left behind once every client stopped
/// (see [`coordinated::judge`]), looked at again until it is clean or the
/// same time as [`leftover_holder`] gives expiring sessions has passed:
/// a candidate deleted or a Lease released just before the exit may not
/// be visible at once.
async fn coordinated_leftovers(world: &World) -> Option<String> {
    let within = world.spawner.ttl * 3 + Duration::from_secs(2);
    let started = Instant::now();
    loop {
        let answer = kube_admin(world, AdminAction::Leftovers).await;
        let found = match serde_json::from_str::<coordinated::Leftovers>(&answer) {
            Ok(left) => coordinated::judge(&left, &world.recorder.events()),
            Err(_) => vec![format!("listing the leftovers failed: {answer}")],
        };
        if found.is_empty() {
            return None;
        }
        if started.elapsed() >= within {
            return Some(found.join("; "));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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
    let killed: Vec<String> = world
        .clients
        .iter()
        .flat_map(|c| c.killed.iter().map(u32::to_string))
        .collect();
    cmd.args([
        "inspect",
        "--source",
        &url,
        "--within-ms",
        &within.as_millis().to_string(),
        "--locks",
        &world.locks().len().to_string(),
    ]);
    if !killed.is_empty() {
        cmd.args(["--killed", &killed.join(",")]);
    }
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
