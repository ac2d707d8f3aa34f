//! One server process of a cluster (an etcd member, a ZooKeeper server):
//! how it is started, killed, paused, resumed and restarted, and how its
//! log is read when something fails ([`MemberProcess`]); and the process
//! control of a whole cluster of them, written once ([`MemberCluster`]).
//! The cluster types own one process per member and add what only their
//! server knows (its command line, its health).

use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use rustix::process::Signal;

use crate::Reaped;

/// How many log lines a failure message quotes.
pub const LOG_TAIL_LINES: usize = 40;

/// A member's process while it runs, and its log file across all its runs.
///
/// Every method takes `&self` (the process sits behind a lock), so that a
/// health check can notice an exited process while tests hold the cluster
/// shared. Dropping it kills and reaps the process.
pub struct MemberProcess {
    name: String,
    log: PathBuf,
    process: Mutex<Option<Reaped>>,
    paused: AtomicBool,
}

impl MemberProcess {
    /// A member called `name` (for messages) that logs to `log`; nothing
    /// runs until [`MemberProcess::start`].
    pub fn new(name: impl Into<String>, log: PathBuf) -> Self {
        MemberProcess {
            name: name.into(),
            log,
            process: Mutex::new(None),
            paused: AtomicBool::new(false),
        }
    }

    /// The name given to [`MemberProcess::new`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The log file every run appends to.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Kills the process if there is one, then starts `cmd` with its output
    /// appended to the log.
    pub fn start(&self, cmd: &mut Command) -> std::io::Result<()> {
        self.kill();
        let process = Reaped::spawn_logged(cmd, &self.log)?;
        *self.process.lock().unwrap() = Some(process);
        Ok(())
    }

    /// Whether there is a process (running or paused).
    pub fn is_running(&self) -> bool {
        self.process.lock().unwrap().is_some()
    }

    /// Running and not paused: the member should answer.
    pub fn is_live(&self) -> bool {
        self.is_running() && !self.is_paused()
    }

    /// The process id while there is a process.
    pub fn pid(&self) -> Option<u32> {
        self.process.lock().unwrap().as_ref().map(Reaped::id)
    }

    /// Whether it is stopped by [`MemberProcess::pause`].
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// SIGKILL and reap (a stopped process is continued first); the data
    /// stays for a restart. Does nothing when there is no process.
    pub fn kill(&self) {
        let process = self.process.lock().unwrap().take();
        drop(process);
        self.paused.store(false, Ordering::SeqCst);
    }

    /// SIGSTOP, returning once every thread has stopped (the sockets stay
    /// open, it answers nothing): a stalled, not a crashed, member.
    pub fn pause(&self) {
        if let Some(p) = self.process.lock().unwrap().as_ref() {
            self.paused.store(true, Ordering::SeqCst);
            p.stop();
        }
    }

    /// SIGCONT after [`MemberProcess::pause`].
    pub fn resume(&self) {
        if let Some(p) = self.process.lock().unwrap().as_ref() {
            p.signal(Signal::CONT);
            self.paused.store(false, Ordering::SeqCst);
        }
    }

    /// The exit status when the process exited by itself since it was
    /// started; from then on it no longer counts as running.
    pub fn exited(&self) -> Option<ExitStatus> {
        let mut process = self.process.lock().unwrap();
        let status = process.as_mut().and_then(Reaped::try_wait);
        if status.is_some() {
            *process = None;
        }
        status
    }

    /// The last [`LOG_TAIL_LINES`] lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }
}

/// A cluster whose members are [`MemberProcess`]es (an etcd cluster, a
/// ZooKeeper ensemble): the kill / pause / resume / restart every cluster
/// offers, written once. An implementor says how to start member `i`, how
/// to tell that the whole cluster is healthy, and how its errors name a
/// member that is unknown or exited.
///
/// Tests `use fencing_harness::member::MemberCluster` to call these
/// methods on a cluster.
pub trait MemberCluster: Send + Sync {
    /// The cluster's error type.
    type Error: std::error::Error + Send;

    /// How many members the cluster has (running or not).
    fn member_count(&self) -> usize;

    /// Member `i`'s process, `None` when `i` is out of range.
    fn member(&self, i: usize) -> Option<&MemberProcess>;

    /// Starts member `i` (killing it first if it still runs) with its
    /// name, ports and data; does not wait for it.
    fn start_member(&mut self, i: usize) -> Result<(), Self::Error>;

