//! LocalSource runs the conformance suite every backend runs.

use std::time::Duration;

use fencing_testkit::LocalHarness;

async fn harness() -> LocalHarness {
    LocalHarness::new(Duration::from_secs(2))
}

fencing_testkit::conformance_suite!(harness);
