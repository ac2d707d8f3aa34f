//! A held Lease: the renew loop that keeps it, and its release.

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use fencing_core::backend::{GrantBackend, LeaseTracker, SentAt, FAR_FUTURE};
use fencing_core::{Error, FencingToken, LossReason, Result};
use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::Mutex as AsyncMutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::candidate::Candidate;
use crate::client::Leases;
use crate::config::lease_seconds;
use crate::error::Failure;
use crate::record::{released_lease, renewed_lease, GrantKey, LeaseView};
use fencing_core::LeaderTimings;

/// What the holder knows of its grant.
pub(crate) struct Held {
    /// The Lease as our last successful write left it; its resourceVersion
    /// is the precondition of our next write.
    pub(crate) lease: Lease,
    pub(crate) key: GrantKey,
    pub(crate) token: FencingToken,
}

/// The backend half of a [`Grant`](fencing_core::Grant): owns the renew
/// task and stops it when released or dropped.
pub(crate) struct KubeGrant {
    leases: Leases,
    /// Locked by the renew loop for the whole of each write, so a release
    /// never races a renewal that is in flight.
    state: Arc<AsyncMutex<Held>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
    /// How long a release keeps retrying a failed write: the lease
    /// duration, after which any candidate may take the Lease over anyway.
    release_for: std::time::Duration,
    /// Our LeaseCandidate in coordinated election, kept while we hold.
    candidate: Option<Candidate>,
    /// The source's tasks: a release runs there, so that a caller who stops
    /// waiting for it (a timeout during a partition) does not cut it short,
    /// and the source's `close()` waits for it.
    background: TaskTracker,
}

/// The least time a release keeps trying, whatever the lease duration: a
/// partition or an apiserver restart often outlasts a short lease, and a
/// record left naming us stays until a candidate takes the Lease over.
const RELEASE_AT_LEAST: std::time::Duration = std::time::Duration::from_secs(15);

impl KubeGrant {
    /// Starts renewing.
    ///
    /// The tracker's TTL is the renew deadline, not the lease duration:
    /// other candidates count the lease duration from when *they* saw our
    /// last write, which is after we sent it, so nobody can take the Lease
    /// before (send time of our last renewal + lease duration) on a clock
    /// running at our rate. We count ourselves lost at (send time + 90 % of
    /// the renew deadline), which leaves lease duration - renew deadline
    /// (5 s with the defaults) plus the margin for clock-rate differences,
    /// late timers and for the application to stop writing. It is the same
    /// role as client-go's renew deadline, after which a leader steps down.
    pub(crate) fn start(
        leases: Leases,
        held: Held,
        tracker: LeaseTracker,
        timings: LeaderTimings,
        candidate: Option<Candidate>,
        background: TaskTracker,
    ) -> Self {
        // A span of its own, not the acquire's that made the grant.
        let span = tracing::debug_span!(
            parent: None,
            "fencing.renew",
            backend = "kube",
            lease = %held.key.name,
            token = held.token.get(),
        );
        let state = Arc::new(AsyncMutex::new(held));
        let stop = CancellationToken::new();
        // A renewal that cannot finish within the renew deadline is of no use.
        let renewals = leases.with_limit(timings.renew_deadline.min(leases.limit()));
        let task = tokio::spawn(
            renew_loop(renewals, state.clone(), tracker, timings, stop.clone()).instrument(span),
        );
        KubeGrant {
            leases,
            state,
            stop,
            task,
            release_for: timings.lease_duration.max(RELEASE_AT_LEAST),
            candidate,
            background,
        }
    }
}

impl Drop for KubeGrant {
    fn drop(&mut self) {
        self.stop.cancel();
        self.task.abort();
    }
}

