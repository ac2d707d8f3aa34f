//! The contract every coordinator backend implements.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use std::future::Future;

use async_trait::async_trait;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::grant::{Grant, HolderInfo, SourceId};
use crate::resource::ResourceName;

/// Options for one acquire call. Every field has a default.
///
/// ```
/// use std::time::Duration;
/// use fencing_core::AcquireOptions;
///
/// let opts = AcquireOptions::new()
///     .ttl(Duration::from_secs(10)) // how long the lease lasts
///     .wait(Duration::from_secs(30)) // how long acquire may wait for it
///     .holder("worker-7");
/// assert_eq!(opts.ttl, Some(Duration::from_secs(10)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcquireOptions {
    /// Lease length; `None` takes the source's default. What it means
    /// depends on the backend; [`Grant::ttl`] reports what was granted:
    ///
    /// - local: the lease itself, renewed every third of it; 300 ms to 24 h,
    ///   else [`Error::Config`].
    /// - etcd: the TTL of the session lease, in whole seconds (rounded up;
    ///   the server may grant more); grants with the same TTL share one
    ///   session, so they are renewed, and lost, together.
    /// - ZooKeeper: the session timeout requested for a session shared by
    ///   the grants with the same TTL; the ensemble clamps it to its
    ///   `minSessionTimeout..maxSessionTimeout` (2 to 20 ticks by default),
    ///   and the negotiated value is the grant's TTL.
    /// - Kubernetes: `leaseDurationSeconds` (whole seconds), how long others
    ///   wait after the Lease last changed; the holder counts the grant as
    ///   lost earlier, at the renew deadline
    ///   ([`LeaderTimings`](crate::LeaderTimings), scaled to a TTL the
    ///   configured deadline does not fit under).
    pub ttl: Option<Duration>,
    /// How long an acquire may wait (Curator's `acquire(time, unit)`); `None` waits until granted or until
    /// the future is dropped. Ends in [`Error::Contended`] when the
    /// coordinator answered that another holder kept the resource, in
    /// [`Error::Timeout`] (naming the last error) when it did not answer.
    /// Not the limit of each request, which is the source's
    /// `request_timeout`.
    pub wait: Option<Duration>,
    /// Holder identity shown by [`FencingSource::holder`]; `None` takes the
    /// source's own (host name, process id and a random suffix).
    pub holder: Option<String>,
    /// Lock-delay (Chubby's, Consul's): after a holder was lost uncleanly
    /// (its lease ran out; it did not release), the lock is not granted
    /// again until this much longer has passed, so that writes the lost
    /// holder still had in flight land first. For storage that cannot
    /// check tokens; a gate is the real fix, as a holder paused for longer
    /// than the delay still writes late. Every candidate of the resource
    /// must ask for the same delay.
    ///
    /// Supported by the local and Kubernetes sources, whose lock records
    /// outlive their holder and tell a release from an expiry. etcd and
    /// ZooKeeper refuse it with [`Error::Config`]: the lock key or node
    /// vanishes with its holder's lease or session, so a newcomer cannot
    /// tell an expiry from a release.
    pub lock_delay: Option<Duration>,
}

impl AcquireOptions {
    /// The defaults.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the lease length.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets how long acquire may wait (not the lease's length, which is
    /// [`ttl`](Self::ttl), nor a request's limit, which is the source's
    /// `request_timeout`).
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Sets the lock-delay (see [`AcquireOptions::lock_delay`]).
    #[must_use]
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// Sets the holder identity.
    #[must_use]
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }
}

