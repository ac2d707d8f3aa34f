//! ZkSource clients on a real ensemble: direct, or through proxies that a
//! test can blackhole; and the conformance-suite harness built on them.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use fencing_testkit::{Client, Harness};
use fencing_zookeeper::{ZkConfig, ZkSource};

use crate::etcd::fixture::Partition;
use crate::fixture::Fixture;
use crate::zk::ensemble::{ZkEnsemble, ZkOptions, ZkVersion};

/// Session timeout the ZooKeeper tests ask for.
pub const TEST_SESSION_TIMEOUT: Duration = Duration::from_secs(2);

/// A running 3-server ensemble and the settings of its clients.
pub struct ZkFixture {
    /// The ensemble (killed and removed on drop).
    pub ensemble: ZkEnsemble,
    /// The lock path the test's sources use.
    pub path: String,
    /// The ensemble name every client of this fixture shares (the source
    /// identity must not depend on whether a client goes through proxies).
    pub name: String,
}

impl ZkFixture {
    /// Starts an ensemble of `servers` servers.
    pub async fn start_with(version: ZkVersion, servers: usize) -> ZkFixture {
        Self::start_options(ZkOptions::new(version, servers)).await
    }

    /// Starts an ensemble as `options` say.
    pub async fn start_options(options: ZkOptions) -> ZkFixture {
        let version = options.version;
        let ensemble = ZkEnsemble::start_with(options)
            .await
            .unwrap_or_else(|e| panic!("start {version}: {e}"));
        let name = format!("test-{}", ensemble.dir().display());
        ZkFixture {
            ensemble,
            path: "/fencing-test/locks".into(),
            name,
        }
    }

    /// Settings for a client of `hosts`.
    pub fn config(&self, hosts: Vec<String>) -> ZkConfig {
        ZkConfig::new(hosts, self.path.clone())
            .expect("valid config")
            .ensemble(self.name.clone())
            .ttl(TEST_SESSION_TIMEOUT)
            .request_timeout(Duration::from_secs(3))
    }
}

impl Fixture for ZkFixture {
    type Version = ZkVersion;
    type Source = ZkSource;
    type Cluster = ZkEnsemble;

    /// Starts a 3-server ensemble of `version`.
    async fn start(version: ZkVersion) -> ZkFixture {
        Self::start_with(version, 3).await
    }

    /// A client connected straight to every server.
    async fn source(&self) -> ZkSource {
        ZkSource::connect(self.config(self.ensemble.endpoints()))
            .await
            .expect("connect")
    }

    /// A client whose connections all go through proxies a test can blackhole.
    async fn partitionable_source(&self) -> (ZkSource, Partition) {
        let (partition, hosts) = Partition::around(self.ensemble.endpoints()).await;
        let source = ZkSource::connect(self.config(hosts))
            .await
            .expect("connect via proxies");
        (source, partition)
    }

    fn cluster_mut(&mut self) -> &mut ZkEnsemble {
        &mut self.ensemble
    }

    fn queued(
        &self,
        observer: &Self::Source,
        resource: &str,
    ) -> impl Future<Output = usize> + Send {
        let dir = format!("{}/{resource}", self.path);
        async move {
            match observer.client().await {
                Ok(client) => client.list_children(&dir).await.map_or(0, |c| c.len()),
                Err(_) => 0,
            }
        }
    }

    fn waiter_wakeups(source: &Self::Source) -> u64 {
        source.waiter_wakeups()
    }
}

#[async_trait]
impl Harness for ZkFixture {
    async fn client(&self) -> Client {
        Client::of(self.partitionable_source().await)
    }

    fn ttl(&self) -> Duration {
        TEST_SESSION_TIMEOUT
    }

    async fn queued(&self, resource: &fencing::ResourceName) -> Option<usize> {
        let client = self.source().await.client().await.ok()?;
        let dir = format!("{}/{resource}", self.path);
        Some(client.list_children(&dir).await.map_or(0, |c| c.len()))
    }
}
