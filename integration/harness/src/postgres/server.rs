//! A throwaway PostgreSQL server on loopback, for tests that need the real
//! thing: committed rows that survive a fast restart and a crash.
//!
//! The binaries come from `scripts/install/postgres.sh` (run by
//! `scripts/test.sh`): the Debian server package, whose newest
//! `/usr/lib/postgresql/<ver>/bin` is used. A missing server is an error that
//! says so, never a silently skipped test.
//!
//! `initdb` and `postgres` refuse to run as root, so when the harness runs as
//! root they run as the `postgres` system user (the spawned process switches
//! its uid and gid itself, so the pid the harness holds is the postmaster's
//! own, with no `runuser` in between). The data directory, the Unix socket and
//! the log file live in one temporary directory owned by that user.
//!
//! The postmaster is a child of the test process (not started by `pg_ctl`),
//! with a parent-death signal, and is killed together with every server
//! process it forked when the [`PgServer`] is dropped, also when a test
//! panics. Every wait is bounded and every failure carries the log tail.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls};

use crate::Reaped;

/// Where the Debian packages put the versioned server directories.
pub const PG_LIB_DIR: &str = "/usr/lib/postgresql";
/// The system user that owns the server's files when the harness is root.
pub const PG_SYSTEM_USER: &str = "postgres";
/// The database superuser `initdb` creates (trust authentication).
pub const PG_SUPERUSER: &str = "postgres";

/// How long `initdb` or `pg_basebackup` may take.
const INITDB_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a start (or the start half of a restart) may take until the
/// server answers a query.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a fast shutdown (SIGINT) may take before the server is killed.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server processes may take to vanish after SIGKILL.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connect or one harness query may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between two rounds of a polling wait.
const POLL: Duration = Duration::from_millis(50);
/// How many times a start is tried with a fresh port when the picked port
/// got taken before the server bound it.
const START_ATTEMPTS: usize = 3;

/// Why the harness could not start, check or drive a server.
#[derive(Debug, thiserror::Error)]
pub enum PgHarnessError {
    /// No `/usr/lib/postgresql/<ver>/bin` with `initdb` and `postgres`.
    #[error("no PostgreSQL server found in {PG_LIB_DIR}/<version>/bin (initdb and postgres): run scripts/test.sh (or bash scripts/install/postgres.sh) to install it")]
    MissingBinary,
    /// The harness runs as root, but the `postgres` system user is missing.
    #[error("running as root, but the system user {PG_SYSTEM_USER:?} does not exist ({0}): run scripts/test.sh (or bash scripts/install/postgres.sh) to install the server package, which creates it")]
    MissingUser(String),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// `initdb` or `pg_basebackup` failed.
    #[error("{status}:\n{output}")]
    Initdb {
        /// Its exit status.
        status: String,
        /// What it printed.
        output: String,
    },
    /// The postmaster exited while it should be serving.
    #[error("postgres exited ({status}); last lines of its log:\n{log}")]
    Exited {
        /// Its exit status.
        status: String,
        /// The tail of its log file.
        log: String,
    },
    /// A bounded wait ran out.
    #[error("{0}")]
    Timeout(String),
    /// A request to the server failed.
    #[error("postgres request failed: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The caller asked for something the server cannot do now.
    #[error("{0}")]
    Usage(String),
}

impl PgHarnessError {
    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        PgHarnessError::Io {
            context: context.into(),
            source,
        }
    }

    fn is_port_clash(&self) -> bool {
        matches!(self, PgHarnessError::Exited { log, .. }
            if log.contains("Address already in use") || log.contains("could not create any TCP/IP sockets"))
    }
}

/// The newest `/usr/lib/postgresql/<ver>/bin` holding `initdb` and
/// `postgres`, with its major version.
pub fn find_bin_dir() -> Result<(u32, PathBuf), PgHarnessError> {
    find_bin_dir_in(Path::new(PG_LIB_DIR))
}