/// A coordinator that grants locks with fencing tokens: what users call.
///
/// Object safe: keep one as `Arc<dyn FencingSource>` and switch backends by
/// configuration.
///
/// # Handing a source over
///
/// Every source of this workspace is a cheap `Clone` handle, as kube-rs's
/// `Client` is, and so is `Arc<dyn FencingSource>`. What keeps a source
/// (`LeaderElector::new`, `ValidatingGate::new`) takes it by value: pass a
/// clone. What only uses one for a call (`fenced`) borrows it: pass `&source`,
/// whatever its type (`&etcd`, `&arc`, `&*boxed`).
///
/// Backends do not implement this trait: they implement
/// [`RawSource`](crate::backend::RawSource), and every `RawSource` is a
/// `FencingSource`.
///
/// # Cancel safety
///
/// Every method's future may be dropped half-way (a timeout around it, a
/// `select!` branch that lost): no grant is left renewing. What the
/// coordinator wrote for an acquire dropped in flight is removed in the
/// background: etcd's key and ZooKeeper's node are deleted, a Kubernetes
/// Lease is given back ([`close`](Self::close) waits for that). When that
/// clean-up cannot reach the coordinator, and on the local source, the
/// record expires with its lease.
///
/// ```
/// # async fn example() -> fencing_core::Result<()> {
/// use std::sync::Arc;
/// use fencing_core::{AcquireOptions, FencingSource, LocalSource, ResourceName};
///
/// let dir = tempfile::tempdir().unwrap();
/// let source: Arc<dyn FencingSource> = Arc::new(LocalSource::open(dir.path())?);
/// let orders = ResourceName::new("orders")?;
/// let grant = source.acquire(&orders, &AcquireOptions::new()).await?;
/// println!("write with token {}", grant.token());
/// grant.release().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait FencingSource: Send + Sync + std::fmt::Debug {
    /// Who mints this source's tokens.
    fn identity(&self) -> &SourceId;

    /// Waits until the resource is granted, the options' wait bound passes
    /// ([`Error::Contended`] while someone else holds it, [`Error::Timeout`]
    /// when the coordinator did not answer), or the future is dropped. A queued request cut
    /// short queues again; with a timeout, failed requests (timeouts, an
    /// unreachable cluster, backend errors) are retried too, so the error
    /// surfaces when the timeout ends. Configuration, permission and name
    /// errors return at once.
    async fn acquire(&self, resource: &ResourceName, options: &AcquireOptions) -> Result<Grant>;

    /// Takes the resource if it is free now; `Ok(None)` when someone holds it.
    async fn try_acquire(
        &self,
        resource: &ResourceName,
        options: &AcquireOptions,
    ) -> Result<Option<Grant>>;

    /// Waits for the lock `name` (checked by [`ResourceName::new`]) with the
    /// source's default lease, for as long as it takes:
    /// `source.lock("nightly-report")`.
    async fn lock(&self, name: &str) -> Result<Grant> {
        let resource = ResourceName::new(name)?;
        self.acquire(&resource, &AcquireOptions::new()).await
    }

    /// [`lock`](Self::lock), giving up when not granted within `wait` (a
    /// bound on the wait, not the lease's length): [`Error::Contended`]
    /// while someone else holds it, [`Error::Timeout`] when the coordinator
    /// did not answer.
    async fn lock_within(&self, name: &str, wait: Duration) -> Result<Grant> {
        let resource = ResourceName::new(name)?;
        self.acquire(&resource, &AcquireOptions::new().wait(wait))
            .await
    }

    /// Asks the coordinator whether this grant is still the current one.
    /// A grant from another source is an [`Error::ForeignSource`].
    async fn validate(&self, grant: &Grant) -> Result<bool>;

    /// The current holder of a resource, if any.
    async fn holder(&self, resource: &ResourceName) -> Result<Option<HolderInfo>>;

    /// Ends this source's sessions and waits until the coordinator ended
    /// them: every grant the source holds is lost at once, and its keys or
    /// nodes go with their sessions (etcd revokes its leases, ZooKeeper
    /// closes its sessions). Local and Kubernetes sources hold no session:
    /// each grant ends when released or dropped; a Kubernetes source waits
    /// until acquires that were dropped while their write was in flight
    /// have given back the Lease the write took. The source opens new
    /// sessions if it is used again.
    async fn close(&self) -> Result<()>;
}

/// What a backend implements; users call [`FencingSource`], which every
/// `RawSource` is. Lives in [`crate::backend`].
///
/// Its methods return `impl Future + Send` rather than going through
/// `async-trait`: an implementation writes plain `async fn`s, and the
/// boxed future of the `FencingSource` method that calls one holds it
/// inline, one allocation fewer per call. (`RawSource` is never used as
/// `dyn`; [`FencingSource`], which is, keeps `async-trait`.)
pub trait RawSource: Send + Sync + std::fmt::Debug {
    /// Who mints this source's tokens.
    fn identity(&self) -> &SourceId;

    /// What [`FencingSource::acquire`] names in its timeout error, e.g.
    /// `acquire "orders" on etcd [10.0.0.1:2379]`. The default names the
    /// resource and [`RawSource::identity`].
    fn describe_acquire(&self, resource: &ResourceName) -> String {
        format!("acquire {resource:?} from {}", self.identity())
    }

