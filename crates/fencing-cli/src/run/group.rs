//! The command's process group: starting the command as its leader,
//! signalling every process in it, and knowing when all of them are gone.
//!
//! Descendants that leave the group on purpose (setsid, setpgid: daemons)
//! are out of reach; everything else a shell script starts stays in it.

use std::ffi::OsString;
use std::time::Duration;

use fencing::Grant;
use rustix::io::Errno;
use rustix::process::{kill_process_group, test_kill_process_group, Pid, Signal};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::watchdog::Announcement;
use super::{NOT_EXECUTABLE, NOT_FOUND};
use crate::failure::Failure;

/// How often a stop looks whether the group is empty yet.
const POLL: Duration = Duration::from_millis(20);

/// Starts the command in a new process group whose id is its pid, so that
/// stopping the group also stops what it started (a shell's children).
/// `announce` runs in the command's process before it executes anything.
pub fn spawn(
    command: &[OsString],
    grant: &Grant,
    announce: Announcement,
) -> Result<(Child, Pid), Failure> {
    let (program, rest) = command.split_first().expect("clap requires a command");
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env("FENCING_TOKEN", grant.token().to_string())
        .env("FENCING_LOCK", grant.resource().as_str())
        .env("FENCING_SOURCE", grant.source().as_str())
        .kill_on_drop(true);
    // SAFETY: setpgid, prctl(PR_SET_PDEATHSIG) and the announcement's
    // write are single system calls, async-signal-safe, that allocate
    // nothing and touch no memory of the parent. In this order, because the
    // watchdog must know the group before the command can start anything
    // in it, however soon `fence` dies. The death signal is for a `fence`
    // killed before the watchdog has read the announcement; it follows the
    // spawning thread, the runtime's main thread here (this runs inside
    // block_on, not in a task). std's spawn returns only after exec, so the
    // group exists by then.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setpgid(None, None)?;
            rustix::process::set_parent_process_death_signal(Some(Signal::TERM))?;
            announce.send();
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| {
        let name = program.to_string_lossy();
        let (code, message) = match e.kind() {
            std::io::ErrorKind::NotFound => {
                (NOT_FOUND, format!("cannot run {name:?}: command not found"))
            }
            _ => (NOT_EXECUTABLE, format!("cannot run {name:?}: {e}")),
        };
        Failure { code, message }
    })?;
    let group = child
        .id()
        .and_then(|id| Pid::from_raw(id as i32))
        .ok_or_else(|| Failure::runtime("the command exited before it had a pid"))?;
    Ok((child, group))
}

/// Sends `signal` to every process of the group. False when none is left.
pub fn signal(group: Pid, signal: Signal) -> bool {
    match kill_process_group(group, signal) {
        Ok(()) => true,
        Err(Errno::SRCH) => false,
        Err(e) => {
            tracing::warn!(group = group.as_raw_nonzero().get(), error = %e, "cannot signal the command's process group");
            true
        }
    }
}

/// Waits until no process of the group can run any more, or `until`.
/// Returns whether the group is gone.
pub async fn wait_gone(group: Pid, until: Instant) -> bool {
    loop {
        if gone(group).await {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep_until((Instant::now() + POLL).min(until)).await;
    }
}

/// True when no process of the group can run: none is left, or only
/// zombies that their parents (or an init that does not reap) keep.
pub async fn gone(group: Pid) -> bool {
    if let Err(Errno::SRCH) = test_kill_process_group(group) {
        return true;
    }
    let pgid = group.as_raw_nonzero().get();
    tokio::task::spawn_blocking(move || !has_live_member(pgid))
        .await
        .unwrap_or(false)
}

/// Scans /proc for a process of group `pgid` that is not a zombie.
/// Blocking: run it on the blocking pool.
fn has_live_member(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // Without /proc we cannot tell; the caller's deadline bounds the wait.
        return true;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .any(|stat| live_in_group(&stat, pgid))
}

/// Parses /proc/PID/stat: "pid (comm) state ppid pgrp ...". The command
/// name may contain anything, so the fields start after the last ')'.
fn live_in_group(stat: &str, pgid: i32) -> bool {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    let state = fields.next();
    let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
    pgrp == Some(pgid) && !matches!(state, Some("Z") | Some("X") | None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_after_the_command_name() {
        let line = "42 (a) b) c) S 1 77 77 0 -1";
        assert!(live_in_group(line, 77));
        assert!(!live_in_group(line, 42));
        assert!(
            !live_in_group("43 (sh) Z 1 77 77 0", 77),
            "a zombie cannot run"
        );
        assert!(!live_in_group("garbage", 77));
    }
}
