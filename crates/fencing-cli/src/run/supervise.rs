//! Watching the command while the grant is held, and stopping it in time.

use std::process::ExitStatus;
use std::time::Duration;

use fencing::{Grant, LossReason};
use rustix::process::{Pid, Signal};
use tokio::process::Child;
use tokio::time::Instant;

use super::rule::Timing;
use super::signals::{self, Received, Signals};
use super::watchdog::Watchdog;
use super::{group, LOST};
use crate::failure::{Failure, Result};

/// How long a SIGKILLed group may take to disappear before we give up
/// waiting (a process in uninterruptible sleep dies only when it wakes).
const REAP_LIMIT: Duration = Duration::from_secs(5);

/// A running command and everything that watches over it.
pub struct Supervised {
    pub child: Child,
    pub group: Pid,
    pub grant: Grant,
    pub timing: Timing,
    pub watchdog: Watchdog,
}

/// Why supervision ended (or paused).
enum Event {
    Exited(std::io::Result<ExitStatus>),
    /// The coordinator says the grant is gone, or the deadline passed.
    Lost(LossReason),
    /// Not renewed in time: the schedule's SIGTERM time has come.
    Expiring,
    Asked(Signal),
    Suspend,
    WatchdogGone,
    /// Time to look at the deadline again.
    Tick,
}

/// Runs until the command exits or must stop; stops its whole process group,
/// stands the watchdog down, then releases the lock.
pub async fn supervise(mut s: Supervised, signals: &mut Signals) -> Result<u8> {
    let event = s.watch(signals).await;
    let outcome = s.conclude(event).await;
    s.watchdog.finish().await;
    super::release(s.grant).await;
    outcome
}

impl Supervised {
    async fn watch(&mut self, signals: &mut Signals) -> Event {
        loop {
            let deadline = self.grant.deadline();
            if self
                .watchdog
                .arm(self.timing.watchdog_at(deadline))
                .await
                .is_err()
            {
                return Event::WatchdogGone;
            }
            let event = tokio::select! {
                // Loss first: after a pause (SIGSTOP) several may be ready,
                // and then the command must not be trusted to have finished
                // under the lock.
                biased;
                reason = self.grant.lost() => Event::Lost(reason),
                () = tokio::time::sleep_until(self.timing.stop_at(deadline)) => {
                    if self.grant.deadline() > deadline { Event::Tick } else { Event::Expiring }
                }
                status = self.child.wait() => Event::Exited(status),
                got = signals.recv() => match got {
                    Received::Stop(signal) => Event::Asked(signal),
                    Received::Suspend => Event::Suspend,
                },
                () = self.watchdog.exited() => Event::WatchdogGone,
                () = tokio::time::sleep(self.timing.check_every()) => Event::Tick,
            };
            match event {
                Event::Tick => {}
                Event::Suspend => self.suspend(),
                other => return other,
            }
        }
    }

    /// Ctrl-Z: the command runs in its own process group, so the terminal's
    /// SIGTSTP reached only `fence`. Stop the command's group, then
    /// ourselves. While we are stopped nothing renews the lease; the
    /// watchdog (not stopped) kills the group at the kill time. On SIGCONT
    /// the command resumes only if the lease still covers it.
    fn suspend(&mut self) {
        group::signal(self.group, Signal::STOP);
        signals::stop_self();
        let kill_at = self.timing.kill_at(self.grant.deadline());
        if self.grant.is_live() && Instant::now() < kill_at {
            group::signal(self.group, Signal::CONT);
        } else {
            // Stopped, it cannot act on SIGTERM; it must not run again.
            group::signal(self.group, Signal::KILL);
        }
    }

    async fn conclude(&mut self, event: Event) -> Result<u8> {
        let pid = self.group.as_raw_nonzero();
        let lock = self.grant.resource().as_str().to_owned();
        match event {
            Event::Exited(status) => {
                // Whatever the command left running in its group must not
                // outlive the lock.
                self.stop(Signal::TERM, self.bound()).await;
                let status = status
                    .map_err(|e| Failure::runtime(format!("waiting for the command: {e}")))?;
                Ok(exit_code(status))
            }
            // The coordinator has freed the lock, and the next holder may
            // be running already: no lease time is left to spend on a grace.
            Event::Lost(reason) if reason.is_free_at_coordinator() => {
                eprintln!("fence: lock {lock:?} lost ({reason}); killing the command (pid {pid})");
                self.kill().await;
                Ok(LOST)
            }
            Event::Lost(reason) => {
                eprintln!("fence: lock {lock:?} lost ({reason}); stopping the command (pid {pid})");
                self.stop(Signal::TERM, self.bound()).await;
                Ok(LOST)
            }
            Event::Expiring => {
                eprintln!(
                    "fence: lock {lock:?} may be lost: not renewed in time; stopping the command \
                     (pid {pid}) so that it is gone before the lease can run out"
                );
                self.stop(Signal::TERM, self.timing.kill_at(self.grant.deadline()))
                    .await;
                Ok(LOST)
            }
            Event::Asked(signal) => {
                let status = self.stop(signal, self.bound()).await;
                Ok(status.map_or(128u8.wrapping_add(signal.as_raw() as u8), exit_code))
            }
            // Tick and Suspend never end `watch`; grouped here to be total.
            Event::WatchdogGone | Event::Tick | Event::Suspend => {
                self.stop(Signal::TERM, self.bound()).await;
                Err(Failure::runtime(
                    "the watchdog process exited unexpectedly; stopped the command",
                ))
            }
        }
    }

    /// The grace from now, but never past the kill time of the current
    /// deadline.
    fn bound(&self) -> Instant {
        let kill_at = self.timing.kill_at(self.grant.deadline());
        (Instant::now() + self.timing.grace).min(kill_at)
    }

    /// Sends `first` to the command's group, then SIGKILL at `kill_by`
    /// unless the command was reaped and its group is empty by then.
    /// Returns the command's status when it could be reaped.
    async fn stop(&mut self, first: Signal, kill_by: Instant) -> Option<ExitStatus> {
        let started = Instant::now();
        group::signal(self.group, first);
        let (status, gone) = self.settle(kill_by).await;
        if gone {
            return status;
        }
        eprintln!(
            "fence: the command's process group did not stop within {:?}; sending SIGKILL",
            kill_by.saturating_duration_since(started)
        );
        self.kill().await
    }

    /// SIGKILL to the command's group, then waits for it to be gone.
    async fn kill(&mut self) -> Option<ExitStatus> {
        group::signal(self.group, Signal::KILL);
        let _ = self.child.start_kill();
        let (status, gone) = self.settle(Instant::now() + REAP_LIMIT).await;
        if !gone {
            tracing::warn!(
                group = pid_of(self.group),
                "processes of the command's group survive SIGKILL (uninterruptible sleep?)"
            );
        }
        status
    }

    /// Waits until `until` for the command to be reaped and its group to be
    /// empty. Returns the status (if reaped) and whether both happened.
    async fn settle(&mut self, until: Instant) -> (Option<ExitStatus>, bool) {
        let status = match tokio::time::timeout_at(until, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => return (None, false),
        };
        (status, group::wait_gone(self.group, until).await)
    }
}

fn pid_of(group: Pid) -> i32 {
    group.as_raw_nonzero().get()
}

/// The status a shell would report for the command.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => 1,
    }
}
