//! A granted lock or lease, carrying its fencing token.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::lease::{LeaseTracker, LeaseView, LossReason};
use crate::resource::ResourceName;
use crate::token::FencingToken;

/// Who minted a token: `etcd:` + the cluster id, `zk:` + the ensemble's id,
/// `kube:` + the cluster's id (the UID of namespace `kube-system`) +
/// `/NAMESPACE`, `local:` + a LocalSource directory's id. Tokens are only
/// comparable within one source identity.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SourceId(String);

impl SourceId {
    /// Wraps a backend's identity string.
    #[must_use]
    pub fn new(id: impl Into<String>) -> Self {
        SourceId(id.into())
    }

    /// The identity as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// The current holder of a resource as the source sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The holder's identity string.
    pub holder: String,
    /// The token of the holder's grant.
    pub token: FencingToken,
}

impl HolderInfo {
    /// A holder as a backend reports it.
    pub fn new(holder: impl Into<String>, token: FencingToken) -> Self {
        HolderInfo {
            holder: holder.into(),
            token,
        }
    }
}

/// What a backend does when its grant is released. Implementations also stop
/// the grant's renewal when dropped, so a grant dropped outside a runtime
/// still stops renewing and its lease runs out.
#[async_trait]
pub trait GrantBackend: Send + Sync + 'static {
    /// Gives the grant back to the coordinator (delete the key, node or
    /// holder record) and stops renewing it.
    async fn release(self: Box<Self>) -> Result<()>;
}

/// Runs a backend's release step `op` until it succeeds, or until `lease`
/// (the coordinator lease the released key lives on) is lost.
///
/// A key or node left behind by one failed delete would otherwise stay
/// first in line for as long as its lease is renewed, which for a session
/// shared by other grants can be the life of the process: every other
/// contender would wait forever. Once the lease is lost it is no longer
/// renewed, so the coordinator removes the key when the lease expires, and
/// the release counts as done. Errors that no retry can fix (permission,
/// configuration) return at once.
pub async fn release_until_lost<F, Fut>(lease: &LeaseTracker, what: &str, mut op: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut pause = Duration::from_millis(100);
    loop {
        let error = match op().await {
            Ok(()) => return Ok(()),
            Err(e @ (Error::PermissionDenied(_) | Error::Config(_))) => return Err(e),
            Err(e) => e,
        };
        tracing::warn!(what, error = %error, retry_in = ?pause, "release failed; retrying while the lease lives");
        tokio::select! {
            reason = lease.lost() => {
                tracing::info!(what, %reason, "release left to lease expiry");
                return Ok(());
            }
            () = tokio::time::sleep(crate::jitter::jittered(pause, 0.5)) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// The parts of a grant a backend fills in.
///
/// Backends build it with [`new`](Self::new) and the `with_*` methods (the
/// struct may gain fields, so it cannot be written as a literal outside
/// this crate).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GrantInfo {
    /// The token minted with this grant.
    pub token: FencingToken,
    /// The resource granted.
    pub resource: ResourceName,
    /// The holder identity the grant was taken under.
    pub holder: String,
    /// The identity of the source that minted the token.
    pub source: SourceId,
    /// The coordinator-side key of this grant: lock file, etcd key, znode
    /// path or Lease name. Guarded writes compare against it.
    pub key: String,
    /// The lease length the grant was taken with.
    pub ttl: Duration,
    /// How often the backend renews the lease: a third of the TTL for
    /// etcd, ZooKeeper and LocalSource, the retry period for Kubernetes.
    /// A deadline counted from the last renewal must leave room for it.
    pub renew_interval: Duration,
}

impl GrantInfo {
    /// A grant of `resource` with `token`, minted by `source`; the holder is
    /// [`default_holder_identity`](crate::default_holder_identity), the key
    /// the resource's name, and the lease unset (zero) until
    /// [`with_lease`](Self::with_lease).
    pub fn new(token: FencingToken, resource: ResourceName, source: SourceId) -> Self {
        GrantInfo {
            key: resource.to_string(),
            token,
            resource,
            holder: crate::default_holder_identity(),
            source,
            ttl: Duration::ZERO,
            renew_interval: Duration::ZERO,
        }
    }

    /// The holder identity the grant was taken under.
    #[must_use]
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// The coordinator-side key of the grant.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// The lease length and how often the backend renews it.
    #[must_use]
    pub fn with_lease(mut self, ttl: Duration, renew_interval: Duration) -> Self {
        self.ttl = ttl;
        self.renew_interval = renew_interval;
        self
    }
}

/// A granted lock or lease and its fencing token.
///
/// Carry [`token()`](Self::token) on every write the lock protects, and let
/// the storage check it with a [`Gate`](crate::Gate). Watch
/// [`lost()`](Self::lost): it resolves when the grant is gone at the
/// coordinator or when the local deadline (send time of the last successful
/// renewal + TTL - [`drift_margin`](crate::backend::drift_margin)) has passed.
///
/// Release with [`release()`](Self::release). A grant dropped without
/// release is released in the background on the current tokio runtime (or,
/// outside a runtime, stops renewing and expires after its TTL); errors of a
/// background release are only logged.
#[must_use = "a dropped grant is released at once"]
pub struct Grant {
    info: GrantInfo,
    lease: LeaseTracker,
    backend: Option<Box<dyn GrantBackend>>,
    /// Where a release finishes when the grant is dropped, or its release
    /// cut short: its source's `close()` waits for them.
    releases: Releases,
}

impl Grant {
    /// Assembles a grant ([`crate::backend::grant`] for backends).
    pub(crate) fn new(
        info: GrantInfo,
        lease: LeaseTracker,
        backend: Box<dyn GrantBackend>,
        releases: &Releases,
    ) -> Self {
        lease.set_source(&info.source);
        Grant {
            info,
            lease,
            backend: Some(backend),
            releases: releases.clone(),
        }
    }

    /// Everything about the grant that can be copied: token, resource,
    /// holder, source, key and TTL.
    #[must_use]
    pub fn info(&self) -> &GrantInfo {
        &self.info
    }

    /// The fencing token to carry on every protected write.
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.info.token
    }

    /// The resource this grant is for.
    #[must_use]
    pub fn resource(&self) -> &ResourceName {
        &self.info.resource
    }

    /// The holder identity.
    #[must_use]
    pub fn holder(&self) -> &str {
        &self.info.holder
    }

    /// The identity of the source that minted the token.
    #[must_use]
    pub fn source(&self) -> &SourceId {
        &self.info.source
    }

    /// The coordinator-side key of this grant.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.info.key
    }

    /// The lease length this grant was taken with.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.info.ttl
    }

    /// The local deadline: past it the grant counts as lost.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.lease.deadline()
    }

    /// True until the grant is lost or its local deadline passes. A true
    /// answer is a hint, not a permission: a pause right after it can outlive
    /// the lease. Only the gate's check of the token is safe.
    #[must_use]
    pub fn is_live(&self) -> bool {
        self.lease.is_live()
    }

    /// Resolves when the grant is or may be lost, with the reason.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future (e.g. in a `select!` branch that
    /// lost the race) changes nothing, and a new call resolves as well.
    pub async fn lost(&self) -> LossReason {
        self.lease.lost().await
    }

    /// The grant's lease, read-only: its last renewal, local deadline and
    /// loss reason; a clone that outlives the borrow of the grant (to wait
    /// for [`LeaseView::lost`] in another task).
    #[must_use]
    pub fn lease(&self) -> LeaseView {
        self.lease.view()
    }

    /// The writable tracker, for backends (see [`crate::backend::tracker`]).
    pub(crate) fn tracker(&self) -> &LeaseTracker {
        &self.lease
    }

    /// Gives the grant back so the next contender can take it at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a caller that stops waiting
    /// (`tokio::time::timeout(d, grant.release())` during a network blip)
    /// does not stop it; what is left of it moves to a task of its own and
    /// goes on until it succeeds or the lease is lost. Dropping it half-way
    /// would otherwise leave the key or node on a session that lives on,
    /// blocking the lock for the life of the process.
    pub async fn release(mut self) -> Result<()> {
        let backend = self.backend.take();
        self.lease.mark_lost(LossReason::Released, "released");
        let Some(backend) = backend else {
            return Ok(());
        };
        let span = tracing::info_span!(
            "fencing.release",
            resource = %self.info.resource,
            source = %self.info.source,
            token = self.info.token.get(),
        );
        // Run here rather than always in a task: a spawn and its join cost
        // two thread hand-offs, about 60 µs of an uncontended etcd cycle of
        // 2.3 ms on a busy 2-core machine (cycle-bench).
        let releasing = FinishOnDrop(Some(backend.release()), self.releases.clone());
        releasing.instrument(span).await
    }
}

