//! The etcd backend of `fencing`.
//!
//! - [`EtcdSource`]: locks whose fencing token is the create revision of
//!   the holder's key, in the key layout of Go's `concurrency.Mutex`
//!   (`PREFIX/RESOURCE/<lease id hex>`), so Go and Rust share locks;
//! - sessions kept alive by our own loop at TTL/3; a grant is lost when a
//!   keep-alive answers TTL 0, when renewals stop reaching the cluster until
//!   the local deadline, or when its key is deleted;
//! - [`EtcdGate`]: high-water marks kept in etcd; and
//!   [`EtcdSource::guarded_txn`] for data kept in etcd itself.
//!
//! Tokens are compared only within one cluster id (the source identity,
//! `etcd:<cluster id>`). A restore does **not** give a new id: the cluster
//! id is derived from the member ids, which are derived from the peer URLs
//! and `--initial-cluster-token`, so `etcdutl snapshot restore` with the
//! same `--initial-cluster` and token brings back the same id, while the
//! revision rewinds to the snapshot's. Tokens minted since the snapshot are
//! then minted again, to other holders, under the same source id: a gate
//! outside the cluster would admit a repeated token as a retry and refuse
//! every lower one as stale. Restore with
//! `etcdutl snapshot restore --bump-revision N --mark-compacted`, N above
//! the number of revisions the old cluster issued after the snapshot
//! (etcdutl of etcd 3.6 and of the later 3.5 releases; etcd 3.4 has no such
//! flag), or reset the gates outside the cluster once no old writer is left (see docs/gates.md, "Restoring a coordinator"). An
//! [`EtcdGate`] rewinds with the data it lives in and needs nothing.

#![cfg_attr(docsrs, feature(doc_cfg))]
mod config;
mod conn;
mod gate;
mod leader;
mod lock;
mod session;
mod source;
mod watches;

pub use config::{EtcdConfig, DEFAULT_REQUEST_TIMEOUT, DEFAULT_TTL};
/// The client's TLS files, shared by every backend.
pub use fencing_core::TlsFiles;
pub use gate::EtcdGate;
pub use source::EtcdSource;

/// The client crate, for building the operations of a guarded txn.
pub use etcd_client;
