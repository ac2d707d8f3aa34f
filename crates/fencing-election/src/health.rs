//! A leadership health check for liveness probes (client-go's
//! `HealthzAdaptor` and `Check(maxTolerableExpiredLease)`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencing_core::{Error, Result};
use tokio::time::Instant;

use crate::term::Term;

/// The term a candidate holds now, shared by its clones and its
/// [`LeaderHealth`] handles; it also drives the `fencing_leader_status`
/// gauge (feature `metrics`).
#[derive(Clone, Default)]
pub(crate) struct CurrentTerm(Arc<Mutex<Option<Arc<Term>>>>);

impl CurrentTerm {
    /// Records `term` as held until the returned guard is dropped.
    pub(crate) fn hold(&self, term: &Arc<Term>) -> HeldTerm {
        *self.lock() = Some(term.clone());
        fencing_core::__private::leader_status(
            term.info.resource.as_str(),
            term.info.source.as_str(),
            true,
        );
        HeldTerm {
            current: self.clone(),
            term: term.clone(),
        }
    }

    fn get(&self) -> Option<Arc<Term>> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Term>>> {
        // The slot holds a plain value; a panic elsewhere cannot leave it
        // half-written.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Owned by a [`Leadership`](crate::Leadership): clears the slot when the
/// term ends (resigned, dropped, or its work cancelled on loss).
pub(crate) struct HeldTerm {
    current: CurrentTerm,
    term: Arc<Term>,
}

impl Drop for HeldTerm {
    fn drop(&mut self) {
        let mut slot = self.current.lock();
        if slot.as_ref().is_some_and(|t| Arc::ptr_eq(t, &self.term)) {
            *slot = None;
            fencing_core::__private::leader_status(
                self.term.info.resource.as_str(),
                self.term.info.source.as_str(),
                false,
            );
        }
    }
}

/// Answers "is this process's leadership healthy?" for a liveness probe.
///
/// Healthy unless this candidate still holds a term whose lease was last
/// renewed longer ago than the lease's TTL plus the tolerance: then the
/// election loop is stuck (a blocked runtime thread, work that ignores
/// cancellation, a [`Leadership`](crate::Leadership) kept after its loss)
/// while others may already have taken over, and restarting the process is
/// the cure. A follower, or a candidate that is not leading, is healthy.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing::Result<()> {
/// # use std::sync::Arc;
/// # use fencing::{LocalSource, ResourceName};
/// # use fencing::election::{ElectionConfig, LeaderElector};
/// # let dir = tempfile::tempdir().unwrap();
/// # let source = Arc::new(LocalSource::open(dir.path())?);
/// # let elector = LeaderElector::new(source, ResourceName::new("a")?, ElectionConfig::new("x"))?;
/// use std::time::Duration;
///
/// let health = elector.health(Duration::from_secs(20));
/// // In an HTTP liveness handler (axum, hyper, ...):
/// let status = match health.check() {
///     Ok(()) => 200,
///     Err(_) => 500,
/// };
/// assert_eq!(status, 200);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderHealth {
    pub(crate) current: CurrentTerm,
    pub(crate) tolerance: Duration,
}

impl LeaderHealth {
    /// `Ok` when healthy; otherwise [`Error::Lost`] saying how overdue the
    /// held term's renewal is.
    pub fn check(&self) -> Result<()> {
        let Some(term) = self.current.get() else {
            return Ok(());
        };
        let since = Instant::now().saturating_duration_since(term.tracker.last_renewal());
        // Saturating: a tolerance of Duration::MAX means "never unhealthy".
        if since <= term.info.ttl.saturating_add(self.tolerance) {
            return Ok(());
        }
        Err(Error::lost(
            &term.info.resource,
            format!(
                "this process still holds term {} but its lease was last renewed {since:?} \
                 ago, more than its TTL {:?} plus the tolerance {:?}: the election loop is stuck",
                term.info.token, term.info.ttl, self.tolerance
            ),
        ))
    }
}

impl std::fmt::Debug for LeaderHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderHealth")
            .field("tolerance", &self.tolerance)
            .field("healthy", &self.check().is_ok())
            .finish()
    }
}
