//! The ZooKeeper backend of `fencing`.
//!
//! - [`ZkSource`]: locks whose fencing token is the czxid of the holder's
//!   node, in the node layout of Curator's `InterProcessMutex`
//!   (`PATH/RESOURCE/_c_<uuid>-lock-<seq>`), so Java and Rust share locks;
//! - a grant is lost when its session expires, when its node is deleted,
//!   or, while disconnected, once the session timeout could have run out
//!   on the server (measured from the send time of the last answered
//!   request);
//! - [`ZkGate`]: high-water marks kept in znodes; and
//!   [`ZkSource::guarded_multi`] for data kept in ZooKeeper itself.
//!
//! The source identity is `zk:` + the ensemble's id, kept by the ensemble
//! in [`ENSEMBLE_ID_NODE`] (or a name set with [`ZkConfig::ensemble`]).

#![cfg_attr(docsrs, feature(doc_cfg))]
mod config;
mod gate;
mod heartbeat;
mod lock;
mod session;
mod source;

pub use config::{ZkConfig, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TIMEOUT, ENSEMBLE_ID_NODE};
/// The client's TLS files, shared by every backend.
pub use fencing_core::TlsFiles;
pub use gate::ZkGate;
pub use source::ZkSource;

/// The client crate, for building the operations of a guarded multi.
pub use zookeeper_client;
