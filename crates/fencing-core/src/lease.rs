//! Local loss detection: the deadline a grant keeps on the holder's clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::suspend;

/// The part of a lease the holder may not count on: clocks on two machines
/// run at slightly different rates, and the holder's timers fire late under
/// load. Ten percent of the TTL covers both with room to spare.
#[must_use]
pub fn drift_margin(ttl: Duration) -> Duration {
    ttl / 10
}

/// The holder's deadline for a lease renewed by a request sent at `sent_at`.
///
/// It is measured from when the request was *sent*, never from when the
/// reply arrived: the server may have started the TTL at any point in
/// between, and only the send time is a safe lower bound. A TTL too large
/// for the clock (`Duration::MAX`) gives a deadline [`FAR_FUTURE`] ahead
/// instead of overflowing.
#[must_use]
pub fn local_deadline(sent_at: Instant, ttl: Duration) -> Instant {
    later(sent_at, ttl.saturating_sub(drift_margin(ttl)))
}

/// The furthest ahead a deadline is kept: far beyond any lease, and well
/// within what every platform's monotonic clock can add.
pub const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `t + by`, at most [`FAR_FUTURE`] ahead.
fn later(t: Instant, by: Duration) -> Instant {
    t.checked_add(by.min(FAR_FUTURE))
        .unwrap_or_else(|| t + Duration::from_secs(365 * 24 * 3600))
}

/// When a request was sent, read on both clocks a lease is counted on:
/// tokio's (which stands still while the machine is suspended) and the
/// running total of suspended time. Taken just before the request goes
/// out, so that a suspend while it was in flight counts against the lease
/// it renews: the coordinator's clock ran on meanwhile.
///
/// ```
/// use fencing_core::backend::{LeaseTracker, SentAt};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let sent = SentAt::now();
/// // ... send the request that grants the lease, await its answer ...
/// let lease = LeaseTracker::new(sent, std::time::Duration::from_secs(10));
/// assert!(lease.is_live());
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SentAt {
    at: Instant,
    suspended: Duration,
}

impl SentAt {
    /// Now, on both clocks.
    #[must_use]
    pub fn now() -> Self {
        SentAt {
            at: Instant::now(),
            suspended: suspend::total(),
        }
    }

    /// The send time on tokio's clock.
    #[must_use]
    pub fn instant(self) -> Instant {
        self.at
    }

    /// The send time on tokio's clock, moved earlier by the time the
    /// machine was suspended between the send and `suspended_now`.
    fn counted(self, suspended_now: Duration) -> Instant {
        earlier(self.at, suspended_now.saturating_sub(self.suspended))
    }
}

/// Why a grant stopped being held, as [`Grant::lost`](crate::Grant::lost)
/// reports it.
///
/// ```
/// use fencing_core::LossReason;
///
/// fn should_retry(reason: LossReason) -> bool {
///     // Our own release ends the work; any other loss means acquire again.
///     !matches!(reason, LossReason::Released)
/// }
/// assert!(should_retry(LossReason::ExpiredLocally));
/// assert_eq!(LossReason::Superseded.to_string(), "superseded by another holder");
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// The local deadline passed without a confirmed renewal: the
    /// coordinator may still hold the lease, but the holder can no longer
    /// count on it.
    ExpiredLocally,
    /// A leader's renew deadline passed without a renewal: it steps down
    /// while its lease still runs, so it stops before anyone else can be
    /// elected (client-go's RenewDeadline).
    RenewDeadlinePassed,
    /// The coordinator ended the lease or session the grant rode on (an
    /// etcd lease expired, a ZooKeeper session expired or closed).
    SessionExpired,
    /// The lock's key, node or Lease was deleted at the server.
    DeletedAtServer,
    /// Another holder owns the lock now (a Kubernetes Lease or a local
    /// lease taken over).
    Superseded,
    /// The holder released the grant, dropped it, or closed its source.
    Released,
    /// The holder was asked to step down while its lease still runs (a
    /// Kubernetes Lease whose `preferredHolder` names someone else): finish
    /// the current unit of work, stop, and release.
    Yielded,
}

