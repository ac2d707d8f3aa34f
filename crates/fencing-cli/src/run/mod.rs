//! `fence run`: hold a lock for exactly as long as a command runs, and make
//! sure the command is dead before anyone else can be granted the lock.
//!
//! - [`rule`]: when stopping starts (SIGTERM `--grace` before the kill
//!   time, SIGKILL W/20 before the local deadline) and which graces fit;
//! - [`group`]: the command runs as the leader of its own process group,
//!   and every stop targets the whole group, also after a normal exit;
//! - [`watchdog`]: a second process kills the group if `fence` is killed or
//!   frozen;
//! - [`signals`]: SIGINT/SIGTERM/SIGTSTP caught from the start to the end;
//! - [`supervise`]: the loop that ties them together.

mod group;
mod rule;
mod signals;
mod supervise;
mod watchdog;

use std::ffi::OsString;
use std::time::Duration;

use fencing::{AcquireOptions, Grant};

use crate::failure::{Failure, Result};
use crate::source_arg::{self, SOURCE_ENV};
use rule::Timing;
pub(crate) use signals::interrupted;
use signals::{Received, Signals};
use supervise::Supervised;
use watchdog::Watchdog;

/// Exit status when the lock was lost, or about to be, while the command
/// ran (the command was stopped). 75 is EX_TEMPFAIL: the caller may retry.
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

The command runs in its own process group, and is dead before anyone else
can be granted the lock. W is how long the lease holds after a renewal was
sent (0.9 x TTL; on Kubernetes 0.9 x the renew deadline). When renewals
fail, the group gets SIGTERM --grace before its kill time and SIGKILL at
W - W/20 after the last renewal; --grace may be at most 0.45 x W (default
W/10, at most 10 s), so a 15 s TTL allows up to 6.075 s. When the
coordinator itself reports the loss (the lock deleted, the session expired,
another holder), the group gets SIGKILL at once, with no grace: the next
holder may be running already. A watchdog process
kills the group if fence is killed or frozen. When the command exits, what
it left running in its group is stopped before the lock is released. Ctrl-Z
stops the command with fence; it resumes only if the lease still holds.

Exit status: the command's own status (128+N when it died of signal N);
75 when the lock was lost, or not renewed in time, while the command ran;
126/127 when the command could not be executed/found; 2 on a usage or
configuration error (a --grace that does not fit in the lease); 1 when the
lock could not be acquired; 128+N when fence got SIGINT/SIGTERM before the
command started.";

#[derive(clap::Args, Debug)]
// The three are required except for the hidden --watchdog, which clap would
// otherwise show as optional.
#[command(override_usage = "fence run [OPTIONS] --source <URL> --lock <NAME> -- <CMD>...")]
pub struct RunArgs {
    /// Where the lock lives: local://DIR, etcd://..., etcds://..., zk://..., kube://..., postgres://...
    #[arg(long, value_name = "URL", required_unless_present = "watchdog", env = SOURCE_ENV, hide_env_values = true)]
    source: Option<String>,

    /// The lock to hold while the command runs
    #[arg(long, value_name = "NAME", required_unless_present = "watchdog")]
    lock: Option<String>,

    /// Lease length in seconds [default: the source's]
    #[arg(long, value_name = "SECS", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    ttl: Option<Duration>,

    /// How long the command has between SIGTERM and SIGKILL when it must stop; at most
    /// 0.45 x the lease window (0.9 x TTL) so that it is dead before the lease can run out
    /// [default: a tenth of the window, at most 10]
    #[arg(long, value_name = "SECS", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    grace: Option<Duration>,

    /// Give up (exit 1) if the lock is not granted within this many seconds [default: wait forever]
    #[arg(long, value_name = "SECS", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    wait: Option<Duration>,

    /// Holder identity recorded with the lock [default: host name, pid and a random suffix]
    #[arg(long, value_name = "ID")]
    identity: Option<String>,

    /// The command and its arguments, after `--`
    #[arg(last = true, required_unless_present = "watchdog", value_name = "CMD")]
    command: Vec<OsString>,

    /// Internal: be the watchdog of a `fence run` (orders on stdin)
    #[arg(long, hide = true, conflicts_with_all = ["source", "lock", "ttl", "grace", "wait", "identity", "command"])]
    watchdog: bool,
}

pub async fn run(args: RunArgs) -> Result<u8> {
    if args.watchdog {
        return watchdog::serve().await;
    }
    // Before anything else, so that no SIGTERM goes unseen (see signals).
    let mut signals = Signals::install()?;
    let grant = acquire(&args, &mut signals).await?;
    match start(&args, &grant, &mut signals).await {
        Ok((child, group, timing, watchdog)) => {
            let supervised = Supervised {
                child,
                group,
                grant,
                timing,
                watchdog,
            };
            supervise::supervise(supervised, &mut signals).await
        }
        Err(f) => {
            release(grant).await;
            Err(f)
        }
    }
}

/// Connects and waits for the lock, unless SIGINT/SIGTERM comes first.
async fn acquire(args: &RunArgs, signals: &mut Signals) -> Result<Grant> {
    let (Some(url), Some(name)) = (args.source.as_deref(), args.lock.as_deref()) else {
        return Err(Failure::usage("--source and --lock are required"));
    };
    // Everything that can be checked offline is refused before connecting.
    let lock = source_arg::resource("--lock", name)?;
    if let (Some(ttl), Some(grace)) = (args.ttl, args.grace) {
        // The window can only be shorter once connected.
        let lease = format!("a {ttl:?} lease");
        Timing::new(rule::window_for_ttl(ttl), Some(grace), &lease)?;
    }
    let source = signals.interruptible(source_arg::open(url)).await??;
    let mut options = AcquireOptions::new();
    options.ttl = args.ttl;
    options.wait = args.wait;
    options.holder = args.identity.clone();
    signals
        .interruptible(source.acquire(&lock, &options))
        .await?
        .map_err(|e| source_arg::classify(e, &format!("lock {name:?}")))
}

type Started = (
    tokio::process::Child,
    rustix::process::Pid,
    Timing,
    Watchdog,
);

/// Checks the schedule, starts the watchdog, then the command, unless a
/// stop signal arrived meanwhile.
async fn start(args: &RunArgs, grant: &Grant, signals: &mut Signals) -> Result<Started> {
    let timing = Timing::for_grant(grant, args.grace)?;
    tracing::info!(lock = %grant.resource().as_str(), token = %grant.token(), grace = ?timing.grace, "lock acquired");
    // Writing that line may have blocked (a full stderr pipe); a signal
    // that came meanwhile, or with the grant, is honoured here.
    while let Some(got) = signals.pending() {
        match got {
            Received::Stop(signal) => return Err(interrupted(signal)),
            Received::Suspend => signals::stop_self(),
        }
    }
    let watchdog = Watchdog::start()?;
    let announcement = watchdog.announcement(timing.grace);
    match group::spawn(&args.command, grant, announcement) {
        Ok((child, group)) => Ok((child, group, timing, watchdog)),
        Err(f) => {
            watchdog.finish().await;
            Err(f)
        }
    }
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
