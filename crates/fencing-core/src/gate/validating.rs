//! A gate that asks the source before it raises a mark.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::{check_fixed_source, Gate};
use crate::error::{Error, Result};
use crate::grant::SourceId;
use crate::resource::ResourceName;
use crate::source::FencingSource;
use crate::token::FencingToken;

/// A [`Gate`] that refuses to raise a mark to a token no live grant
/// carries: the defence against a forged huge token (Chubby's
/// `CheckSequencer`).
///
/// A plain gate believes every token: a client that sends `u64::MAX` is
/// admitted, the mark rises to it, and every real holder is refused with
/// [`Error::Stale`] from then on. Before this gate lets a token *raise* a
/// mark, it asks the source for the resource's current holder
/// ([`FencingSource::holder`]) and admits only if that holder's token is
/// the one presented; otherwise [`Error::UnknownToken`], and the mark is
/// unchanged. Tokens equal to or below the mark go straight to the inner
/// gate (a retry, or a refusal as stale), so only the first write of each
/// grant costs a lookup. The bound form also refuses a source id other than
/// the source's own with [`Error::ForeignSource`], before any lookup.
///
/// What it does not stop: a client that knows the current token can still
/// write with it (tokens are not credentials; authenticate clients), and a
/// holder whose grant ended before its first write is refused even though
/// no newer holder wrote yet ([`Error::needs_reacquire`] is true: acquire
/// again). The source must report the grant's own token in `holder()`:
/// true for the local, etcd and ZooKeeper sources and for Kubernetes Leases
/// held by this crate, not for a client-go holder (whose token `holder()`
/// can only approximate).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing_core::Result<()> {
/// use std::sync::Arc;
/// use fencing_core::{AcquireOptions, Error, FencingSource, FencingToken, Gate, LocalSource,
///     MemoryGate, ResourceName, ValidatingGate};
///
/// let dir = tempfile::tempdir().unwrap();
/// let source = Arc::new(LocalSource::open(dir.path())?);
/// let gate = ValidatingGate::new(MemoryGate::new(), source.clone());
/// let ledger = ResourceName::new("ledger")?;
///
/// let grant = source.acquire(&ledger, &AcquireOptions::new()).await?;
/// gate.admit_grant(grant.info()).await?; // the holder's token: one lookup
/// gate.admit_grant(grant.info()).await?; // a retry: no lookup
///
/// let forged = FencingToken::new(u64::MAX);
/// let err = gate.admit_from(&ledger, source.identity(), forged).await.unwrap_err();
/// assert!(matches!(err, Error::UnknownToken { .. }));
/// assert_eq!(gate.high_water(&ledger).await?, Some(grant.token()));
/// grant.release().await?;
/// # Ok(()) }
/// ```
pub struct ValidatingGate<G> {
    inner: G,
    source: Arc<dyn FencingSource>,
}

impl<G: Gate> ValidatingGate<G> {
    /// Wraps `inner`, checking raises with `source`, the one source whose
    /// tokens this gate admits (any source by value: a clone of yours, or
    /// the `Arc<dyn FencingSource>` `connect` returns).
    #[must_use]
    pub fn new(inner: G, source: impl FencingSource + 'static) -> Self {
        ValidatingGate {
            inner,
            source: Arc::new(source),
        }
    }

    /// The wrapped gate.
    #[must_use]
    pub fn inner(&self) -> &G {
        &self.inner
    }

    /// The source asked before a raise.
    #[must_use]
    pub fn source(&self) -> &dyn FencingSource {
        &*self.source
    }

    /// Passes a token at or below the mark unchecked; a token that would
    /// raise the mark must be the live holder's.
    async fn check_raise(&self, resource: &ResourceName, token: FencingToken) -> Result<()> {
        let mark = self.inner.high_water(resource).await?;
        if mark.is_some_and(|highest| token <= highest) {
            return Ok(());
        }
        let holder = self.source.holder(resource).await?;
        if holder.as_ref().is_some_and(|h| h.token == token) {
            return Ok(());
        }
        tracing::warn!(
            %resource,
            %token,
            holder_token = ?holder.map(|h| h.token),
            "refused to raise a mark to a token no live grant carries"
        );
        Err(super::refused(Error::UnknownToken {
            resource: resource.clone(),
            token,
        }))
    }
}

impl<G: fmt::Debug> fmt::Debug for ValidatingGate<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidatingGate")
            .field("inner", &self.inner)
            .field("source", &self.source.identity())
            .finish()
    }
}

#[async_trait]
impl<G: Gate> Gate for ValidatingGate<G> {
    async fn admit_with(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        check_fixed_source(resource, self.source.identity(), source)?;
        self.check_raise(resource, token).await?;
        self.inner.admit_with(resource, source, token).await
    }

    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        self.inner.high_water(resource).await
    }
}

