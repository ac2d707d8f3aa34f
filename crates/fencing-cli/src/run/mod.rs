//! `fence run`: hold a lock for exactly as long as a command runs, and stop
//! the command the moment the lock may be lost.

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;

use fencing::{AcquireOptions, Grant};
use rustix::process::{kill_process_group, Pid, Signal};
use tokio::process::{Child, Command};

use crate::failure::{Failure, Result};
use crate::source_arg;

/// Exit status when the lock was lost while the command ran (the command was
/// stopped). 75 is EX_TEMPFAIL: the caller may retry.
pub const LOST: u8 = 75;
/// Exit status when the command could not be started (as a shell reports it).
pub const NOT_FOUND: u8 = 127;
/// Exit status when the command exists but could not be executed.
pub const NOT_EXECUTABLE: u8 = 126;

pub const EXAMPLES: &str = "\
Examples:
  fence run --source local:///var/lib/fence --lock nightly-report -- ./report.sh
  fence run --source etcd://127.0.0.1:2379/locks --lock ledger --ttl 10 -- \\
      sh -c 'psql -c \"UPDATE ledger SET v = 1, fence = $FENCING_TOKEN WHERE fence <= $FENCING_TOKEN\"'

The command gets FENCING_TOKEN (the grant's token), FENCING_LOCK (the lock
name) and FENCING_SOURCE (the identity of the cluster that minted the token)
in its environment. Pass the token with every write so the storage can refuse
it once a newer holder exists.

Exit status: the command's own status (128+N when it died of signal N);
75 when the lock was lost while the command ran (it got SIGTERM, then SIGKILL
after --grace); 126/127 when the command could not be executed/found;
2 on a usage or configuration error; 1 when the lock could not be acquired.";

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Where the lock lives: local://DIR, etcd://..., etcds://..., zk://..., kube://...
    #[arg(long, value_name = "URL")]
    source: String,

    /// The lock to hold while the command runs
    #[arg(long, value_name = "NAME")]
    lock: String,

    /// Lease length in seconds [default: the source's]
    #[arg(long, value_name = "SECS", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    ttl: Option<Duration>,

    /// After the lock is lost, how long the command has between SIGTERM and SIGKILL
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    grace: Duration,

    /// Give up (exit 1) if the lock is not granted within this many seconds [default: wait forever]
    #[arg(long, value_name = "SECS", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    wait: Option<Duration>,

    /// Holder identity recorded with the lock [default: host name, pid and a random suffix]
    #[arg(long, value_name = "ID")]
    identity: Option<String>,

    /// The command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub async fn run(args: RunArgs) -> Result<u8> {
    let source = source_arg::open(&args.source).await?;
    let lock = source_arg::resource("--lock", &args.lock)?;
    let mut options = AcquireOptions::new();
    options.ttl = args.ttl;
    options.timeout = args.wait;
    options.holder = args.identity.clone();

    let grant = tokio::select! {
        g = source.acquire(&lock, &options) => g.map_err(|e| source_arg::classify(e, &format!("lock {:?}", args.lock)))?,
        f = crate::interrupted() => return Err(f),
    };
    tracing::info!(lock = %args.lock, token = %grant.token(), "lock acquired");

    let mut child = match spawn(&args.command, &grant) {
        Ok(child) => child,
        Err((code, message)) => {
            release(grant).await;
            return Err(Failure { code, message });
        }
    };
    supervise(&mut child, grant, args.grace).await
}

/// Starts the command in its own process group, so that stopping it also
/// stops what it started (a shell's children).
fn spawn(command: &[OsString], grant: &Grant) -> std::result::Result<Child, (u8, String)> {
    let (program, rest) = command.split_first().expect("clap requires a command");
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env("FENCING_TOKEN", grant.token().to_string())
        .env("FENCING_LOCK", grant.resource().as_str())
        .env("FENCING_SOURCE", grant.source().as_str())
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no
    // memory of the parent. It makes the command get SIGTERM if `fence` is
    // killed outright, instead of running on without anyone watching the
    // lease. The death signal follows the spawning thread, which is the
    // runtime's main thread here (this runs inside block_on, not a task).
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(Signal::TERM))
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn().map_err(|e| {
        let name = program.to_string_lossy();
        match e.kind() {
            std::io::ErrorKind::NotFound => {
                (NOT_FOUND, format!("cannot run {name:?}: command not found"))
            }
            _ => (NOT_EXECUTABLE, format!("cannot run {name:?}: {e}")),
        }
    })
}

/// Waits for the first of: the command exits, the lock may be lost, or
/// `fence` itself is asked to stop.
async fn supervise(child: &mut Child, grant: Grant, grace: Duration) -> Result<u8> {
    let pid = child.id();
    let outcome = tokio::select! {
        // Loss first: after a pause (SIGSTOP) both may be ready, and then the
        // command must not be trusted to have finished under the lock.
        biased;
        reason = grant.lost() => Stop::Lost(reason),
        status = child.wait() => Stop::Exited(status),
        signal = crate::stop_signal() => Stop::Asked(signal),
    };
    match outcome {
        Stop::Exited(status) => {
            release(grant).await;
            let status =
                status.map_err(|e| Failure::runtime(format!("waiting for the command: {e}")))?;
            Ok(exit_code(status))
        }
        Stop::Lost(reason) => {
            eprintln!(
                "fence: lock {:?} lost ({reason}); stopping the command (pid {})",
                grant.resource().as_str(),
                pid.unwrap_or(0)
            );
            stop(child, Signal::TERM, grace).await;
            // Deletes our record if the coordinator still has it, so the
            // next holder need not wait for it to expire.
            release(grant).await;
            Ok(LOST)
        }
        Stop::Asked(signal) => {
            let status = stop(child, signal, grace).await;
            release(grant).await;
            Ok(status.map_or(128u8.wrapping_add(signal.as_raw() as u8), exit_code))
        }
    }
}

enum Stop {
    Exited(std::io::Result<ExitStatus>),
    Lost(String),
    Asked(Signal),
}

/// Sends `first` to the command's process group, then SIGKILL after `grace`.
/// Returns the command's status when it could be reaped.
async fn stop(child: &mut Child, first: Signal, grace: Duration) -> Option<ExitStatus> {
    let group = child.id().and_then(|id| Pid::from_raw(id as i32));
    if let Some(group) = group {
        let _ = kill_process_group(group, first);
    }
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        return status.ok();
    }
    eprintln!("fence: the command did not stop within {grace:?}; sending SIGKILL");
    if let Some(group) = group {
        let _ = kill_process_group(group, Signal::KILL);
    }
    let _ = child.start_kill();
    tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .ok()
        .and_then(Result::ok)
}

/// Releases quietly: the command's status is what the caller wants to see,
/// and an unreleased lease runs out by itself.
async fn release(grant: Grant) {
    match tokio::time::timeout(Duration::from_secs(10), grant.release()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "releasing the lock failed; it expires after its TTL")
        }
        Err(_) => tracing::warn!("releasing the lock timed out; it expires after its TTL"),
    }
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
