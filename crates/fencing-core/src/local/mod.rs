//! The embedded source: leases and a durable token counter in a directory.

mod store;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::grant::{Grant, GrantBackend, GrantInfo, HolderInfo, Releases, SourceId};
use crate::lease::{LeaseTracker, SentAt};
use crate::resource::ResourceName;
use crate::source::{
    default_holder_identity, ensure_same_source, AcquireOptions, IfHeld, RawSource,
};
use store::{Store, TryGrant};

/// Default lease length of a [`LocalSource`].
pub const DEFAULT_LOCAL_TTL: Duration = Duration::from_secs(15);

/// Shortest lease a LocalSource grants: renewals run every TTL/3 and must
/// fit in well over one file write.
pub const MIN_LOCAL_TTL: Duration = Duration::from_millis(300);

/// Longest pause between two attempts while waiting for a held resource.
const MAX_POLL: Duration = Duration::from_millis(50);

/// A [`FencingSource`](crate::FencingSource) kept in a local directory, for development, tests and
/// one-node deployments.
///
/// Several processes on **one host** can share a directory: every operation
/// takes an exclusive `flock(2)` on `DIR/lock`, leases expire on the host's
/// monotonic clock (and with a reboot), and tokens come from a counter that
/// is fsynced before any grant is returned, so a crash, even `kill -9` in the
/// middle of granting, never lets a token repeat. It is not a distributed
/// coordinator: on a network filesystem or across hosts it is unsafe.
///
/// Grants are renewed in the background every TTL/3 by a task the grant owns.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing_core::Result<()> {
/// use fencing_core::{AcquireOptions, FencingSource, LocalSource, ResourceName};
///
/// let dir = tempfile::tempdir().unwrap();
/// let source = LocalSource::open(dir.path())?;
/// let r = ResourceName::new("job")?;
/// let first = source.acquire(&r, &AcquireOptions::new()).await?;
/// let t1 = first.token();
/// first.release().await?;
/// let second = source.acquire(&r, &AcquireOptions::new()).await?;
/// assert!(second.token() > t1);
/// # second.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LocalSource {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    dir: PathBuf,
    identity: SourceId,
    holder: String,
    default_ttl: Duration,
    renewals_paused: Arc<AtomicBool>,
    /// Releases of dropped grants, which `close()` waits for.
    releases: Releases,
}

impl LocalSource {
    /// Opens (creating if needed) the state directory, with the default
    /// lease length [`DEFAULT_LOCAL_TTL`].
    ///
    /// Blocking: call it at start-up, or from `spawn_blocking`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with_ttl(dir, DEFAULT_LOCAL_TTL)
    }

    /// Like [`open`](Self::open), with the lease length used when the
    /// acquire options give none.
    pub fn open_with_ttl(dir: impl AsRef<Path>, default_ttl: Duration) -> Result<Self> {
        check_ttl(default_ttl)?;
        let dir = dir.as_ref().to_path_buf();
        let (store, identity) = Store::open(&dir)?;
        Ok(LocalSource {
            inner: Arc::new(Inner {
                store,
                dir,
                identity: SourceId::new(identity),
                holder: default_holder_identity(),
                default_ttl,
                renewals_paused: Arc::new(AtomicBool::new(false)),
                releases: Releases::new(),
            }),
        })
    }

    /// The state directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Stops (or resumes) renewing every grant of this source, as if the
    /// process were frozen: the grants run out after their TTL while the
    /// holder still has them. A test hook (feature `test-util`).
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn pause_renewals(&self, paused: bool) {
        self.inner.renewals_paused.store(paused, Ordering::SeqCst);
    }

    /// The highest token this directory has minted.
    pub async fn last_token(&self) -> Result<crate::FencingToken> {
        self.blocking(|store| store.lock()?.last_token()).await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Store) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || op(&inner.store))
            .await
            .map_err(|e| Error::backend("local source worker task", e))?
    }

    fn resolve(&self, options: &AcquireOptions) -> Result<(Duration, String)> {
        let ttl = options.ttl.unwrap_or(self.inner.default_ttl);
        check_ttl(ttl)?;
        let holder = options
            .holder
            .clone()
            .unwrap_or_else(|| self.inner.holder.clone());
        crate::source::check_holder(&holder)?;
        Ok((ttl, holder))
    }

    /// One attempt: a grant, or who holds it and for how much longer.
    async fn attempt(
        &self,
        resource: &ResourceName,
        ttl: Duration,
        holder: &str,
        lock_delay: Duration,
    ) -> Result<std::result::Result<Grant, Duration>> {
        let sent = SentAt::now();
        let (r, h) = (resource.clone(), holder.to_owned());
        let outcome = self
            .blocking(move |s| s.lock()?.try_grant(&r, &h, ttl, lock_delay))
            .await?;
        match outcome {
            TryGrant::Held { remaining, .. } => Ok(Err(remaining)),
            TryGrant::Granted { token, key } => {
                let info = GrantInfo {
                    token,
                    resource: resource.clone(),
                    holder: holder.to_owned(),
                    source: self.inner.identity.clone(),
                    key: key.display().to_string(),
                    ttl,
                    renew_interval: ttl / 3,
                };
                let lease = LeaseTracker::new(sent, ttl);
                // A span of its own, not the acquire's that made the grant.
                let span = tracing::debug_span!(parent: None, "fencing.renew", backend = "local", resource = %info.resource, token = info.token.get());
                let renewing = renew_loop(self.clone(), info.clone(), lease.clone());
                let renewer = tokio::spawn(tracing::Instrument::instrument(renewing, span));
                tracing::debug!(resource = %resource, %token, "local grant");
                let backend = LocalGrant {
                    source: self.clone(),
                    info: info.clone(),
                    renewer,
                };
                Ok(Ok(Grant::new(
                    info,
                    lease,
                    Box::new(backend),
                    &self.inner.releases,
                )))
            }
        }
    }
}

fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_LOCAL_TTL || ttl > Duration::from_secs(24 * 3600) {
        return Err(Error::Config(format!(
            "lease TTL {ttl:?} must be between 300ms and 24h"
        )));
    }
    Ok(())
}

/// Renews every TTL/3 until the grant is lost or released.
async fn renew_loop(source: LocalSource, info: GrantInfo, lease: LeaseTracker) {
    let period = info.renew_interval;
    loop {
        tokio::select! {
            _ = lease.lost() => return,
            _ = tokio::time::sleep(period) => {}
        }
        if source.inner.renewals_paused.load(Ordering::SeqCst) {
            continue;
        }
        let sent = SentAt::now();
        let (r, t, ttl) = (info.resource.clone(), info.token, info.ttl);
        match source.blocking(move |s| s.lock()?.renew(&r, t, ttl)).await {
            Ok(None) => {
                if !lease.renewed(sent, info.ttl) {
                    return;
                }
            }
            Ok(Some(reason)) => {
                lease.mark_lost(reason, "renewal refused by the local store");
                return;
            }
            // The local deadline still fires if this keeps failing.
            Err(e) => tracing::warn!(resource = %info.resource, error = %e, "lease renewal failed"),
        }
    }
}

struct LocalGrant {
    source: LocalSource,
    info: GrantInfo,
    renewer: JoinHandle<()>,
}

impl Drop for LocalGrant {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

#[async_trait]
impl GrantBackend for LocalGrant {
    async fn release(self: Box<Self>) -> Result<()> {
        self.renewer.abort();
        let (r, t) = (self.info.resource.clone(), self.info.token);
        self.source
            .blocking(move |s| s.lock()?.release(&r, t))
            .await
    }
}

impl RawSource for LocalSource {
    fn identity(&self) -> &SourceId {
        &self.inner.identity
    }

    fn describe_acquire(&self, resource: &ResourceName) -> String {
        format!("acquire {resource:?} in {}", self.inner.dir.display())
    }

    /// Waiting polls the directory, with a pause that doubles up to
    /// `MAX_POLL` and never outlasts the holder's remaining lease.
    async fn take(
        &self,
        resource: &ResourceName,
        options: &AcquireOptions,
        if_held: IfHeld,
    ) -> Result<Option<Grant>> {
        let (ttl, holder) = self.resolve(options)?;
        let mut poll = Duration::from_millis(2);
        loop {
            let lock_delay = options.lock_delay.unwrap_or_default();
            match self.attempt(resource, ttl, &holder, lock_delay).await? {
                Ok(grant) => return Ok(Some(grant)),
                Err(_) if if_held == IfHeld::GiveUp => return Ok(None),
                Err(remaining) => {
                    let pause = crate::jitter::jittered(poll, 0.5);
                    tokio::time::sleep(pause.min(remaining + Duration::from_millis(1))).await;
                    poll = (poll * 2).min(MAX_POLL);
                }
            }
        }
    }

    async fn validate(&self, grant: &Grant) -> Result<bool> {
        ensure_same_source(&self.inner.identity, grant)?;
        let (r, t) = (grant.resource().clone(), grant.token());
        self.blocking(move |s| s.lock()?.is_current(&r, t)).await
    }

    async fn holder(&self, resource: &ResourceName) -> Result<Option<HolderInfo>> {
        let r = resource.clone();
        let found = self.blocking(move |s| s.lock()?.holder(&r)).await?;
        Ok(found.map(|(rec, _)| HolderInfo {
            holder: rec.holder,
            token: rec.token,
        }))
    }

    /// Holds no session: waits for the releases of grants dropped before
    /// the call.
    async fn close(&self) -> Result<()> {
        self.inner.releases.wait().await;
        Ok(())
    }
}
