//! Optional metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`, off by default). Without the feature every function
//! here is empty and the crate does not depend on `metrics`. With it,
//! install any exporter (Prometheus, StatsD, ...) and these appear:
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `fencing_acquire_seconds` | histogram | `outcome` = `granted` / `error`, `source` | time in `FencingSource::acquire`, waiting included |
//! | `fencing_grants_lost_total` | counter | `reason` ([`LossReason`] in snake case), `source` | grants that ended, counted once each when the loss is seen |
//! | `fencing_gate_refusals_total` | counter | `kind` = `stale` / `foreign_source` / `unnamed_source` / `unknown_token` | writes a gate refused |
//! | `fencing_leader_status` | gauge | `election`, `source` | 1 while this process leads the election, else 0 (client-go's `leader_election_master_status`) |
//!
//! `source` is the [`SourceId`](crate::SourceId) of the source that minted
//! the grant (e.g. `etcd:cdf818194e3a8c32`).
//!
//! The names are stable API; the functions that record them are the
//! workspace's own (hidden, no stability).

use std::time::Duration;

use crate::error::Error;
use crate::lease::LossReason;

/// Histogram: seconds spent in `FencingSource::acquire`.
pub const ACQUIRE_SECONDS: &str = "fencing_acquire_seconds";
/// Counter: grants lost, by reason.
pub const GRANTS_LOST: &str = "fencing_grants_lost_total";
/// Counter: writes refused by a gate, by kind.
pub const GATE_REFUSALS: &str = "fencing_gate_refusals_total";
/// Gauge: 1 while this process leads an election.
pub const LEADER_STATUS: &str = "fencing_leader_status";

/// Records one acquire call and how it ended.
#[doc(hidden)]
pub fn acquire_finished(elapsed: Duration, granted: bool, source: &str) {
    #[cfg(feature = "metrics")]
    {
        let outcome = if granted { "granted" } else { "error" };
        metrics::histogram!(ACQUIRE_SECONDS, "outcome" => outcome, "source" => source.to_owned())
            .record(elapsed.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (elapsed, granted, source);
}

/// Counts a grant's loss (call once per grant).
#[doc(hidden)]
pub fn grant_lost(reason: LossReason, source: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(GRANTS_LOST, "reason" => reason.label(), "source" => source.to_owned())
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (reason, source);
}

/// Counts a gate's refusal; errors that are not refusals are ignored.
#[doc(hidden)]
pub fn gate_refused(error: &Error) {
    let kind = match error {
        Error::Stale { .. } => "stale",
        Error::ForeignSource { .. } => "foreign_source",
        Error::UnnamedSource { .. } => "unnamed_source",
        Error::UnknownToken { .. } => "unknown_token",
        _ => return,
    };
    #[cfg(feature = "metrics")]
    metrics::counter!(GATE_REFUSALS, "kind" => kind).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = kind;
}

/// Sets whether this process leads `election`.
#[doc(hidden)]
pub fn leader_status(election: &str, source: &str, leading: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(LEADER_STATUS, "election" => election.to_owned(), "source" => source.to_owned())
        .set(if leading { 1.0 } else { 0.0 });
    #[cfg(not(feature = "metrics"))]
    let _ = (election, source, leading);
}
