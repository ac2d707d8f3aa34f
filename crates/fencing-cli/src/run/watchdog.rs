//! The watchdog: a second `fence` process that kills the command's process
//! group when the supervising `fence` can no longer do it.
//!
//! A supervisor that is SIGKILLed cannot stop anything, and one that is
//! frozen (SIGSTOP, a stopped VM, Ctrl-Z held past the lease) cannot either,
//! while its command runs on and the lease runs out. The parent-death signal
//! reaches only the direct child, never its children, and not at all while
//! the parent is merely frozen. So `fence run` starts this watchdog, in a
//! process group of its own (no terminal signal or stop of `fence`'s group
//! or the command's group reaches it), and tells it through a pipe:
//!
//! - `group PGID GRACE_NS`: the command's process group and its grace,
//!   written by the command's own process between fork and exec (see
//!   [`Announcement`]), so no window is left in which `fence` could die
//!   with a running command the watchdog does not know;
//! - `kill MONO_NS`: SIGKILL the group at this CLOCK_MONOTONIC time (just
//!   after `fence`'s own kill time for the current deadline, see
//!   `Timing::watchdog_at`), unless told a later one first; `fence` passes
//!   each renewal on;
//! - `done`: `fence` has stopped the group itself; exit.
//!
//! When the pipe closes without `done`, `fence` died: the watchdog sends
//! the group SIGTERM at once and SIGKILL after the grace or at the kill
//! time, whichever comes first. Both processes read the same system-wide
//! monotonic clock, so a time written before a freeze stays right after it.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::process::Stdio;
use std::time::Duration;

use rustix::process::{Pid, Signal};
use rustix::time::{clock_gettime, ClockId};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use super::group;
use crate::failure::{Failure, Result};

/// Longest wait for the watchdog to read an order or to exit after `done`.
const PATIENCE: Duration = Duration::from_secs(2);

/// `fence`'s end: the watchdog process and the pipe to it.
pub struct Watchdog {
    process: Child,
    orders: pipe::Sender,
    armed: Option<Instant>,
}

impl Watchdog {
    /// Starts `fence run --watchdog` from our own executable (which works
    /// even if the file was replaced since we started).
    pub fn start() -> Result<Watchdog> {
        let failed =
            |e: std::io::Error| Failure::runtime(format!("cannot start the watchdog: {e}"));
        // Created close-on-exec: only this process holds the write end, so
        // the watchdog sees end-of-file exactly when `fence` is gone.
        let (reader, writer) = std::io::pipe().map_err(failed)?;
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("fence")
            .args(["run", "--watchdog"])
            // The watchdog needs no source (and `--watchdog` conflicts with one).
            .env_remove(crate::source_arg::SOURCE_ENV)
            .stdin(Stdio::from(reader))
            .stdout(Stdio::null())
            .process_group(0);
        // Not killed on drop: if `fence` unwinds without `finish`, the pipe
        // closes and the watchdog stops the command's group, then exits.
        let process = cmd.spawn().map_err(failed)?;
        let orders = pipe::Sender::from_owned_fd(OwnedFd::from(writer)).map_err(failed)?;
        Ok(Watchdog {
            process,
            orders,
            armed: None,
        })
    }