/// [`find_bin_dir`] under another root than `/usr/lib/postgresql`.
pub fn find_bin_dir_in(root: &Path) -> Result<(u32, PathBuf), PgHarnessError> {
    let entries = fs::read_dir(root).map_err(|_| PgHarnessError::MissingBinary)?;
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            // Debian names the directories by major version ("15"; "9.6"
            // before 10): compare the numeric components.
            let name = e.file_name().to_string_lossy().into_owned();
            let version: Vec<u32> = name
                .split('.')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(v, bin)| (v[0], bin))
        .ok_or(PgHarnessError::MissingBinary)
}

/// The uid and gid the server runs as: the `postgres` system user's when
/// the harness is root, `None` (the harness's own) otherwise.
pub(crate) fn server_ids() -> Result<Option<(u32, u32)>, PgHarnessError> {
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let id = |flag: &str| -> Result<u32, PgHarnessError> {
        let out = Command::new("id")
            .arg(flag)
            .arg(PG_SYSTEM_USER)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| PgHarnessError::io("running id(1)", e))?;
        if !out.status.success() {
            return Err(PgHarnessError::MissingUser(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|e| PgHarnessError::MissingUser(format!("id {flag} printed no number: {e}")))
    };
    Ok(Some((id("-u")?, id("-g")?)))
}
fn free_port() -> Result<u16, PgHarnessError> {
    crate::ports::free_port().map_err(|e| PgHarnessError::io("finding a free loopback port", e))
}

/// One process of a running server: its pid and its start time (field 22 of
/// `/proc/<pid>/stat`), which tells it apart from a later process that gets
/// the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcId {
    pid: u32,
    start: u64,
}

/// The parent pid, state and start time of `pid`, from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(u32, char, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: the fields
    // after it start behind the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state), so field N is fields[N - 3].
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((ppid, state, start))
}

/// Whether the process is still there and not a zombie (a zombie holds no
/// memory, sockets or shared memory any more).
fn proc_alive(p: ProcId) -> bool {
    matches!(proc_stat(p.pid), Some((_, state, start)) if start == p.start && state != 'Z')
}

/// The children of `parent`: the postmaster's server processes (each is
/// the leader of its own session, so a process group kill misses them).
fn children_of(parent: u32) -> Vec<ProcId> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| match proc_stat(pid) {
            Some((ppid, _, start)) if ppid == parent => Some(ProcId { pid, start }),
            _ => None,
        })
        .collect()
}