#[cfg(all(test, feature = "local"))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::error::Error;
    use crate::gate::MemoryGate;
    use crate::grant::{Grant, HolderInfo};
    use crate::source::{AcquireOptions, IfHeld, RawSource};
    use crate::LocalSource;

    /// A LocalSource that counts the holder lookups the gate makes.
    #[derive(Debug)]
    struct Counting {
        local: LocalSource,
        lookups: AtomicUsize,
    }

    impl RawSource for Counting {
        fn identity(&self) -> &SourceId {
            RawSource::identity(&self.local)
        }
        async fn take(
            &self,
            r: &ResourceName,
            o: &AcquireOptions,
            if_held: IfHeld,
        ) -> Result<Option<Grant>> {
            self.local.take(r, o, if_held).await
        }
        async fn validate(&self, grant: &Grant) -> Result<bool> {
            RawSource::validate(&self.local, grant).await
        }
        async fn holder(&self, r: &ResourceName) -> Result<Option<HolderInfo>> {
            self.lookups.fetch_add(1, Ordering::SeqCst);
            RawSource::holder(&self.local, r).await
        }
    }

    fn setup() -> (tempfile::TempDir, Arc<Counting>, ValidatingGate<MemoryGate>) {
        let dir = tempfile::tempdir().unwrap();
        let source = Arc::new(Counting {
            local: LocalSource::open(dir.path()).unwrap(),
            lookups: AtomicUsize::new(0),
        });
        let gate = ValidatingGate::new(MemoryGate::new(), source.clone());
        (dir, source, gate)
    }

    fn r() -> ResourceName {
        ResourceName::new("ledger").unwrap()
    }

    /// Its Debug output names the wrapped gate and the one source it
    /// admits (what a log of a refused write needs to be read).
    #[test]
    fn debug_shows_the_inner_gate_and_the_source() {
        let (_dir, source, gate) = setup();
        let id = RawSource::identity(&*source).clone();
        let shown = format!("{gate:?}");
        assert!(shown.starts_with("ValidatingGate {"), "{shown}");
        assert!(shown.contains("MemoryGate"), "{shown}");
        assert!(shown.contains(id.as_str()), "{shown}");
    }

    #[tokio::test]
    async fn a_forged_huge_token_is_refused_and_the_mark_kept() {
        let (_dir, source, gate) = setup();
        let grant = source.acquire(&r(), &AcquireOptions::new()).await.unwrap();
        gate.admit_grant(grant.info()).await.unwrap();
        let id = RawSource::identity(&*source).clone();
        let forged = FencingToken::new(u64::MAX - 1);
        match gate.admit_from(&r(), &id, forged).await {
            Err(Error::UnknownToken { resource, token }) => {
                assert_eq!((resource.as_str(), token), ("ledger", forged));
            }
            other => panic!("forged bound token: {other:?}"),
        }
        assert!(matches!(
            gate.admit_any_source(&r(), forged).await,
            Err(Error::UnnamedSource { .. } | Error::UnknownToken { .. })
        ));
        assert_eq!(gate.high_water(&r()).await.unwrap(), Some(grant.token()));
        // The real holder is not locked out.
        gate.admit_grant(grant.info()).await.unwrap();
        grant.release().await.unwrap();
    }

    #[tokio::test]
    async fn the_holders_token_passes_and_retries_cost_no_lookup() {
        let (_dir, source, gate) = setup();
        let first = source.acquire(&r(), &AcquireOptions::new()).await.unwrap();
        gate.admit_grant(first.info()).await.unwrap();
        let old = first.info().clone();
        first.release().await.unwrap();
        let second = source.acquire(&r(), &AcquireOptions::new()).await.unwrap();
        gate.admit_grant(second.info()).await.unwrap();
        assert_eq!(source.lookups.load(Ordering::SeqCst), 2, "one per raise");
        for _ in 0..3 {
            gate.admit_grant(second.info()).await.unwrap();
        }
        assert!(matches!(
            gate.admit_grant(&old).await,
            Err(Error::Stale { .. })
        ));
        assert_eq!(
            source.lookups.load(Ordering::SeqCst),
            2,
            "retries and stale tokens go straight to the inner gate"
        );
        second.release().await.unwrap();
    }

    #[tokio::test]
    async fn a_released_grants_token_that_was_never_admitted_is_refused() {
        let (_dir, source, gate) = setup();
        let first = source.acquire(&r(), &AcquireOptions::new()).await.unwrap();
        let old = first.info().clone();
        first.release().await.unwrap();
        // Nobody holds the resource now.
        assert!(matches!(
            gate.admit_grant(&old).await,
            Err(Error::UnknownToken { .. })
        ));
        // Someone else holds it now.
        let second = source.acquire(&r(), &AcquireOptions::new()).await.unwrap();
        assert!(matches!(
            gate.admit_grant(&old).await,
            Err(Error::UnknownToken { .. })
        ));
        assert_eq!(gate.high_water(&r()).await.unwrap(), None);
        gate.admit_grant(second.info()).await.unwrap();
        second.release().await.unwrap();
    }

    #[tokio::test]
    async fn a_token_of_another_source_is_refused_before_any_lookup() {
        let (_dir, source, gate) = setup();
        let grant = source.acquire(&r(), &AcquireOptions::new()).await.unwrap();
        let foreign = SourceId::new("etcd:ffff");
        assert!(matches!(
            gate.admit_from(&r(), &foreign, grant.token()).await,
            Err(Error::ForeignSource { .. })
        ));
        assert_eq!(source.lookups.load(Ordering::SeqCst), 0);
        assert_eq!(gate.high_water(&r()).await.unwrap(), None);
        grant.release().await.unwrap();
    }
}