    /// The `group` order, for the command's process to send.
    pub fn announcement(&self, grace: Duration) -> Announcement {
        Announcement {
            orders: self.orders.as_raw_fd(),
            grace_ns: u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Sets the kill time, if it changed.
    pub async fn arm(&mut self, kill_at: Instant) -> std::io::Result<()> {
        if self.armed == Some(kill_at) {
            return Ok(());
        }
        self.send(&format!("kill {}\n", to_monotonic_ns(kill_at)))
            .await?;
        self.armed = Some(kill_at);
        Ok(())
    }

    /// Resolves when the watchdog process has exited.
    pub async fn exited(&mut self) {
        let _ = self.process.wait().await;
    }

    /// Stands the watchdog down once `fence` has stopped the group itself,
    /// and reaps it.
    pub async fn finish(mut self) {
        // It may have exited already (after killing the group itself).
        let _ = self.send("done\n").await;
        if tokio::time::timeout(PATIENCE, self.process.wait())
            .await
            .is_err()
        {
            tracing::warn!("the watchdog did not exit; killing it");
            let _ = self.process.kill().await;
        }
    }

    async fn send(&mut self, order: &str) -> std::io::Result<()> {
        // The pipe never fills (a few orders per renewal), so this is prompt
        // unless the watchdog is stuck; then it counts as gone.
        match tokio::time::timeout(PATIENCE, self.orders.write_all(order.as_bytes())).await {
            Ok(written) => written,
            Err(_) => Err(std::io::Error::other(
                "the watchdog does not read its orders",
            )),
        }
    }
}

/// The `group` order as the command's own process sends it, after fork and
/// before exec: the group is the process's pid (it made itself leader).
#[derive(Clone, Copy, Debug)]
pub struct Announcement {
    orders: RawFd,
    grace_ns: u64,
}

impl Announcement {
    /// Async-signal-safe: formats into a stack buffer and makes one write
    /// (shorter than PIPE_BUF, so it never interleaves with `fence`'s own
    /// orders). Should the watchdog already be gone, the command does not
    /// get far: SIGPIPE ends it here, or supervision sees the watchdog's
    /// exit and stops it.
    pub fn send(&self) {
        let mut order = Order::default();
        order.push(b"group ");
        order.number(rustix::process::getpid().as_raw_nonzero().get() as u64);
        order.push(b" ");
        order.number(self.grace_ns);
        order.push(b"\n");
        // SAFETY: the pipe's write end stays open in this process until
        // exec (it is close-on-exec), and we only borrow it for the write.
        let orders = unsafe { BorrowedFd::borrow_raw(self.orders) };
        let _ = rustix::io::write(orders, order.bytes());
    }
}

/// A fixed buffer for one order: no allocation between fork and exec.
struct Order {
    buf: [u8; 64],
    len: usize,
}

impl Default for Order {
    fn default() -> Self {
        Order {
            buf: [0; 64],
            len: 0,
        }
    }
}

impl Order {
    fn push(&mut self, bytes: &[u8]) {
        let end = (self.len + bytes.len()).min(self.buf.len());
        self.buf[self.len..end].copy_from_slice(&bytes[..end - self.len]);
        self.len = end;
    }

    fn number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The watchdog process (`fence run --watchdog`, started by `fence run`).
pub async fn serve() -> Result<u8> {
    // Shutdown signals are meant for `fence` (a service manager may send
    // them to every process of a unit); the watchdog must outlive them.
    let _ignored = [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
        SignalKind::quit(),
    ]
    .map(signal);
    let stdin = std::io::stdin().as_fd().try_clone_to_owned();
    let orders = stdin
        .and_then(pipe::Receiver::from_owned_fd)
        .map_err(|e| Failure::usage(format!("--watchdog is for fence run's own use: {e}")))?;
    let mut lines = BufReader::new(orders).lines();
    let mut duty = Duty::default();
    loop {
        let kill_at = duty.group.and(duty.kill_at);
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => {
                    if duty.apply(&line) {
                        return Ok(0);
                    }
                }
                Ok(None) | Err(_) => {
                    duty.supervisor_gone().await;
                    return Ok(0);
                }
            },
            () = sleep_until(kill_at) => {
                duty.deadline_reached();
                return Ok(0);
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What the watchdog was told.
#[derive(Debug, Default, PartialEq)]
struct Duty {
    group: Option<Pid>,
    grace: Duration,
    kill_at: Option<Instant>,
}

impl Duty {
    /// Takes one order; true for `done`.
    fn apply(&mut self, line: &str) -> bool {
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        match (words.first().copied(), number(1), number(2)) {
            (Some("done"), ..) => return true,
            (Some("group"), Some(pgid), Some(grace)) => {
                self.group = i32::try_from(pgid).ok().and_then(Pid::from_raw);
                self.grace = Duration::from_nanos(grace);
            }
            (Some("kill"), Some(at), _) => self.kill_at = Some(from_monotonic_ns(at)),
            _ => tracing::warn!(order = line, "watchdog: unknown order"),
        }
        false
    }

    /// `fence` is frozen or too slow and the command must be dead now.
    fn deadline_reached(&self) {
        let Some(group) = self.group else { return };
        if group::signal(group, Signal::KILL) {
            eprintln!(
                "fence: watchdog: the lock's lease is about to run out and fence did not \
                 stop the command (it is stopped or frozen); killed its process group {}",
                group.as_raw_nonzero()
            );
        }
    }

    /// `fence` died: stop the group within the grace and before the kill
    /// time.
    async fn supervisor_gone(&self) {
        let Some(group) = self.group else { return };
        if !group::signal(group, Signal::TERM) {
            return;
        }
        eprintln!(
            "fence: watchdog: fence is gone; stopping the command's process group {}",
            group.as_raw_nonzero()
        );
        let mut until = Instant::now() + self.grace;
        if let Some(kill_at) = self.kill_at {
            until = until.min(kill_at);
        }
        if !group::wait_gone(group, until).await {
            group::signal(group, Signal::KILL);
        }
    }
}

fn monotonic_now() -> Duration {
    let ts = clock_gettime(ClockId::Monotonic);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A tokio instant as CLOCK_MONOTONIC nanoseconds, which another process
/// can read back.
fn to_monotonic_ns(at: Instant) -> u128 {
    let (now, mono) = (Instant::now(), monotonic_now());
    let t = if at >= now {
        mono + (at - now)
    } else {
        mono.saturating_sub(now - at)
    };
    t.as_nanos()
}

fn from_monotonic_ns(ns: u64) -> Instant {
    let (now, mono) = (Instant::now(), monotonic_now());
    let t = Duration::from_nanos(ns);
    if t >= mono {
        now + (t - mono)
    } else {
        now.checked_sub(mono - t).unwrap_or(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn orders_round_trip_through_the_monotonic_clock() {
        let mut duty = Duty::default();
        let kill_at = Instant::now() + Duration::from_secs(3);
        assert!(!duty.apply("group 4242 1500000000"));
        assert!(!duty.apply(&format!("kill {}", to_monotonic_ns(kill_at))));
        assert_eq!(duty.group, Pid::from_raw(4242));
        assert_eq!(duty.grace, Duration::from_millis(1500));
        let back = duty.kill_at.unwrap();
        let error = if back > kill_at {
            back - kill_at
        } else {
            kill_at - back
        };
        assert!(error < Duration::from_millis(5), "{error:?}");
        assert!(!duty.apply("nonsense 1"), "unknown orders are ignored");
        let mut order = Order::default();
        order.push(b"group ");
        order.number(0);
        order.push(b" ");
        order.number(u64::MAX);
        assert_eq!(order.bytes(), b"group 0 18446744073709551615");
        assert!(duty.apply("done"));
    }
}
