//! The plot's frame: the column of lane names, the lanes' backgrounds and
//! the time axis.

use std::fmt::Write;

use super::{Plot, AXIS_H, FAULT_H, LABEL_W, LANE_H, PAD, PAD_RIGHT};
use fencing_harness::markup::escape as esc;

impl Plot<'_> {
    pub(super) fn svg(&self) -> String {
        let h = self.height();
        let total_w = self.width + PAD + PAD_RIGHT;
        let mut s = String::new();
        s.push_str("<div class=\"timeline\">\n");
        // The names column, outside the scrolling part.
        let _ = writeln!(
            s,
            "<div class=\"names\"><svg class=\"names\" width=\"{LABEL_W}\" height=\"{h}\" viewBox=\"0 0 {LABEL_W} {h}\">"
        );
        let _ = writeln!(
            s,
            "<text class=\"name\" x=\"6\" y=\"{}\">time</text>",
            AXIS_H - 10.0
        );
        let _ = writeln!(
            s,
            "<text class=\"name\" x=\"6\" y=\"{}\">faults</text>",
            AXIS_H + FAULT_H / 2.0 + 4.0
        );
        for (k, c) in self.lanes.iter().enumerate() {
            let _ = writeln!(
                s,
                "<text class=\"name lane-label\" x=\"6\" y=\"{:.1}\">{}</text>",
                self.lane_top(k) + LANE_H / 2.0 + 4.0,
                esc(c)
            );
        }
        s.push_str("</svg></div>\n");

        let _ = writeln!(
            s,
            "<div class=\"scroll\"><svg class=\"plot\" width=\"{total_w:.0}\" height=\"{h}\" viewBox=\"0 0 {total_w:.0} {h}\">"
        );
        self.lane_backgrounds(&mut s, total_w);
        self.axis(&mut s, h);
        self.faults(&mut s, h);
        if self.overview {
            self.overview_lanes(&mut s);
        } else {
            self.lanes_content(&mut s);
        }
        s.push_str("</svg></div>\n</div>\n");
        s
    }

    fn lane_backgrounds(&self, s: &mut String, total_w: f64) {
        for k in 0..self.lanes.len() {
            let fill = if k % 2 == 0 { "#ffffff" } else { "#f4f6f8" };
            let _ = writeln!(
                s,
                "<rect x=\"0\" y=\"{:.1}\" width=\"{total_w:.0}\" height=\"{LANE_H}\" fill=\"{fill}\"/>",
                self.lane_top(k)
            );
        }
    }

    /// Ticks about 100 px apart, in ms from the run's start (in s once
    /// they are a second apart or the part ends 10 s in).
    fn axis(&self, s: &mut String, h: f64) {
        let span_ms = self.to.saturating_sub(self.from) as f64 / 1e6;
        let px_per_ms = if span_ms > 0.0 {
            self.width / span_ms
        } else {
            self.width
        };
        let step = nice_step(100.0 / px_per_ms);
        let from_ms = self.from.saturating_sub(self.origin) as f64 / 1e6;
        let (unit, per_unit) = if step >= 1000.0 || from_ms + span_ms >= 10_000.0 {
            ("s", 1000.0)
        } else {
            ("ms", 1.0)
        };
        let decimals = if step / per_unit >= 1.0 {
            0
        } else {
            (-(step / per_unit).log10()).ceil() as usize
        };
        s.push_str("<g class=\"axis\">\n");
        let _ = writeln!(
            s,
            "<line x1=\"{PAD}\" y1=\"{AXIS_H}\" x2=\"{:.1}\" y2=\"{AXIS_H}\" stroke=\"#555\"/>",
            PAD + self.width
        );
        let mut k = (from_ms / step - 1e-9).ceil().max(0.0) as u64;
        loop {
            let t_ms = k as f64 * step;
            if t_ms > from_ms + span_ms.max(0.0) + 1e-9 {
                break;
            }
            let x = PAD
                + if span_ms > 0.0 {
                    (t_ms - from_ms) / span_ms * self.width
                } else {
                    0.0
                };
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{h:.1}\" stroke=\"#e4e4e4\"/>\
                 <line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{AXIS_H}\" stroke=\"#555\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{:.decimals$} {unit}</text>",
                AXIS_H,
                AXIS_H - 5.0,
                x + 2.0,
                AXIS_H - 8.0,
                t_ms / per_unit,
            );
            k += 1;
            if span_ms <= 0.0 {
                break;
            }
        }
        s.push_str("</g>\n");
    }
}

/// The smallest 1, 2 or 5 times a power of ten that is at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let pow = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * pow >= raw * (1.0 - 1e-9) {
            return m * pow;
        }
    }
    10.0 * pow
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{grant, write, MS};
    use super::super::{render_html, MAX_W};
    use super::*;
    use crate::checker::check;
    use crate::history::WriteOutcome;

    #[test]
    fn large_history_stays_bounded() {
        // 2000 events over 10 minutes: width capped, output linear.
        let mut events = Vec::new();
        for k in 0..1000u64 {
            let at = k * 600 * MS;
            events.push(grant(at / MS, &format!("c{}", k % 5), k + 1));
            events.push(write(
                at / MS,
                at / MS + 1,
                &format!("c{}", k % 5),
                k + 1,
                WriteOutcome::Accepted,
                at / MS + 1,
            ));
        }
        let report = check(&events);
        let html = render_html(&events, &report, "big");
        let width: f64 = {
            let at =
                html.find("class=\"plot\" width=\"").unwrap() + "class=\"plot\" width=\"".len();
            html[at..at + html[at..].find('"').unwrap()]
                .parse()
                .unwrap()
        };
        assert!(width <= MAX_W + PAD + PAD_RIGHT, "{width}");
        assert!(html.len() < 2_000_000, "{}", html.len());
        assert_eq!(html.matches("class=\"lane\"").count(), 5);
        // Ticks are spaced at least ~100 px apart.
        let ticks = html.matches(" ms</text>").count() + html.matches(" s</text>").count();
        assert!(ticks <= (MAX_W / 100.0) as usize + 2, "{ticks}");
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(37.5), 50.0);
        assert_eq!(nice_step(600.0), 1000.0);
        assert!((nice_step(0.03) - 0.05).abs() < 1e-12);
    }
}
