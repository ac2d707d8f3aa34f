//! Child processes of the demo, and the guard that makes sure none of them
//! outlives it: a frozen child left behind would hold its stdin pipe and a
//! slot in the process table forever.

use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::timeout;

use super::protocol::{read_line, Report};
use crate::failure::{Failure, Result};

/// How long any single wait on a child may take before the demo gives up.
pub const CHILD_WAIT: Duration = Duration::from_secs(10);

/// A running `fence demo-client`. Dropping it SIGCONTs, SIGKILLs and reaps
/// the process if that has not happened yet.
pub struct ChildProc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    reaped: bool,
}

impl ChildProc {
    /// Re-runs this executable with `args`; stdout is the report channel and
    /// stderr (logs) goes straight to ours.
    pub fn spawn(name: &str, args: Vec<OsString>, with_stdin: bool) -> Result<ChildProc> {
        let exe = std::env::current_exe().map_err(|e| {
            Failure::runtime(format!(
                "cannot find the fence executable to start {name}: {e}"
            ))
        })?;
        let mut child = Command::new(&exe)
            .args(args)
            .stdin(if with_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                Failure::runtime(format!("cannot start {name} ({}): {e}", exe.display()))
            })?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Failure::runtime("child stdout was not piped"))?;
        Ok(ChildProc {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            stdout: BufReader::new(stdout),
            reaped: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The next report, failing on silence, garbage, an `ERROR` report or
    /// the child's exit.
    pub async fn next_report(&mut self) -> Result<Report> {
        match self.next_report_or_exit().await? {
            Some(report) => Ok(report),
            None => {
                let status = self.wait_exit().await?;
                Err(Failure::runtime(format!(
                    "{} exited early ({status})",
                    self.name
                )))
            }
        }
    }

    /// Like [`next_report`](Self::next_report), but `None` when the child
    /// closed its stdout (it is exiting).
    pub async fn next_report_or_exit(&mut self) -> Result<Option<Report>> {
        let line = match timeout(CHILD_WAIT, read_line(&mut self.stdout)).await {
            Err(_) => {
                return Err(Failure::runtime(format!(
                    "{} reported nothing for {CHILD_WAIT:?}",
                    self.name
                )))
            }
            Ok(Err(e)) => {
                return Err(Failure::runtime(format!(
                    "reading {}'s reports: {e}",
                    self.name
                )))
            }
            Ok(Ok(None)) => return Ok(None),
            Ok(Ok(Some(line))) => line,
        };
        match Report::parse(&line) {
            Ok(Report::Error(msg)) => Err(Failure::runtime(format!("{} failed: {msg}", self.name))),
            Ok(report) => Ok(Some(report)),
            Err(e) => Err(Failure::runtime(format!(
                "{} sent a bad report: {e}",
                self.name
            ))),
        }
    }

    /// Writes one line to the child's stdin.
    pub async fn send_line(&mut self, line: &str) -> Result<()> {
        let fail =
            |e: std::io::Error| Failure::runtime(format!("writing to {}'s stdin: {e}", self.name));
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Failure::runtime(format!("{} has no stdin pipe", self.name)))?;
        let write = async {
            stdin.write_all(format!("{line}\n").as_bytes()).await?;
            stdin.flush().await
        };
        match timeout(CHILD_WAIT, write).await {
            Ok(r) => r.map_err(fail),
            Err(_) => Err(Failure::runtime(format!(
                "{}'s stdin stayed full for {CHILD_WAIT:?}",
                self.name
            ))),
        }
    }

    pub fn signal(&self, signal: Signal) -> Result<()> {
        let pid = self
            .live_pid()
            .ok_or_else(|| Failure::runtime(format!("{} has already exited", self.name)))?;
        kill_process(pid, signal)
            .map_err(|e| Failure::runtime(format!("signalling {}: {e}", self.name)))
    }

    /// Waits until the kernel shows the child as stopped, so the timeline
    /// never claims a freeze that did not happen. `Ok(false)` where /proc is
    /// not available to check.
    pub async fn confirm_stopped(&self) -> Result<bool> {
        let Some(pid) = self.pid() else {
            return Err(Failure::runtime(format!(
                "{} exited instead of stopping",
                self.name
            )));
        };
        let stat_path = format!("/proc/{pid}/stat");
        let started = tokio::time::Instant::now();
        loop {
            let Ok(stat) = tokio::fs::read_to_string(&stat_path).await else {
                return Ok(false);
            };
            // The state letter follows the command name, which is in
            // parentheses and may itself contain spaces or ')'.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            if matches!(state, Some("T")) {
                return Ok(true);
            }
            if started.elapsed() > Duration::from_secs(2) {
                return Err(Failure::runtime(format!(
                    "{} did not stop after SIGSTOP (state {state:?})",
                    self.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits for the child to exit; kills it if it takes too long.
    pub async fn wait_exit(&mut self) -> Result<ExitStatus> {
        match timeout(CHILD_WAIT, self.child.wait()).await {
            Ok(Ok(status)) => {
                self.reaped = true;
                Ok(status)
            }
            Ok(Err(e)) => Err(Failure::runtime(format!("waiting for {}: {e}", self.name))),
            Err(_) => {
                self.kill().await;
                Err(Failure::runtime(format!(
                    "{} did not exit within {CHILD_WAIT:?}; killed it",
                    self.name
                )))
            }
        }
    }

    /// SIGCONT then SIGKILL, and reap.
    pub async fn kill(&mut self) {
        self.force_kill();
        if let Ok(Ok(_)) = timeout(Duration::from_secs(2), self.child.wait()).await {
            self.reaped = true;
        }
    }

    /// `Child::id` is `None` once tokio has reaped the child, so a signal
    /// can never hit a recycled pid.
    fn live_pid(&self) -> Option<Pid> {
        self.child.id().and_then(|id| Pid::from_raw(id as i32))
    }

    fn force_kill(&mut self) {
        if let Some(pid) = self.live_pid() {
            // SIGKILL also ends a stopped process, but continuing it first
            // costs nothing and does not depend on that kernel detail.
            let _ = kill_process(pid, Signal::CONT);
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if self.reaped || self.child.id().is_none() {
            return;
        }
        tracing::debug!(child = %self.name, "killing child on drop");
        self.force_kill();
        // A SIGKILLed child exits at once; wait a bounded moment so it is
        // reaped here rather than left as a zombie. This only runs on error
        // paths, and block_in_place keeps the runtime's other tasks moving.
        let child = &mut self.child;
        let mut reap = || {
            for _ in 0..200 {
                match child.try_wait() {
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                    _ => return,
                }
            }
        };
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            tokio::task::block_in_place(reap);
        } else {
            reap();
        }
    }
}
