//! Locks and leases whose every grant carries a fencing token, and the
//! storage-side gates that refuse writes made with a superseded token.
//!
//! This crate re-exports everything from [`fencing_core`] and adds
//! [`connect`], which picks a coordinator backend from a URL so that
//! applications can switch backends by configuration alone.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing::Result<()> {
//! use fencing::{AcquireOptions, FencingSource, Gate, GrantInfo, MemoryGate, ResourceName};
//! use tokio::sync::Mutex;
//!
//! /// The storage's side: the token check and the write are one step (here
//! /// under the store's lock; in a database, one conditional UPDATE).
//! struct Store {
//!     gate: MemoryGate,
//!     value: Mutex<String>,
//! }
//!
//! impl Store {
//!     async fn write(&self, from: &GrantInfo, value: &str) -> fencing::Result<()> {
//!         let mut current = self.value.lock().await;
//!         self.gate.admit_grant(from).await?; // Err(Stale) once superseded
//!         *current = value.to_owned();
//!         Ok(())
//!     }
//! }
//!
//! let dir = tempfile::tempdir().unwrap();
//! let source = fencing::connect(&format!("local://{}?ttl=5", dir.path().display())).await?;
//! let ledger = ResourceName::new("ledger")?;
//! let store = Store { gate: MemoryGate::new(), value: Mutex::default() };
//!
//! let grant = source.acquire(&ledger, &AcquireOptions::new()).await?;
//! assert_eq!(grant.ttl(), std::time::Duration::from_secs(5));
//! store.write(grant.info(), "balance=100").await?; // the token goes with the write
//! grant.release().await?;
//!
//! // Backends that are not built in, and malformed URLs, are refused with
//! // a clear message.
//! assert!(fencing::connect("kube://").await.is_err());
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! | --- | --- |
//! | `local` (default) | `local://` URLs, [`LocalSource`] and [`FileGate`] |
//! | `aws-lc-rs` (default) | the rustls crypto provider of the etcd and Kubernetes clients |
//! | `ring` | ring instead (see [TLS crypto provider](#tls-crypto-provider)) |
//! | `etcd` | `etcd://` and `etcds://` URLs, `fencing::etcd` (building it needs `protoc`) |
//! | `zookeeper` | `zk://` URLs, `fencing::zookeeper` |
//! | `kube` | `kube://` URLs, `fencing::kube`; the application picks a `k8s-openapi` version feature |
//! | `postgres` | `postgres://` URLs (a lock table), fence columns and tables in PostgreSQL, `fencing::postgres` |
//! | `http` | a tower layer that fences an HTTP store, `fencing::http` |
//! | `metrics` | acquire, loss, refusal and leadership figures through the `metrics` facade |
//!
//! Leader election ([`election`]) is always built in.
//!
//! # TLS crypto provider
//!
//! TLS runs on rustls, whose crypto provider is a process-wide choice that
//! belongs to the application: no crate here installs one. With exactly
//! one provider compiled in (the default, `aws-lc-rs`) rustls picks it by
//! itself. The ZooKeeper client always compiles aws-lc-rs, so `ring`
//! together with `zookeeper` (or another provider your dependencies bring)
//! links two, and the application installs one at start-up:
//!
//! ```ignore
//! rustls::crypto::ring::default_provider().install_default().expect("first install");
//! ```
//!
//! Without that, [`connect`] refuses `kube://` and TLS `zk://` URLs with an
//! [`Error::Config`] that names this fix, instead of letting rustls panic.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "zookeeper", feature = "kube"))]
mod tls;
mod url;

/// The I/O-free core, whole: everything below is re-exported from it, and
/// [`core::backend`] holds what only authors of backends and gates need.
pub use fencing_core as core;

pub use fencing_core::{
    default_holder_identity, fenced, AcquireOptions, BoxError, Credentials, Error, Fenced,
    FencingSource, FencingToken, Gate, Grant, GrantInfo, HolderInfo, LeaderTimings, LeaseView,
    LossReason, Mark, MemoryGate, ResourceName, Result, SourceId, TlsFiles, ValidatingGate,
    WorkError, DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD,
    MAX_RESOURCE_LEN, PORTABLE_RULE,
};
/// The file-backed parts; feature `local` (on by default).
#[cfg(feature = "local")]
#[cfg_attr(docsrs, doc(cfg(feature = "local")))]
pub use fencing_core::{FileGate, LocalSource, DEFAULT_LOCAL_TTL, MIN_LOCAL_TTL};

use std::sync::Arc;

pub use url::{SourceUrl, KNOWN_SCHEMES};