impl LossReason {
    /// A short snake-case name, for metric labels and logs
    /// (`"expired_locally"`, `"session_expired"`, ...).
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            LossReason::ExpiredLocally => "expired_locally",
            LossReason::RenewDeadlinePassed => "renew_deadline_passed",
            LossReason::SessionExpired => "session_expired",
            LossReason::DeletedAtServer => "deleted_at_server",
            LossReason::Superseded => "superseded",
            LossReason::Released => "released",
            LossReason::Yielded => "yielded",
        }
    }

    /// Whether the coordinator itself reported the end (session expired,
    /// key deleted, another holder): the lock is free there, and a waiter
    /// may be granted at once, so no lease time is left to finish work in.
    /// The other reasons are local judgements made while the lease may
    /// still hold at the coordinator.
    #[must_use]
    pub fn is_free_at_coordinator(self) -> bool {
        matches!(
            self,
            LossReason::SessionExpired | LossReason::DeletedAtServer | LossReason::Superseded
        )
    }
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::ExpiredLocally => "local deadline passed without a confirmed renewal",
            LossReason::RenewDeadlinePassed => "leader's renew deadline passed without a renewal",
            LossReason::SessionExpired => "session or lease expired at the coordinator",
            LossReason::DeletedAtServer => "deleted at the server",
            LossReason::Superseded => "superseded by another holder",
            LossReason::Released => "released",
            LossReason::Yielded => "asked to step down for another holder",
        })
    }
}

/// Shared between a backend's renewal task and the [`Grant`](crate::Grant)
/// it serves: the backend reports renewals and server-side loss, the grant
/// owner watches for loss.
///
/// Loss is sticky. Once the deadline has passed or [`mark_lost`](Self::mark_lost)
/// was called, a late renewal reply does not revive the grant.
#[derive(Clone, Debug)]
pub struct LeaseTracker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Shared by a [`LeaseGroup`]'s lease and every grant it tracks, so
    /// that one renewal of the session moves every grant's deadline at
    /// once (O(1), not O(grants)). The deadline only ever moves later, so
    /// [`LeaseTracker::lost`] re-reads it when its sleep ends rather than
    /// being woken by each renewal.
    clock: Arc<Mutex<Clock>>,
    lost: CancellationToken,
    /// The first reason given, and when it was given.
    reason: Mutex<Option<(LossReason, Instant)>>,
    /// The source of the grant it serves, for the loss metric's label.
    source: std::sync::OnceLock<String>,
}

/// A lease's local deadline and the send time of its latest confirmed
/// renewal (or of the grant), under one lock: a renewal checks the old
/// deadline and sets the new one atomically, so nobody can see a lease
/// expire and then live again.
///
/// Both are tokio instants, whose clock stands still while the machine is
/// suspended; the coordinator's does not. The time suspended since they
/// were set ([`suspend::total`] then and now) has passed for the lease
/// too, so both are read that much earlier.
#[derive(Debug)]
struct Clock {
    deadline: Instant,
    renewed_at: Instant,
    /// [`suspend::total`] when the two were set.
    suspended: Duration,
}

impl Clock {
    /// Set as of the send: a suspend while the request was in flight is
    /// counted as time slept since then.
    fn new(sent: SentAt, ttl: Duration) -> Self {
        Clock {
            deadline: local_deadline(sent.at, ttl),
            renewed_at: sent.at,
            suspended: sent.suspended,
        }
    }

    /// How long the machine was suspended since the instants were set.
    fn slept(&self) -> Duration {
        suspend::total().saturating_sub(self.suspended)
    }

    fn deadline(&self) -> Instant {
        earlier(self.deadline, self.slept())
    }

    fn renewed_at(&self) -> Instant {
        earlier(self.renewed_at, self.slept())
    }

    /// Moves the instants earlier by the time slept since they were set.
    fn settle(&mut self) {
        let slept = self.slept();
        self.deadline = earlier(self.deadline, slept);
        self.renewed_at = earlier(self.renewed_at, slept);
        self.suspended += slept;
    }
}

/// `t - by`, or now when that is before the clock's origin (which only a
/// suspend longer than the uptime before it could ask for).
fn earlier(t: Instant, by: Duration) -> Instant {
    t.checked_sub(by).unwrap_or_else(Instant::now)
}

/// How often a waiter on [`LeaseTracker::lost`] looks at the boot-time
/// clock: after a resume, a lease that ran out during the suspend is
/// reported lost within this (tokio's timers only count monotonic time, so
/// a sleep until the deadline would end that much later).
const SUSPEND_CHECK: Duration = Duration::from_secs(1);

