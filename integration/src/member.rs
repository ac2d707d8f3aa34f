//! One server process of a cluster (an etcd member, a ZooKeeper server):
//! how it is started, killed, paused, resumed and restarted, and how its
//! log is read when something fails. The cluster types own one per member
//! and add what only their server knows (its command line, its health).

use std::fs;
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
