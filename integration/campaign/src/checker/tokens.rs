//! The token properties: `unique-tokens`, `monotonic-grants` and
//! `gate-monotonic`.

use std::collections::{BTreeMap, HashMap};

use super::{
    grants, result, Ctx, PropertyResult, Violation, GATE_MONOTONIC, MONOTONIC_GRANTS, UNIQUE_TOKENS,
};
use crate::history::{Event, EventKind, WriteOutcome};

/// Completed operations as (completion ns, token, event index), in
/// completion order.
pub(super) type Done = Vec<(u64, u64, usize)>;

/// Accepted writes per (gate, resource).
pub(super) type ByRegister<'a> = BTreeMap<(&'a str, &'a str), Done>;

pub(super) fn unique_tokens(ctx: &Ctx) -> PropertyResult {
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

pub(super) fn monotonic_grants(ctx: &Ctx) -> PropertyResult {
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
pub(super) fn accepted_writes<'a>(ctx: &Ctx<'a>) -> ByRegister<'a> {
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

pub(super) fn write_start(e: &Event) -> u64 {
    match e.kind {
        EventKind::Write { start_ns, .. } => start_ns,
        _ => e.at_ns,
    }
}

pub(super) fn gate_monotonic(ctx: &Ctx) -> PropertyResult {
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
