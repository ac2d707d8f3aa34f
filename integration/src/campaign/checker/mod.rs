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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::heal::{heal_waits, percentile, HealWait};
use super::history::{
    fault_spans, holds, sorted_order, Event, EventKind, FaultSpan, Hold, HoldEnd, WriteOutcome,
    NEMESIS,
};

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

/// Completed operations as (completion ns, token, event index), in
/// completion order.
type Done = Vec<(u64, u64, usize)>;

/// Accepted writes per (gate, resource).
type ByRegister<'a> = BTreeMap<(&'a str, &'a str), Done>;

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

/// Violations shown per property by `Display`.
const SHOWN: usize = 10;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .properties
            .iter()
            .map(|p| p.name.len())
            .max()
            .unwrap_or(0)
            .max("property".len());
        writeln!(f, "{:<width$} | result | violations", "property")?;
        writeln!(f, "{:-<width$}-+--------+-----------", "")?;
        for p in &self.properties {
            let result = if p.passed { "pass" } else { "FAIL" };
            writeln!(
                f,
                "{:<width$} | {result:<6} | {}",
                p.name,
                p.violations.len()
            )?;
        }
        writeln!(
            f,
            "verdict: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )?;

        let g = &self.figures;
        writeln!(f)?;
        writeln!(f, "figures")?;
        writeln!(
            f,
            "  events: {}  clients: {}  duration: {:.3} ms",
            g.events, g.clients, g.duration_ms
        )?;
        writeln!(f, "  grants: {}", g.grants)?;
        writeln!(
            f,
            "  writes: {} accepted, {} refused, {} unknown",
            g.writes_accepted, g.writes_refused, g.writes_unknown
        )?;
        if g.faults_by_kind.is_empty() {
            writeln!(f, "  faults: none")?;
        } else {
            let list: Vec<String> = g
                .faults_by_kind
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect();
            writeln!(f, "  faults: {}", list.join(", "))?;
        }
        match &g.max_hold {
            Some(h) => writeln!(
                f,
                "  max hold: {:.3} ms ({} token {} of {}{})",
                h.ms,
                h.client,
                h.token,
                h.resource,
                if h.open { ", never ended" } else { "" }
            )?,
            None => writeln!(f, "  max hold: -")?,
        }
        writeln!(f, "  recovery after last fault: {}", opt_ms(g.recovery_ms))?;
        writeln!(
            f,
            "  max gap between grants: {}",
            opt_ms(g.max_grant_gap_ms)
        )?;

        for p in &self.properties {
            if p.violations.is_empty() && p.notes.is_empty() {
                continue;
            }
            writeln!(f)?;
            writeln!(f, "{} ({} violations)", p.name, p.violations.len())?;
            for n in &p.notes {
                writeln!(f, "  note: {n}")?;
            }
            for v in p.violations.iter().take(SHOWN) {
                writeln!(f, "  - {} [events {:?}]", v.message, v.events)?;
            }
            if p.violations.len() > SHOWN {
                writeln!(f, "  ... and {} more", p.violations.len() - SHOWN)?;
            }
        }
        Ok(())
    }
}

fn opt_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_string(), |ms| format!("{ms:.3} ms"))
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

fn unique_tokens(ctx: &Ctx) -> PropertyResult {
    let mut by_token: BTreeMap<(&str, u64), Vec<usize>> = BTreeMap::new();
    for (i, _, resource, token) in grants(ctx) {
        by_token.entry((resource, token)).or_default().push(i);
    }
    let violations = by_token
        .into_iter()
        .filter(|(_, is)| is.len() > 1)
        .map(|((resource, token), is)| {
            let who: Vec<String> = is
                .iter()
                .map(|&i| format!("{} at {}", ctx.events[i].client, ctx.at(i)))
                .collect();
            Violation {
                message: format!(
                    "token {token} of {resource} granted {} times: {}",
                    is.len(),
                    who.join(", ")
                ),
                events: is,
            }
        })
        .collect();
    result(UNIQUE_TOKENS, violations, Vec::new())
}

/// Per grant (event index): the index of the latest `AcquireStart` of the
/// same client and resource at or before it in `at_ns` order.
fn acquire_starts(ctx: &Ctx) -> HashMap<usize, usize> {
    let mut latest: HashMap<(&str, &str), usize> = HashMap::new();
    let mut out = HashMap::new();
    for &i in &ctx.order {
        let e = &ctx.events[i];
        match &e.kind {
            EventKind::AcquireStart { resource } => {
                latest.insert((e.client.as_str(), resource.as_str()), i);
            }
            EventKind::Grant { resource, .. } => {
                if let Some(&s) = latest.get(&(e.client.as_str(), resource.as_str())) {
                    out.insert(i, s);
                }
            }
            _ => {}
        }
    }
    out
}

/// Among `done` (completion ns, token, event index) sorted by completion,
/// with `best[k]` the position of the highest token among the first k+1:
/// the highest-token entry completed strictly before `before_ns`.
fn best_before(done: &[(u64, u64, usize)], best: &[usize], before_ns: u64) -> Option<usize> {
    let n = done.partition_point(|&(at, _, _)| at < before_ns);
    (n > 0).then(|| best[n - 1])
}

/// Prefix maxima of tokens: position of the highest token in `done[..=k]`
/// (the earliest such on ties).
fn prefix_best(done: &[(u64, u64, usize)]) -> Vec<usize> {
    let mut best: Vec<usize> = Vec::with_capacity(done.len());
    for (k, d) in done.iter().enumerate() {
        match best.last() {
            Some(&b) if done[b].1 >= d.1 => best.push(b),
            _ => best.push(k),
        }
    }
    best
}

fn monotonic_grants(ctx: &Ctx) -> PropertyResult {
    let starts = acquire_starts(ctx);
    let mut by_resource: BTreeMap<&str, Done> = BTreeMap::new();
    for (i, _, resource, token) in grants(ctx) {
        by_resource
            .entry(resource)
            .or_default()
            .push((ctx.events[i].at_ns, token, i));
    }
    let mut violations = Vec::new();
    let mut unpaired = 0;
    for (resource, done) in &by_resource {
        let best = prefix_best(done);
        for &(_, token, g2) in done {
            let Some(&s2) = starts.get(&g2) else {
                unpaired += 1;
                continue;
            };
            let Some(b) = best_before(done, &best, ctx.events[s2].at_ns) else {
                continue;
            };
            let (_, token1, g1) = done[b];
            if token1 >= token {
                violations.push(Violation {
                    message: format!(
                        "{} was granted token {token} of {resource} (acquire began {}, returned {}) \
                         after {} was granted token {token1} (returned {}): not higher in real-time order",
                        ctx.events[g2].client,
                        ctx.at(s2),
                        ctx.at(g2),
                        ctx.events[g1].client,
                        ctx.at(g1),
                    ),
                    events: vec![g1, s2, g2],
                });
            }
        }
    }
    let mut notes = Vec::new();
    if unpaired > 0 {
        notes.push(format!(
            "{unpaired} grant(s) without a preceding acquire_start: not ordered after any grant"
        ));
    }
    result(MONOTONIC_GRANTS, violations, notes)
}

