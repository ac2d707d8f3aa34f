//! The candidate: campaign, observe, run work while leading.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::__private::{jittered, JITTER_FACTOR};
use fencing_core::{AcquireOptions, Error, FencingSource, GrantInfo, ResourceName, Result};
use tracing::Instrument;

use crate::config::ElectionConfig;
use crate::health::{CurrentTerm, LeaderHealth};
use crate::observer::Observer;
use crate::term::{LeaderContext, Leadership};

/// A candidate in one election, over any [`FencingSource`].
///
/// An election is a lock: the leader is the grant's holder, and each term
/// is a new grant with its own fencing token. Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing::Result<()> {
/// use std::sync::Arc;
/// use fencing::{LocalSource, ResourceName};
/// use fencing::election::{ElectionConfig, LeaderElector};
///
/// let dir = tempfile::tempdir().unwrap();
/// let source = Arc::new(LocalSource::open(dir.path())?);
/// let elector = LeaderElector::new(
///     source,
///     ResourceName::new("scheduler")?,
///     ElectionConfig::new("worker-1"),
/// )?;
/// let written = elector
///     .run(|ctx| async move {
///         // Send ctx.token() with every write; stop when ctx.lost() resolves.
///         ctx.token()
///     })
///     .await?;
/// assert!(written.get() > 0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderElector {
    source: Arc<dyn FencingSource>,
    election: ResourceName,
    config: ElectionConfig,
    current: CurrentTerm,
}

