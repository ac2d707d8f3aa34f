//! For authors of backends and gates, not for their users: the trait a
//! backend implements ([`RawSource`]), the writable lease tracker and the
//! lease group a renewal loop drives, the release retry loop, and the
//! token and source rules every gate applies. An application that only
//! takes grants and guards writes needs none of this.
//!
//! # Stability
//!
//! This module follows the crate's version like the rest of the API, but
//! it is the part most likely to change before 1.0: a 0.x minor release may
//! change it, and says so in the changelog under "Changed (breaking), for
//! backend authors". Helpers the workspace's own backends share (URL
//! parsing, jitter, redaction, the metric recorders) are not here: they are
//! in a hidden module with no stability at all.

pub use crate::gate::{check_fixed_source, check_source, check_token, next_mark};
pub use crate::grant::{release_until_lost, GrantBackend, Releases};
pub use crate::lease::{
    drift_margin, local_deadline, LeaseGroup, LeaseTracker, SentAt, FAR_FUTURE,
};
pub use crate::source::{ensure_same_source, with_timeout, IfHeld, RawSource};

use crate::grant::{Grant, GrantInfo};

/// Assembles a grant from what the backend minted (`info`), the tracker of
/// its lease, how to release it, and the source's [`Releases`] (where the
/// release finishes if the grant is dropped; the source's `close()` waits
/// for them). Users get grants from a [`FencingSource`](crate::FencingSource).
pub fn grant(
    info: GrantInfo,
    lease: LeaseTracker,
    backend: Box<dyn GrantBackend>,
    releases: &Releases,
) -> Grant {
    Grant::new(info, lease, backend, releases)
}

/// The writable tracker behind `grant`'s lease: a backend marks the grant
/// lost with it when it sees the loss at the server (a guarded write that
/// finds its key gone). Users get the read-only [`Grant::lease`].
#[must_use]
pub fn tracker(grant: &Grant) -> &LeaseTracker {
    grant.tracker()
}

/// Refuses [`AcquireOptions::lock_delay`](crate::AcquireOptions::lock_delay)
/// on a backend that cannot honour it, with an
/// [`Error::Config`](crate::Error::Config) saying why.
pub fn refuse_lock_delay(options: &crate::AcquireOptions, backend: &str) -> crate::Result<()> {
    match options.lock_delay {
        None => Ok(()),
        Some(_) => Err(crate::Error::Config(format!(
            "lock_delay is not supported on {backend}: the lock vanishes with its holder's \
             lease or session, so a newcomer cannot tell an expiry from a release; fence the \
             storage with the token instead"
        ))),
    }
}
