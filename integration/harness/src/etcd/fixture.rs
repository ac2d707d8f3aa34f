//! EtcdSource clients on a real cluster: direct, or through proxies that a
//! test can blackhole; and the conformance-suite harness built on them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_testkit::{Client, Harness, Stall};

use crate::etcd::cluster::{EtcdCluster, EtcdVersion};
use crate::fixture::Fixture;
use crate::net::proxy::Proxy;

/// Lease length the etcd tests use: short, but well above etcd's minimum.
pub const TEST_TTL: Duration = Duration::from_secs(2);

/// A running 3-member cluster and a lock prefix unique to one test.
pub struct EtcdFixture {
    /// The cluster (killed and removed on drop).
    pub cluster: EtcdCluster,
    /// The key prefix the test's sources use.
    pub prefix: String,
}

impl EtcdFixture {
    /// Settings for a client of `endpoints`.
    pub fn config(&self, endpoints: Vec<String>) -> EtcdConfig {
        EtcdConfig::new(endpoints, self.prefix.clone())
            .expect("valid config")
            .ttl(TEST_TTL)
            .request_timeout(Duration::from_secs(2))
    }
}

/// The proxies of one client: blackholing them partitions it.
#[derive(Clone)]
pub struct Partition(Arc<Vec<Proxy>>);

impl Partition {
    /// One proxy in front of each of `endpoints`; returns the partition and
    /// the proxies' endpoints for the client to use instead.
    pub async fn around(endpoints: Vec<String>) -> (Self, Vec<String>) {
        let mut proxies = Vec::new();
        for ep in endpoints {
            let target = ep.parse().expect("endpoint address");
            proxies.push(Proxy::start(target).await.expect("proxy"));
        }
        let through = proxies.iter().map(Proxy::endpoint).collect();
        (Partition(Arc::new(proxies)), through)
    }

    /// Cuts (or restores) the client's network.
    pub fn set(&self, cut: bool) {
        for p in self.0.iter() {
            p.set_blackhole(cut);
        }
    }

    /// Drops (or forwards again) every answer to the client; its requests
    /// still reach the cluster.
    pub fn set_replies_dropped(&self, on: bool) {
        for p in self.0.iter() {
            p.set_replies_dropped(on);
        }
    }

    /// Closes every connection the client has open now.
    pub fn cut_connections(&self) {
        for p in self.0.iter() {
            p.cut_connections();
        }
    }
}

#[async_trait]
impl Stall for Partition {
    async fn stall(&self) {
        self.set(true);
    }
}

impl Fixture for EtcdFixture {
    type Version = EtcdVersion;
    type Source = EtcdSource;
    type Cluster = EtcdCluster;

    /// Starts a 3-member cluster of `version`.
    async fn start(version: EtcdVersion) -> EtcdFixture {
        if std::env::var_os("FENCING_TEST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter("fencing_etcd=debug")
                .with_test_writer()
                .try_init();
        }
        let cluster = EtcdCluster::start(version, 3)
            .await
            .unwrap_or_else(|e| panic!("start {version}: {e}"));
        EtcdFixture {
            cluster,
            prefix: "/fencing-test".into(),
        }
    }

    /// A client connected straight to every member.
    async fn source(&self) -> EtcdSource {
        EtcdSource::connect(self.config(self.cluster.endpoints()))
            .await
            .expect("connect")
    }

    /// A client whose every connection goes through a proxy the test can
    /// blackhole.
    async fn partitionable_source(&self) -> (EtcdSource, Partition) {
        let (partition, endpoints) = Partition::around(self.cluster.endpoints()).await;
        let source = EtcdSource::connect(self.config(endpoints))
            .await
            .expect("connect via proxies");
        (source, partition)
    }

    fn cluster_mut(&mut self) -> &mut EtcdCluster {
        &mut self.cluster
    }

    fn queued(
        &self,
        observer: &Self::Source,
        resource: &str,
    ) -> impl Future<Output = usize> + Send {
        let (mut client, dir) = (observer.client(), format!("{}/{resource}/", self.prefix));
        async move {
            let count = etcd_client::GetOptions::new()
                .with_prefix()
                .with_count_only();
            client
                .get(dir, Some(count))
                .await
                .map_or(0, |r| r.count() as usize)
        }
    }

    fn waiter_wakeups(source: &Self::Source) -> u64 {
        source.waiter_wakeups()
    }
}

#[async_trait]
impl Harness for EtcdFixture {
    async fn client(&self) -> Client {
        Client::of(self.partitionable_source().await)
    }

    fn ttl(&self) -> Duration {
        TEST_TTL
    }

    async fn queued(&self, resource: &fencing::ResourceName) -> Option<usize> {
        let dir = format!("{}/{resource}/", self.prefix);
        let mut client = self.source().await.client();
        let count = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        Some(client.get(dir, Some(count)).await.ok()?.count() as usize)
    }
}
