//! Run work under a grant, and answer a rejection by starting over.

use std::future::Future;

use crate::error::{Error, Result};
use crate::grant::GrantInfo;
use crate::resource::ResourceName;
use crate::source::{AcquireOptions, FencingSource};

/// Work under a grant on `resource`, started with [`run`](Fenced::run):
/// acquire, then read, compute and write inside the work, carrying the
/// grant's token on every write.
///
/// Pass the whole [`GrantInfo`] to the gate ([`Gate::admit_grant`](crate::Gate::admit_grant)),
/// not the bare token, so the gate also refuses it if another source set
/// the mark.
///
/// When the work fails with an error whose [`Error::needs_reacquire`] is
/// true ([`Error::Stale`], [`Error::Lost`], [`Error::UnknownToken`]: a gate
/// saw a newer token, or the grant ran out), the grant is released and
/// everything starts over: a new grant, so the work re-reads and redoes the
/// write with the new token. After [`attempts`](Self::attempts) tries (3
/// unless set) the last rejection is returned; it is never swallowed. Other
/// errors return at once.
///
/// The work is cancelled (its future dropped) the moment the grant may be
/// lost, so it cannot go on writing as a holder it no longer is.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing_core::Result<()> {
/// use fencing_core::{fenced, Gate, LocalSource, MemoryGate, ResourceName};
///
/// let dir = tempfile::tempdir().unwrap();
/// let source = LocalSource::open(dir.path())?;
/// let gate = MemoryGate::new();
/// let ledger = ResourceName::new("ledger")?;
/// let written = fenced(&source, &ledger)
///     .attempts(5)
///     .run(|grant| {
///         let gate = &gate;
///         async move {
///             gate.admit_grant(&grant).await?; // the storage's check: token and source
///             Ok(grant.token)
///         }
///     })
///     .await?;
/// assert_eq!(gate.high_water_now(&ledger), Some(written));
/// # Ok(()) }
/// ```
#[must_use = "nothing runs until .run(work) is awaited"]
pub struct Fenced<'a> {
    source: &'a dyn FencingSource,
    resource: &'a ResourceName,
    options: AcquireOptions,
    attempts: usize,
}

/// Work under a grant on `resource` of `source`: see [`Fenced`].
pub fn fenced<'a>(source: &'a dyn FencingSource, resource: &'a ResourceName) -> Fenced<'a> {
    Fenced {
        source,
        resource,
        options: AcquireOptions::new(),
        attempts: DEFAULT_ATTEMPTS,
    }
}

/// How many grants [`Fenced::run`] tries unless told otherwise.
pub const DEFAULT_ATTEMPTS: usize = 3;

impl Fenced<'_> {
    /// The options each acquire uses (TTL, wait bound, holder).
    pub fn options(mut self, options: AcquireOptions) -> Self {
        self.options = options;
        self
    }

    /// How many grants to try before the last rejection is returned (at
    /// least one).
    pub fn attempts(mut self, attempts: usize) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// Runs `work` under a grant, again under a new grant after each
    /// rejection, as [`Fenced`] describes.
    pub async fn run<T, F, Fut>(self, mut work: F) -> Result<T>
    where
        F: FnMut(GrantInfo) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let Fenced {
            source,
            resource,
            options,
            attempts,
        } = self;
        let mut last_rejection = None;
        for attempt in 1..=attempts {
            let grant = source.acquire(resource, &options).await?;
            let outcome = tokio::select! {
                r = work(grant.info().clone()) => r,
                why = grant.lost() => Err(Error::lost(resource, why)),
            };
            match outcome {
                Ok(value) => {
                    grant.release().await?;
                    return Ok(value);
                }
                Err(e) if e.needs_reacquire() => {
                    tracing::info!(%resource, attempt, error = %e, "fenced work rejected; re-acquiring");
                    if let Err(release) = grant.release().await {
                        tracing::debug!(%resource, error = %release, "release after rejection failed");
                    }
                    last_rejection = Some(e);
                }
                Err(e) => {
                    let _ = grant.release().await;
                    return Err(e);
                }
            }
        }
        Err(last_rejection.unwrap_or_else(|| Error::lost(resource, "no attempt was made")))
    }
}

#[cfg(all(test, feature = "local"))]
mod tests {
    use super::*;
    use crate::gate::{Gate, MemoryGate};
    use crate::token::FencingToken;
    use crate::LocalSource;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_rejection_is_redone_under_a_newer_grant() {
        let dir = tempfile::tempdir().unwrap();
        let source = LocalSource::open(dir.path()).unwrap();
        let r = ResourceName::new("r").unwrap();
        let gate = MemoryGate::new();
        // Someone with a far newer token wrote first: the first two tries are
        // refused, the third (with a token above it) passes.
        let tries = AtomicUsize::new(0);
        let result = fenced(&source, &r)
            .attempts(5)
            .run(|g| {
                let n = tries.fetch_add(1, Ordering::SeqCst);
                let (gate, r) = (&gate, &r);
                async move {
                    if n == 0 {
                        gate.admit_any_source(r, FencingToken::new(g.token.get() + 1))
                            .await?;
                    }
                    gate.admit_any_source(r, g.token).await.map(|()| g.token)
                }
            })
            .await
            .unwrap();
        assert_eq!(tries.load(Ordering::SeqCst), 2);
        assert_eq!(gate.high_water_now(&r), Some(result));
    }

    #[tokio::test]
    async fn the_last_rejection_is_returned_not_swallowed() {
        let dir = tempfile::tempdir().unwrap();
        let source = LocalSource::open(dir.path()).unwrap();
        let r = ResourceName::new("r").unwrap();
        let gate = MemoryGate::new();
        gate.admit_now(&r, FencingToken::new(u64::MAX)).unwrap();
        let tries = AtomicUsize::new(0);
        let err = fenced(&source, &r)
            .attempts(3)
            .run(|g| {
                tries.fetch_add(1, Ordering::SeqCst);
                let (gate, r) = (&gate, &r);
                async move { gate.admit_any_source(r, g.token).await }
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Stale { .. }), "{err:?}");
        assert_eq!(tries.load(Ordering::SeqCst), 3);
        // Every grant was released: the resource is free.
        assert!(source.holder(&r).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn other_errors_return_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let source = LocalSource::open(dir.path()).unwrap();
        let r = ResourceName::new("r").unwrap();
        let tries = AtomicUsize::new(0);
        let err = fenced(&source, &r)
            .run(|_| {
                tries.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>(Error::Config("boom".into())) }
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }
}
