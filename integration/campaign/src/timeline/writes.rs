//! Writes: a mark of its own for each refused, unknown or violating write,
//! and one per lane and pixel column for the accepted ones.

use std::fmt::Write;

use super::{Plot, GREEN, GREY, LANE_H, ORANGE};
use crate::history::{EventKind, WriteOutcome};
use fencing_harness::markup::escape as esc;

impl Plot<'_> {
    /// One write, drawn on its own: refused, unknown, in a violation, or
    /// alone in its pixel column.
    pub(super) fn write_mark(&self, out: &mut String, i: usize, top: f64) {
        let e = &self.events[i];
        let EventKind::Write {
            resource,
            token,
            gate,
            start_ns,
            outcome,
            value,
        } = &e.kind
        else {
            return;
        };
        let x = self.x(e.at_ns);
        let y = top + LANE_H - 9.0;
        let word = match outcome {
            WriteOutcome::Accepted => "accepted",
            WriteOutcome::Refused => "refused",
            WriteOutcome::Unknown => "unknown",
        };
        let tip = esc(&format!(
            "write {value} to {gate}/{resource} with token {token}: sent {}, {word} at {}",
            self.t(*start_ns),
            self.t(e.at_ns)
        ));
        let base = match outcome {
            WriteOutcome::Accepted => GREEN,
            WriteOutcome::Refused => ORANGE,
            WriteOutcome::Unknown => GREY,
        };
        let (class, color) = self.paint(i, base);
        let width = if class.is_empty() { 1.5 } else { 2.5 };
        let xs = self.x(*start_ns).min(x);
        let _ = write!(
            out,
            "<g class=\"write {word}{class}\" data-ev=\"{i}\"><title>{tip}</title>\
             <line x1=\"{xs:.1}\" y1=\"{y:.1}\" x2=\"{x:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" stroke-opacity=\"0.5\"/>"
        );
        match outcome {
            WriteOutcome::Refused => {
                let _ = write!(
                    out,
                    "<path d=\"M{:.1} {:.1} l6 6 m0 -6 l-6 6\" stroke=\"{color}\" stroke-width=\"{width}\"/>",
                    x - 3.0,
                    y - 3.0
                );
            }
            _ => {
                let _ = write!(
                    out,
                    "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"{width}\"/>",
                    y - 5.0,
                    y + 4.0
                );
            }
        }
        out.push_str("</g>\n");
    }

    /// Accepted writes that share a lane and a pixel column: one mark, so
    /// that a long campaign's hundreds of thousands of writes stay a few
    /// marks per pixel.
    pub(super) fn bin_mark(&self, out: &mut String, bin: &WriteBin, top: f64) {
        if bin.count == 1 {
            return self.write_mark(out, bin.first, top);
        }
        let y = top + LANE_H - 9.0;
        let x = self.x(bin.end_ns);
        let xs = self.x(bin.start_ns).min(x);
        let tip = esc(&format!(
            "{} accepted writes, sent from {}, the last answered at {}, tokens {} to {}",
            bin.count,
            self.t(bin.start_ns),
            self.t(bin.end_ns),
            bin.tokens.0,
            bin.tokens.1
        ));
        let _ = writeln!(
            out,
            "<g class=\"write accepted\" data-ev=\"{}\"><title>{tip}</title>\
             <line x1=\"{xs:.1}\" y1=\"{y:.1}\" x2=\"{x:.1}\" y2=\"{y:.1}\" stroke=\"{GREEN}\" stroke-opacity=\"0.5\"/>\
             <line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{GREEN}\" stroke-width=\"1.5\"/></g>",
            bin.first,
            y - 5.0,
            y + 4.0
        );
    }
}

/// Accepted writes of one lane in one pixel column.
pub(super) struct WriteBin {
    pub(super) px: i64,
    /// The first write's event index.
    first: usize,
    count: usize,
    /// The earliest send and the latest answer.
    start_ns: u64,
    end_ns: u64,
    /// The lowest and highest token.
    tokens: (u64, u64),
}

impl WriteBin {
    pub(super) fn new(px: i64, first: usize, start_ns: u64, at_ns: u64, token: u64) -> Self {
        WriteBin {
            px,
            first,
            count: 1,
            start_ns,
            end_ns: at_ns,
            tokens: (token, token),
        }
    }

    pub(super) fn add(&mut self, start_ns: u64, at_ns: u64, token: u64) {
        self.count += 1;
        self.start_ns = self.start_ns.min(start_ns);
        self.end_ns = self.end_ns.max(at_ns);
        self.tokens = (self.tokens.0.min(token), self.tokens.1.max(token));
    }
}

#[cfg(test)]
mod tests {
    use super::super::render_html;
    use super::super::test_support::{grant, write};
    use crate::checker::check;
    use crate::history::WriteOutcome;

    /// A soak's hundreds of thousands of accepted writes: one mark per lane
    /// and pixel column; a refused write keeps its own.
    #[test]
    fn accepted_writes_share_a_mark_per_pixel() {
        let mut events = vec![grant(0, "c1", 1)];
        // 50,000 writes over 5 s: 10,000 px wide, about 5 writes a pixel.
        for k in 0..50_000u64 {
            events.push(write(
                k / 10,
                k / 10 + 1,
                "c1",
                1,
                WriteOutcome::Accepted,
                k / 10 + 1,
            ));
        }
        events.push(write(4000, 4001, "c1", 1, WriteOutcome::Refused, 4001));
        let report = check(&events);
        let html = render_html(&events, &report, "soak");
        let accepted = html.matches("class=\"write accepted\"").count();
        assert!(accepted <= 10_002, "{accepted} marks for accepted writes");
        assert!(
            html.contains("10 accepted writes, sent from"),
            "no shared mark"
        );
        assert_eq!(html.matches("class=\"write refused\"").count(), 1);
        assert!(html.len() < 5_000_000, "{}", html.len());
    }
}