/// Accepted writes in `at_ns` order per (gate, resource):
/// (completion ns, token, event index).
fn accepted_writes<'a>(ctx: &Ctx<'a>) -> ByRegister<'a> {
    let mut out = ByRegister::new();
    for &i in &ctx.order {
        if let EventKind::Write {
            resource,
            token,
            gate,
            outcome: WriteOutcome::Accepted,
            ..
        } = &ctx.events[i].kind
        {
            out.entry((gate.as_str(), resource.as_str()))
                .or_default()
                .push((ctx.events[i].at_ns, *token, i));
        }
    }
    out
}

fn write_start(e: &Event) -> u64 {
    match e.kind {
        EventKind::Write { start_ns, .. } => start_ns,
        _ => e.at_ns,
    }
}

fn gate_monotonic(ctx: &Ctx) -> PropertyResult {
    let mut violations = Vec::new();
    for ((gate, resource), done) in accepted_writes(ctx) {
        let best = prefix_best(&done);
        for &(_, token, w2) in &done {
            let sent = write_start(&ctx.events[w2]);
            let Some(b) = best_before(&done, &best, sent) else {
                continue;
            };
            let (_, token1, w1) = done[b];
            if token1 > token {
                violations.push(Violation {
                    message: format!(
                        "gate {gate} accepted {}'s write with token {token} on {resource} \
                         (sent {}, accepted {}) after {}'s write with token {token1} \
                         was accepted at {}",
                        ctx.events[w2].client,
                        ctx.t(sent),
                        ctx.at(w2),
                        ctx.events[w1].client,
                        ctx.at(w1),
                    ),
                    events: vec![w1, w2],
                });
            }
        }
    }
    result(GATE_MONOTONIC, violations, Vec::new())
}

/// Clients named so, followed by their number, are anchors (another library
/// on the same lock): they hear of a lost lease late or never, which is why
/// fencing exists; only their stale writes are checked. Go's
/// `concurrency.Mutex` on etcd, Curator's `InterProcessMutex` on ZooKeeper,
/// client-go's leader election on Kubernetes.
pub const ANCHOR_PREFIXES: [&str; 3] = ["go", "curator", CLIENT_GO_PREFIX];

/// The anchor on Kubernetes, client-go's leader election.
pub const CLIENT_GO_PREFIX: &str = "clientgo";

/// A client of ours named so ignores `lost()` on purpose: it writes with
/// its token for the whole hold it planned, as a careless user of the
/// library would, so the gates (the guarded writes above all) meet late
/// writes from a real grant. Like an anchor, only its stale writes are
/// checked.
pub const CARELESS_PREFIX: &str = "careless";

pub fn is_careless(client: &str) -> bool {
    numbered(client, CARELESS_PREFIX)
}

pub fn is_anchor(client: &str) -> bool {
    ANCHOR_PREFIXES
        .iter()
        .any(|prefix| numbered(client, prefix))
}

/// `client` is `prefix` followed by a client number, and nothing else.
fn numbered(client: &str, prefix: &str) -> bool {
    client
        .strip_prefix(prefix)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `fault` excuses `client` for not noticing, during the hold from
/// `from_ns` to the next grant at `to_ns`, that it lost its grant: its own
/// pause or clock, an administrator deleting every Lease under every holder
/// (which no holder hears of before its next renewal), or a known server
/// bug deleting keys under live sessions.
fn excusing(fault: &FaultSpan, client: &str, bugs: BackendFacts, from_ns: u64, to_ns: u64) -> bool {
    let member_paused = matches!(fault.fault.as_str(), "pause-member" | "pause-leader");
    if member_paused && bugs.resumed_leader_revokes_leases {
        // The revokes land after the resume: the fault counts as lasting
        // the grace longer.
        let grace = RESUMED_LEADER_GRACE.as_nanos() as u64;
        return fault.overlaps(from_ns.saturating_sub(grace), to_ns);
    }
    let own = fault.fault == "pause-client" || fault.fault.starts_with("clock-");
    let deleted = matches!(fault.fault.as_str(), "delete-leases" | "delete-holders");
    let excuses = (own && fault.target == client) || deleted;
    excuses && fault.overlaps(from_ns, to_ns)
}

/// How long after its "release" line a client-go anchor's `release()` may
/// still land: client-go bounds it by the renew deadline (2/3 of the 2 s
/// lease the campaign gives the anchor), rounded up.
const CLIENT_GO_RELEASE_LIMIT: Duration = Duration::from_secs(2);

/// A client-go anchor's hold, superseded before the anchor released it,
/// whose release fell between `h`'s grant and `next`'s.
///
/// client-go's `release()` (v0.36) reads the Lease to refresh its
/// resourceVersion, then asks `IsLeader()` of the record it observed
/// *before* that read, so an elector resumed after a pause, believing it
/// still leads, overwrites the current holder's live record with an empty
/// one, and the next candidate takes it at once. No holder can hear of that
/// before its next renewal, as with an administrator's delete; what the
/// checker demands of `h` is then only that the gate refused its stale
/// writes.
fn stale_client_go_release<'a>(hs: &[&'a Hold], h: &Hold, next: &Hold) -> Option<&'a Hold> {
    let lag = CLIENT_GO_RELEASE_LIMIT.as_nanos() as u64;
    hs.iter().copied().find(|a| {
        let Some(released) = a.end_ns.filter(|_| a.end_kind == Some(HoldEnd::Release)) else {
            return false;
        };
        let superseded = hs
            .iter()
            .any(|g| g.client != a.client && g.token > a.token && g.start_ns < released);
        numbered(&a.client, CLIENT_GO_PREFIX)
            && a.token < h.token
            && superseded
            && released + lag >= h.start_ns
            && released <= next.start_ns
    })
}