    /// One attempt to take the resource, the one method a backend writes
    /// for both [`FencingSource::acquire`] and
    /// [`FencingSource::try_acquire`]. With [`IfHeld::GiveUp`] it returns
    /// `Ok(None)` when someone holds the resource. With [`IfHeld::Wait`] it
    /// waits in the backend's queue until granted; when the wait is cut
    /// short (`Ok(None)`, or [`Error::Lost`]: the session carrying the
    /// queued request died), `acquire` calls it again.
    fn take(
        &self,
        resource: &ResourceName,
        options: &AcquireOptions,
        if_held: IfHeld,
    ) -> impl Future<Output = Result<Option<Grant>>> + Send;

    /// [`FencingSource::validate`].
    fn validate(&self, grant: &Grant) -> impl Future<Output = Result<bool>> + Send;

    /// [`FencingSource::holder`].
    fn holder(
        &self,
        resource: &ResourceName,
    ) -> impl Future<Output = Result<Option<HolderInfo>>> + Send;

    /// [`FencingSource::close`]; nothing to do by default.
    fn close(&self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }
}

#[async_trait]
impl<T: RawSource> FencingSource for T {
    fn identity(&self) -> &SourceId {
        RawSource::identity(self)
    }

    async fn acquire(&self, resource: &ResourceName, options: &AcquireOptions) -> Result<Grant> {
        // A user's span around the call contains this one, and with it every
        // request and retry of the wait.
        let source = RawSource::identity(self);
        let span = tracing::info_span!("fencing.acquire", %resource, %source, token = tracing::field::Empty);
        let requeued = AtomicUsize::new(0);
        let last_error = std::sync::Mutex::new(None);
        let waiting = wait_requeuing(options.wait.is_some(), &requeued, &last_error, || {
            self.take(resource, options, IfHeld::Wait)
        });
        let started = tokio::time::Instant::now();
        let result = async {
            let Some(limit) = options.wait else {
                return waiting.await;
            };
            match tokio::time::timeout(limit, waiting).await {
                Ok(done) => done,
                Err(_) => {
                    let last = last_error.lock().unwrap_or_else(|p| p.into_inner()).take();
                    let operation = format!(
                        "{}{}{}",
                        self.describe_acquire(resource),
                        requeue_note(&requeued),
                        last.map(|e| format!(" (last error: {e})"))
                            .unwrap_or_default()
                    );
                    Err(wait_ran_out(self, resource, limit, operation).await)
                }
            }
        }
        .instrument(span.clone())
        .await;
        crate::metrics::acquire_finished(started.elapsed(), result.is_ok(), source.as_str());
        if let Ok(grant) = &result {
            span.record("token", grant.token().get());
        }
        result
    }

    async fn try_acquire(
        &self,
        resource: &ResourceName,
        options: &AcquireOptions,
    ) -> Result<Option<Grant>> {
        let source = RawSource::identity(self);
        let span = tracing::info_span!("fencing.try_acquire", %resource, %source, token = tracing::field::Empty);
        let taken = self
            .take(resource, options, IfHeld::GiveUp)
            .instrument(span.clone())
            .await;
        if let Ok(Some(grant)) = &taken {
            span.record("token", grant.token().get());
        }
        taken
    }

    async fn validate(&self, grant: &Grant) -> Result<bool> {
        RawSource::validate(self, grant).await
    }

    async fn holder(&self, resource: &ResourceName) -> Result<Option<HolderInfo>> {
        RawSource::holder(self, resource).await
    }

    async fn close(&self) -> Result<()> {
        RawSource::close(self).await
    }
}

/// A shared source is a source: `Arc<dyn FencingSource>` (what `connect`
/// returns) and `Arc<EtcdSource>` go wherever a source is asked for.
///
/// (`Box<S>` and `&S` cannot have the same: every [`RawSource`] is a
/// `FencingSource`, and a `Box` or reference of another crate's type may
/// implement `RawSource` there. Borrow the source instead: the functions
/// that only use a source for a call take `&S` with `S: ?Sized`, so
/// `&*boxed` is one; those that keep it take it by value.)
#[async_trait]
impl<S: FencingSource + ?Sized> FencingSource for std::sync::Arc<S> {
    fn identity(&self) -> &SourceId {
        (**self).identity()
    }

    async fn acquire(&self, resource: &ResourceName, options: &AcquireOptions) -> Result<Grant> {
        (**self).acquire(resource, options).await
    }

    async fn try_acquire(
        &self,
        resource: &ResourceName,
        options: &AcquireOptions,
    ) -> Result<Option<Grant>> {
        (**self).try_acquire(resource, options).await
    }

    async fn lock(&self, name: &str) -> Result<Grant> {
        (**self).lock(name).await
    }

