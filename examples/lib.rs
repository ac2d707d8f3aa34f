//! Runnable examples; see the `[[example]]` and `[[bin]]` entries in
//! Cargo.toml.
//!
//! The library holds what the examples share ([`FileStore`], the storage
//! side) and compiles the code blocks of the repository README and of
//! every page of the guide in docs/ as doctests.

mod file_store;

pub use file_store::{Accepted, FileStore};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/README.md")]
pub struct DocsReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/getting-started.md")]
pub struct DocsGettingStartedDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/backends.md")]
pub struct DocsBackendsDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/gates.md")]
pub struct DocsGatesDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/leader-election.md")]
pub struct DocsLeaderElectionDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/cli.md")]
pub struct DocsCliDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/deploying.md")]
pub struct DocsDeployingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/failure-behaviour.md")]
pub struct DocsFailureBehaviourDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/fault-campaign.md")]
pub struct DocsFaultCampaignDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/performance.md")]
pub struct DocsPerformanceDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/troubleshooting.md")]
pub struct DocsTroubleshootingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/design.md")]
pub struct DocsDesignDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/choosing-a-backend.md")]
pub struct DocsChoosingABackendDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/migrating.md")]
pub struct DocsMigratingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/faq.md")]
pub struct DocsFaqDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/stability.md")]
pub struct DocsStabilityDoctests;
