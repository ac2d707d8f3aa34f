//! Child processes that are killed and reaped when dropped, also when a
//! test panics.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;

use rustix::process::{kill_process, Pid, Signal};

/// Makes the process `cmd` starts receive `signal` when the thread that
/// started it exits (`PR_SET_PDEATHSIG`), so that nothing a test or a
/// campaign starts outlives it, even when it is killed outright and no
/// `Drop` runs. Set after any uid switch of `cmd` (which would clear it).
pub fn die_with_parent(cmd: &mut Command, signal: Signal) -> &mut Command {
    // SAFETY: the closure only makes one async-signal-safe prctl call.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(signal))
                .map_err(std::io::Error::from)
        });
    }
    cmd
}

/// A child process that is killed and reaped when dropped.
pub struct Reaped {
    child: Child,
    /// In a mutex only so that a fixture holding a server is `Sync`.
    lines: std::sync::Mutex<mpsc::Receiver<String>>,
    /// Set once the child is known to have exited and been reaped: its pid
    /// may belong to another process then, so no signal is sent to it.
    exited: Option<ExitStatus>,
}

impl Reaped {
    /// Starts `cmd` with its stdout captured line by line.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Self> {
        let mut child = cmd.stdout(Stdio::piped()).stdin(Stdio::null()).spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Reaped {
            child,
            lines: std::sync::Mutex::new(lines),
            exited: None,
        })
    }

    /// Starts `cmd` with its stdout and stderr appended to the file `log`
    /// (created if missing), for long-running servers whose output is only
    /// read when something fails. Nothing is captured line by line, so
    /// [`Reaped::kill_and_collect`] returns no lines for such a child.
    pub fn spawn_logged(cmd: &mut Command, log: &Path) -> std::io::Result<Self> {
        let out = OpenOptions::new().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()?;
        let (_, lines) = mpsc::channel();
        Ok(Reaped {
            child,
            lines: std::sync::Mutex::new(lines),
            exited: None,
        })
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child's exit status if it has exited already (the child is then
    /// reaped), `None` while it runs.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Sends a signal to the child.
    pub fn signal(&self, signal: Signal) {
        if self.exited.is_some() {
            return;
        }
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process(pid, signal);
        }
    }

    /// SIGSTOP, then waits (at most 2 s) until every thread of the child
    /// has stopped. The signal's group stop is asynchronous: a busy JVM's
    /// threads can still answer a request for a moment after `kill`
    /// returns, which would make "a paused server answers nothing" flaky.
    pub fn stop(&self) {
        self.signal(Signal::STOP);
        let tasks = format!("/proc/{}/task", self.child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < deadline && !all_stopped(&tasks) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// The next line the child prints, waiting at most `limit`.
    pub fn next_line(&self, limit: std::time::Duration) -> Option<String> {
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        lines.recv_timeout(limit).ok()
    }

    /// Kills the child with SIGKILL, waits for it, and returns every line
    /// it printed.
    pub fn kill_and_collect(mut self) -> Vec<String> {
        self.reap();
        let lines = self.lines.get_mut().unwrap_or_else(|p| p.into_inner());
        lines.iter().collect()
    }

    fn reap(&mut self) {
        self.signal(Signal::CONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.reap();
    }
}

/// True when every thread under `/proc/PID/task` is stopped (`T` or `t`),
/// or the process is gone.
fn all_stopped(tasks: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(tasks) else {
        return true;
    };
    entries.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next());
            matches!(state, Some("T" | "t") | None)
        })
    })
}
