//! The [`Figures`] of a history.

use super::{grants, ms, Ctx, Figures, HoldFigure};
use crate::history::{EventKind, WriteOutcome, NEMESIS};

pub(super) fn figures(ctx: &Ctx) -> Figures {
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
