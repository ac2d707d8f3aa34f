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
//! Tokens are compared only within one cluster id (the source identity): a
//! cluster restored from a snapshot gets a new id, and its revisions may
//! start lower.

#![warn(missing_docs)]

mod config;
mod conn;
mod gate;
mod lock;
mod session;
mod source;

pub use config::{EtcdConfig, TlsFiles, DEFAULT_REQUEST_TIMEOUT, DEFAULT_TTL};
pub use gate::EtcdGate;
pub use source::EtcdSource;

/// The client crate, for building the operations of a guarded txn.
pub use etcd_client;
