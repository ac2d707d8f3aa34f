//! The contract every coordinator backend implements.

use std::time::Duration;

use async_trait::async_trait;

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
///     .ttl(Duration::from_secs(10))
///     .timeout(Duration::from_secs(30))
///     .holder("worker-7");
/// assert_eq!(opts.ttl, Some(Duration::from_secs(10)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcquireOptions {
    /// Lease length; `None` takes the source's default.
    pub ttl: Option<Duration>,
    /// Give up with [`Error::Timeout`] after this long; `None` waits until
    /// granted or until the future is dropped.
    pub timeout: Option<Duration>,
    /// Holder identity shown by [`FencingSource::holder`]; `None` takes the
    /// source's own (host name, process id and a random suffix).
    pub holder: Option<String>,
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

    /// Sets how long acquire may wait.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the holder identity.
    #[must_use]
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }
}

/// A coordinator that grants locks with fencing tokens.
///
/// Object safe: keep one as `Arc<dyn FencingSource>` and switch backends by
/// configuration. Every method is cancel-safe in the sense that dropping its
/// future leaves no grant that keeps renewing; a grant minted just before the
/// drop expires after its TTL.
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

    /// Waits until the resource is granted, the options' timeout passes
    /// ([`Error::Timeout`]), or the future is dropped.
    async fn acquire(&self, resource: &ResourceName, options: &AcquireOptions) -> Result<Grant>;

    /// Takes the resource if it is free now; `Ok(None)` when someone holds it.
    async fn try_acquire(
        &self,
        resource: &ResourceName,
        options: &AcquireOptions,
    ) -> Result<Option<Grant>>;

    /// Asks the coordinator whether this grant is still the current one.
    /// A grant from another source is an [`Error::ForeignSource`].
    async fn validate(&self, grant: &Grant) -> Result<bool>;

    /// The current holder of a resource, if any.
    async fn holder(&self, resource: &ResourceName) -> Result<Option<HolderInfo>>;
}

/// Refuses a grant that another source minted. Backends call this first in
/// `validate`.
pub fn ensure_same_source(expected: &SourceId, grant: &Grant) -> Result<()> {
    if grant.source() == expected {
        Ok(())
    } else {
        Err(Error::ForeignSource {
            expected: expected.to_string(),
            presented: grant.source().to_string(),
        })
    }
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