fn loss_before_next_grant(ctx: &Ctx) -> PropertyResult {
    let mut violations = Vec::new();
    let mut exempt = 0;
    let mut limited = 0;
    let accepted = accepted_writes(ctx);
    // Holds per resource, in grant order (holds() yields them so).
    let mut by_resource: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in &ctx.holds {
        by_resource.entry(h.resource.as_str()).or_default().push(h);
    }
    for (resource, hs) in &by_resource {
        for (k, h) in hs.iter().enumerate() {
            let Some(next) = hs[k + 1..]
                .iter()
                .find(|n| n.client != h.client && n.token > h.token)
            else {
                continue;
            };
            if h.end_ns.is_some_and(|end| end <= next.start_ns) {
                continue;
            }
            if let Some(f) = ctx.faults.iter().find(|f| {
                ctx.bugs.candidates_judge_expiry_on_their_clocks
                    && f.fault == "clock-fast"
                    && f.target == next.client
                    && f.overlaps(h.start_ns, next.start_ns)
            }) {
                limited += 1;
                let why = format!("{} on a fast clock ({} {})", next.client, f.fault, f.id);
                stale_writes(ctx, h, &why, &accepted, &mut violations);
                continue;
            }
            let excuse = if is_anchor(&h.client) {
                Some("an anchor, told of no loss in time".to_string())
            } else if is_careless(&h.client) {
                Some("careless by design, deaf to its loss".to_string())
            } else if let Some(a) = stale_client_go_release(hs, h, next) {
                Some(format!(
                    "its Lease cleared by {}'s release of superseded token {} at {} \
                     (client-go's release() bug)",
                    a.client,
                    a.token,
                    ctx.t(a.end_ns.unwrap_or_default())
                ))
            } else {
                ctx.faults
                    .iter()
                    .find(|f| excusing(f, &h.client, ctx.bugs, h.start_ns, next.start_ns))
                    .map(|f| format!("{} {} from {}", f.fault, f.id, ctx.t(f.start_ns)))
            };
            if let Some(why) = excuse {
                exempt += 1;
                stale_writes(ctx, h, &why, &accepted, &mut violations);
                continue;
            }
            let end_c = h.end_ns.unwrap_or(ctx.end);
            let end_next = next.end_ns.unwrap_or(ctx.end);
            let overlap = end_c.min(end_next).saturating_sub(next.start_ns);
            let ended = match (h.end, h.end_kind) {
                (Some(e), Some(kind)) => {
                    let how = match (&ctx.events[e].kind, kind) {
                        (EventKind::Lost { reason, .. }, _) => format!("lost ({reason})"),
                        (_, HoldEnd::Release) => "released".to_string(),
                        _ => "crashed".to_string(),
                    };
                    format!("{} only at {}", how, ctx.at(e))
                }
                _ => "never lost, released or crashed".to_string(),
            };
            let mut events = vec![h.grant, next.grant];
            events.extend(h.end);
            violations.push(Violation {
                message: format!(
                    "{} still held token {} of {resource} (granted {}) when {} was granted \
                     token {} at {}: {}; both held it for {:.3} ms",
                    h.client,
                    h.token,
                    ctx.t(h.start_ns),
                    next.client,
                    next.token,
                    ctx.t(next.start_ns),
                    ended,
                    ms(overlap),
                ),
                events,
            });
        }
    }
    let mut notes = Vec::new();
    if exempt > 0 {
        notes.push(format!(
            "{exempt} hold(s) outlived the next grant under pause-client, clock-* or \
             delete-* faults, a known server or client-go bug, or of an anchor \
             (exempt; their stale writes checked instead)"
        ));
    }
    if limited > 0 {
        notes.push(format!(
            "DOCUMENTED LIMIT, not a pass: {limited} hold(s) taken over before their \
             holder was told, by a candidate whose clock ran at 2x, beyond the clock-rate \
             skew a Kubernetes Lease tolerates (lease duration / renew deadline); their \
             stale writes checked"
        ));
    }
    result(LOSS_BEFORE_NEXT_GRANT, violations, notes)
}

/// For an exempt hold: every accepted write of its client with its token
/// that was sent after a write with a higher token had been accepted at the
/// same gate.
fn stale_writes(
    ctx: &Ctx,
    h: &Hold,
    why: &str,
    accepted: &ByRegister,
    violations: &mut Vec<Violation>,
) {
    for ((gate, resource), done) in accepted {
        if *resource != h.resource {
            continue;
        }
        for &(_, token, w) in done {
            if token != h.token || ctx.events[w].client != h.client {
                continue;
            }
            let sent = write_start(&ctx.events[w]);
            // The earliest accepted write with a higher token, completed
            // before this one was sent.
            let Some(&(_, newer_token, newer)) = done
                .iter()
                .take_while(|&&(at, _, _)| at < sent)
                .find(|&&(_, t, _)| t > token)
            else {
                continue;
            };
            violations.push(Violation {
                message: format!(
                    "stale write accepted from a holder past its lease: gate {gate} accepted \
                     {}'s write with token {token} on {resource} (sent {}) after {}'s write \
                     with token {newer_token} was accepted at {} (exempt as {why})",
                    h.client,
                    ctx.t(sent),
                    ctx.events[newer].client,
                    ctx.at(newer),
                ),
                events: vec![h.grant, newer, w],
            });
        }
    }
}

/// Every write the storage acknowledged is in it afterwards, whatever was
/// killed in between; a storage that keeps marks only still holds a mark
/// at least as high as every token it acknowledged (writes of other gates
/// are not checked).
fn durability(ctx: &Ctx, stored: Option<&Stored>) -> PropertyResult {
    let Some(stored) = stored else {
        return result(DURABILITY, Vec::new(), vec!["not checked".to_string()]);
    };
    let mut violations = Vec::new();
    let mut acknowledged = BTreeMap::<(&str, &str), usize>::new();
    for &i in &ctx.order {
        let EventKind::Write {
            resource,
            token,
            gate,
            outcome: WriteOutcome::Accepted,
            value,
            ..
        } = &ctx.events[i].kind
        else {
            continue;
        };
        let missing = if *gate == stored.gate {
            !stored.writes.contains(&(resource.clone(), *token, *value))
        } else if let Some(&mark) = stored.marks.get(&(gate.clone(), resource.clone())) {
            mark < *token
        } else {
            continue;
        };
        *acknowledged.entry((gate, resource)).or_default() += 1;
        if missing {
            violations.push(Violation {
                message: format!(
                    "{}'s write of {value} with token {token} to {gate}/{resource}, \
                     acknowledged at {}, is missing afterwards",
                    ctx.events[i].client,
                    ctx.at(i)
                ),
                events: vec![i],
            });
        }
    }
    let to_stored_gate: usize = acknowledged
        .iter()
        .filter(|((gate, _), _)| *gate == stored.gate)
        .map(|(_, n)| n)
        .sum();
    let mut notes = vec![format!(
        "{to_stored_gate} acknowledged writes to {}, {} stored",
        stored.gate,
        stored.writes.len()
    )];
    for ((gate, resource), mark) in &stored.marks {
        let n = acknowledged
            .get(&(gate.as_str(), resource.as_str()))
            .copied()
            .unwrap_or(0);
        notes.push(format!(
            "{gate}/{resource}: mark {mark} ({n} acknowledged writes)"
        ));
    }
    result(DURABILITY, violations, notes)
}

