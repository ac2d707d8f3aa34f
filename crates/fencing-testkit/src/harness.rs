//! What a backend provides to run the conformance suite.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::{FencingSource, LocalSource, ResourceName};

/// Makes a client stop renewing without releasing: a frozen process or a
/// partitioned network, as the backend can best produce it.
#[async_trait]
pub trait Stall: Send + Sync {
    /// From now on this client's renewals no longer reach the coordinator.
    async fn stall(&self);
}

/// One independent client of the source under test.
pub struct Client {
    /// The client's source; grants it mints belong to this client alone.
    pub source: Arc<dyn FencingSource>,
    staller: Box<dyn Stall>,
}

impl Client {
    /// Pairs a source with the way to stall it.
    pub fn new(source: Arc<dyn FencingSource>, staller: impl Stall + 'static) -> Self {
        Client {
            source,
            staller: Box::new(staller),
        }
    }

    /// A source that is its own staller is one client: `(source, partition)`
    /// as the harnesses' partitionable sources come.
    pub fn of<S: FencingSource + 'static>(pair: (S, impl Stall + 'static)) -> Self {
        Client::new(Arc::new(pair.0), pair.1)
    }

    /// Stops this client's renewals (see [`Stall`]).
    pub async fn stall(&self) {
        self.staller.stall().await;
    }
}

/// A backend's entry into the conformance suite.
#[async_trait]
pub trait Harness: Send + Sync {
    /// A new client with its own session or connection to the coordinator.
    async fn client(&self) -> Client;

    /// The lease length the checks acquire with: short, so expiry checks
    /// finish quickly, but long enough for a loaded machine (2 s or more).
    fn ttl(&self) -> Duration;

    /// How many contenders (holder and waiters) are queued on `resource`
    /// at the coordinator, for backends with a visible queue (etcd keys,
    /// ZooKeeper nodes); `None` where there is none to see.
    async fn queued(&self, _resource: &ResourceName) -> Option<usize> {
        None
    }

    /// A resource name no other check or earlier run uses.
    fn resource(&self, check: &str) -> ResourceName {
        let suffix = uuid_like();
        let check: String = check
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        ResourceName::new(format!("conformance-{check}-{suffix}")).expect("valid generated name")
    }
}

fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}", std::process::id(), nanos & 0xffff_ffff)
}

/// Stalls a [`LocalSource`] by pausing its renewal tasks.
#[async_trait]
impl Stall for LocalSource {
    async fn stall(&self) {
        self.pause_renewals(true);
    }
}

/// The harness for the embedded [`LocalSource`]: every client opens the same
/// directory separately, as separate processes would.
pub struct LocalHarness {
    dir: tempfile::TempDir,
    ttl: Duration,
}

impl LocalHarness {
    /// A fresh state directory.
    #[must_use]
    pub fn new(ttl: Duration) -> Self {
        LocalHarness {
            dir: tempfile::tempdir().expect("temp dir"),
            ttl,
        }
    }
}

#[async_trait]
impl Harness for LocalHarness {
    async fn client(&self) -> Client {
        let source = LocalSource::open(self.dir.path()).expect("open local source");
        Client::new(Arc::new(source.clone()), source)
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }
}