impl LeaderElector {
    /// A candidate for `election` on `source` (any source by value: a
    /// clone of yours, or the `Arc<dyn FencingSource>` `connect` returns);
    /// refuses an invalid configuration with [`Error::Config`].
    pub fn new(
        source: impl FencingSource + 'static,
        election: ResourceName,
        config: ElectionConfig,
    ) -> Result<Self> {
        config.check()?;
        Ok(LeaderElector {
            source: Arc::new(source),
            election,
            config,
            current: CurrentTerm::default(),
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ElectionConfig {
        &self.config
    }

    /// The election's name (the resource locked on the source).
    #[must_use]
    pub fn election(&self) -> &ResourceName {
        &self.election
    }

    /// Waits until this candidate leads.
    ///
    /// The source's acquire does the waiting (etcd and ZooKeeper watch their
    /// predecessor, LocalSource polls), with the lease duration as TTL and
    /// the identity as holder. Transient errors (timeouts, backend and I/O
    /// failures, a session lost while waiting) are logged and retried after
    /// `retry_period`; configuration, permission and name errors return at
    /// once, since retrying cannot fix them.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no leadership behind: a grant the
    /// coordinator minted in the very moment of the drop is never renewed
    /// and is cleaned up as for any acquire (see
    /// [`FencingSource`](fencing_core::FencingSource#cancel-safety)).
    pub async fn campaign(&self) -> Result<Leadership> {
        let span = tracing::info_span!(
            "fencing.campaign",
            election = %self.election,
            identity = %self.config.identity,
            token = tracing::field::Empty,
        );
        let leadership = self
            .campaign_until_elected()
            .instrument(span.clone())
            .await?;
        span.record("token", leadership.token().get());
        Ok(leadership)
    }

    async fn campaign_until_elected(&self) -> Result<Leadership> {
        let options = AcquireOptions::new()
            .ttl(self.config.timings.lease_duration)
            .holder(self.config.identity.clone());
        loop {
            let error = match self.source.acquire(&self.election, &options).await {
                Ok(grant) => {
                    if let Err(e) = self.check_renewals(grant.info()) {
                        let _ = grant.release().await;
                        return Err(e);
                    }
                    let leadership = Leadership::new(grant, self.config.timings.renew_deadline)
                        .held_in(&self.current);
                    // A grant that took longer than the renew deadline to
                    // come back is no leadership: drop it and try again.
                    if leadership.is_leader() {
                        tracing::info!(
                            election = %self.election,
                            identity = %self.config.identity,
                            token = %leadership.token(),
                            "elected"
                        );
                        return Ok(leadership);
                    }
                    Error::lost(&self.election, "granted too late to lead")
                }
                Err(e) if is_transient(&e) => e,
                Err(e) => return Err(e),
            };
            tracing::warn!(
                election = %self.election,
                error = %error,
                retry_in = ?self.config.timings.retry_period,
                "campaign attempt failed"
            );
            tokio::time::sleep(jittered(self.config.timings.retry_period, JITTER_FACTOR)).await;
        }
    }

    /// Refuses a term whose lease the source renews too rarely for the
    /// renew deadline: the leader would step down between two renewals,
    /// every term. Known only once granted, because the source may change
    /// the TTL (ZooKeeper negotiates the session timeout within the
    /// server's bounds; etcd rounds up to whole seconds).
    fn check_renewals(&self, grant: &GrantInfo) -> Result<()> {
        let needed = grant.renew_interval * 6 / 5;
        if self.config.timings.renew_deadline > needed {
            return Ok(());
        }
        Err(Error::Config(format!(
            "the source renews this election's lease every {:?} (TTL {:?}, asked for {:?}), \
             so renew_deadline {:?} would end every term between two renewals; it must \
             exceed {needed:?}: raise renew_deadline or lower lease_duration (on ZooKeeper \
             the server's minSessionTimeout may have raised the TTL)",
            grant.renew_interval,
            grant.ttl,
            self.config.timings.lease_duration,
            self.config.timings.renew_deadline
        )))
    }

    /// A health check for a liveness probe: unhealthy while this candidate
    /// (or a clone) holds a term whose lease was last renewed more than its
    /// TTL plus `tolerance` ago (client-go's
    /// `Check(maxTolerableExpiredLease)`); see [`LeaderHealth`].
    #[must_use]
    pub fn health(&self, tolerance: Duration) -> LeaderHealth {
        LeaderHealth {
            current: self.current.clone(),
            tolerance,
        }
    }

    /// The current leader and every change, for followers. Polls the source
    /// every `retry_period`; each query is bounded by the lease duration.
    #[must_use]
    pub fn observe(&self) -> Observer {
        Observer::new(
            self.source.clone(),
            self.election.clone(),
            self.config.timings.retry_period,
            self.config.timings.lease_duration,
        )
    }

    /// Campaigns, then runs `work` while leading.
    ///
    /// The work future is dropped (cancelled) the moment leadership may be
    /// lost, and `run` returns [`Error::Lost`] with the reason; its side
    /// effects must still be fenced with [`LeaderContext::token`], because a
    /// process can be paused between a check and a write. When the work
    /// finishes first, leadership is resigned and its output returned.
    ///
    /// A failed resign after finished work is logged, not returned: the work
    /// has already taken effect under a valid term; the etcd and ZooKeeper
    /// sources retry a release until it succeeds or their lease is lost
    /// (and then the coordinator expires it), so a failed resign cannot
    /// block the next leader for longer than the lease duration. Turning it
    /// into an error would make callers redo work that is done.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the work with it and gives leadership
    /// back in the background (as dropping a grant does).
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(LeaderContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let finished = self.run_until(std::future::pending(), work).await?;
        Ok(finished.expect("a shutdown that never comes"))
    }

    /// [`run`](Self::run) until `shutdown` resolves (a signal, a
    /// cancellation token): a campaign still waiting gives up, and a term
    /// in progress has its work dropped and is resigned at once, so the
    /// next leader need not wait out the lease. Returns `Ok(None)` then,
    /// `Ok(Some(output))` when the work finished first.
    ///
    /// The shutdown recipe (client-go's `ReleaseOnCancel`): signal, resign,
    /// close. Closing the source afterwards waits for every release still
    /// in flight, so nothing is left holding the election when `main`
    /// returns.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing::Result<()> {
    /// use fencing::{FencingSource, LocalSource, ResourceName};
    /// use fencing::election::{ElectionConfig, LeaderElector};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let source = LocalSource::open(dir.path())?;
    /// let election = ResourceName::new("scheduler")?;
    /// let elector = LeaderElector::new(source.clone(), election, ElectionConfig::new("w1"))?;
    /// // In a service: `tokio::signal::ctrl_c()`, or a CancellationToken.
    /// let (stop, shutdown) = tokio::sync::oneshot::channel::<()>();
    /// let leading = tokio::spawn(async move {
    ///     elector
    ///         .run_until(async { let _ = shutdown.await; }, |ctx| async move {
    ///             // Lead until told to stop: fenced work with ctx.token().
    ///             std::future::pending::<()>().await
    ///         })
    ///         .await
    /// });
    /// stop.send(()).unwrap();
    /// assert!(leading.await.unwrap()?.is_none()); // resigned, not finished
    /// source.close().await?; // waits for every release in flight
    /// # Ok(()) }
    /// ```
    pub async fn run_until<F, Fut, T>(
        &self,
        shutdown: impl Future<Output = ()>,
        work: F,
    ) -> Result<Option<T>>
    where
        F: FnOnce(LeaderContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let mut shutdown = std::pin::pin!(shutdown);
        let leadership = tokio::select! {
            biased;
            () = &mut shutdown => return Ok(None),
            elected = self.campaign() => elected?,
        };
        let work = work(leadership.context());
        // Loss first: when both are ready, the work is not polled again.
        let output = tokio::select! {
            biased;
            reason = leadership.lost() => {
                tracing::warn!(election = %self.election, token = %leadership.token(), %reason, "leadership lost, work cancelled");
                // Dropping `leadership` releases the grant in the background,
                // so a successor need not wait for the lease to run out.
                return Err(Error::lost(&self.election, reason));
            }
            () = &mut shutdown => None,
            output = work => Some(output),
        };
        let token = leadership.token();
        if let Err(e) = leadership.resign().await {
            tracing::warn!(election = %self.election, %token, error = %e, "resign failed; the lease expires within the lease duration");
        }
        Ok(output)
    }

    /// [`run`](Self::run) for fallible work: the work's error type also
    /// takes this crate's errors (`From<Error>`), so a failed campaign or a
    /// lost term arrives in it too and one `?` does instead of `.await??`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use fencing::{LocalSource, ResourceName};
    /// use fencing::election::{ElectionConfig, LeaderElector};
    ///
    /// #[derive(Debug)]
    /// enum AppError { Fencing(fencing::Error), Refused(&'static str) }
    /// impl From<fencing::Error> for AppError {
    ///     fn from(e: fencing::Error) -> Self { AppError::Fencing(e) }
    /// }
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let source = Arc::new(LocalSource::open(dir.path()).unwrap());
    /// let election = ResourceName::new("scheduler").unwrap();
    /// let elector = LeaderElector::new(source, election, ElectionConfig::new("w1")).unwrap();
    /// let outcome = elector
    ///     .try_run(|_ctx| async { Err::<(), _>(AppError::Refused("quota")) })
    ///     .await;
    /// assert!(matches!(outcome, Err(AppError::Refused("quota"))));
    /// # }
    /// ```
    pub async fn try_run<F, Fut, T, E>(&self, work: F) -> std::result::Result<T, E>
    where
        F: FnOnce(LeaderContext) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        self.run(work).await?
    }
}

/// Errors a later attempt may not see again.
fn is_transient(e: &Error) -> bool {
    matches!(
        e,
        Error::Timeout { .. }
            | Error::Contended { .. }
            | Error::Unreachable { .. }
            | Error::Backend { .. }
            | Error::Io { .. }
            | Error::Lost { .. }
    )
}

impl fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElector")
            .field("source", &self.source.identity())
            .field("election", &self.election)
            .field("config", &self.config)
            .finish()
    }
}