impl LeaseTracker {
    /// A tracker for a lease granted by a request sent at `sent`.
    #[must_use]
    pub fn new(sent: SentAt, ttl: Duration) -> Self {
        Self::on_clock(Arc::new(Mutex::new(Clock::new(sent, ttl))))
    }

    fn on_clock(clock: Arc<Mutex<Clock>>) -> Self {
        LeaseTracker {
            inner: Arc::new(Inner {
                clock,
                lost: CancellationToken::new(),
                reason: Mutex::new(None),
                source: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Records a successful renewal whose request was sent at `sent`.
    /// Returns false (and marks the grant lost) when the old deadline had
    /// already passed: the holder may have acted as a non-holder meanwhile.
    ///
    /// A tracker from [`LeaseGroup::track`] shares the group's deadline:
    /// renew the group, not its grants.
    ///
    /// A suspend between the send and now counts against the renewal (the
    /// server may have renewed it just before the machine slept), so it
    /// counts from that much earlier.
    pub fn renewed(&self, sent: SentAt, ttl: Duration) -> bool {
        let live = {
            let mut clock = lock(&self.inner.clock);
            clock.settle();
            let sent_at = sent.counted(clock.suspended);
            let live = !self.inner.lost.is_cancelled() && Instant::now() < clock.deadline;
            if live {
                clock.renewed_at = clock.renewed_at.max(sent_at);
                clock.deadline = clock.deadline.max(local_deadline(sent_at, ttl));
            }
            live
        };
        if !live {
            self.mark_lost(
                LossReason::ExpiredLocally,
                "local deadline passed before the renewal was confirmed",
            );
        }
        live
    }

    /// Marks the grant lost for good. The first reason given is kept;
    /// `detail` (what the backend saw) goes to the log.
    pub fn mark_lost(&self, reason: LossReason, detail: &str) {
        let mut slot = lock(&self.inner.reason);
        if slot.is_none() {
            *slot = Some((reason, Instant::now()));
            tracing::debug!(%reason, detail, "grant marked lost");
            let source = self.inner.source.get().map_or("", String::as_str);
            crate::metrics::grant_lost(reason, source);
        }
        drop(slot);
        self.inner.lost.cancel();
    }

    /// When the request of the latest confirmed renewal (or of the grant
    /// itself) was sent: the lease is known to have been valid since then.
    #[must_use]
    pub fn last_renewal(&self) -> Instant {
        lock(&self.inner.clock).renewed_at()
    }

    /// Names the source of the grant this tracker serves (the label of the
    /// loss metric); the first name set stays.
    pub(crate) fn set_source(&self, source: &crate::SourceId) {
        let _ = self.inner.source.set(source.as_str().to_owned());
    }

    /// The current local deadline (earlier by any time the machine was
    /// suspended since the last renewal).
    #[must_use]
    pub fn deadline(&self) -> Instant {
        lock(&self.inner.clock).deadline()
    }

    /// True until loss was reported or the local deadline passed.
    #[must_use]
    pub fn is_live(&self) -> bool {
        !self.inner.lost.is_cancelled() && Instant::now() < self.deadline()
    }

    /// Why the grant is lost, once it is.
    #[must_use]
    pub fn loss_reason(&self) -> Option<LossReason> {
        if let Some((r, _)) = *lock(&self.inner.reason) {
            return Some(r);
        }
        (!self.is_live()).then_some(LossReason::ExpiredLocally)
    }

    /// When the grant was lost on the local clock, once it is: the local
    /// deadline, or the moment the loss was reported if that came first.
    #[must_use]
    pub fn lost_at(&self) -> Option<Instant> {
        let deadline = self.deadline();
        match *lock(&self.inner.reason) {
            Some((_, marked)) => Some(marked.min(deadline)),
            None => (Instant::now() >= deadline).then_some(deadline),
        }
    }

    /// Resolves when the grant is lost: reported by the backend, or the local
    /// deadline passed without a renewal. Returns the reason.
    pub async fn lost(&self) -> LossReason {
        loop {
            // A renewal meanwhile moved the deadline later: sleep again.
            let (deadline, now) = (self.deadline(), Instant::now());
            if now >= deadline {
                self.mark_lost(LossReason::ExpiredLocally, "local deadline passed");
                break;
            }
            tokio::select! {
                _ = self.inner.lost.cancelled() => break,
                _ = tokio::time::sleep_until(deadline.min(now + SUSPEND_CHECK)) => {}
            }
        }
        self.loss_reason().unwrap_or(LossReason::ExpiredLocally)
    }

    /// Resolves once the grant is marked lost (by its backend, by its
    /// [`LeaseGroup`], or by its release), without watching the deadline.
    /// For a backend's per-grant task that only has to end with its grant:
    /// each [`lost`](Self::lost) waiter wakes at every deadline a renewal
    /// has since moved (and every second, to look for a suspend), so N of them cost N wake-ups per renewal, while
    /// this costs no timer. The group's renewal loop watches the shared
    /// deadline and marks every grant lost when it passes.
    pub async fn marked_lost(&self) {
        self.inner.lost.cancelled().await;
    }

    /// The read-only view of this tracker that grant holders get.
    #[must_use]
    pub fn view(&self) -> LeaseView {
        LeaseView(self.clone())
    }
}

/// A grant's lease as its holder sees it ([`Grant::lease`](crate::Grant::lease)):
/// when it was last renewed, when it runs out on the local clock, and
/// whether and why it was lost. Read-only: only the backend renews it or
/// marks it lost. Cheap to clone; a clone follows the same lease.
///
/// A holder cannot extend or silence its own lease:
///
/// ```compile_fail
/// fn silence(grant: &fencing_core::Grant) {
///     let a_day = std::time::Duration::from_secs(86_400);
///     grant.lease().renewed(fencing_core::backend::SentAt::now(), a_day);
/// }
/// ```
#[derive(Clone, Debug)]
pub struct LeaseView(LeaseTracker);

impl LeaseView {
    /// When the request of the latest confirmed renewal (or of the grant
    /// itself) was sent: the lease is known to have been valid since then.
    #[must_use]
    pub fn last_renewal(&self) -> Instant {
        self.0.last_renewal()
    }

    /// The current local deadline: past it the grant counts as lost.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.0.deadline()
    }

    /// True until loss was reported or the local deadline passed.
    #[must_use]
    pub fn is_live(&self) -> bool {
        self.0.is_live()
    }

    /// Why the grant is lost, once it is.
    #[must_use]
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.0.loss_reason()
    }

    /// When the grant was lost on the local clock, once it is: the local
    /// deadline, or the moment the loss was reported if that came first.
    /// Holders that look at [`lost`](Self::lost) only between steps of
    /// work learn from it how long they went on after the loss.
    ///
    /// ```
    /// # fn f(grant: fencing_core::Grant) {
    /// let lease = grant.lease();
    /// // ... a step of work ...
    /// if let Some(at) = lease.lost_at() {
    ///     eprintln!("worked on for {:?} after the grant was lost", at.elapsed());
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn lost_at(&self) -> Option<Instant> {
        self.0.lost_at()
    }

    /// Resolves when the grant is lost, with the reason.
    pub async fn lost(&self) -> LossReason {
        self.0.lost().await
    }
}

/// One coordinator lease (an etcd lease, a ZooKeeper session) shared by
/// several grants. The backend's renewal loop reports renewals and loss
/// here once; each grant gets its own [`LeaseTracker`] that shares the
/// lease's deadline but can also be lost on its own (its key deleted).
#[derive(Debug)]
pub struct LeaseGroup {
    lease: LeaseTracker,
    /// The grants to mark lost with the lease. Released grants are marked
    /// lost, and pruned once the list has doubled since the last pruning,
    /// so it stays within twice the grants held, at O(1) amortized cost.
    grants: Mutex<Grants>,
}

#[derive(Debug, Default)]
struct Grants {
    list: Vec<LeaseTracker>,
    prune_at: usize,
}

impl LeaseGroup {
    /// A group for a lease granted by a request sent at `sent`.
    #[must_use]
    pub fn new(sent: SentAt, ttl: Duration) -> Self {
        LeaseGroup {
            lease: LeaseTracker::new(sent, ttl),
            grants: Mutex::new(Grants::default()),
        }
    }

    /// The shared lease itself.
    #[must_use]
    pub fn lease(&self) -> &LeaseTracker {
        &self.lease
    }

    /// A tracker for a new grant on this lease, sharing its deadline:
    /// renewed and lost together with it from now on.
    #[must_use]
    pub fn track(&self) -> LeaseTracker {
        let tracker = LeaseTracker::on_clock(self.lease.inner.clock.clone());
        // Checked and pushed under the list's lock: a `lose` that marks the
        // lease after this check drains the list after this push, so the
        // new grant is lost either way.
        let mut grants = lock(&self.grants);
        if !self.lease.is_live() {
            let reason = self.lease.loss_reason();
            tracker.mark_lost(
                reason.unwrap_or(LossReason::ExpiredLocally),
                "tracked after its lease was lost",
            );
        }
        if grants.list.len() >= grants.prune_at {
            grants.list.retain(|g| !g.inner.lost.is_cancelled());
            grants.prune_at = (2 * grants.list.len()).max(64);
        }
        grants.list.push(tracker.clone());
        tracker
    }

    /// Records a renewal sent at `sent` for `ttl`, for the lease and so
    /// for every grant on it. False (and everything lost) when it came too
    /// late.
    pub fn renewed(&self, sent: SentAt, ttl: Duration) -> bool {
        if self.lease.renewed(sent, ttl) {
            return true;
        }
        self.lose(
            LossReason::ExpiredLocally,
            "lease deadline passed before a renewal was confirmed",
        );
        false
    }

    /// Marks the lease and every grant on it lost.
    pub fn lose(&self, reason: LossReason, detail: &str) {
        self.lease.mark_lost(reason, detail);
        for g in lock(&self.grants).list.drain(..) {
            g.mark_lost(reason, detail);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine suspended for longer than the lease: tokio's clock (played
    /// by the paused clock) stood still, boot time ran on. Seen failing
    /// before the boot-time check: `is_live()` said true and `lost()` slept
    /// on towards the monotonic deadline.
    #[tokio::test(start_paused = true)]
    async fn a_suspend_longer_than_the_lease_loses_it_within_a_second_of_the_resume() {
        let ttl = Duration::from_secs(10);
        let t = LeaseTracker::new(SentAt::now(), ttl);
        let waiter = tokio::spawn({
            let t = t.clone();
            async move { (t.lost().await, Instant::now()) }
        });
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(t.is_live());
        crate::suspend::inject(Duration::from_secs(20));
        let resumed = Instant::now();
        assert!(!t.is_live(), "20 s suspended out of a 9 s deadline");
        assert_eq!(t.loss_reason(), Some(LossReason::ExpiredLocally));
        assert!(t.deadline() <= resumed);
        let (reason, at) = waiter.await.unwrap();
        assert_eq!(reason, LossReason::ExpiredLocally);
        assert!(
            at - resumed <= SUSPEND_CHECK,
            "reported {:?} after the resume",
            at - resumed
        );
        // A renewal confirmed after the resume does not revive it.
        assert!(!t.renewed(SentAt::now(), ttl));
    }

    /// A suspend shorter than what is left of the lease: the grant lives on
    /// with that much less time. A renewal sent before the suspend and
    /// confirmed after it counts from that much earlier; one sent after the
    /// resume counts in full.
    #[tokio::test(start_paused = true)]
    async fn a_short_suspend_shortens_the_lease_by_its_length() {
        let ttl = Duration::from_secs(10);
        let sent = SentAt::now();
        let t = LeaseTracker::new(sent, ttl);
        let start = sent.instant();
        tokio::time::advance(Duration::from_secs(2)).await;
        let before_the_suspend = SentAt::now();
        crate::suspend::inject(Duration::from_secs(5));
        assert!(t.is_live());
        assert_eq!(t.deadline(), start + Duration::from_secs(4));
        assert!(t.renewed(before_the_suspend, ttl));
        // Sent at 2 s on tokio's clock, counted from 2 s - 5 s: 9 s later.
        assert_eq!(t.deadline(), start + Duration::from_secs(6));
        assert!(t.renewed(SentAt::now(), ttl));
        assert_eq!(t.deadline(), start + Duration::from_secs(11));
    }

    /// A suspend while the request that grants the lease is in flight
    /// counts against it, for a tracker and for a group (issue 54): with
    /// the suspended total sampled when the tracker was built, both lived
    /// on to 9 s as if the 5 s and the 20 s had not passed.
    #[tokio::test(start_paused = true)]
    async fn a_suspend_during_the_granting_request_counts_against_the_lease() {
        let ttl = Duration::from_secs(10);
        let sent = SentAt::now();
        crate::suspend::inject(Duration::from_secs(5));
        let t = LeaseTracker::new(sent, ttl);
        assert_eq!(t.deadline(), sent.instant() + Duration::from_secs(4));

        let sent = SentAt::now();
        crate::suspend::inject(Duration::from_secs(20));
        let group = LeaseGroup::new(sent, ttl);
        assert!(
            !group.lease().is_live(),
            "20 s suspended out of a 9 s lease"
        );
        assert!(!group.track().is_live());
    }

    /// A TTL too large for the clock gives a far deadline, not a panic.
    #[tokio::test(start_paused = true)]
    async fn a_huge_ttl_does_not_overflow_the_clock() {
        let t = LeaseTracker::new(SentAt::now(), Duration::MAX);
        assert!(t.is_live());
        assert!(t.deadline() > Instant::now() + Duration::from_secs(365 * 24 * 3600));
        assert!(t.renewed(SentAt::now(), Duration::MAX));
    }

    /// `lost_at` names when the loss happened, not when someone looked:
    /// the deadline for an expiry noticed late, the report for a loss
    /// reported before the deadline, and stays put after that.
    #[tokio::test(start_paused = true)]
    async fn lost_at_is_the_deadline_or_the_earlier_report() {
        let ttl = Duration::from_secs(10);
        let start = Instant::now();
        let expired = LeaseTracker::new(SentAt::now(), ttl);
        assert_eq!(expired.lost_at(), None);
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(expired.lost_at(), Some(start + Duration::from_secs(9)));
        expired.mark_lost(LossReason::SessionExpired, "reported late");
        assert_eq!(expired.lost_at(), Some(start + Duration::from_secs(9)));

        let reported = LeaseTracker::new(SentAt::now(), ttl);
        tokio::time::advance(Duration::from_secs(2)).await;
        let at = Instant::now();
        reported.mark_lost(LossReason::DeletedAtServer, "key deleted");
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(reported.view().lost_at(), Some(at));
    }

    #[tokio::test(start_paused = true)]
    async fn lost_fires_at_the_deadline_measured_from_send_time() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(10);
        let t = LeaseTracker::new(SentAt::now(), ttl);
        assert_eq!(t.deadline(), sent + Duration::from_secs(9));
        assert_eq!(t.view().lost().await, LossReason::ExpiredLocally);
        assert_eq!(Instant::now(), sent + Duration::from_secs(9));
        assert!(!t.is_live());
    }

    #[tokio::test(start_paused = true)]
    async fn renewal_moves_the_deadline_and_late_renewal_does_not_revive() {
        let ttl = Duration::from_secs(10);
        let t = LeaseTracker::new(SentAt::now(), ttl);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(t.renewed(SentAt::now(), ttl));
        let waiter = tokio::spawn({
            let t = t.clone();
            async move {
                t.lost().await;
                Instant::now()
            }
        });
        let start = Instant::now();
        let fired = waiter.await.unwrap();
        assert_eq!(fired - start, Duration::from_secs(9));
        assert!(
            !t.renewed(SentAt::now(), ttl),
            "a renewal after loss must not revive"
        );
        assert!(!t.is_live());
    }

    /// A waiter already asleep on the old deadline is not woken by the
    /// renewal; it wakes at the old deadline, finds the new one and sleeps
    /// on.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_while_waiting_moves_the_waiters_deadline() {
        let ttl = Duration::from_secs(10);
        let start = Instant::now();
        let t = LeaseTracker::new(SentAt::now(), ttl);
        let waiter = tokio::spawn({
            let t = t.clone();
            async move {
                t.lost().await;
                Instant::now()
            }
        });
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(t.renewed(SentAt::now(), ttl));
        let fired = waiter.await.unwrap();
        assert_eq!(fired - start, Duration::from_secs(14));
    }

    #[tokio::test(start_paused = true)]
    async fn an_older_send_time_never_shortens_the_deadline() {
        let ttl = Duration::from_secs(10);
        let old = SentAt::now();
        tokio::time::advance(Duration::from_secs(3)).await;
        let t = LeaseTracker::new(SentAt::now(), ttl);
        let before = t.deadline();
        assert!(t.renewed(old, ttl));
        assert_eq!(t.deadline(), before);
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_renews_and_loses_its_grants_together() {
        let ttl = Duration::from_secs(10);
        let group = LeaseGroup::new(SentAt::now(), ttl);
        let (a, b) = (group.track(), group.track());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(group.renewed(SentAt::now(), ttl));
        assert_eq!(a.deadline(), b.deadline());
        assert_eq!(a.deadline(), Instant::now() + Duration::from_secs(9));
        b.mark_lost(LossReason::DeletedAtServer, "key deleted");
        assert!(a.is_live() && !b.is_live(), "one grant's loss is its own");
        group.lose(LossReason::SessionExpired, "session expired");
        assert!(
            !a.is_live() && !group.track().is_live(),
            "the lease's loss is everyone's"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_grants_own_loss_outlives_the_groups_renewals() {
        let ttl = Duration::from_secs(10);
        let group = LeaseGroup::new(SentAt::now(), ttl);
        let (a, b) = (group.track(), group.track());
        b.mark_lost(LossReason::DeletedAtServer, "key deleted");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(group.renewed(SentAt::now(), ttl));
        assert!(a.is_live() && !b.is_live());
        assert_eq!(b.loss_reason(), Some(LossReason::DeletedAtServer));
        tokio::time::advance(Duration::from_secs(8)).await;
        assert!(a.is_live(), "the renewal moved the shared deadline");
    }

    /// `marked_lost` waits for a mark only: a passing deadline does not end
    /// it (the group's renewal loop turns that into a mark), a mark does.
    #[tokio::test(start_paused = true)]
    async fn marked_lost_waits_for_a_mark_not_the_deadline() {
        let ttl = Duration::from_secs(10);
        let group = LeaseGroup::new(SentAt::now(), ttl);
        let grant = group.track();
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(!grant.is_live());
        let waited = tokio::time::timeout(Duration::from_secs(1), grant.marked_lost()).await;
        assert!(waited.is_err(), "ended without a mark");
        group.lose(LossReason::ExpiredLocally, "deadline passed");
        let waited = tokio::time::timeout(Duration::from_secs(1), grant.marked_lost()).await;
        assert!(waited.is_ok(), "the group's mark did not end it");
    }

    /// A long-lived session acquires and releases without end: released
    /// grants must not pile up in the group.
    #[test]
    fn released_grants_do_not_pile_up_in_the_group() {
        let group = LeaseGroup::new(SentAt::now(), Duration::from_secs(60));
        let held: Vec<_> = (0..100).map(|_| group.track()).collect();
        for _ in 0..10_000 {
            group.track().mark_lost(LossReason::Released, "released");
        }
        let tracked = lock(&group.grants).list.len();
        assert!(tracked <= 2 * held.len() + 1, "{tracked} trackers kept");
        group.lose(LossReason::SessionExpired, "session expired");
        assert!(held.iter().all(|g| !g.is_live()));
    }

    /// A grant tracked at the same moment the lease is lost must be lost
    /// too: either `lose` sees it in the list, or `track` sees the loss.
    #[test]
    fn a_grant_tracked_while_the_lease_is_lost_is_lost() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _entered = rt.enter();
        let mut missed = 0;
        for _ in 0..30_000 {
            let group = Arc::new(LeaseGroup::new(SentAt::now(), Duration::from_secs(60)));
            let start = Arc::new(std::sync::Barrier::new(2));
            let loser = std::thread::spawn({
                let (group, start) = (group.clone(), start.clone());
                move || {
                    start.wait();
                    group.lose(LossReason::SessionExpired, "session expired");
                }
            });
            start.wait();
            let tracker = group.track();
            loser.join().unwrap();
            if tracker.is_live() {
                missed += 1;
            }
        }
        assert_eq!(missed, 0, "grants tracked during the loss stayed live");
    }

    /// The deadline is the first instant the lease no longer holds: a
    /// renewal confirmed exactly then is too late, and loses the grant.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_confirmed_at_the_deadline_is_too_late() {
        let ttl = Duration::from_secs(10);
        let t = LeaseTracker::new(SentAt::now(), ttl);
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(Instant::now(), t.deadline());
        assert!(!t.view().is_live());
        assert!(!t.renewed(SentAt::now(), ttl));
        assert_eq!(t.loss_reason(), Some(LossReason::ExpiredLocally));
    }

    /// Loss is sticky also before the deadline: a renewal confirmed after
    /// the backend reported the key deleted does not count.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_after_a_reported_loss_does_not_count() {
        let ttl = Duration::from_secs(10);
        let t = LeaseTracker::new(SentAt::now(), ttl);
        t.mark_lost(LossReason::DeletedAtServer, "key deleted");
        assert!(!t.renewed(SentAt::now(), ttl));
        assert_eq!(t.loss_reason(), Some(LossReason::DeletedAtServer));
    }

    /// A group renewed too late says so and marks every grant on it lost
    /// (their own `marked_lost` waiters end), not only its own lease.
    #[tokio::test(start_paused = true)]
    async fn a_group_renewed_too_late_loses_every_grant() {
        let ttl = Duration::from_secs(10);
        let group = LeaseGroup::new(SentAt::now(), ttl);
        let grant = group.track();
        assert!(grant.view().is_live());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!group.renewed(SentAt::now(), ttl));
        assert!(grant.inner.lost.is_cancelled(), "the grant was not marked");
        assert_eq!(grant.loss_reason(), Some(LossReason::ExpiredLocally));
    }

    /// A TTL too large for the clock is cut to [`FAR_FUTURE`], a century:
    /// not a year, not a few days.
    #[tokio::test(start_paused = true)]
    async fn a_huge_ttl_is_cut_to_a_century() {
        let start = Instant::now();
        let t = LeaseTracker::new(SentAt::now(), Duration::MAX);
        let year = Duration::from_secs(365 * 24 * 3600);
        assert_eq!(t.deadline() - start, year * 100);
    }

    /// A clock so close to its end that a century no longer fits gives a
    /// deadline a year ahead, never one behind it.
    #[test]
    fn near_the_end_of_the_clock_a_deadline_is_a_year_ahead() {
        let now = Instant::now();
        // The furthest whole second the clock can still add to `now`.
        let (mut fits, mut overflows) = (0u64, u64::MAX);
        while overflows - fits > 1 {
            let mid = fits + (overflows - fits) / 2;
            if now.checked_add(Duration::from_secs(mid)).is_some() {
                fits = mid;
            } else {
                overflows = mid;
            }
        }
        let year = Duration::from_secs(365 * 24 * 3600);
        let t = now + Duration::from_secs(fits) - year * 50;
        assert!(t.checked_add(FAR_FUTURE).is_none());
        assert_eq!(later(t, Duration::MAX), t + year);
    }

    /// The labels and texts users match on and the metric carries, and
    /// which reasons leave the lock free at the coordinator.
    #[test]
    fn each_reason_has_its_label_text_and_freedom() {
        use LossReason::*;
        let all = [
            (ExpiredLocally, "expired_locally", false),
            (RenewDeadlinePassed, "renew_deadline_passed", false),
            (SessionExpired, "session_expired", true),
            (DeletedAtServer, "deleted_at_server", true),
            (Superseded, "superseded", true),
            (Released, "released", false),
            (Yielded, "yielded", false),
        ];
        for (reason, label, free) in all {
            assert_eq!(reason.label(), label);
            assert_eq!(reason.is_free_at_coordinator(), free, "{reason:?}");
        }
        assert_eq!(
            ExpiredLocally.to_string(),
            "local deadline passed without a confirmed renewal"
        );
        assert_eq!(Released.to_string(), "released");
    }

    /// Released grants are pruned once the list has doubled since the last
    /// pruning, not at every track: pruning scans the whole list, so doing
    /// it each time would make a track cost O(grants held).
    #[test]
    fn released_grants_are_pruned_once_the_list_has_doubled() {
        let group = LeaseGroup::new(SentAt::now(), Duration::from_secs(60));
        let held: Vec<_> = (0..100).map(|_| group.track()).collect();
        let mut longest = 0;
        for _ in 0..300 {
            group.track().mark_lost(LossReason::Released, "released");
            longest = longest.max(lock(&group.grants).list.len());
        }
        assert!(
            (150..=2 * held.len()).contains(&longest),
            "the list reached {longest} trackers"
        );
    }

    #[tokio::test]
    async fn server_side_loss_wakes_waiters_with_the_first_reason() {
        let t = LeaseTracker::new(SentAt::now(), Duration::from_secs(60));
        let waiter = tokio::spawn({
            let t = t.clone();
            async move { t.lost().await }
        });
        t.mark_lost(LossReason::DeletedAtServer, "key deleted");
        t.mark_lost(LossReason::Released, "second reason");
        assert_eq!(waiter.await.unwrap(), LossReason::DeletedAtServer);
        assert_eq!(t.view().loss_reason(), Some(LossReason::DeletedAtServer));
    }
}