#[async_trait]
impl GrantBackend for KubeGrant {
    /// client-go's ReleaseOnCancel: write an empty holder with our last
    /// resourceVersion as the precondition. A Lease someone else has taken
    /// meanwhile (409 and no longer naming us) means the grant was already
    /// lost, which is not an error for a release.
    ///
    /// A Lease has no expiry at the server: a record a failed release left
    /// naming us stays, and `holder()` reports it, until a candidate takes
    /// it over. So a write that failed (a timeout, a partition, an
    /// apiserver restarting, even a 403 while a restarted apiserver's
    /// authorizer reloads its Roles) is retried for the lease duration or
    /// 15 s, whichever is longer, also when the grant was already lost and
    /// also when the caller stops waiting (the retries run in a task of
    /// the source, which `close()` waits for); the precondition keeps a
    /// late retry from clearing anyone else's record.
    async fn release(mut self: Box<Self>) -> Result<()> {
        self.stop.cancel();
        let (leases, state) = (self.leases.clone(), self.state.clone());
        // Moved, not cloned: `leave` withdraws a candidacy only when no
        // one else of this source holds it.
        let (candidate, release_for) = (self.candidate.take(), self.release_for);
        let released = self.background.spawn(async move {
            let mut held = state.lock().await;
            let mut backoff = Backoff::within(release_for);
            // Withdrawn first: the controller elects someone else when the
            // Lease goes free, not us again.
            if let Some(candidate) = &candidate {
                if let Err(e) = candidate.leave().await {
                    tracing::warn!(lease = %held.key.name, error = %e, "could not delete our LeaseCandidate");
                }
            }
            loop {
                let error = match clear(&leases, &mut held).await {
                    Ok(()) => return Ok(()),
                    Err(e @ Error::Config(_)) => return Err(e),
                    Err(e) => e,
                };
                if !backoff.pause("kube release", &held.key.name, &error).await {
                    return Err(error);
                }
            }
        });
        released.await.unwrap_or_else(|e| {
            Err(Error::backend(
                "kube release",
                format!("the release task ended: {e}"),
            ))
        })
    }
}

/// The pauses between attempts of a write that must land for the Lease not
/// to go on naming a holder that is gone: from 100 ms, doubling up to 1 s,
/// for as long as the lease duration (after it, any candidate may take the
/// Lease over anyway).
pub(crate) struct Backoff {
    give_up: Instant,
    pause: std::time::Duration,
}

impl Backoff {
    pub(crate) fn within(limit: std::time::Duration) -> Self {
        let now = Instant::now();
        Backoff {
            give_up: now.checked_add(limit).unwrap_or(now + FAR_FUTURE),
            pause: std::time::Duration::from_millis(100),
        }
    }

    /// Logs the failed attempt and waits before the next; false (without
    /// waiting) when the next would start too late.
    pub(crate) async fn pause(&mut self, what: &str, lease: &str, error: &Error) -> bool {
        if !self.next_in_time() {
            return false;
        }
        tracing::warn!(lease, error = %error, retry_in = ?self.pause, "{what} failed; retrying");
        self.wait().await
    }

    fn next_in_time(&self) -> bool {
        Instant::now() + self.pause < self.give_up
    }

    /// Waits before the next look; false (without waiting) when the next
    /// would start too late.
    pub(crate) async fn wait(&mut self) -> bool {
        if !self.next_in_time() {
            return false;
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(std::time::Duration::from_secs(1));
        true
    }
}

/// One attempt to write the released record: done when written, when the
/// Lease is gone, or when it no longer names this grant.
async fn clear(leases: &Leases, held: &mut Held) -> Result<()> {
    let name = held.key.name.clone();
    for _ in 0..3 {
        let next = released_lease(held.lease.clone(), SystemTime::now());
        match leases.replace(&next).await {
            Ok(_) => {
                tracing::debug!(lease = %name, token = %held.token, "kube grant released");
                return Ok(());
            }
            Err(Failure::NotFound) => return Ok(()),
            Err(Failure::Conflict) => match leases.get(&name).await? {
                Some(lease) if LeaseView::of(&lease).names(&held.key) => held.lease = lease,
                _ => return Ok(()),
            },
            Err(f) => return Err(f.into_error(leases.call("release", &name))),
        }
    }
    Err(Error::backend(
        leases.call("release", &name).to_string(),
        "the Lease kept changing under the release",
    ))
}

/// How one renewal ended, when it did not succeed.
enum Renewal {
    /// The Lease no longer names this grant: why, and what was seen.
    Lost(LossReason, String),
    /// Not confirmed; tried again next period until the deadline.
    Failed(Error),
}

/// Renews every retry period until stopped, lost, or past the deadline.
async fn renew_loop(
    leases: Leases,
    state: Arc<AsyncMutex<Held>>,
    tracker: LeaseTracker,
    timings: LeaderTimings,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tracker.lost() => return,
            _ = tokio::time::sleep(timings.retry_period) => {}
        }
        let mut held = state.lock().await;
        if stop.is_cancelled() {
            return;
        }
        let sent = SentAt::now();
        match renew_once(&leases, &mut held, lease_seconds(&timings)).await {
            Ok(()) => {
                if !tracker.renewed(sent, timings.renew_deadline) {
                    return;
                }
            }
            Err(Renewal::Lost(reason, detail)) => {
                tracing::info!(lease = %held.key.name, token = %held.token, %reason, detail, "kube grant lost");
                tracker.mark_lost(reason, &detail);
                return;
            }
            Err(Renewal::Failed(e)) => {
                tracing::warn!(lease = %held.key.name, error = %e, "kube renewal failed; retrying");
            }
        }
    }
}