/// The etcd backend ([`EtcdSource`](fencing_etcd::EtcdSource),
/// [`EtcdGate`](fencing_etcd::EtcdGate)); feature `etcd`.
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use fencing_etcd as etcd;

/// The ZooKeeper backend ([`ZkSource`](fencing_zookeeper::ZkSource),
/// [`ZkGate`](fencing_zookeeper::ZkGate)); feature `zookeeper`.
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use fencing_zookeeper as zookeeper;

/// The PostgreSQL backend ([`PgSource`](fencing_postgres::PgSource)) and
/// gates inside PostgreSQL ([`FencedUpdate`](fencing_postgres::FencedUpdate),
/// [`FenceTable`](fencing_postgres::FenceTable)); feature `postgres`.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use fencing_postgres as postgres;

/// The Kubernetes backend ([`KubeLeaseSource`](fencing_kube::KubeLeaseSource));
/// feature `kube`. Enable a k8s-openapi version feature in your application.
#[cfg(feature = "kube")]
#[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
pub use fencing_kube as kube;

/// A gate for HTTP stores ([`FencingLayer`](fencing_http::FencingLayer));
/// feature `http`.
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use fencing_http as http;

/// Leader election over any source, with client-go's names and defaults
/// ([`LeaderElector`](fencing_election::LeaderElector)); each term carries
/// its own fencing token.
pub use fencing_election as election;

/// Opens the fencing source a URL names.
///
/// Supported:
///
/// - `local://DIR` — a [`LocalSource`] in `DIR`, absolute (`local:///var/lib/fencing`)
///   or relative to the working directory (`local://./state`, `local://state`).
///   An optional `?ttl=SECS` (decimal seconds, e.g. `ttl=2.5`) sets the default
///   lease length used when [`AcquireOptions`] give none.
///
/// - `etcd://HOST:PORT[,HOST:PORT...]/PREFIX[?ttl=SECS&request_timeout=SECS&user=U&password=P]`
///   and `etcds://...?ca=&cert=&key=&domain=` — an etcd cluster (feature
///   `etcd`; see `fencing_etcd::EtcdConfig::from_url`).
///
/// - `zk://HOST:PORT[,HOST:PORT...]/PATH[?ttl=SECS&request_timeout=SECS&ensemble=NAME&user=U&password=P]`
///   — a ZooKeeper ensemble (feature `zookeeper`; see
///   `fencing_zookeeper::ZkConfig::from_url`).
///
/// - `kube://NAMESPACE[?kubeconfig=PATH&context=NAME&ttl=SECS&renew_deadline=SECS&retry_period=SECS&request_timeout=SECS&cluster=NAME]`
///   — Kubernetes Leases in NAMESPACE, compatible with client-go's
///   leader election (feature `kube`; see `fencing_kube::KubeLeaseConfig::from_url`).
///   Without `kubeconfig=` the client comes from `KUBECONFIG`,
///   `~/.kube/config` or the in-cluster service account.
///
/// - `postgres://[USER[:PASSWORD]@]HOST[:PORT][,...]/DB[?table=&ttl=&request_timeout=&...]`
///   — a lock table in PostgreSQL (feature `postgres`; see
///   `fencing_postgres::PgConfig::from_url`). libpq's URL, so
///   `target_session_attrs=read-write` finds the primary after a failover.
///   The schema must exist (`PgSource::create_schema`, `fence schema`).
///
/// A scheme whose backend is not part of this build, unknown schemes and
/// malformed URLs give [`Error::Config`] naming the problem.
///
/// Opening a local directory is blocking file I/O, so it runs on tokio's
/// blocking pool; call this from inside a tokio runtime.
pub async fn connect(url: &str) -> Result<Arc<dyn FencingSource>> {
    match SourceUrl::parse(url)? {
        #[cfg(feature = "local")]
        SourceUrl::Local { dir, default_ttl } => {
            let shown = dir.display().to_string();
            let source = tokio::task::spawn_blocking(move || {
                LocalSource::open_with_ttl(&dir, default_ttl.unwrap_or(DEFAULT_LOCAL_TTL))
            })
            .await
            .map_err(|e| Error::backend("opening the local source", e))??;
            tracing::debug!(dir = %shown, identity = %source.identity(), "connected to local source");
            Ok(Arc::new(source))
        }
        #[cfg(feature = "etcd")]
        SourceUrl::Etcd(cfg) => Ok(Arc::new(fencing_etcd::EtcdSource::connect(cfg).await?)),
        #[cfg(feature = "zookeeper")]
        SourceUrl::Zk(cfg) => {
            if cfg.tls.is_some() {
                tls::check_provider("zk:// with ca=")?;
            }
            Ok(Arc::new(fencing_zookeeper::ZkSource::connect(cfg).await?))
        }
        #[cfg(feature = "kube")]
        SourceUrl::Kube(cfg) => {
            tls::check_provider("kube://")?;
            Ok(Arc::new(fencing_kube::KubeLeaseSource::connect(cfg).await?))
        }
        #[cfg(feature = "postgres")]
        SourceUrl::Postgres(cfg) => Ok(Arc::new(fencing_postgres::PgSource::connect(*cfg).await?)),
    }
}