/// SIGKILLs the postmaster `pid` (by `kill_postmaster`, which also reaps
/// it) and every server process it forked, and waits (bounded) until they
/// are gone.
pub(crate) fn kill_tree(pid: u32, kill_postmaster: impl FnOnce()) {
    // Stopped, the postmaster cannot fork new processes nor reap the ones
    // it has, so their pids stay theirs while they are killed.
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, Signal::STOP);
    }
    let stopped_by = Instant::now() + Duration::from_secs(1);
    while matches!(proc_stat(pid), Some((_, state, _)) if state != 'T' && state != 't' && state != 'Z')
        && Instant::now() < stopped_by
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    let children = signal_children(pid, Signal::KILL);
    kill_postmaster();
    // The orphaned children are reaped by init; wait until they are gone
    // (a leftover would keep the shared memory, and the next postmaster on
    // this data directory would refuse to start).
    let deadline = Instant::now() + KILL_TIMEOUT;
    while children.iter().any(|c| proc_alive(*c)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `signal` to every live server process the postmaster `pid`
/// forked; returns them.
pub(crate) fn signal_children(pid: u32, signal: Signal) -> Vec<ProcId> {
    let children = children_of(pid);
    for child in &children {
        if let Some(p) = rustix::process::Pid::from_raw(child.pid as i32) {
            if proc_alive(*child) {
                let _ = rustix::process::kill_process(p, signal);
            }
        }
    }
    children
}

/// A throwaway PostgreSQL server on `127.0.0.1`, killed with all its
/// processes and deleted with its data when dropped.
pub struct PgServer {
    bin: PathBuf,
    major: u32,
    ids: Option<(u32, u32)>,
    port: u16,
    postmaster: Option<Reaped>,
    connections: Mutex<Vec<JoinHandle<()>>>,
    log: PathBuf,
    // Declared last: removed after the processes are gone.
    dir: TempDir,
}

impl PgServer {
    /// Creates a fresh cluster with `initdb` in a temporary directory,
    /// starts `postgres` on a free loopback port and waits (at most 30 s)
    /// until it answers a query.
    pub async fn start() -> Result<PgServer, PgHarnessError> {
        let mut server = PgServer::blank()?;
        server.initdb().await?;
        server.launch_on_free_port().await?;
        Ok(server)
    }

    /// A streaming standby of `primary`: its data copied with
    /// `pg_basebackup -R` (which writes the standby's connection to the
    /// primary), started on a free loopback port; it answers read-only
    /// queries until [`promote`](Self::promote)d.
    pub async fn standby_of(primary: &PgServer) -> Result<PgServer, PgHarnessError> {
        let mut server = PgServer::blank()?;
        let mut cmd = server.command("pg_basebackup", Signal::KILL);
        cmd.args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", PG_SUPERUSER, "-D"])
            .arg(server.data_dir())
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"]);
        server.run_tool(cmd, "pg_basebackup").await?;
        server.launch_on_free_port().await?;
        Ok(server)
    }

    /// Ends a standby's recovery (`pg_promote()`, waiting until it is done):
    /// it takes writes on a new timeline.
    pub async fn promote(&self) -> Result<(), PgHarnessError> {
        let client = self.client().await?;
        let promote = client.query_one("SELECT pg_promote(true, 30)", &[]);
        let done: bool = match tokio::time::timeout(Duration::from_secs(35), promote).await {
            Ok(row) => row?.try_get(0)?,
            Err(_) => return Err(PgHarnessError::Timeout("pg_promote() timed out".into())),
        };
        if !done {
            return Err(PgHarnessError::Usage(format!(
                "pg_promote() did not finish within 30 s\n--- log tail ---\n{}",
                self.log_tail()
            )));
        }
        Ok(())
    }

    /// A server not yet created: its temporary directory, owned by the
    /// server user when the harness is root.
    fn blank() -> Result<PgServer, PgHarnessError> {
        let (major, bin) = find_bin_dir()?;
        let ids = server_ids()?;
        let dir = tempfile::Builder::new()
            .prefix("fencing-pg-")
            .tempdir()
            .map_err(|e| PgHarnessError::io("creating the server's temporary directory", e))?;
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).map_err(|e| {
                PgHarnessError::io(
                    format!("chown {PG_SYSTEM_USER} {}", dir.path().display()),
                    e,
                )
            })?;
        }
        Ok(PgServer {
            bin,
            major,
            ids,
            port: 0,
            postmaster: None,
            connections: Mutex::new(Vec::new()),
            log: dir.path().join("postgres.log"),
            dir,
        })
    }

    async fn launch_on_free_port(&mut self) -> Result<(), PgHarnessError> {
        let mut attempt = 1;
        loop {
            self.port = free_port()?;
            match self.launch().await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_port_clash() && attempt < START_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// A command for one of the server binaries: run as the server user,
    /// in the temporary directory, with no `PG*` variable of the caller's
    /// environment, and killed when the spawning thread dies.
    fn command(&self, program: &str, death_signal: Signal) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        cmd.current_dir(self.dir.path()).env("LC_ALL", "C");
        if let Some((uid, gid)) = self.ids {
            // std switches gid, drops supplementary groups, then switches uid,
            // all before running the pre_exec closure below.
            cmd.uid(uid).gid(gid);
        }
        // The server must not outlive a test process that is killed outright
        // (Drop never runs then). The signal follows the spawning thread,
        // which in a tokio test is the test's thread or a runtime worker:
        // both live as long as the server. It is set after the uid switch,
        // which would clear it.
        crate::process::die_with_parent(&mut cmd, death_signal);
        cmd
    }

    async fn initdb(&self) -> Result<(), PgHarnessError> {
        let mut cmd = self.command("initdb", Signal::KILL);
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-U", PG_SUPERUSER, "--auth=trust", "-E", "UTF8"])
            .args(["--locale=C", "--no-sync"]);
        self.run_tool(cmd, "initdb").await
    }

    /// Runs one of the server's tools to its end (bounded), failing with
    /// what it printed.
    async fn run_tool(&self, cmd: Command, tool: &str) -> Result<(), PgHarnessError> {
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.stdin(Stdio::null()).kill_on_drop(true);
        let out = match tokio::time::timeout(INITDB_TIMEOUT, cmd.output()).await {
            Ok(out) => out.map_err(|e| {
                PgHarnessError::io(format!("running {}", self.bin.join(tool).display()), e)
            })?,
            Err(_) => {
                return Err(PgHarnessError::Timeout(format!(
                    "{tool} did not finish within {INITDB_TIMEOUT:?}"
                )))
            }
        };
        if !out.status.success() {
            return Err(PgHarnessError::Initdb {
                status: format!("{tool}: {}", out.status),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        Ok(())
    }

    /// Spawns the postmaster on the data directory and port, and waits
    /// until it answers a query. A postmaster that does not get there is
    /// killed.
    async fn launch(&mut self) -> Result<(), PgHarnessError> {
        // On the parent's death SIGQUIT, not SIGKILL: an immediate shutdown,
        // in which the postmaster takes its server processes down with it
        // (they are in sessions of their own, out of reach otherwise).
        let mut cmd = self.command("postgres", Signal::QUIT);
        cmd.arg("-D")
            .arg(self.data_dir())
            .arg("-k")
            .arg(self.dir.path())
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=on"]);
        let process = Reaped::spawn_logged(&mut cmd, &self.log).map_err(|e| {
            PgHarnessError::io(
                format!("starting {}", self.bin.join("postgres").display()),
                e,
            )
        })?;
        self.postmaster = Some(process);
        let result = self.wait_ready().await;
        if result.is_err() {
            self.kill();
        }
        result
    }

    /// Waits until the server answers `SELECT 1` over TCP, failing early
    /// with the log tail when the postmaster exits.
    async fn wait_ready(&mut self) -> Result<(), PgHarnessError> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            self.check_alive()?;
            let last = match self.probe().await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(PgHarnessError::Timeout(format!(
                    "postgres on port {} did not answer a query within {STARTUP_TIMEOUT:?}; last error: {last}\n--- log tail ---\n{}",
                    self.port,
                    self.log_tail()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn probe(&self) -> Result<(), PgHarnessError> {
        let client = self.client().await?;
        let row =
            match tokio::time::timeout(REQUEST_TIMEOUT, client.query_one("SELECT 1", &[])).await {
                Ok(row) => row?,
                Err(_) => return Err(PgHarnessError::Timeout("SELECT 1 timed out".into())),
            };
        let one: i32 = row.try_get(0)?;
        if one != 1 {
            return Err(PgHarnessError::Usage(format!("SELECT 1 returned {one}")));
        }
        Ok(())
    }

    /// Fails with [`PgHarnessError::Exited`] when the postmaster has exited
    /// (and forgets it).
    fn check_alive(&mut self) -> Result<(), PgHarnessError> {
        let status = match self.postmaster.as_mut() {
            Some(p) => p.try_wait(),
            None => return Err(PgHarnessError::Usage("postgres is not running".into())),
        };
        if let Some(status) = status {
            // Its server processes may outlive it for a moment.
            self.kill();
            return Err(PgHarnessError::Exited {
                status: status.to_string(),
                log: self.log_tail(),
            });
        }
        Ok(())
    }

    /// A libpq-style connection string for the server over TCP, e.g.
    /// `host=127.0.0.1 port=5433 user=postgres dbname=postgres connect_timeout=5`.
    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={PG_SUPERUSER} dbname=postgres connect_timeout={}",
            self.port,
            REQUEST_TIMEOUT.as_secs()
        )
    }

    /// The TCP port the server listens on (kept across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's major version (the `<ver>` of its bin directory).
    pub fn major_version(&self) -> u32 {
        self.major
    }

    /// The temporary directory: `data/`, `postgres.log` and the socket.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The postmaster's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.postmaster.as_ref().map(Reaped::id)
    }

    /// The process ids of the postmaster and of the server processes it
    /// has forked (checkpointer, WAL writer, backends, ...) right now.
    pub fn pids(&self) -> Vec<u32> {
        let Some(pid) = self.pid() else {
            return Vec::new();
        };
        let mut pids = vec![pid];
        pids.extend(children_of(pid).into_iter().map(|p| p.pid));
        pids
    }

    /// Whether the postmaster runs.
    pub fn is_running(&self) -> bool {
        self.postmaster.is_some()
    }

    /// A client connected over TCP (connect bounded by 5 s). Its connection
    /// runs in a spawned task that ends when the client is dropped or the
    /// server goes away, and is aborted when the server is dropped.
    pub async fn client(&self) -> Result<Client, PgHarnessError> {
        let config = self.connection_string();
        let connect = tokio_postgres::connect(&config, NoTls);
        let (client, connection) = match tokio::time::timeout(REQUEST_TIMEOUT, connect).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(PgHarnessError::Timeout(format!(
                    "connecting to postgres on port {} timed out",
                    self.port
                )))
            }
        };
        let task = tokio::spawn(async move {
            // An error here is the server going away (killed, restarted):
            // the client's next request reports it.
            let _ = connection.await;
        });
        let mut connections = self.connections.lock().unwrap();
        connections.retain(|t| !t.is_finished());
        connections.push(task);
        Ok(client)
    }

    /// Stops the server with a fast shutdown (SIGINT: sessions are ended,
    /// a checkpoint is written), waits for it (at most 30 s, then it is
    /// killed and the restart fails), and starts it again on the same data
    /// directory and port, waiting until it answers a query. Also starts a
    /// server that was [`kill`](PgServer::kill)ed.
    pub async fn restart(&mut self) -> Result<(), PgHarnessError> {
        self.stop().await?;
        self.launch().await
    }

    /// Fast shutdown of a running server; nothing if it is not running.
    async fn stop(&mut self) -> Result<(), PgHarnessError> {
        let Some(process) = self.postmaster.as_mut() else {
            return Ok(());
        };
        process.signal(Signal::INT);
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            if process.try_wait().is_some() {
                self.postmaster = None;
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(PgHarnessError::Timeout(format!(
                    "postgres did not finish a fast shutdown within {SHUTDOWN_TIMEOUT:?} (killed); log tail:\n{}",
                    self.log_tail()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Crashes the server: SIGKILL to the postmaster and every server
    /// process it forked, and waits (bounded) until they are gone. The data
    /// directory stays for [`restart`](PgServer::restart), which then runs
    /// crash recovery. Does nothing if the server is not running.
    pub fn kill(&mut self) {
        if let Some(postmaster) = self.postmaster.take() {
            kill_tree(postmaster.id(), || drop(postmaster));
        }
    }

    /// The last 40 lines of the server log (all its runs), for failure
    /// messages.
    pub fn log_tail(&self) -> String {
        crate::member::log_tail(&self.log)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        for task in self.connections.get_mut().unwrap().drain(..) {
            task.abort();
        }
        self.kill();
        // The temporary directory is removed when `dir` drops, after this.
    }
}
