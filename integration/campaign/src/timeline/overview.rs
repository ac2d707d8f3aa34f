//! An overview's lanes: per pixel column, one summary ([`Cell`]) of what
//! the client did; then each violating event on its own, in red.

use std::fmt::Write;

use super::{Plot, BLUE, CELL_PX, LANE_H, ORANGE, PAD, RED};
use crate::history::{holds, EventKind, WriteOutcome};
use fencing_harness::markup::escape as esc;

impl Plot<'_> {
    /// An overview's lanes: per column, one summary of what the client
    /// did; then each violating event on its own, in red.
    pub(super) fn overview_lanes(&self, s: &mut String) {
        let columns = ((self.width / CELL_PX).ceil() as usize).max(1);
        let span = u128::from(self.to.saturating_sub(self.from).max(1));
        let column_of = |ns: u64| {
            let off = u128::from(ns.clamp(self.from, self.to) - self.from);
            ((off * columns as u128 / span) as usize).min(columns - 1)
        };
        let column_start = |c: usize| self.from + (span * c as u128 / columns as u128) as u64;
        let mut cells: Vec<Vec<Cell>> = (0..self.lanes.len())
            .map(|_| (0..columns).map(|_| Cell::default()).collect())
            .collect();
        for h in holds(self.events) {
            let Some(&k) = self.lane_of.get(h.client.as_str()) else {
                continue;
            };
            let (a, z) = (
                h.start_ns.max(self.from),
                h.end_ns.unwrap_or(self.to).min(self.to),
            );
            if a > z {
                continue;
            }
            let (first, last) = (column_of(a), column_of(z));
            cells[k][first].grant(h.token);
            for (c, cell) in cells[k][first..=last].iter_mut().enumerate() {
                let c = first + c;
                let covered = column_start(c + 1)
                    .min(z)
                    .saturating_sub(column_start(c).max(a));
                cell.held_ns += covered;
            }
        }
        for e in self.events {
            if let (Some(&k), true) = (
                self.lane_of.get(e.client.as_str()),
                self.shows(e.at_ns, Some(e.at_ns)),
            ) {
                cells[k][column_of(e.at_ns)].count(&e.kind);
            }
        }
        let w = self.width / columns as f64;
        for (k, row) in cells.iter().enumerate() {
            let top = self.lane_top(k);
            let mut body = String::new();
            for (c, cell) in row.iter().enumerate().filter(|(_, cell)| !cell.is_empty()) {
                let (t1, t2) = (column_start(c), column_start(c + 1));
                let held = (cell.held_ns as f64 / t2.saturating_sub(t1).max(1) as f64).min(1.0);
                let tip = esc(&format!(
                    "{} to {}: {}",
                    self.t(t1),
                    self.t(t2),
                    cell.describe(held)
                ));
                let x = PAD + c as f64 * w;
                let _ = write!(
                    body,
                    "<g class=\"cell\"><title>{tip}</title><rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"14\" fill=\"{BLUE}\" fill-opacity=\"{:.2}\"/>",
                    top + LANE_H / 2.0 - 11.0,
                    0.08 + 0.8 * held
                );
                if cell.refused > 0 {
                    let _ = write!(
                        body,
                        "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"4\" fill=\"{ORANGE}\"/>",
                        top + LANE_H - 9.0
                    );
                }
                if cell.crashes > 0 {
                    let _ = write!(
                        body,
                        "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"3\" fill=\"#000000\"/>",
                        top + 2.0
                    );
                }
                body.push_str("</g>\n");
            }
            self.violating_marks(&mut body, k);
            let _ = writeln!(
                s,
                "<g class=\"lane\" data-client=\"{}\">\n{body}</g>",
                esc(self.lanes[k])
            );
        }
    }

    /// The violating events of lane `k`, as red lines across it.
    fn violating_marks(&self, out: &mut String, k: usize) {
        let top = self.lane_top(k);
        for &i in &self.viol {
            let e = &self.events[i];
            if self.lane_of.get(e.client.as_str()) != Some(&k)
                || !self.shows(e.at_ns, Some(e.at_ns))
            {
                continue;
            }
            let x = self.x(e.at_ns);
            let what = match (e.kind.resource(), e.kind.token()) {
                (Some(r), Some(t)) => format!(" of {r}, token {t}"),
                _ => String::new(),
            };
            let tip = esc(&format!(
                "{} {}{what} at {}, in a violation",
                e.client,
                e.kind.name(),
                self.t(e.at_ns)
            ));
            let _ = writeln!(
                out,
                "<line class=\"viol\" data-ev=\"{i}\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{RED}\" stroke-width=\"2\"><title>{tip}</title></line>",
                top + 1.0,
                top + LANE_H - 1.0
            );
        }
    }
}

/// What one client did in one column of an overview.
#[derive(Default)]
struct Cell {
    /// Time held (summed over resources held at once).
    held_ns: u64,
    grants: usize,
    tokens: Option<(u64, u64)>,
    accepted: usize,
    refused: usize,
    unknown: usize,
    lost: usize,
    released: usize,
    crashes: usize,
}

impl Cell {
    fn grant(&mut self, token: u64) {
        self.grants += 1;
        self.tokens = Some(
            self.tokens
                .map_or((token, token), |(lo, hi)| (lo.min(token), hi.max(token))),
        );
    }

    fn count(&mut self, kind: &EventKind) {
        match kind {
            EventKind::Write { outcome, .. } => match outcome {
                WriteOutcome::Accepted => self.accepted += 1,
                WriteOutcome::Refused => self.refused += 1,
                WriteOutcome::Unknown => self.unknown += 1,
            },
            EventKind::Lost { .. } => self.lost += 1,
            EventKind::Release { .. } => self.released += 1,
            EventKind::Crash {} => self.crashes += 1,
            _ => {}
        }
    }

    fn is_empty(&self) -> bool {
        self.held_ns == 0
            && self.grants
                + self.accepted
                + self.refused
                + self.unknown
                + self.lost
                + self.released
                + self.crashes
                == 0
    }

    /// The non-zero counts, in words.
    fn describe(&self, held: f64) -> String {
        let mut parts = vec![format!("held {:.0}% of the time", held * 100.0)];
        if let Some((lo, hi)) = self.tokens {
            parts.push(format!("{} grants (tokens {lo} to {hi})", self.grants));
        }
        for (n, what) in [
            (self.accepted, "writes accepted"),
            (self.refused, "writes refused"),
            (self.unknown, "writes unknown"),
            (self.lost, "losses"),
            (self.released, "releases"),
            (self.crashes, "crashes"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        parts.join(", ")
    }
}
