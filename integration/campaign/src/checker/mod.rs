//! Checks a campaign history (see [`super::history`]) against the properties
//! a fenced lock must keep under faults.
//!
//! The checker only reports what the history proves: an operation whose
//! outcome is unknown, or two operations that overlap in time, are given
//! every ordering that real time allows. Every event index in a
//! [`Violation`] refers to the slice given to [`check`]; the slice may be in
//! any order (it is ordered stably by `at_ns` here, as the file may be
//! slightly out of order). Times in messages are milliseconds since the
//! first event.
//!
//! The properties, by name:
//!
//! - `unique-tokens` ([`UNIQUE_TOKENS`]): no two grants of one resource
//!   carry the same token.
//! - `monotonic-grants` ([`MONOTONIC_GRANTS`]): a grant that *returned*
//!   before another grant's acquire *began* (real-time order) has the
//!   lower token. A grant's acquire began at the latest `AcquireStart` of
//!   the same client and resource before it (a grant without one is never
//!   the later of a pair). Acquires that overlap in time are unordered:
//!   either may get the higher token. There is no other tolerance.
//! - `gate-monotonic` ([`GATE_MONOTONIC`]): per gate and resource, an
//!   accepted write sent after another accepted write *completed* carries a
//!   token at least as high (equal tokens are retries and fine).
//! - `loss-before-next-grant` ([`LOSS_BEFORE_NEXT_GRANT`]): when another
//!   client is granted a higher token of the resource, the previous
//!   holder has already stopped believing it holds its grant (`Lost`,
//!   `Release`, or a `Crash`), at or before that grant returned. A holder
//!   that was paused (`pause-client`) or had its clock skewed (`clock-*`)
//!   meanwhile, whose Lease, key or node an administrator deleted
//!   (`delete-leases`, `delete-holders`: the holder and the next waiter
//!   hear of it at the same moment), or a resumed client-go anchor's
//!   release cleared (see
//!   `stale_client_go_release`), cannot notice in time and is exempt; for
//!   it the property
//!   becomes: no write it sent with the old token after a write with a
//!   higher token completed at the same gate was accepted.
//! - `durability` ([`DURABILITY`]): with what the storage held after the
//!   run (see [`check_with_stored`]), every write it acknowledged is in it.
//! - `liveness` ([`LIVENESS`]): after the last fault ended some grant is
//!   made, if anyone still tries to acquire; and after every heal, each
//!   lock someone was acquiring is granted within the backend's bound
//!   ([`BackendFacts::heal_bound`], counted in fault-free time: see
//!   [`super::heal`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use super::history::{fault_spans, holds, sorted_order, Event, EventKind, FaultSpan, Hold};

mod durability;
mod figures;
mod liveness;
mod loss;
mod report;
mod tokens;

pub use loss::{is_anchor, is_careless, ANCHOR_PREFIXES, CARELESS_PREFIX, CLIENT_GO_PREFIX};

use durability::durability;
use figures::figures;
use liveness::liveness;
use loss::loss_before_next_grant;
use tokens::{gate_monotonic, monotonic_grants, unique_tokens};

/// Property names, in report order.
pub const UNIQUE_TOKENS: &str = "unique-tokens";
pub const MONOTONIC_GRANTS: &str = "monotonic-grants";
pub const GATE_MONOTONIC: &str = "gate-monotonic";
pub const LOSS_BEFORE_NEXT_GRANT: &str = "loss-before-next-grant";
pub const DURABILITY: &str = "durability";
pub const LIVENESS: &str = "liveness";

/// What the storages held after the run, read back from disk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    /// The gate name of the writes that keep values in the history.
    pub gate: String,
    /// Every write that storage stored, as (resource, token, value).
    pub writes: BTreeSet<(String, u64, u64)>,
    /// A storage that keeps only the newest value per register (a fence
    /// column): the fence it holds, per (gate, resource). No write it
    /// acknowledged may carry a higher token.
    pub marks: BTreeMap<(String, String), u64>,
}

/// One breach of a property.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    /// What happened, naming clients, tokens and times (ms since the first
    /// event).
    pub message: String,
    /// Indices of the events involved, into the slice given to [`check`].
    pub events: Vec<usize>,
}

/// The verdict on one property.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PropertyResult {
    pub name: String,
    pub passed: bool,
    pub violations: Vec<Violation>,
    /// Remarks that are not violations ("not checked", exemptions used).
    pub notes: Vec<String>,
}

/// The longest hold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HoldFigure {
    pub client: String,
    pub resource: String,
    pub token: u64,
    pub ms: f64,
    /// The hold never ended (measured to the end of the history).
    pub open: bool,
}

/// Numbers about the history.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Figures {
    pub events: usize,
    /// Clients other than the nemesis.
    pub clients: usize,
    pub duration_ms: f64,
    pub grants: usize,
    pub writes_accepted: usize,
    pub writes_refused: usize,
    pub writes_unknown: usize,
    /// Number of `FaultStart` per fault name.
    pub faults_by_kind: BTreeMap<String, usize>,
    pub max_hold: Option<HoldFigure>,
    /// From the last `FaultEnd` to the next grant; `None` without faults or
    /// without a grant after them.
    pub recovery_ms: Option<f64>,
    /// Longest time between two consecutive grants (any resource).
    pub max_grant_gap_ms: Option<f64>,
}

/// The checker's verdict: one [`PropertyResult`] per property and the
/// [`Figures`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub properties: Vec<PropertyResult>,
    pub figures: Figures,
    /// The first event's `at_ns`: times in messages are relative to it.
    pub origin_ns: u64,
}

