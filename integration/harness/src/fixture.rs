//! What the etcd and ZooKeeper test fixtures share ([`crate::etcd::fixture`],
//! [`crate::zk::fixture`] implement it), so that a scenario
//! of [`crate::scenarios`] is written once and run on both: a fresh
//! 3-member cluster of one release, clients straight to every member, and
//! clients behind a [`Partition`] the test can cut.

use std::future::Future;

use fencing::FencingSource;

use crate::etcd::fixture::Partition;
use crate::member::MemberCluster;

/// A backend's fixture; see the module.
pub trait Fixture: Sized + Send + Sync {
    /// The releases it runs (`EtcdVersion`, `ZkVersion`).
    type Version: Copy + Send;
    /// Its backend's source.
    type Source: FencingSource + Clone + 'static;
    /// Its cluster's process control.
    type Cluster: MemberCluster;

    /// A fresh 3-member cluster of `version`.
    fn start(version: Self::Version) -> impl Future<Output = Self> + Send;
    /// A client connected straight to every member.
    fn source(&self) -> impl Future<Output = Self::Source> + Send;
    /// A client whose every connection goes through a proxy the test cuts.
    fn partitionable_source(&self) -> impl Future<Output = (Self::Source, Partition)> + Send;
    /// The members, to kill, pause and restart.
    fn cluster_mut(&mut self) -> &mut Self::Cluster;
    /// How many contenders (the holder among them) the cluster has queued
    /// on lock `resource`, asked through `observer`'s connection.
    fn queued(&self, observer: &Self::Source, resource: &str)
        -> impl Future<Output = usize> + Send;
    /// How often `source`'s waiters woke to look at the queue.
    fn waiter_wakeups(source: &Self::Source) -> u64;
}

/// Awaits a cluster's `start`, panicking with `what` and the error if it
/// failed, and logs how long it took (the harness's own tests report it).
pub async fn started<T, E: std::fmt::Display>(
    what: impl std::fmt::Display,
    start: impl Future<Output = Result<T, E>>,
) -> T {
    let t = std::time::Instant::now();
    let cluster = start
        .await
        .unwrap_or_else(|e| panic!("{what} did not start: {e}"));
    eprintln!("{what} ready after {:?}", t.elapsed());
    cluster
}

/// The resource `name`, which a test spells out; panics if it is no valid
/// resource name.
pub fn resource(name: &str) -> fencing::ResourceName {
    fencing::ResourceName::new(name).unwrap_or_else(|e| panic!("resource {name:?}: {e}"))
}