fn liveness(ctx: &Ctx) -> PropertyResult {
    let last_fault_end = ctx
        .order
        .iter()
        .rev()
        .copied()
        .find(|&i| matches!(ctx.events[i].kind, EventKind::FaultEnd { .. }));
    let mut violations = Vec::new();
    let mut notes = Vec::new();
    match last_fault_end {
        None => notes.push("no fault ended: nothing to recover from".to_string()),
        Some(f) => {
            let after = ctx.order.iter().skip_while(|&&i| i != f).skip(1);
            let mut grant = None;
            let mut starts = Vec::new();
            for &i in after {
                match ctx.events[i].kind {
                    EventKind::Grant { .. } if grant.is_none() => grant = Some(i),
                    EventKind::AcquireStart { .. } => starts.push(i),
                    _ => {}
                }
            }
            if grant.is_none() && !starts.is_empty() {
                let mut clients: Vec<&str> = starts
                    .iter()
                    .map(|&i| ctx.events[i].client.as_str())
                    .collect();
                clients.sort_unstable();
                clients.dedup();
                let mut events = vec![f];
                events.extend(starts.iter().take(20));
                violations.push(Violation {
                    message: format!(
                        "stuck: no grant after the last fault ended at {}, though {} acquire(s) \
                         began after it (by {}); history ends at {}",
                        ctx.at(f),
                        starts.len(),
                        clients.join(", "),
                        ctx.t(ctx.end),
                    ),
                    events,
                });
            }
        }
    }
    heal_liveness(ctx, &mut violations, &mut notes);
    result(LIVENESS, violations, notes)
}

/// Every heal's waits against the backend's bound, and their figures per
/// fault kind.
fn heal_liveness(ctx: &Ctx, violations: &mut Vec<Violation>, notes: &mut Vec<String>) {
    let waits = heal_waits(ctx.events, &ctx.order, &ctx.faults, ctx.end);
    if waits.is_empty() {
        return;
    }
    let mut by_kind: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for w in &waits {
        by_kind
            .entry(w.fault.as_str())
            .or_default()
            .push(w.quiet_ns);
    }
    let figures: Vec<String> = by_kind
        .iter_mut()
        .map(|(kind, v)| {
            v.sort_unstable();
            let at = |p| ms(percentile(v, p)) / 1e3;
            format!(
                "{kind} n={} median {:.2} s, p99 {:.2} s, max {:.2} s",
                v.len(),
                at(50),
                at(99),
                at(100)
            )
        })
        .collect();
    notes.push(format!(
        "heal to next grant, fault-free time, per fault kind: {}",
        figures.join("; ")
    ));
    let mut longest: Vec<&HealWait> = waits.iter().collect();
    longest.sort_by_key(|w| std::cmp::Reverse(w.quiet_ns));
    let top: Vec<String> = longest.iter().take(3).map(|w| describe(ctx, w)).collect();
    notes.push(format!("longest heal-to-grant waits: {}", top.join("; ")));
    let Some(bound) = ctx.bugs.heal_bound else {
        return;
    };
    for w in waits
        .iter()
        .filter(|w| w.quiet_ns > bound.as_nanos() as u64)
    {
        violations.push(Violation {
            message: format!(
                "slow to recover: {} (bound {:.1} s)",
                describe(ctx, w),
                bound.as_secs_f64()
            ),
            events: std::iter::once(w.heal).chain(w.grant).collect(),
        });
    }
}

fn describe(ctx: &Ctx, w: &HealWait) -> String {
    let granted = match w.grant {
        Some(g) => format!("granted at {}", ctx.at(g)),
        None => "never granted again".to_string(),
    };
    format!(
        "{} waited {:.2} s of fault-free time after {} {} healed at {} ({granted})",
        w.resource,
        ms(w.quiet_ns) / 1e3,
        w.fault,
        w.id,
        ctx.t(w.heal_ns),
    )
}