impl Report {
    /// Whether every property holds.
    pub fn passed(&self) -> bool {
        self.properties.iter().all(|p| p.passed)
    }

    /// The result for the property `name`.
    pub fn property(&self, name: &str) -> Option<&PropertyResult> {
        self.properties.iter().find(|p| p.name == name)
    }

    /// Indices of every event involved in some violation, sorted.
    pub fn violating_events(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .properties
            .iter()
            .flat_map(|p| p.violations.iter().flat_map(|v| v.events.iter().copied()))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Every violation with its property's name.
    pub fn violations(&self) -> impl Iterator<Item = (&str, &Violation)> {
        self.properties
            .iter()
            .flat_map(|p| p.violations.iter().map(move |v| (p.name.as_str(), v)))
    }
}

/// What the checker knows of the backend under test: its servers' known
/// faults and its documented limits, excused like a client's own pause
/// (the holders they hit cannot notice in time, so only their stale writes
/// are checked, and the report names each one apart), and how soon its
/// locks must be granted again after each fault heals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendFacts {
    /// An etcd leader that resumes after a pause revokes the leases it
    /// believes expired before it learns it was replaced; the proposals are
    /// forwarded to the new leader and applied, deleting keys under holders
    /// whose sessions are live (etcd issues 12528 and 15247; fixed in
    /// 3.4.28 and later, not in Debian's 3.4.23). Excuses holds within
    /// [`RESUMED_LEADER_GRACE`] of the end of a `pause-member` or
    /// `pause-leader`.
    pub resumed_leader_revokes_leases: bool,
    /// Kubernetes candidates judge a Lease expired on their own clocks (the
    /// server keeps no time), so one whose clock runs faster than lease
    /// duration / renew deadline (1.5 at the defaults) may take a Lease
    /// while its holder still renews on time: the documented clock-rate
    /// limit. A hold taken over by a candidate in a `clock-fast` fault is
    /// reported as that limit, never counted as a pass.
    pub candidates_judge_expiry_on_their_clocks: bool,
    /// Each client stands for one holder identity per lock, and keeps an
    /// acquire of it going while it holds (the coordinated workload): a
    /// grant of a lock to a client that still holds it is then a second
    /// grant to one identity, which the library must never make (issue
    /// 54, item 1), so the client's own next grant counts as "the next
    /// grant" too. In the other workloads a client acquires only after its
    /// last hold ended.
    pub own_next_grant_counts: bool,
    /// The longest a lock that had a waiter when a fault healed may go
    /// without a grant, counting only time without another member, link
    /// or apiserver fault (see [`super::heal`]); `None` checks nothing and
    /// only reports the figures.
    pub heal_bound: Option<Duration>,
}

/// How long after a paused member resumes its stale revokes may land.
pub const RESUMED_LEADER_GRACE: Duration = Duration::from_secs(2);

/// Checks every property; durability is reported as passed and "not
/// checked".
pub fn check(events: &[Event]) -> Report {
    run(events, None, BackendFacts::default())
}

/// Checks every property but durability (reported as not checked), with
/// what is known of the backend.
pub fn check_with(events: &[Event], facts: BackendFacts) -> Report {
    run(events, None, facts)
}

/// Checks every property, durability against what the storage held after
/// the run; `bugs` is what is known of the backend.
pub fn check_with_stored(events: &[Event], stored: &Stored, bugs: BackendFacts) -> Report {
    run(events, Some(stored), bugs)
}

/// What the properties share: the ordered view of the history.
struct Ctx<'a> {
    events: &'a [Event],
    order: Vec<usize>,
    origin: u64,
    end: u64,
    holds: Vec<Hold>,
    faults: Vec<FaultSpan>,
    bugs: BackendFacts,
}

impl Ctx<'_> {
    /// "12.345 ms" since the first event.
    fn t(&self, ns: u64) -> String {
        format!("{:.3} ms", ms(ns.saturating_sub(self.origin)))
    }

    fn at(&self, i: usize) -> String {
        self.t(self.events[i].at_ns)
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn run(events: &[Event], stored: Option<&Stored>, bugs: BackendFacts) -> Report {
    let order = sorted_order(events);
    let origin = order.first().map_or(0, |&i| events[i].at_ns);
    let end = order.last().map_or(0, |&i| events[i].at_ns);
    let ctx = Ctx {
        events,
        origin,
        end,
        holds: holds(events),
        faults: fault_spans(events),
        order,
        bugs,
    };
    let properties = vec![
        unique_tokens(&ctx),
        monotonic_grants(&ctx),
        gate_monotonic(&ctx),
        loss_before_next_grant(&ctx),
        durability(&ctx, stored),
        liveness(&ctx),
    ];
    Report {
        properties,
        figures: figures(&ctx),
        origin_ns: origin,
    }
}

fn result(name: &str, violations: Vec<Violation>, notes: Vec<String>) -> PropertyResult {
    PropertyResult {
        name: name.to_string(),
        passed: violations.is_empty(),
        violations,
        notes,
    }
}

/// Grants in `at_ns` order: (event index, client, resource, token).
fn grants<'a>(ctx: &Ctx<'a>) -> Vec<(usize, &'a str, &'a str, u64)> {
    ctx.order
        .iter()
        .filter_map(|&i| match &ctx.events[i].kind {
            EventKind::Grant { resource, token } => {
                Some((i, ctx.events[i].client.as_str(), resource.as_str(), *token))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
