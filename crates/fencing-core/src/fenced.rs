//! Run work under a grant, and answer a rejection by starting over.

use std::future::Future;

use crate::error::Error;
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
pub struct Fenced<'a, S: ?Sized> {
    source: &'a S,
    resource: &'a ResourceName,
    options: AcquireOptions,
    attempts: usize,
}

/// Work under a grant on `resource` of `source` (any source, borrowed:
/// `&etcd`, `&arc`, `&*boxed`): see [`Fenced`].
pub fn fenced<'a, S: FencingSource + ?Sized>(
    source: &'a S,
    resource: &'a ResourceName,
) -> Fenced<'a, S> {
    Fenced {
        source,
        resource,
        options: AcquireOptions::new(),
        attempts: DEFAULT_ATTEMPTS,
    }
}

/// How many grants [`Fenced::run`] tries unless told otherwise.
pub const DEFAULT_ATTEMPTS: usize = 3;

/// The error type of [`Fenced::run`]'s work: it carries this library's
/// errors (`From<Error>`), and tells which of its values is a rejection
/// that a new grant answers.
///
/// Implemented for [`Error`] and for `Box<dyn std::error::Error + Send +
/// Sync>` (a rejection anywhere in its source chain). An application error
/// type implements it in two lines:
///
/// ```
/// use fencing_core::{Error, WorkError};
///
/// #[derive(Debug)]
/// enum AppError {
///     Fencing(Error),
///     Parse(String),
/// }
/// impl From<Error> for AppError {
///     fn from(e: Error) -> Self {
///         AppError::Fencing(e)
///     }
/// }
/// impl WorkError for AppError {
///     fn needs_reacquire(&self) -> bool {
///         matches!(self, AppError::Fencing(e) if e.needs_reacquire())
///     }
/// }
/// assert!(!AppError::Parse("x".into()).needs_reacquire());
/// ```
pub trait WorkError: From<Error> {
    /// True when the work was refused for its grant ([`Error::Stale`],
    /// [`Error::Lost`], [`Error::UnknownToken`]: see
    /// [`Error::needs_reacquire`]).
    fn needs_reacquire(&self) -> bool;
}

impl WorkError for Error {
    fn needs_reacquire(&self) -> bool {
        Error::needs_reacquire(self)
    }
}

impl WorkError for Box<dyn std::error::Error + Send + Sync> {
    fn needs_reacquire(&self) -> bool {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(self.as_ref());
        while let Some(e) = next {
            if e.downcast_ref::<Error>()
                .is_some_and(Error::needs_reacquire)
            {
                return true;
            }
            next = e.source();
        }
        false
    }
}

impl<S: FencingSource + ?Sized> Fenced<'_, S> {
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
    /// rejection, as [`Fenced`] describes. The work's error type is yours
    /// (see [`WorkError`]). Once the work succeeded its value is returned
    /// even if the release then fails (logged; the grant then ends with its
    /// lease), as [`LeaderElector::run`] does with a failed resign.
    ///
    /// [`LeaderElector::run`]: https://docs.rs/fencing-election
    pub async fn run<T, E, F, Fut>(self, mut work: F) -> std::result::Result<T, E>
    where
        E: WorkError + std::fmt::Display,
        F: FnMut(GrantInfo) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
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
                why = grant.lost() => Err(Error::lost(resource, why).into()),
            };
            match outcome {
                Ok(value) => {
                    if let Err(e) = grant.release().await {
                        tracing::warn!(%resource, error = %e, "release after fenced work failed; the grant ends with its lease");
                    }
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
        Err(last_rejection.unwrap_or_else(|| Error::lost(resource, "no attempt was made").into()))
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

    /// The work's own error type, as long as it carries this library's
    /// errors and says which are rejections (issue 55, item 6: only
    /// `fencing::Error` was accepted).
    #[tokio::test]
    async fn the_work_may_return_its_own_error_type() {
        #[derive(Debug)]
        enum AppError {
            Fencing(Error),
            Parse,
        }
        impl From<Error> for AppError {
            fn from(e: Error) -> Self {
                AppError::Fencing(e)
            }
        }
        impl WorkError for AppError {
            fn needs_reacquire(&self) -> bool {
                matches!(self, AppError::Fencing(e) if e.needs_reacquire())
            }
        }
        impl std::fmt::Display for AppError {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{self:?}")
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let source = LocalSource::open(dir.path()).unwrap();
        let r = ResourceName::new("r").unwrap();
        let gate = MemoryGate::new();
        let tries = AtomicUsize::new(0);
        let token = fenced(&source, &r)
            .run(|g| {
                let n = tries.fetch_add(1, Ordering::SeqCst);
                let (gate, r) = (&gate, &r);
                async move {
                    if n == 0 {
                        gate.admit_any_source(r, FencingToken::new(g.token.get() + 1))
                            .await?;
                    }
                    gate.admit_any_source(r, g.token).await?;
                    Ok::<_, AppError>(g.token)
                }
            })
            .await
            .unwrap();
        assert_eq!(tries.load(Ordering::SeqCst), 2, "the rejection was redone");
        assert_eq!(gate.high_water_now(&r), Some(token));
        let err = fenced(&source, &r)
            .run(|_| async { Err::<(), _>(AppError::Parse) })
            .await
            .unwrap_err();
        assert!(matches!(err, AppError::Parse));
    }

    /// A work that succeeded keeps its value when the release then fails
    /// (issue 55, item 6: the release error replaced it).
    #[tokio::test]
    async fn a_failed_release_after_the_work_keeps_its_value() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let source = LocalSource::open(&state).unwrap();
        let r = ResourceName::new("r").unwrap();
        let value = fenced(&source, &r)
            .run(|_| {
                let state = state.clone();
                async move {
                    // The store is gone by the time the release writes to it.
                    std::fs::remove_dir_all(&state).unwrap();
                    Ok::<_, Error>(42)
                }
            })
            .await;
        assert_eq!(value.unwrap(), 42);
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