    async fn lock_within(&self, name: &str, wait: Duration) -> Result<Grant> {
        (**self).lock_within(name, wait).await
    }

    async fn validate(&self, grant: &Grant) -> Result<bool> {
        (**self).validate(grant).await
    }

    async fn holder(&self, resource: &ResourceName) -> Result<Option<HolderInfo>> {
        (**self).holder(resource).await
    }

    async fn close(&self) -> Result<()> {
        (**self).close().await
    }
}

/// What [`RawSource::take`] does when someone else holds the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfHeld {
    /// Queue until granted.
    Wait,
    /// Return `Ok(None)` at once.
    GiveUp,
}

/// Refuses a grant that another source minted. Backends call this first in
/// `validate`.
pub fn ensure_same_source(expected: &SourceId, grant: &Grant) -> Result<()> {
    if grant.source() == expected {
        Ok(())
    } else {
        Err(Error::ForeignSource {
            expected: expected.clone(),
            presented: grant.source().clone(),
        })
    }
}

/// A holder identity a record can keep: 1 to 253 bytes without control
/// characters, else an [`Error::Config`] naming it.
pub fn check_holder(holder: &str) -> Result<()> {
    if holder.is_empty() || holder.len() > 253 || holder.chars().any(char::is_control) {
        return Err(Error::Config(format!(
            "holder identity {holder:?} must be 1 to 253 bytes without control characters"
        )));
    }
    Ok(())
}

/// Runs `fut` under an optional time limit, naming the operation in the error.
pub async fn with_timeout<T>(
    limit: Option<Duration>,
    operation: impl FnOnce() -> String,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match limit {
        None => fut.await,
        Some(after) => match tokio::time::timeout(after, fut).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                operation: operation(),
                after,
            }),
        },
    }
}

/// The waiting loop of [`FencingSource::acquire`]: runs `attempt` again
/// whenever the wait was cut short, until it is granted or the caller's time
/// limit (applied outside, with [`with_timeout`]) ends it. A wait cut short
/// (`Ok(None)`) or a session lost while queued (the member carrying it died,
/// a partition outlived the TTL) queues again; with a time limit
/// (`bounded`), a failed request (timeout, unreachable cluster, backend
/// error) is retried too. Configuration, permission and name errors return
/// at once. `requeued` counts the new attempts, for the timeout message.
async fn wait_requeuing<T, F, Fut>(
    bounded: bool,
    requeued: &AtomicUsize,
    last_error: &std::sync::Mutex<Option<String>>,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    loop {
        let reason = match attempt().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => "the wait was cut short".to_owned(),
            Err(e @ Error::Lost { .. }) => e.to_string(),
            Err(
                e @ (Error::Timeout { .. } | Error::Unreachable { .. } | Error::Backend { .. }),
            ) if bounded => {
                let reason = e.to_string();
                *last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.clone());
                reason
            }
            Err(e) => return Err(e),
        };
        let n = requeued.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(error = %reason, requeued = n, "acquire interrupted while waiting; queueing again");
        // A moment for the cluster or the connection to settle.
        tokio::time::sleep(crate::jitter::jittered(REQUEUE_PAUSE, 1.0)).await;
    }
}

const REQUEUE_PAUSE: Duration = Duration::from_millis(100);

/// How long an acquire whose wait ran out asks who holds the resource.
const ASK_HOLDER: Duration = Duration::from_secs(2);

/// Why an acquire's wait of `waited` ran out: the coordinator names a
/// holder (or answers at all) within [`ASK_HOLDER`]: [`Error::Contended`];
/// it does not: [`Error::Timeout`] for `operation`.
async fn wait_ran_out<S: RawSource + ?Sized>(
    source: &S,
    resource: &ResourceName,
    waited: Duration,
    operation: String,
) -> Error {
    match tokio::time::timeout(ASK_HOLDER.min(waited), source.holder(resource)).await {
        Ok(Ok(holder)) => Error::Contended {
            resource: resource.clone(),
            holder: holder.map(|h| h.holder),
            waited,
        },
        _ => Error::Timeout {
            operation,
            after: waited,
        },
    }
}

/// Appended to an acquire's timeout message: how often it queued again.
fn requeue_note(requeued: &AtomicUsize) -> String {
    match requeued.load(Ordering::Relaxed) {
        0 => String::new(),
        n => format!(" (queued again {n} times after losing its session or a request)"),
    }
}