    /// Waits until every live member serves, failing early with
    /// [`MemberCluster::check_alive`]'s error when one exited.
    fn wait_healthy(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The index of the member that leads right now, as a majority of the
    /// live members sees it.
    fn leader(&self) -> impl Future<Output = Result<usize, Self::Error>> + Send;

    /// The error for a member index the cluster does not have.
    fn out_of_range(&self, i: usize) -> Self::Error;

    /// The error for member `i`, which should run, having exited.
    fn member_exited(&self, i: usize, status: ExitStatus, log: String) -> Self::Error;

    /// Fails with [`MemberCluster::out_of_range`] unless the cluster has
    /// member `i`.
    fn check_index(&self, i: usize) -> Result<(), Self::Error> {
        match self.member(i) {
            Some(_) => Ok(()),
            None => Err(self.out_of_range(i)),
        }
    }

    /// Whether member `i` has a process (running or paused).
    fn is_running(&self, i: usize) -> bool {
        self.member(i).is_some_and(MemberProcess::is_running)
    }

    /// The process id of member `i` while it has a process.
    fn pid(&self, i: usize) -> Option<u32> {
        self.member(i).and_then(MemberProcess::pid)
    }

    /// Whether member `i` is stopped by [`MemberCluster::pause`].
    fn is_paused(&self, i: usize) -> bool {
        self.member(i).is_some_and(MemberProcess::is_paused)
    }

    /// Kills member `i` with SIGKILL and reaps it; its data stays for
    /// [`MemberCluster::restart`]. Does nothing if it is not running.
    fn kill(&mut self, i: usize) {
        if let Some(p) = self.member(i) {
            p.kill();
        }
    }

    /// Stops member `i` with SIGSTOP (the process stays, its sockets stay
    /// open, it answers nothing): a stalled, not a crashed, member.
    fn pause(&self, i: usize) {
        if let Some(p) = self.member(i) {
            p.pause();
        }
    }

    /// Continues member `i` after [`MemberCluster::pause`] (SIGCONT).
    fn resume(&self, i: usize) {
        if let Some(p) = self.member(i) {
            p.resume();
        }
    }

    /// Members that should answer: running and not paused.
    fn live(&self) -> Vec<usize> {
        (0..self.member_count())
            .filter(|&i| self.member(i).is_some_and(MemberProcess::is_live))
            .collect()
    }

    /// Fails with [`MemberCluster::member_exited`] when a member that
    /// should run has exited.
    fn check_alive(&self) -> Result<(), Self::Error> {
        for i in 0..self.member_count() {
            let Some(p) = self.member(i) else { continue };
            if let Some(status) = p.exited() {
                return Err(self.member_exited(i, status, p.log_tail()));
            }
        }
        Ok(())
    }

    /// The last lines of member `i`'s log (all its runs), for failure
    /// messages.
    fn log_tail(&self, i: usize) -> String {
        self.member(i)
            .map_or_else(|| format!("(no member {i})"), MemberProcess::log_tail)
    }

    /// Kills the current leader and waits until the others serve again;
    /// returns its index, for [`MemberCluster::restart`].
    fn kill_leader(&mut self) -> impl Future<Output = Result<usize, Self::Error>> + Send {
        async move {
            let leader = self.leader().await?;
            self.kill(leader);
            self.wait_healthy().await?;
            Ok(leader)
        }
    }

    /// Starts member `i` again (killing it first if it still runs) and
    /// waits until the whole cluster is healthy.
    fn restart(&mut self, i: usize) -> impl Future<Output = Result<(), Self::Error>> + Send {
        async move {
            self.check_index(i)?;
            self.start_member(i)?;
            self.wait_healthy().await
        }
    }

    /// Kills every member and starts them all again on their data, then
    /// waits until the cluster is healthy (one by one would never regain a
    /// quorum).
    fn restart_all(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        async move {
            for i in 0..self.member_count() {
                self.kill(i);
            }
            for i in 0..self.member_count() {
                self.start_member(i)?;
            }
            self.wait_healthy().await
        }
    }
}

/// The last [`LOG_TAIL_LINES`] lines of the log file `path`, or why it
/// cannot be read, for failure messages.
pub fn log_tail(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_started_paused_resumed_killed_and_noticed_when_it_exits() {
        let dir = tempfile::tempdir().unwrap();
        let member = MemberProcess::new("sleeper", dir.path().join("log"));
        assert!(!member.is_running() && member.pid().is_none());
        member
            .start(Command::new("sh").args(["-c", "echo started; exec sleep 30"]))
            .unwrap();
        let pid = member.pid().expect("a pid while running");
        // Paused before its echo ran, it would never log a line.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !member.log_tail().contains("started") {
            assert!(std::time::Instant::now() < deadline, "no output");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        member.pause();
        assert!(member.is_paused() && !member.is_live());
        let state = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        assert!(state.contains(") T "), "{state}");
        member.resume();
        assert!(member.is_live());
        member.kill();
        assert!(!member.is_running() && !member.is_paused());
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "reaped");

        member
            .start(Command::new("sh").args(["-c", "exit 3"]))
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            if let Some(s) = member.exited() {
                break s;
            }
            assert!(std::time::Instant::now() < deadline, "exit not noticed");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(3));
        assert!(!member.is_running());
        assert_eq!(member.log_tail(), "started", "both runs append to one log");
    }
}