#[cfg(all(test, feature = "local"))]
mod tests {
    use super::*;
    use std::time::Duration;

    fn config_message(result: Result<Arc<dyn FencingSource>>) -> String {
        match result {
            Err(Error::Config(msg)) => msg,
            Err(other) => panic!("expected a config error, got {other:?}"),
            Ok(source) => panic!("expected a config error, got {source:?}"),
        }
    }

    #[tokio::test]
    async fn local_url_with_absolute_path_grants_increasing_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("local://{}", dir.path().join("state").display());
        let source = connect(&url).await.unwrap();
        let r = ResourceName::new("job").unwrap();
        let first = source.acquire(&r, &AcquireOptions::new()).await.unwrap();
        let t1 = first.token();
        first.release().await.unwrap();
        let second = source.acquire(&r, &AcquireOptions::new()).await.unwrap();
        assert!(second.token() > t1);
        assert_eq!(second.ttl(), DEFAULT_LOCAL_TTL);
        second.release().await.unwrap();
        assert!(dir.path().join("state").is_dir());
    }

    #[tokio::test]
    async fn ttl_query_sets_the_default_lease_length() {
        let dir = tempfile::tempdir().unwrap();
        let source = connect(&format!("local://{}?ttl=2.5", dir.path().display()))
            .await
            .unwrap();
        let r = ResourceName::new("job").unwrap();
        let grant = source.acquire(&r, &AcquireOptions::new()).await.unwrap();
        assert_eq!(grant.ttl(), Duration::from_millis(2500));
        grant.release().await.unwrap();
    }

    #[tokio::test]
    async fn ttl_below_the_local_minimum_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let msg =
            config_message(connect(&format!("local://{}?ttl=0.1", dir.path().display())).await);
        assert!(msg.contains("300ms"), "{msg}");
    }

    #[tokio::test]
    async fn missing_backends_name_their_scheme() {
        let missing = [
            ("etcd://127.0.0.1:2379", "`etcd`", cfg!(feature = "etcd")),
            (
                "etcds://etcd.example:2379",
                "`etcd`",
                cfg!(feature = "etcd"),
            ),
            (
                "zk://zk1:2181/locks",
                "`zookeeper`",
                cfg!(feature = "zookeeper"),
            ),
            ("kube://default", "`kube`", cfg!(feature = "kube")),
        ];
        for (url, feature, _) in missing.into_iter().filter(|(_, _, built)| !built) {
            let msg = config_message(connect(url).await);
            assert!(
                msg.contains("this build has no backend") && msg.contains(feature),
                "{url}: {msg}"
            );
        }
    }

    #[cfg(feature = "etcd")]
    #[tokio::test]
    async fn etcd_urls_are_checked_before_connecting() {
        let msg = config_message(connect("etcd://127.0.0.1:2379").await);
        assert!(msg.contains("prefix"), "{msg}");
        let unreachable = connect("etcd://127.0.0.1:1/locks?request_timeout=0.5").await;
        match unreachable {
            Err(e @ Error::Unreachable { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains("127.0.0.1:1") && text.contains("refused"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[cfg(feature = "kube")]
    #[tokio::test]
    async fn kube_url_with_a_missing_kubeconfig_names_the_path() {
        let msg = config_message(connect("kube://team-a?kubeconfig=/nonexistent/kube.conf").await);
        assert!(msg.contains("/nonexistent/kube.conf"), "{msg}");
    }

    #[tokio::test]
    async fn unknown_scheme_lists_the_known_ones() {
        let msg = config_message(connect("redis://localhost").await);
        assert!(msg.contains("\"redis\""), "{msg}");
        for known in KNOWN_SCHEMES {
            assert!(msg.contains(known), "{msg} lacks {known}");
        }
    }

    #[tokio::test]
    async fn malformed_urls_are_config_errors() {
        for bad in [
            "",
            "   ",
            "nonsense",
            "local://",
            "local://?ttl=3",
            "://x",
            "local://d?ttl=abc",
        ] {
            let msg = config_message(connect(bad).await);
            assert!(!msg.is_empty(), "{bad:?}");
        }
    }
}
