//! One term of leadership: its grant, and when it "may be lost".

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::backend::LeaseTracker;
use fencing_core::{FencingToken, Grant, GrantInfo, LossReason, ResourceName, Result};
use tokio::time::Instant;

use crate::health::{CurrentTerm, HeldTerm};

/// The loss rule shared by a [`Leadership`] and its [`LeaderContext`]s.
///
/// Leadership may be lost as soon as either
/// 1. the grant reports loss (the coordinator said so, the grant was
///    released, or its own local deadline, last renewal's send time + TTL -
///    10 %, passed), or
/// 2. the lease was last renewed longer than `renew_deadline` ago.
///
/// Rule 2 makes a leader step down (and cancel its work) while its lease is
/// still valid at the coordinator, as client-go's RenewDeadline does, so the
/// old leader has stopped before anyone else can be elected.
///
/// Loss is sticky: once either rule fired, the grant's tracker is marked lost
/// with the reason, so a renewal arriving later does not revive the term.
#[derive(Debug)]
pub(crate) struct Term {
    pub(crate) tracker: LeaseTracker,
    renew_deadline: Duration,
    /// The grant's token, resource (the election), holder, source and TTL.
    pub(crate) info: GrantInfo,
}

/// How often a term's loss is looked at again while nothing else wakes it.
const SUSPEND_CHECK: Duration = Duration::from_secs(1);

impl Term {
    /// When rule 2 fires if no renewal arrives before.
    fn renew_by(&self) -> Instant {
        self.tracker.last_renewal() + self.renew_deadline
    }

    /// The reason leadership may be lost, or `None` while it holds.
    fn loss(&self) -> Option<LossReason> {
        if let Some(reason) = self.tracker.loss_reason() {
            return Some(reason);
        }
        if Instant::now() >= self.renew_by() {
            let detail = format!(
                "lease not renewed within renew_deadline ({:?})",
                self.renew_deadline
            );
            self.tracker
                .mark_lost(LossReason::RenewDeadlinePassed, &detail);
            return self.tracker.loss_reason();
        }
        None
    }

    async fn lost(&self) -> LossReason {
        loop {
            if let Some(reason) = self.loss() {
                return reason;
            }
            // A renewal only moves renew_by later, so waking at the old value
            // and checking again is never late. A suspend moves it earlier
            // (tokio's clock stood still meanwhile): waking every second, as
            // the tracker does, sees that within a second of the resume.
            let wake = self.renew_by().min(Instant::now() + SUSPEND_CHECK);
            tokio::select! {
                reason = self.tracker.lost() => return reason,
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

/// One term of leadership, won by [`LeaderElector::campaign`](crate::LeaderElector::campaign).
///
/// It owns the term's [`Grant`]: carry [`token()`](Self::token) on every
/// write the leader makes, and let the storage's gate refuse tokens of
/// earlier terms. Each term is a new grant, so its token is strictly greater
/// than every earlier term's.
///
/// Give leadership up with [`resign()`](Self::resign); a dropped `Leadership`
/// releases its grant in the background. [`lost()`](Self::lost) resolves when
/// leadership may be lost (see [`ElectionConfig::renew_deadline`](crate::ElectionConfig::renew_deadline)).
#[must_use = "a dropped Leadership resigns at once"]
pub struct Leadership {
    grant: Grant,
    term: Arc<Term>,
    /// Keeps the term visible to [`LeaderHealth`](crate::LeaderHealth).
    _held: Option<HeldTerm>,
}

impl Leadership {
    pub(crate) fn new(grant: Grant, renew_deadline: Duration) -> Self {
        let term = Arc::new(Term {
            tracker: fencing_core::backend::tracker(&grant).clone(),
            renew_deadline,
            info: grant.info().clone(),
        });
        Leadership {
            grant,
            term,
            _held: None,
        }
    }

    /// Marks this term as the one `current` holds, until it ends.
    pub(crate) fn held_in(mut self, current: &CurrentTerm) -> Self {
        self._held = Some(current.hold(&self.term));
        self
    }

    /// This term's fencing token.
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.grant.token()
    }

    /// The leader's identity.
    #[must_use]
    pub fn identity(&self) -> &str {
        self.grant.holder()
    }

    /// The election won.
    #[must_use]
    pub fn election(&self) -> &ResourceName {
        self.grant.resource()
    }

    /// True until leadership may be lost. A hint, not a permission: a pause
    /// right after a `true` can outlive the lease; only the gate is safe.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.term.loss().is_none()
    }

    /// Resolves, with the reason, when leadership may be lost.
    pub async fn lost(&self) -> LossReason {
        self.term.lost().await
    }

    /// The term's grant.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// What the storage's gate checks of this term: token, election,
    /// identity and source ([`Gate::admit_grant`](fencing_core::Gate::admit_grant)).
    #[must_use]
    pub fn info(&self) -> &GrantInfo {
        self.grant.info()
    }

    /// A cheap handle for the leader's work.
    #[must_use]
    pub fn context(&self) -> LeaderContext {
        LeaderContext {
            term: self.term.clone(),
        }
    }

    /// Gives leadership up so a waiting candidate is elected at once.
    pub async fn resign(self) -> Result<()> {
        tracing::debug!(election = %self.election(), token = %self.token(), "resigning");
        self.grant.release().await
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", self.election())
            .field("identity", &self.identity())
            .field("token", &self.token())
            .field("leader", &self.is_leader())
            .finish()
    }
}

/// What [`LeaderElector::run`](crate::LeaderElector::run)'s work receives:
/// the term's token and identity, and its loss signal. Cheap to clone.
///
/// Holding a context does not keep the term alive: when the leadership
/// resigns or is dropped, every context reports `is_leader() == false`.
#[derive(Clone, Debug)]
pub struct LeaderContext {
    term: Arc<Term>,
}

impl LeaderContext {
    /// The term's fencing token: send it with every write.
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.term.info.token
    }

    /// The term's grant: token, election, identity and source, what the
    /// storage's gate checks ([`Gate::admit_grant`](fencing_core::Gate::admit_grant)).
    #[must_use]
    pub fn info(&self) -> &GrantInfo {
        &self.term.info
    }

    /// The leader's identity.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.term.info.holder
    }

