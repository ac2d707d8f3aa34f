//! A long run's detail windows, and the overview's introduction that
//! links them.

use std::fmt::Write;

use super::{run_span, secs, Plot, CELL_PX, SEC, VIOLATION_WINDOWS, WINDOW_NS};
use crate::checker::Report;
use crate::heal::heal_waits;
use crate::history::{fault_spans, sorted_order, Event, EventKind};
use fencing_harness::markup::escape as esc;

/// A part of a long run drawn in detail, and why.
pub(super) struct Window {
    pub(super) from: u64,
    pub(super) to: u64,
    pub(super) why: Vec<String>,
}

impl Window {
    pub(super) fn file(&self, origin: u64) -> String {
        format!("timeline-{}s.html", secs(self.from - origin))
    }
}

/// Windows of [`WINDOW_NS`] on whole seconds, in time order: around each
/// of the first violations (ending a half window after its last event),
/// the longest gap between grants and the longest wait after a heal (from
/// a little before each) and the end.
pub(super) fn detail_windows(events: &[Event], report: &Report) -> Vec<Window> {
    let (origin, end) = run_span(events);
    let mut wanted: Vec<(u64, String)> = Vec::new();
    for (name, v) in report.violations().take(VIOLATION_WINDOWS) {
        let last = v
            .events
            .iter()
            .filter_map(|&i| events.get(i))
            .map(|e| e.at_ns)
            .max();
        if let Some(at) = last {
            wanted.push((
                at.saturating_sub(WINDOW_NS / 2),
                format!("a {name} violation"),
            ));
        }
    }
    let mut grants: Vec<u64> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Grant { .. }))
        .map(|e| e.at_ns)
        .collect();
    grants.sort_unstable();
    if let Some(gap) = grants.windows(2).max_by_key(|w| w[1] - w[0]) {
        let why = format!(
            "the longest gap between grants, {} ms",
            (gap[1] - gap[0]) / 1_000_000
        );
        wanted.push((gap[0].saturating_sub(WINDOW_NS / 6), why));
    }
    let (order, faults) = (sorted_order(events), fault_spans(events));
    let waits = heal_waits(events, &order, &faults, end);
    if let Some(w) = waits.iter().max_by_key(|w| w.quiet_ns) {
        let why = format!(
            "the longest wait after a heal: {} went {} ms of fault-free time without a grant \
             after {} {}",
            w.resource,
            w.quiet_ns / 1_000_000,
            w.fault,
            w.id
        );
        wanted.push((w.heal_ns.saturating_sub(WINDOW_NS / 6), why));
    }
    wanted.push((
        end.saturating_sub(WINDOW_NS),
        "the end of the run".to_string(),
    ));

    let mut out: Vec<Window> = Vec::new();
    for (from, why) in wanted {
        let from = from.clamp(origin, end.saturating_sub(WINDOW_NS).max(origin));
        let from = origin + (from - origin) / SEC * SEC;
        match out
            .iter_mut()
            .find(|w| w.from.abs_diff(from) < WINDOW_NS / 2)
        {
            Some(w) => w.why.push(why),
            None => out.push(Window {
                from,
                to: (from + WINDOW_NS).min(end),
                why: vec![why],
            }),
        }
    }
    out.sort_by_key(|w| w.from);
    out
}