#[cfg(test)]
mod cluster_tests {
    use super::*;

    /// A "cluster" of `sleep` processes (or of one command per member):
    /// enough to exercise the provided process control.
    struct Sleepers {
        members: Vec<MemberProcess>,
        commands: Vec<&'static str>,
    }

    #[derive(Debug, thiserror::Error)]
    enum SleepError {
        #[error("no member {0}")]
        OutOfRange(usize),
        #[error("member {0} exited with {1}")]
        Exited(usize, ExitStatus),
        #[error(transparent)]
        Io(#[from] std::io::Error),
    }

    impl MemberCluster for Sleepers {
        type Error = SleepError;

        fn member_count(&self) -> usize {
            self.members.len()
        }

        fn member(&self, i: usize) -> Option<&MemberProcess> {
            self.members.get(i)
        }

        fn start_member(&mut self, i: usize) -> Result<(), SleepError> {
            let script = self.commands[i];
            Ok(self.members[i].start(Command::new("sh").args(["-c", script]))?)
        }

        async fn wait_healthy(&self) -> Result<(), SleepError> {
            self.check_alive()
        }

        async fn leader(&self) -> Result<usize, SleepError> {
            Ok(self.live()[0])
        }

        fn out_of_range(&self, i: usize) -> SleepError {
            SleepError::OutOfRange(i)
        }

        fn member_exited(&self, i: usize, status: ExitStatus, _log: String) -> SleepError {
            SleepError::Exited(i, status)
        }
    }

    fn sleepers(dir: &Path, commands: Vec<&'static str>) -> Sleepers {
        let members = (0..commands.len())
            .map(|i| MemberProcess::new(format!("m{i}"), dir.join(format!("m{i}.log"))))
            .collect();
        let mut cluster = Sleepers { members, commands };
        for i in 0..cluster.member_count() {
            cluster.start_member(i).unwrap();
        }
        cluster
    }

    fn pids(cluster: &Sleepers) -> Vec<Option<u32>> {
        (0..cluster.member_count())
            .map(|i| cluster.pid(i))
            .collect()
    }

    #[tokio::test]
    async fn restarts_kill_the_leader_and_index_errors_work_on_any_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let mut cluster = sleepers(dir.path(), vec!["exec sleep 30"; 3]);
        let first = pids(&cluster);
        assert!(first.iter().all(Option::is_some));

        assert_eq!(cluster.kill_leader().await.unwrap(), 0);
        assert!(!cluster.is_running(0) && cluster.is_running(1));
        assert_eq!(cluster.live(), vec![1, 2]);

        cluster.restart(0).await.unwrap();
        assert!(cluster.is_running(0) && cluster.pid(0) != first[0]);

        cluster.pause(2);
        assert!(cluster.is_paused(2) && cluster.live() == vec![0, 1]);
        cluster.resume(2);

        let before = pids(&cluster);
        cluster.restart_all().await.unwrap();
        let after = pids(&cluster);
        assert!(before
            .iter()
            .zip(&after)
            .all(|(b, a)| a.is_some() && a != b));

        assert!(matches!(
            cluster.check_index(3),
            Err(SleepError::OutOfRange(3))
        ));
        assert!(matches!(
            cluster.restart(7).await,
            Err(SleepError::OutOfRange(7))
        ));
        assert_eq!(cluster.log_tail(9), "(no member 9)");
    }

    #[tokio::test]
    async fn a_member_that_exits_fails_the_health_check_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = sleepers(dir.path(), vec!["exec sleep 30", "exit 4"]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let err = loop {
            match cluster.wait_healthy().await {
                Err(e) => break e,
                Ok(()) => assert!(std::time::Instant::now() < deadline, "exit not noticed"),
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        assert!(
            matches!(&err, SleepError::Exited(1, s) if s.code() == Some(4)),
            "{err}"
        );
        assert!(!cluster.is_running(1) && cluster.is_running(0));
    }
}
