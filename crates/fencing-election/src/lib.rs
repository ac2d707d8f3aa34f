//! Leader election over any [`FencingSource`](fencing_core::FencingSource),
//! with client-go's names and defaults, where every term carries its own
//! fencing token.
//!
//! Election alone cannot keep two leaders from acting at once: a leader that
//! pauses longer than its lease still believes it leads. So each term here
//! is a grant of the election's lock, and its token goes with every write
//! the leader makes; the storage's gate refuses tokens of earlier terms.
//!
//! - [`LeaderElector::campaign`] waits until this candidate leads and
//!   returns the term as a [`Leadership`];
//! - [`LeaderElector::run`] campaigns, runs work while leading, and cancels
//!   the work the moment leadership may be lost;
//! - [`LeaderElector::observe`] reports the current leader and every change
//!   to followers.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing::Result<()> {
//! use fencing::{LocalSource, ResourceName};
//! use fencing::election::{ElectionConfig, LeaderElector};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let source = LocalSource::open(dir.path())?;
//! let election = ResourceName::new("compactor")?;
//! let elector = LeaderElector::new(source, election, ElectionConfig::new("node-a"))?;
//!
//! let leadership = elector.campaign().await?;
//! // Every write of this term carries `leadership.info()` (token and
//! // source), and the storage checks it in the same step as the write
//! // (see `fencing::Gate`).
//! assert!(leadership.token().get() > 0);
//! leadership.resign().await?;
//!
//! let mut followers = elector.observe();
//! assert_eq!(followers.changed().await?, None); // nobody leads now
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
mod config;
mod elector;
mod health;
mod observer;
mod term;

pub use config::ElectionConfig;
pub use elector::LeaderElector;
pub use health::LeaderHealth;
pub use observer::{Leader, Observer};
pub use term::{LeaderContext, Leadership};