/// A renewed Lease whose `preferredHolder` names another identity asks us
/// to step down (the apiserver accepts the field only beside a `strategy`,
/// so it appears while we hold the Lease, never before the grant): the grant is reported lost ([`LossReason::Yielded`]) while
/// its lease still runs, so the work stops and the holder releases, as a
/// client-go leader does when the coordinated election controller moves
/// leadership.
fn asked_to_yield(held: &Held) -> std::result::Result<(), Renewal> {
    match LeaseView::of(&held.lease).asks_to_yield(&held.key.holder) {
        Some(next) => Err(Renewal::Lost(
            LossReason::Yielded,
            format!("the Lease's preferredHolder names {next:?}"),
        )),
        None => Ok(()),
    }
}

/// One renewal: replace with our last version. A 409 is re-read: if the
/// Lease still names this grant (same holder, transitions and UID), the
/// write that moved it was one of ours whose reply was lost, or a change by
/// someone who is not a candidate (an annotation, the election
/// controller's fields); candidates always write their own identity. Then
/// we go on from what we read, with our own lease duration written again.
async fn renew_once(
    leases: &Leases,
    held: &mut Held,
    lease_seconds: i32,
) -> std::result::Result<(), Renewal> {
    let name = held.key.name.clone();
    for _ in 0..2 {
        let now = SystemTime::now();
        let next = renewed_lease(
            held.lease.clone(),
            held.token,
            &held.key,
            lease_seconds,
            now,
        );
        match leases.replace(&next).await {
            Ok(lease) => {
                held.lease = lease;
                return asked_to_yield(held);
            }
            Err(Failure::NotFound) => {
                return Err(Renewal::Lost(
                    LossReason::DeletedAtServer,
                    "the Lease was deleted".into(),
                ))
            }
            Err(Failure::Conflict) => {
                let current = leases.get(&name).await.map_err(Renewal::Failed)?;
                let Some(lease) = current else {
                    return Err(Renewal::Lost(
                        LossReason::DeletedAtServer,
                        "the Lease was deleted".into(),
                    ));
                };
                let view = LeaseView::of(&lease);
                if !view.names(&held.key) {
                    return Err(Renewal::Lost(
                        LossReason::Superseded,
                        format!(
                            "the Lease now names holder {:?} with {} transitions",
                            view.holder, view.transitions
                        ),
                    ));
                }
                held.lease = lease;
            }
            Err(f) => return Err(Renewal::Failed(f.into_error(leases.call("renew", &name)))),
        }
    }
    Err(Renewal::Failed(Error::backend(
        leases.call("renew", &name).to_string(),
        "the Lease kept changing (409) while still naming us",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A release limit past what the clock can count gives up never, not
    /// with a panic (issue 54: `Instant + Duration::MAX` overflowed).
    #[tokio::test(start_paused = true)]
    async fn a_huge_limit_does_not_overflow_the_clock() {
        let mut backoff = Backoff::within(std::time::Duration::MAX);
        assert!(backoff.wait().await);
        let mut none = Backoff::within(std::time::Duration::ZERO);
        assert!(!none.wait().await);
    }
}