    /// The election this term belongs to.
    #[must_use]
    pub fn election(&self) -> &ResourceName {
        &self.term.info.resource
    }

    /// True until leadership may be lost.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.term.loss().is_none()
    }

    /// Resolves, with the reason, when leadership may be lost.
    pub async fn lost(&self) -> LossReason {
        self.term.lost().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(ttl: Duration, renew_deadline: Duration) -> Term {
        Term {
            tracker: LeaseTracker::new(fencing_core::backend::SentAt::now(), ttl),
            renew_deadline,
            info: GrantInfo::new(
                FencingToken::new(7),
                ResourceName::new("e").unwrap(),
                fencing_core::SourceId::new("test"),
            )
            .with_holder("a")
            .with_lease(ttl, ttl / 3),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn renew_deadline_counts_from_the_last_renewal_send_time() {
        let (ttl, renew) = (Duration::from_secs(15), Duration::from_secs(10));
        let t = term(ttl, renew);
        tokio::time::advance(Duration::from_secs(4)).await;
        let sent = fencing_core::backend::SentAt::now();
        assert!(t.tracker.renewed(sent, ttl));
        let sent = sent.instant();
        assert_eq!(t.renew_by(), sent + renew);
        let reason = t.lost().await;
        assert_eq!(Instant::now(), sent + renew, "not at the renew deadline");
        assert_eq!(t.tracker.last_renewal(), sent);
        assert_eq!(reason, LossReason::RenewDeadlinePassed);
        // Sticky: a late renewal does not make it leader again.
        assert!(!t.tracker.renewed(fencing_core::backend::SentAt::now(), ttl));
        assert!(t.loss().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_grant_s_own_deadline_wins_when_it_comes_first() {
        // renew_deadline above the grant's deadline (ttl - 10 %).
        let t = term(Duration::from_secs(10), Duration::from_millis(9_500));
        let start = Instant::now();
        let reason = t.lost().await;
        assert_eq!(Instant::now() - start, Duration::from_secs(9));
        assert_eq!(reason, LossReason::ExpiredLocally);
    }

    /// A tolerance of `Duration::MAX` means "never unhealthy", not an
    /// overflow while a term is held.
    #[tokio::test]
    async fn an_unbounded_health_tolerance_is_always_healthy() {
        let t = Arc::new(term(Duration::from_secs(15), Duration::from_secs(10)));
        let current = crate::health::CurrentTerm::default();
        let _held = current.hold(&t);
        let health = crate::LeaderHealth {
            current,
            tolerance: Duration::MAX,
        };
        assert!(health.check().is_ok());
    }

    #[tokio::test]
    async fn server_side_loss_is_reported_at_once() {
        let t = term(Duration::from_secs(15), Duration::from_secs(10));
        assert!(t.loss().is_none());
        t.tracker
            .mark_lost(LossReason::DeletedAtServer, "key deleted");
        assert_eq!(t.lost().await, LossReason::DeletedAtServer);
    }
}
