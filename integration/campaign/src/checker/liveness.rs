//! `liveness`: a grant after the last fault, and each lock granted again
//! within the backend's bound after every heal.

use std::collections::BTreeMap;

use super::{ms, result, Ctx, PropertyResult, Violation, LIVENESS};
use crate::heal::{heal_waits, percentile, HealWait};
use crate::history::EventKind;

pub(super) fn liveness(ctx: &Ctx) -> PropertyResult {
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