/// What an overview shows, and its links to the detail windows.
pub(super) fn overview_intro(plot: &Plot, windows: &[Window]) -> String {
    let column_s = plot.to.saturating_sub(plot.from) as f64 / 1e9 * CELL_PX / plot.width;
    let mut out = format!(
        "<p class=\"intro\">This run lasted {} s, too long to draw every event: each lane \
         shows columns of {column_s:.2} s (blue as dark as the share of the column the client \
         held a lock; orange below: a write refused; black above: a crash; hover for the \
         counts). Events in a violation are red lines. Parts drawn event by event:</p>\n\
         <ul class=\"windows\">\n",
        secs(plot.to.saturating_sub(plot.from))
    );
    for w in windows {
        let _ = writeln!(
            out,
            "<li><a href=\"{}\">{} s to {} s</a>: {}</li>",
            w.file(plot.origin),
            secs(w.from - plot.origin),
            secs(w.to - plot.origin),
            esc(&w.why.join("; "))
        );
    }
    out.push_str("</ul>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::super::render_pages;
    use super::super::test_support::{ev, grant, small, tag_of, write};
    use crate::checker::check;
    use crate::history::{EventKind, WriteOutcome, NEMESIS};

    /// Two hours of four clients taking turns every 250 ms (28,800 grants,
    /// a write each), a partition every minute, and one overlap: an
    /// overview with a summary per column, and windows drawing every event
    /// around the overlap, the longest gap and the end.
    #[test]
    fn a_long_run_gets_an_overview_and_detail_windows() {
        let mut events = Vec::new();
        let turns = 2 * 3600 * 4;
        for k in 0..turns {
            // A 5 s gap (no grant) from 30 minutes in.
            let at = k * 250 + if k >= 7200 { 5000 } else { 0 };
            let c = format!("c{}", k % 4);
            events.push(grant(at, &c, k + 1));
            events.push(write(
                at + 10,
                at + 20,
                &c,
                k + 1,
                WriteOutcome::Accepted,
                at + 20,
            ));
            let release = if k == 14_400 { at + 400 } else { at + 200 };
            events.push(ev(
                release,
                &c,
                EventKind::Release {
                    resource: "r".into(),
                    token: k + 1,
                },
            ));
            if k % 240 == 0 {
                events.push(ev(
                    at,
                    NEMESIS,
                    EventKind::FaultStart {
                        fault: "partition-leader".into(),
                        target: "n1".into(),
                        id: k,
                    },
                ));
                events.push(ev(at + 3000, NEMESIS, EventKind::FaultEnd { id: k }));
            }
        }
        let report = check(&events);
        let overlap = &report
            .property("loss-before-next-grant")
            .unwrap()
            .violations;
        assert_eq!(overlap.len(), 1, "{report}");
        let pages = render_pages(&events, &report, "soak");
        let files: Vec<&str> = pages.iter().map(|p| p.file.as_str()).collect();
        // The overlap ends at 3605.4 s, the gap is from 1799.75 s, the run
        // ends at 7204.95 s.
        assert_eq!(
            files,
            [
                "timeline.html",
                "timeline-1789s.html",
                "timeline-3575s.html",
                "timeline-7144s.html"
            ]
        );
        let overview = &pages[0].html;
        assert!(
            overview.len() < 6_000_000,
            "overview of {} bytes",
            overview.len()
        );
        assert!(!overview.contains("class=\"hold"), "holds are summarised");
        assert_eq!(overview.matches("class=\"lane\"").count(), 4);
        let cells = overview.matches("class=\"cell\"").count();
        assert!(cells <= 4 * 2000, "{cells} cells");
        assert!(overview.contains("grants (tokens"), "cells count grants");
        assert!(overview.contains("<a href=\"timeline-3575s.html\">3575 s to 3635 s</a>: a loss-before-next-grant violation"));
        // 120 partitions, merged where their bands touch.
        assert!(overview.matches("class=\"fault global-fault\"").count() <= 120);
        for &i in &overlap[0].events {
            assert!(
                tag_of(overview, i).contains("viol"),
                "{}",
                tag_of(overview, i)
            );
        }
        let window = &pages[2].html;
        assert!(window.len() < 3_000_000, "window of {} bytes", window.len());
        for &i in &overlap[0].events {
            assert!(tag_of(window, i).contains("viol"), "{}", tag_of(window, i));
        }
        // Only the window's events are drawn: 241 grants, both ends included.
        let holds = window.matches("class=\"hold").count();
        assert_eq!(holds, 241);
        assert!(!window.contains("data-ev=\"0\""));
        assert!(window.contains(">3575.0 s</text>") && window.contains(">3635.0 s</text>"));
        for p in &pages {
            assert_eq!(
                p.html.matches("<g ").count() + p.html.matches("<g>").count(),
                p.html.matches("</g>").count(),
                "{}",
                p.file
            );
        }
        // A short run keeps a single page with every event.
        let short = render_pages(&small(), &check(&small()), "short");
        assert_eq!(short.len(), 1);
        assert!(short[0].html.contains("class=\"hold"));
    }
}