/// A default holder identity: host name, process id and a random suffix.
#[must_use]
pub fn default_holder_identity() -> String {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &suffix[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails with each error of `errors` in turn, then succeeds.
    fn scripted(errors: Vec<Error>) -> impl FnMut() -> std::future::Ready<Result<Option<u8>>> {
        let mut errors = errors.into_iter();
        move || std::future::ready(errors.next().map_or(Ok(Some(7)), Err))
    }

    fn timeout() -> Error {
        Error::Timeout {
            operation: "lock txn".into(),
            after: Duration::from_secs(1),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_session_queues_again_and_counts() {
        let n = AtomicUsize::new(0);
        let lost = || {
            Error::lost(
                &ResourceName::new("r").unwrap(),
                "session lost while waiting",
            )
        };
        let got = wait_requeuing(
            false,
            &n,
            &Default::default(),
            scripted(vec![lost(), lost()]),
        )
        .await;
        assert_eq!(got.unwrap(), 7);
        assert_eq!(
            requeue_note(&n),
            " (queued again 2 times after losing its session or a request)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failed_requests_are_retried_only_within_a_bound() {
        let n = AtomicUsize::new(0);
        assert!(
            wait_requeuing(false, &n, &Default::default(), scripted(vec![timeout()]))
                .await
                .is_err()
        );
        assert_eq!(
            wait_requeuing(true, &n, &Default::default(), scripted(vec![timeout()]))
                .await
                .unwrap(),
            7
        );
        let refused = scripted(vec![Error::PermissionDenied("no".into())]);
        assert!(matches!(
            wait_requeuing(true, &n, &Default::default(), refused).await,
            Err(Error::PermissionDenied(_))
        ));
        assert_eq!(
            requeue_note(&n),
            " (queued again 1 times after losing its session or a request)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_cut_short_queues_again() {
        let n = AtomicUsize::new(0);
        let mut answers = vec![Ok(None), Ok(None), Ok(Some(7))].into_iter();
        let got = wait_requeuing(false, &n, &Default::default(), || {
            std::future::ready(answers.next().unwrap())
        })
        .await;
        assert_eq!(got.unwrap(), 7);
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }

    /// A source whose every attempt fails with a backend error and whose
    /// holder query never answers: a silent cluster.
    #[derive(Debug)]
    struct Silent(SourceId);

    impl RawSource for Silent {
        fn identity(&self) -> &SourceId {
            &self.0
        }
        async fn take(
            &self,
            _: &ResourceName,
            _: &AcquireOptions,
            _: IfHeld,
        ) -> Result<Option<Grant>> {
            Err(Error::backend("test take", "connection refused"))
        }
        async fn validate(&self, _: &Grant) -> Result<bool> {
            Ok(false)
        }
        async fn holder(&self, _: &ResourceName) -> Result<Option<HolderInfo>> {
            std::future::pending().await
        }
    }

    /// A wait bound that runs out on a cluster that does not answer is a
    /// timeout naming the last error, not contention (issue 55, item 2:
    /// both were the same `Timeout`).
    #[tokio::test(start_paused = true)]
    async fn a_silent_cluster_times_out_with_its_last_error() {
        let source = Silent(SourceId::new("test:silent"));
        let r = ResourceName::new("r").unwrap();
        let opts = AcquireOptions::new().wait(Duration::from_secs(1));
        match source.acquire(&r, &opts).await {
            Err(Error::Timeout { operation, after }) => {
                assert_eq!(after, Duration::from_secs(1));
                assert!(
                    operation.contains("last error") && operation.contains("connection refused"),
                    "{operation}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// A wait bound that runs out while someone else holds the resource is
    /// `Contended`, naming the holder (issue 55, item 2).
    #[cfg(feature = "local")]
    #[tokio::test]
    async fn a_wait_that_runs_out_on_a_held_lock_is_contended() {
        let dir = tempfile::tempdir().unwrap();
        let source = crate::LocalSource::open(dir.path()).unwrap();
        let r = ResourceName::new("r").unwrap();
        let held = source
            .acquire(&r, &AcquireOptions::new().holder("first"))
            .await
            .unwrap();
        let opts = AcquireOptions::new().wait(Duration::from_millis(300));
        match source.acquire(&r, &opts).await {
            Err(Error::Contended {
                resource,
                holder,
                waited,
            }) => {
                assert_eq!(resource, r);
                assert_eq!(holder.as_deref(), Some("first"));
                assert_eq!(waited, Duration::from_millis(300));
            }
            other => panic!("{other:?}"),
        }
        held.release().await.unwrap();
    }
}
