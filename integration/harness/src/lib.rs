//! The real-cluster harness the integration tests, the fault campaign and
//! the benchmarks share: clusters on loopback, one folder per backend
//! ([`etcd`], [`zk`], [`kubernetes`], [`postgres`]); clusters whose members
//! live in network namespaces ([`namespaced`]); the parts they share
//! ([`process`] and [`member`] for processes that are always reaped, [`pki`]
//! for certificates, [`ports`] and [`cache`] for the machine); the partition
//! tools ([`net`]: network namespaces and a TCP proxy); the scenarios run on
//! every backend ([`scenarios`], [`durability`], [`frozen`]).

pub mod cache;
pub mod durability;
pub mod etcd;
pub mod fixture;
pub mod frozen;
pub mod kubernetes;
pub mod markup;
pub mod member;
pub mod namespaced;
pub mod net;
pub mod pki;
pub mod ports;
pub mod postgres;
pub mod process;
pub mod scenarios;
pub mod zk;

pub use process::Reaped;

/// One module of tests: each `scenario` becomes a test calling
/// `super::scenario(version)`. Used by the `on_both_*_versions` macros.
#[macro_export]
macro_rules! version_tests {
    ($version:expr, $module:ident, [$($scenario:ident),*]) => {
        mod $module { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() { super::$scenario($version).await }
        )* }
    };
}

/// Expands each `async fn scenario(version: EtcdVersion)` of the calling
/// test file into one test per etcd release: `v3_4::scenario` and
/// `v3_6::scenario`.
#[macro_export]
macro_rules! on_both_etcd_versions {
    ($($scenario:ident),* $(,)?) => {
        $crate::version_tests!($crate::etcd::cluster::EtcdVersion::V3_4, v3_4, [$($scenario),*]);
        $crate::version_tests!($crate::etcd::cluster::EtcdVersion::V3_6, v3_6, [$($scenario),*]);
    };
}

/// The same for `async fn scenario(version: ZkVersion)`: `v3_8::scenario`
/// and `v3_9::scenario`.
#[macro_export]
macro_rules! on_both_zk_versions {
    ($($scenario:ident),* $(,)?) => {
        $crate::version_tests!($crate::zk::ensemble::ZkVersion::V3_8, v3_8, [$($scenario),*]);
        $crate::version_tests!($crate::zk::ensemble::ZkVersion::V3_9, v3_9, [$($scenario),*]);
    };
}
