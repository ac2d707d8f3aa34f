//! The conformance suite every [`FencingSource`](fencing_core::FencingSource)
//! runs against its real coordinator.
//!
//! A backend implements [`Harness`] (fresh clients, a way to stall one, a
//! TTL) and expands [`conformance_suite!`] in an integration test; each check
//! becomes its own `#[tokio::test]`.
//!
//! ```no_run
//! // tests/conformance.rs of a backend crate
//! use std::time::Duration;
//! use fencing_testkit::LocalHarness;
//!
//! async fn harness() -> LocalHarness {
//!     LocalHarness::new(Duration::from_secs(2))
//! }
//!
//! fencing_testkit::conformance_suite!(harness);
//! # fn main() {}
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
pub mod checks;
pub mod gates;
mod harness;
mod history;

pub use gates::{gate_keeps_the_rules, gate_survives_racing_admits, Binding};
pub use harness::{Client, Harness, LocalHarness, Stall};
pub use history::{Event, History};

/// Expands to one `#[tokio::test]` per conformance check. The argument is an
/// async function returning the [`Harness`].
#[macro_export]
macro_rules! conformance_suite {
    ($harness:path) => {
        $crate::conformance_suite!(@each $harness;
            sequential_grants_strictly_increase,
            one_live_grant_under_contention,
            expiry_regrants_with_higher_token,
            release_hands_over_to_waiter,
            stale_holder_write_is_rejected,
            validate_turns_false_after_loss,
            lost_fires_by_the_local_deadline,
            holder_and_try_acquire_respect_the_holder,
            lock_by_name,
            lock_delay_follows_an_expiry_not_a_release,
        );
    };
    (@each $harness:path; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let h = $harness().await;
                $crate::checks::$check(&h).await;
            }
        )*
    };
}