fn figures(ctx: &Ctx) -> Figures {
    let mut f = Figures {
        events: ctx.events.len(),
        duration_ms: ms(ctx.end - ctx.origin),
        ..Figures::default()
    };
    let mut clients: Vec<&str> = ctx
        .events
        .iter()
        .map(|e| e.client.as_str())
        .filter(|&c| c != NEMESIS)
        .collect();
    clients.sort_unstable();
    clients.dedup();
    f.clients = clients.len();
    for e in ctx.events {
        match &e.kind {
            EventKind::Grant { .. } => f.grants += 1,
            EventKind::Write { outcome, .. } => match outcome {
                WriteOutcome::Accepted => f.writes_accepted += 1,
                WriteOutcome::Refused => f.writes_refused += 1,
                WriteOutcome::Unknown => f.writes_unknown += 1,
            },
            EventKind::FaultStart { fault, .. } => {
                *f.faults_by_kind.entry(fault.clone()).or_default() += 1
            }
            _ => {}
        }
    }
    f.max_hold = ctx
        .holds
        .iter()
        .map(|h| (h, h.end_ns.unwrap_or(ctx.end).saturating_sub(h.start_ns)))
        .max_by_key(|&(_, d)| d)
        .map(|(h, d)| HoldFigure {
            client: h.client.clone(),
            resource: h.resource.clone(),
            token: h.token,
            ms: ms(d),
            open: h.end.is_none(),
        });
    let grant_times: Vec<u64> = grants(ctx)
        .iter()
        .map(|&(i, ..)| ctx.events[i].at_ns)
        .collect();
    f.max_grant_gap_ms = grant_times.windows(2).map(|w| w[1] - w[0]).max().map(ms);
    let last_fault_end = ctx
        .order
        .iter()
        .rev()
        .find(|&&i| matches!(ctx.events[i].kind, EventKind::FaultEnd { .. }))
        .copied();
    if let Some(fe) = last_fault_end {
        let pos = ctx.order.iter().position(|&i| i == fe).unwrap_or(0);
        f.recovery_ms = ctx.order[pos + 1..]
            .iter()
            .find(|&&i| matches!(ctx.events[i].kind, EventKind::Grant { .. }))
            .map(|&i| ms(ctx.events[i].at_ns - ctx.events[fe].at_ns));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds histories tersely; times in ms.
    #[derive(Default)]
    struct H(Vec<Event>);

    const MS: u64 = 1_000_000;

    impl H {
        fn push(&mut self, at_ms: u64, client: &str, kind: EventKind) -> usize {
            self.0.push(Event::new(at_ms * MS, client, kind));
            self.0.len() - 1
        }
        fn start(&mut self, at: u64, c: &str) -> usize {
            self.push(
                at,
                c,
                EventKind::AcquireStart {
                    resource: "r".into(),
                },
            )
        }
        fn grant(&mut self, at: u64, c: &str, token: u64) -> usize {
            self.push(
                at,
                c,
                EventKind::Grant {
                    resource: "r".into(),
                    token,
                },
            )
        }
        fn lost(&mut self, at: u64, c: &str, token: u64) -> usize {
            self.push(
                at,
                c,
                EventKind::Lost {
                    resource: "r".into(),
                    token,
                    reason: "lease expired".into(),
                },
            )
        }
        fn release(&mut self, at: u64, c: &str, token: u64) -> usize {
            self.push(
                at,
                c,
                EventKind::Release {
                    resource: "r".into(),
                    token,
                },
            )
        }
        fn write(
            &mut self,
            sent: u64,
            at: u64,
            c: &str,
            token: u64,
            outcome: WriteOutcome,
            value: u64,
        ) -> usize {
            self.push(
                at,
                c,
                EventKind::Write {
                    resource: "r".into(),
                    token,
                    gate: "g".into(),
                    start_ns: sent * MS,
                    outcome,
                    value,
                },
            )
        }
        fn fault(&mut self, from: u64, to: u64, fault: &str, target: &str, id: u64) {
            self.push(
                from,
                NEMESIS,
                EventKind::FaultStart {
                    fault: fault.into(),
                    target: target.into(),
                    id,
                },
            );
            self.push(to, NEMESIS, EventKind::FaultEnd { id });
        }
    }

    /// c1 holds 1, writes, releases; c2 acquires meanwhile, gets 2 when c1
    /// released, writes; a partition comes and goes; c1 gets 3.
    fn clean() -> H {
        let mut h = H::default();
        h.start(0, "c1");
        h.grant(1, "c1", 1);
        h.start(2, "c2");
        h.write(3, 4, "c1", 1, WriteOutcome::Accepted, 10);
        h.release(5, "c1", 1);
        h.grant(6, "c2", 2);
        h.write(7, 8, "c2", 2, WriteOutcome::Accepted, 20);
        h.write(8, 9, "c2", 2, WriteOutcome::Accepted, 21);
        h.fault(10, 20, "partition-leader", "n1", 1);
        h.start(11, "c1");
        h.lost(12, "c2", 2);
        h.grant(25, "c1", 3);
        h.write(26, 27, "c1", 3, WriteOutcome::Accepted, 30);
        h.write(26, 28, "c2", 2, WriteOutcome::Refused, 22);
        h
    }

    fn assert_only_fails(report: &Report, name: &str) {
        for p in &report.properties {
            assert_eq!(p.passed, p.name != name, "{}\n{report}", p.name);
        }
        assert!(!report.passed());
        let v = &report.property(name).unwrap().violations;
        assert!(!v.is_empty());
    }

    #[test]
    fn clean_history_passes() {
        let h = clean();
        let report = check(&h.0);
        assert!(report.passed(), "{report}");
        assert_eq!(report.properties.len(), 6);
        let f = &report.figures;
        assert_eq!((f.grants, f.clients, f.events), (3, 2, h.0.len()));
        assert_eq!(
            (f.writes_accepted, f.writes_refused, f.writes_unknown),
            (4, 1, 0)
        );
        assert_eq!(f.faults_by_kind.get("partition-leader"), Some(&1));
        assert_eq!(f.recovery_ms, Some(5.0));
        assert_eq!(f.max_grant_gap_ms, Some(19.0));
        let hold = f.max_hold.as_ref().unwrap();
        assert_eq!((hold.client.as_str(), hold.token, hold.ms), ("c2", 2, 6.0));
        assert_eq!(
            report.property(DURABILITY).unwrap().notes,
            vec!["not checked".to_string()]
        );
        let text = report.to_string();
        assert!(
            text.contains("durability") && text.contains("not checked"),
            "{text}"
        );
        assert!(!text.contains("FAIL"), "{text}");
    }

    #[test]
    fn shuffled_file_order_is_tolerated() {
        let mut events = clean().0;
        events.reverse();
        assert!(check(&events).passed());
    }

    #[test]
    fn duplicate_token_fails_unique_tokens() {
        let mut h = clean();
        // c1's last grant carries c2's token 2 (granted in real time after
        // c2's lost 2, so monotonic-grants fails too).
        let EventKind::Grant { token, .. } = &mut h.0[12].kind else {
            panic!("event 12 is c1's grant")
        };
        *token = 2;
        // Keep the writes consistent so only token properties break.
        let EventKind::Write { token, .. } = &mut h.0[13].kind else {
            panic!()
        };
        *token = 2;
        let report = check(&h.0);
        let p = report.property(UNIQUE_TOKENS).unwrap();
        assert!(!p.passed, "{report}");
        assert_eq!(p.violations.len(), 1);
        assert_eq!(p.violations[0].events, vec![5, 12]);
        assert!(p.violations[0]
            .message
            .contains("token 2 of r granted 2 times"));
        assert!(!report.property(MONOTONIC_GRANTS).unwrap().passed);
        assert!(report.property(GATE_MONOTONIC).unwrap().passed);
    }

    #[test]
    fn duplicate_token_in_overlapping_acquires_fails_only_unique_tokens() {
        let mut h = H::default();
        h.start(0, "c1");
        h.start(0, "c2");
        h.grant(1, "c1", 4);
        h.release(2, "c1", 4);
        h.grant(3, "c2", 4);
        assert!(!check(&h.0).property(UNIQUE_TOKENS).unwrap().passed);
        assert!(check(&h.0).property(MONOTONIC_GRANTS).unwrap().passed);
    }

    #[test]
    fn token_going_down_in_real_time_fails_monotonic_grants() {
        let mut h = clean();
        let EventKind::Grant { token, .. } = &mut h.0[12].kind else {
            panic!("event 12 is c1's grant")
        };
        *token = 0; // c1 acquires at 11 ms, after c2's grant of 2 at 6 ms
        h.0.truncate(13); // without the writes (gate-monotonic would see them)
        let report = check(&h.0);
        assert_only_fails(&report, MONOTONIC_GRANTS);
        let v = &report.property(MONOTONIC_GRANTS).unwrap().violations;
        assert_eq!(v.len(), 1, "{report}");
        assert_eq!(v[0].events, vec![5, 10, 12]);
        assert!(
            v[0].message.contains("c1 was granted token 0"),
            "{}",
            v[0].message
        );
        assert!(
            v[0].message.contains("c2 was granted token 2"),
            "{}",
            v[0].message
        );
    }

    #[test]
    fn overlapping_acquires_are_unordered() {
        let mut h = H::default();
        h.start(0, "c1");
        h.start(1, "c2");
        h.grant(2, "c2", 5);
        h.release(3, "c2", 5);
        h.grant(4, "c1", 4); // began before c2's grant returned: fine
        h.release(5, "c1", 4);
        assert!(check(&h.0).passed(), "{}", check(&h.0));
        // ... but had c1 begun after c2's grant returned, it is not.
        h.0[0].at_ns = 2 * MS + 1;
        let report = check(&h.0);
        assert_only_fails(&report, MONOTONIC_GRANTS);
    }

    #[test]
    fn gate_accepting_lower_after_higher_fails_gate_monotonic() {
        let mut h = H::default();
        h.write(0, 1, "c2", 7, WriteOutcome::Accepted, 70);
        h.write(1, 2, "c1", 5, WriteOutcome::Refused, 50);
        h.write(1, 3, "c1", 7, WriteOutcome::Accepted, 71); // equal: a retry
        assert!(check(&h.0).passed());
        // Concurrent with the 7: may be ordered before it.
        h.write(0, 3, "c1", 5, WriteOutcome::Accepted, 51);
        assert!(check(&h.0).passed(), "{}", check(&h.0));
        // Sent after the 7 completed: must have been refused.
        let w = h.write(2, 4, "c1", 5, WriteOutcome::Accepted, 52);
        let report = check(&h.0);
        assert_only_fails(&report, GATE_MONOTONIC);
        let v = &report.property(GATE_MONOTONIC).unwrap().violations;
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].events, vec![0, w]);
        assert!(v[0].message.contains("token 5") && v[0].message.contains("token 7"));
        // Another gate is independent.
        let EventKind::Write { gate, .. } = &mut h.0[w].kind else {
            panic!()
        };
        *gate = "other".into();
        assert!(check(&h.0).passed());
    }

    /// c1 holds 1 and never notices; c2 is granted 2 at 10 ms.
    fn overlap(lost_at: u64) -> H {
        let mut h = H::default();
        h.start(0, "c1");
        h.grant(1, "c1", 1);
        h.write(2, 3, "c1", 1, WriteOutcome::Accepted, 10);
        h.start(4, "c2");
        h.grant(10, "c2", 2);
        h.write(11, 12, "c2", 2, WriteOutcome::Accepted, 20);
        h.lost(lost_at, "c1", 1);
        h.write(14, 15, "c1", 1, WriteOutcome::Refused, 11);
        h
    }

    #[test]
    fn holder_without_loss_fails_loss_before_next_grant() {
        assert!(check(&overlap(9).0).passed());
        assert!(check(&overlap(10).0).passed(), "at the grant is in time");
        let h = overlap(13);
        let report = check(&h.0);
        assert_only_fails(&report, LOSS_BEFORE_NEXT_GRANT);
        let v = &report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().violations;
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].events, vec![1, 4, 6]);
        let m = &v[0].message;
        assert!(m.contains("c1 still held token 1") && m.contains("c2 was granted token 2"));
        assert!(m.contains("both held it for 3.000 ms"), "{m}");

        // Never lost at all: overlap to the end of the history (15 ms).
        let mut h = overlap(13);
        h.0.remove(6);
        let report = check(&h.0);
        let m = &report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().violations[0].message;
        assert!(m.contains("never lost") && m.contains("5.000 ms"), "{m}");

        // A crash before the grant ends the hold; a crash after does not.
        let mut h = overlap(13);
        h.0.remove(6);
        h.push(9, "c1", EventKind::Crash {});
        assert!(check(&h.0).passed());
        h.0.last_mut().unwrap().at_ns = 11 * MS;
        assert!(!check(&h.0).passed());
    }

    #[test]
    fn paused_holder_is_exempt_unless_stale_write_accepted() {
        // Same overlap, but c1 was paused over it.
        let mut h = overlap(13);
        h.fault(5, 12, "pause-client", "c1", 1);
        let report = check(&h.0);
        assert!(report.passed(), "{report}");
        assert!(report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().notes[0].contains("exempt"));

        // A pause of another client, or a fault before the grant, does not
        // excuse c1.
        let mut other = overlap(13);
        other.fault(5, 12, "pause-client", "c2", 1);
        assert!(!check(&other.0).passed());
        let mut before = overlap(13);
        before.fault(0, 1, "clock-fast", "c1", 1);
        before.0[1].at_ns = 2 * MS; // grant after the fault ended
        assert!(!check(&before.0).passed());
        let mut clock = overlap(13);
        clock.fault(5, 12, "clock-fast", "c1", 1);
        assert!(check(&clock.0).passed());
        // Leases are timed on the monotonic clock: a jump of the wall clock
        // is no excuse.
        let mut wall = overlap(13);
        wall.fault(5, 12, "wall-jump-back", "c1", 1);
        assert!(!check(&wall.0).passed());
        // Deleting the Leases revokes every holder without telling it.
        let mut deleted = overlap(13);
        deleted.fault(5, 12, "delete-leases", "deleted [\"r\"]", 1);
        assert!(check(&deleted.0).passed());
        let mut deleted = overlap(13);
        deleted.fault(
            5,
            12,
            "delete-holders",
            "m1: deleted [\"/campaign/r/1\"]",
            1,
        );
        assert!(check(&deleted.0).passed());

        // The paused holder's stale write, sent at 14 ms after c2's write
        // with token 2 completed at 12 ms, is accepted by the gate.
        let EventKind::Write { outcome, .. } = &mut h.0[7].kind else {
            panic!()
        };
        *outcome = WriteOutcome::Accepted;
        let report = check(&h.0);
        let p = report.property(LOSS_BEFORE_NEXT_GRANT).unwrap();
        assert!(!p.passed, "{report}");
        assert_eq!(p.violations.len(), 1);
        assert!(p.violations[0]
            .message
            .starts_with("stale write accepted from a holder past its lease"));
        assert_eq!(p.violations[0].events, vec![1, 5, 7]);
        // (gate-monotonic sees the same write.)
        assert!(!report.property(GATE_MONOTONIC).unwrap().passed);
    }

    #[test]
    fn a_resumed_leaders_revoke_is_excused_only_where_the_server_has_that_bug() {
        let bugs = BackendFacts {
            resumed_leader_revokes_leases: true,
            ..BackendFacts::default()
        };
        // A member paused until 1 ms, i.e. 9 ms (within the grace) before
        // c2's grant at 10 ms: its late revoke may have deleted c1's key.
        let mut h = overlap(13);
        h.fault(0, 1, "pause-member", "m2", 1);
        assert!(
            !check(&h.0).passed(),
            "no excuse on a server without the bug"
        );
        let report = run(&h.0, None, bugs);
        assert!(report.passed(), "{report}");
        assert!(report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().notes[0]
            .contains("server or client-go bug"));
        // Long after the pause ended, it is no excuse.
        let mut late = overlap(13);
        late.fault(0, 1, "pause-member", "m2", 1);
        for e in &mut late.0 {
            if e.client != "nemesis" {
                e.at_ns += 3_000 * MS;
            }
            if let EventKind::Write { start_ns, .. } = &mut e.kind {
                *start_ns += 3_000 * MS;
            }
        }
        assert!(!run(&late.0, None, bugs).passed());
        // The excused holder's stale write is still checked.
        let EventKind::Write { outcome, .. } = &mut h.0[7].kind else {
            panic!()
        };
        *outcome = WriteOutcome::Accepted;
        assert!(!run(&h.0, None, bugs).passed());
    }

    #[test]
    fn a_fast_candidate_is_the_documented_limit_only_on_kubernetes() {
        // c2, the next holder, ran on a fast clock over c1's hold.
        let mut h = overlap(13);
        h.fault(5, 12, "clock-fast", "c2", 1);
        assert!(
            !check(&h.0).passed(),
            "no excuse where the server keeps the time"
        );
        let kube = BackendFacts {
            candidates_judge_expiry_on_their_clocks: true,
            ..BackendFacts::default()
        };
        let report = run(&h.0, None, kube);
        assert!(report.passed(), "{report}");
        let notes = &report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().notes;
        assert!(
            notes.iter().any(|n| n.starts_with("DOCUMENTED LIMIT")),
            "{notes:?}"
        );
        // A slow clock, or another client's fast one, is not that limit.
        let mut slow = overlap(13);
        slow.fault(5, 12, "clock-slow", "c2", 1);
        assert!(!run(&slow.0, None, kube).passed());
        let mut other = overlap(13);
        other.fault(5, 12, "clock-fast", "c3", 1);
        assert!(!run(&other.0, None, kube).passed());
        // The holder's stale write is still checked.
        let EventKind::Write { outcome, .. } = &mut h.0[7].kind else {
            panic!()
        };
        *outcome = WriteOutcome::Accepted;
        assert!(!run(&h.0, None, kube).passed());
    }

    #[test]
    fn a_lock_left_without_a_grant_after_a_heal_fails_liveness() {
        // c2 waits for r from 4 ms; a member fault heals at 5 ms, the next
        // grant comes at 10 ms: 5 ms of fault-free waiting.
        let mut h = overlap(9);
        h.fault(2, 5, "kill-leader", "m1", 1);
        let bound = |ms: u64| BackendFacts {
            heal_bound: Some(Duration::from_millis(ms)),
            ..BackendFacts::default()
        };
        let report = run(&h.0, None, bound(6));
        assert!(report.passed(), "{report}");
        let report = run(&h.0, None, bound(4));
        assert_only_fails(&report, LIVENESS);
        let v = &report.property(LIVENESS).unwrap().violations;
        assert!(
            v[0].message.contains("r waited 0.01 s") && v[0].message.contains("kill-leader 1"),
            "{}",
            v[0].message
        );
        // A second leader fault from 6 to 9 ms explains 3 ms of the wait.
        let mut two = overlap(9);
        two.fault(2, 5, "kill-leader", "m1", 1);
        two.fault(6, 9, "pause-leader", "m2", 2);
        assert!(run(&two.0, None, bound(4)).passed());
        // A client's fault does not stop grants: it explains nothing.
        let mut client = overlap(9);
        client.fault(2, 5, "kill-leader", "m1", 1);
        client.fault(6, 9, "pause-client", "c3", 2);
        assert!(!run(&client.0, None, bound(4)).passed());
    }

    #[test]
    fn anchor_and_careless_holders_are_exempt_unless_stale_write_accepted() {
        let deaf = [
            ("go1", "an anchor, told of no loss in time"),
            ("careless1", "careless by design, deaf to its loss"),
        ];
        for (name, why) in deaf {
            // The same overlap, c1 never hearing of (or heeding) its loss.
            let mut h = overlap(13);
            for e in h.0.iter_mut().filter(|e| e.client == "c1") {
                e.client = name.into();
            }
            let report = check(&h.0);
            assert!(report.passed(), "{report}");
            // Its stale write accepted after c2's newer one.
            let EventKind::Write { outcome, .. } = &mut h.0[7].kind else {
                panic!()
            };
            *outcome = WriteOutcome::Accepted;
            let report = check(&h.0);
            let p = report.property(LOSS_BEFORE_NEXT_GRANT).unwrap();
            assert_eq!(p.violations.len(), 1, "{report}");
            let message = &p.violations[0].message;
            assert!(message.contains(&format!("{name}'s write with token 1")));
            assert!(
                message.ends_with(&format!("(exempt as {why})")),
                "{message}"
            );
        }
        assert!(!is_careless("careless") && !is_careless("careless1x"));
    }

    /// clientgo1 holds 1 and is superseded by c2 (2); it releases its
    /// stale term, which clears c2's Lease, and wins 3 at once; c2 hears of
    /// it at its next renewal. c2's write with 2 after the write with 3 is
    /// refused.
    fn cleared_by_client_go() -> H {
        let mut h = H::default();
        h.grant(1, "clientgo1", 1);
        h.grant(10, "c2", 2);
        h.release(20, "clientgo1", 1);
        h.grant(21, "clientgo1", 3);
        h.write(22, 23, "clientgo1", 3, WriteOutcome::Accepted, 30);
        h.write(24, 25, "c2", 2, WriteOutcome::Refused, 20);
        h.lost(26, "c2", 2);
        h
    }

    #[test]
    fn a_lease_cleared_by_client_go_release_excuses_its_holder() {
        let report = check(&cleared_by_client_go().0);
        assert!(report.passed(), "{report}");
        assert!(report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().notes[0].contains("client-go"));

        // The gate accepting c2's stale write is still caught.
        let mut h = cleared_by_client_go();
        let EventKind::Write { outcome, .. } = &mut h.0[5].kind else {
            panic!()
        };
        *outcome = WriteOutcome::Accepted;
        let report = check(&h.0);
        let v = &report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().violations;
        assert!(
            v[0].message.contains("client-go's release() bug"),
            "{report}"
        );

        // No excuse without the stale release, from another library, or
        // from a release that was no longer stale (before c2's grant).
        let mut without = cleared_by_client_go();
        without.0.remove(2);
        for renamed in ["go1", "c1"] {
            let mut h = cleared_by_client_go();
            for e in h.0.iter_mut().filter(|e| e.client == "clientgo1") {
                e.client = renamed.into();
            }
            assert!(!check(&h.0).passed(), "{renamed}");
        }
        let mut early = cleared_by_client_go();
        early.0[2].at_ns = 5 * MS;
        for h in [without, early] {
            assert_only_fails(&check(&h.0), LOSS_BEFORE_NEXT_GRANT);
        }
    }

    #[test]
    fn anchors_are_named_by_library_and_number() {
        for anchor in ["go4", "curator4", "clientgo12"] {
            assert!(is_anchor(anchor), "{anchor}");
        }
        for client in ["c1", "c12", "go", "curator", "gopher1", "c", NEMESIS] {
            assert!(!is_anchor(client), "{client}");
        }
    }

    #[test]
    fn acknowledged_write_missing_afterwards_fails_durability() {
        let h = clean();
        let all = |writes: &[(u64, u64)]| Stored {
            gate: "g".into(),
            writes: writes.iter().map(|&(t, v)| ("r".into(), t, v)).collect(),
            ..Stored::default()
        };
        // Refused writes need not be there; extra ones (unknown outcomes
        // that landed) may be.
        let kept = all(&[(1, 10), (2, 20), (2, 21), (3, 30), (9, 99)]);
        let report = check_with_stored(&h.0, &kept, BackendFacts::default());
        assert!(report.passed(), "{report}");
        assert!(report.property(DURABILITY).unwrap().notes[0].starts_with("4 acknowledged"));

        let lost = all(&[(1, 10), (2, 20), (3, 30)]);
        let report = check_with_stored(&h.0, &lost, BackendFacts::default());
        assert_only_fails(&report, DURABILITY);
        let v = &report.property(DURABILITY).unwrap().violations;
        assert_eq!(v.len(), 1);
        assert!(
            v[0].message.starts_with("c2's write of 21 with token 2"),
            "{}",
            v[0].message
        );
        assert_eq!(v[0].events, vec![7]);

        // Another gate's writes are not its business.
        let other = Stored {
            gate: "other".into(),
            ..Stored::default()
        };
        assert!(check_with_stored(&h.0, &other, BackendFacts::default()).passed());
    }

    #[test]
    fn a_mark_below_an_acknowledged_token_fails_durability() {
        // The clean history's gate g acknowledged tokens up to 3 on r.
        let h = clean();
        let marked = |mark: u64| Stored {
            gate: "other".into(),
            marks: [(("g".to_string(), "r".to_string()), mark)].into(),
            ..Stored::default()
        };
        // Higher than every acknowledged token: an unknown write landed.
        for mark in [3, 4] {
            let report = check_with_stored(&h.0, &marked(mark), BackendFacts::default());
            assert!(report.passed(), "{report}");
        }
        let report = check_with_stored(&h.0, &marked(2), BackendFacts::default());
        assert_only_fails(&report, DURABILITY);
        let v = &report.property(DURABILITY).unwrap().violations;
        assert!(
            v.iter().all(|v| v.message.contains("with token 3 to g/r")),
            "{v:?}"
        );

        // The notes count each resource's own writes.
        let mut two = marked(3);
        two.marks.insert(("g".into(), "elsewhere".into()), 0);
        let report = check_with_stored(&h.0, &two, BackendFacts::default());
        let notes = &report.property(DURABILITY).unwrap().notes;
        assert!(
            notes.contains(&"g/elsewhere: mark 0 (0 acknowledged writes)".to_string()),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("g/r: mark 3 (") && !n.contains("(0 ")),
            "{notes:?}"
        );
    }

    #[test]
    fn stuck_after_last_fault_fails_liveness() {
        let mut h = clean();
        h.fault(30, 40, "kill-member", "n2", 2);
        h.start(41, "c2");
        let report = check(&h.0);
        assert_only_fails(&report, LIVENESS);
        let v = &report.property(LIVENESS).unwrap().violations;
        assert!(v[0].message.starts_with("stuck"), "{}", v[0].message);
        assert_eq!(report.figures.recovery_ms, None);

        h.release(42, "c1", 3);
        h.grant(45, "c2", 4);
        let report = check(&h.0);
        assert!(report.passed(), "{report}");
        assert_eq!(report.figures.recovery_ms, Some(5.0));
        assert_eq!(report.figures.faults_by_kind.len(), 2);

        // Nobody tries after the last fault: not stuck.
        let mut quiet = clean();
        quiet.fault(30, 40, "kill-member", "n2", 2);
        assert!(check(&quiet.0).passed());
    }

    #[test]
    fn display_lists_failures_and_caps_violations() {
        let mut h = H::default();
        for k in 0..15 {
            h.grant(k, &format!("c{k}"), 1);
        }
        let report = check(&h.0);
        let text = report.to_string();
        assert!(
            text.contains("unique-tokens") && text.contains("FAIL"),
            "{text}"
        );
        // 1 duplicate group: one violation naming all 15 grants.
        assert_eq!(report.property(UNIQUE_TOKENS).unwrap().violations.len(), 1);

        let mut h = H::default();
        for k in 0..12u64 {
            h.write(2 * k + 2, 2 * k + 3, "c", 1, WriteOutcome::Accepted, k);
        }
        h.write(0, 1, "c0", 9, WriteOutcome::Accepted, 99);
        let report = check(&h.0);
        assert_eq!(
            report.property(GATE_MONOTONIC).unwrap().violations.len(),
            12
        );
        let text = report.to_string();
        assert!(text.contains("... and 2 more"), "{text}");
        assert_eq!(text.matches("  - gate g accepted").count(), 10, "{text}");
    }

    #[test]
    fn empty_history_passes() {
        let report = check(&[]);
        assert!(report.passed());
        assert_eq!(report.figures.events, 0);
        let _ = report.to_string();
    }
}
