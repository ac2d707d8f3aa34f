//! The I/O-free heart of the `fencing` workspace. The default feature
//! `local` adds the file-backed parts, [`LocalSource`] and [`FileGate`],
//! which touch only their own directory and file.
//!
//! A lease is a permission that decays with time; a client's belief in it
//! does not, and storage accepts a late write forever. This crate fixes that
//! with five parts:
//!
//! 1. a [`FencingSource`] mints a strictly monotonic [`FencingToken`] with
//!    each [`Grant`];
//! 2. the token never goes backwards, also across coordinator failover
//!    (each backend takes it from the cluster's own replicated counter);
//! 3. the holder carries [`Grant::token`] on every protected write;
//! 4. the storage runs a [`Gate`], which keeps the highest token accepted and
//!    refuses lower ones with [`Error::Stale`] (retries with the same token
//!    pass), and tokens of another source with [`Error::ForeignSource`]
//!    ([`Gate::admit_grant`], the bound form); a [`ValidatingGate`] also
//!    refuses tokens no live grant carries (a forged huge token);
//! 5. the holder answers a rejection by re-acquiring, re-reading and redoing.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing_core::Result<()> {
//! use fencing_core::{AcquireOptions, FencingSource, Gate, LocalSource, MemoryGate, ResourceName};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let source = LocalSource::open(dir.path())?;
//! let gate = MemoryGate::new(); // lives in the storage, not in the client
//! let ledger = ResourceName::new("ledger")?;
//!
//! let grant = source.acquire(&ledger, &AcquireOptions::new()).await?;
//! gate.admit_grant(grant.info()).await?; // storage checks token and source, then writes
//! grant.release().await?;
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
mod connection;
#[cfg(feature = "local")]
mod durable;
mod error;
mod fenced;
mod gate;
mod grant;
mod jitter;
mod lease;
#[cfg(feature = "local")]
mod local;
pub mod metrics;
mod redact;
mod resource;
mod settings;
mod source;
mod source_url;
mod suspend;
mod timings;
mod token;

pub use connection::{Credentials, TlsFiles};
pub use error::{BoxError, Error, Result};
pub use fenced::{fenced, Fenced, WorkError, DEFAULT_ATTEMPTS};
#[cfg(feature = "local")]
#[cfg_attr(docsrs, doc(cfg(feature = "local")))]
pub use gate::FileGate;
pub use gate::{Gate, Mark, MemoryGate, ValidatingGate};
pub use grant::{Grant, GrantInfo, HolderInfo, SourceId};
pub use lease::{LeaseView, LossReason};
#[cfg(feature = "local")]
#[cfg_attr(docsrs, doc(cfg(feature = "local")))]
pub use local::{LocalSource, DEFAULT_LOCAL_TTL, MIN_LOCAL_TTL};
pub use resource::{ResourceName, MAX_RESOURCE_LEN, PORTABLE_RULE};
pub use source::{default_holder_identity, AcquireOptions, FencingSource};
pub use timings::{
    LeaderTimings, DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD,
};
pub use token::FencingToken;

/// Helpers the crates of this workspace share (URL parsing, jitter,
/// redaction, the metric recorders). Not part of the API: no stability,
/// anything here may change or go in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::error::connect_failure;
    pub use crate::jitter::{jittered, JITTER_FACTOR};
    pub use crate::metrics::{acquire_finished, gate_refused, grant_lost, leader_status};
    pub use crate::redact::{redact_secrets, REDACTED};
    pub use crate::settings::{is_host_port, positive_seconds};
    pub use crate::source::check_holder;
    pub use crate::source_url::UrlParts;
}