/// Where a source's grants finish their releases in the background (a
/// grant dropped without [`Grant::release`], or a release whose caller
/// stopped waiting), so that the source's `close()` can wait for them: a
/// `main` that drops a grant and closes its source right before it returns
/// loses no release. Each backend keeps one per source, hands it to
/// [`grant`](crate::backend::grant), and calls [`wait`](Self::wait) in
/// its [`RawSource::close`](crate::backend::RawSource::close).
#[derive(Clone, Debug, Default)]
pub struct Releases(TaskTracker);

impl Releases {
    /// None pending.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits until every release registered before the call has finished
    /// (each is bounded by its backend: a retry loop ends at the latest
    /// when the grant's lease is lost).
    pub async fn wait(&self) {
        self.0.close();
        self.0.wait().await;
        self.0.reopen();
    }

    /// Registers `release` at once and runs it on the current runtime;
    /// outside one it is dropped (the grant then expires with its lease).
    fn spawn(&self, release: impl Future<Output = ()> + Send + 'static) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            self.0.spawn_on(release, &rt);
        }
    }
}

/// A release future that, when dropped before it is done, finishes in a
/// task of its own, registered with the source's [`Releases`].
struct FinishOnDrop(
    Option<Pin<Box<dyn Future<Output = Result<()>> + Send>>>,
    Releases,
);

impl Future for FinishOnDrop {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let Some(fut) = self.0.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let done = std::task::ready!(fut.as_mut().poll(cx));
        self.0 = None;
        Poll::Ready(done)
    }
}

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        let Some(rest) = self.0.take() else {
            return;
        };
        self.1.spawn(async move {
            if let Err(e) = rest.await {
                tracing::warn!(error = %e, "release finished in the background failed");
            }
        });
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        let Some(backend) = self.backend.take() else {
            return;
        };
        self.lease.mark_lost(LossReason::Released, "dropped");
        let resource = self.info.resource.clone();
        // Registered now, run in the background: the backend bounds its
        // own release with a timeout or retries it until its lease is lost
        // (after which the coordinator expires the key itself), and the
        // source's `close()` waits for it.
        self.releases.spawn(async move {
            if let Err(e) = backend.release().await {
                tracing::warn!(%resource, error = %e, "background release failed");
            }
        });
    }
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("token", &self.info.token)
            .field("resource", &self.info.resource)
            .field("holder", &self.info.holder)
            .field("source", &self.info.source)
            .field("live", &self.is_live())
            .finish()
    }
}
