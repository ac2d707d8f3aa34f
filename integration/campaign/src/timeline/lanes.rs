//! A detailed part's lanes: the wait before each grant and the hold after
//! it, then the events one by one (acquire starts, losses, releases,
//! crashes and writes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;

use super::writes::WriteBin;
use super::{Plot, BLUE, LANE_H};
use crate::history::{holds, sorted_order, EventKind, HoldEnd, WriteOutcome};
use fencing_harness::markup::escape as esc;

impl Plot<'_> {
    pub(super) fn lanes_content(&self, s: &mut String) {
        // Per lane, the SVG of its elements, in at_ns order.
        let mut lanes: Vec<String> = vec![String::new(); self.lanes.len()];
        let order = sorted_order(self.events);

        // Acquire starts, paired with the grant that follows.
        let mut pending: HashMap<(&str, &str), usize> = HashMap::new();
        let mut waits: BTreeMap<usize, usize> = BTreeMap::new(); // grant -> start
        for &i in &order {
            let e = &self.events[i];
            match &e.kind {
                EventKind::AcquireStart { resource } => {
                    pending.insert((e.client.as_str(), resource.as_str()), i);
                }
                EventKind::Grant { resource, .. } => {
                    if let Some(st) = pending.remove(&(e.client.as_str(), resource.as_str())) {
                        waits.insert(i, st);
                    }
                }
                _ => {}
            }
        }
        let waited: BTreeSet<usize> = waits.values().copied().collect();

        for h in holds(self.events) {
            let Some(&k) = self.lane_of.get(h.client.as_str()) else {
                continue;
            };
            if !self.shows(h.start_ns, h.end_ns) {
                continue;
            }
            let out = &mut lanes[k];
            let top = self.lane_top(k);
            let mid = top + LANE_H / 2.0 - 4.0;
            if let Some(&st) = waits.get(&h.grant) {
                let (class, color) = self.paint(st, "#777777");
                let _ = writeln!(
                    out,
                    "<line class=\"wait{class}\" x1=\"{:.1}\" y1=\"{mid:.1}\" x2=\"{:.1}\" y2=\"{mid:.1}\" stroke=\"{color}\" stroke-dasharray=\"2 2\"/>",
                    self.x(self.events[st].at_ns),
                    self.x(h.start_ns)
                );
            }
            let x1 = self.x(h.start_ns);
            let x2 = self.x(h.end_ns.unwrap_or(self.to)).max(x1 + 2.0);
            let (class, color) = self.paint(h.grant, BLUE);
            let opacity = if h.end.is_some() { "0.85" } else { "0.45" };
            let ended = match (h.end_kind, h.end_ns) {
                (Some(kind), Some(at)) => {
                    let how = match kind {
                        HoldEnd::Lost => "lost",
                        HoldEnd::Release => "released",
                        HoldEnd::Crash => "crashed",
                    };
                    format!("{how} at {}", self.t(at))
                }
                _ => "held to the end".to_string(),
            };
            let tip = esc(&format!(
                "{} token {} of {}: granted at {}, {}",
                h.client,
                h.token,
                h.resource,
                self.t(h.start_ns),
                ended
            ));
            // Bars too narrow for their label keep it in the tooltip only.
            let label = if x2 - x1 < 10.0 {
                String::new()
            } else if self.several_resources {
                format!("{}:{}", h.resource, h.token)
            } else {
                h.token.to_string()
            };
            let _ = writeln!(
                out,
                "<g class=\"hold{class}\" data-ev=\"{}\"><title>{tip}</title>\
                 <rect x=\"{x1:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"14\" rx=\"2\" fill=\"{color}\" fill-opacity=\"{opacity}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#fff\">{}</text></g>",
                h.grant,
                mid - 7.0,
                x2 - x1,
                x1 + 2.0,
                mid + 3.5,
                esc(&label)
            );
        }

        // Per lane, the accepted writes of the pixel column being filled.
        let mut bins: Vec<Option<WriteBin>> = (0..self.lanes.len()).map(|_| None).collect();
        for &i in &order {
            let e = &self.events[i];
            let Some(&k) = self.lane_of.get(e.client.as_str()) else {
                continue;
            };
            if !self.shows(e.at_ns, Some(e.at_ns)) {
                continue;
            }
            let out = &mut lanes[k];
            let top = self.lane_top(k);
            let mid = top + LANE_H / 2.0 - 4.0;
            let x = self.x(e.at_ns);
            match &e.kind {
                EventKind::AcquireStart { resource } => {
                    let (class, color) = self.paint(i, "#777777");
                    let tip = if waited.contains(&i) {
                        format!("acquire of {resource} began at {}", self.t(e.at_ns))
                    } else {
                        format!(
                            "acquire of {resource} began at {} (no grant followed)",
                            self.t(e.at_ns)
                        )
                    };
                    let _ = writeln!(
                        out,
                        "<circle class=\"acquire{class}\" data-ev=\"{i}\" cx=\"{x:.1}\" cy=\"{mid:.1}\" r=\"3\" fill=\"#fff\" stroke=\"{color}\"><title>{}</title></circle>",
                        esc(&tip)
                    );
                }
                EventKind::Lost {
                    resource,
                    token,
                    reason,
                } => {
                    let (class, color) = self.paint(i, "#333333");
                    let tip = esc(&format!(
                        "lost token {token} of {resource} at {}: {reason}",
                        self.t(e.at_ns)
                    ));
                    let _ = writeln!(
                        out,
                        "<path class=\"lost{class}\" data-ev=\"{i}\" d=\"M{x:.1} {:.1} l-4 -7 h8 z\" fill=\"{color}\"><title>{tip}</title></path>",
                        mid - 7.0
                    );
                }
                EventKind::Release { resource, token } => {
                    let (class, color) = self.paint(i, "#333333");
                    let tip = esc(&format!(
                        "released token {token} of {resource} at {}",
                        self.t(e.at_ns)
                    ));
                    let _ = writeln!(
                        out,
                        "<line class=\"release{class}\" data-ev=\"{i}\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"2\"><title>{tip}</title></line>",
                        mid - 9.0,
                        mid + 9.0
                    );
                }
                EventKind::Crash {} => {
                    let (class, color) = self.paint(i, "#000000");
                    let tip = esc(&format!("{} crashed at {}", e.client, self.t(e.at_ns)));
                    let _ = writeln!(
                        out,
                        "<path class=\"crash{class}\" data-ev=\"{i}\" d=\"M{:.1} {:.1} l12 12 m0 -12 l-12 12\" stroke=\"{color}\" stroke-width=\"3\"><title>{tip}</title></path>",
                        x - 6.0,
                        mid - 6.0
                    );
                }
                EventKind::Write {
                    start_ns,
                    outcome,
                    token,
                    ..
                } => {
                    if *outcome != WriteOutcome::Accepted || self.viol.contains(&i) {
                        self.write_mark(out, i, top);
                        continue;
                    }
                    let px = x.round() as i64;
                    match &mut bins[k] {
                        Some(bin) if bin.px == px => bin.add(*start_ns, e.at_ns, *token),
                        open => {
                            if let Some(bin) = open.take() {
                                self.bin_mark(out, &bin, top);
                            }
                            *open = Some(WriteBin::new(px, i, *start_ns, e.at_ns, *token));
                        }
                    }
                }
                EventKind::Grant { .. }
                | EventKind::FaultStart { .. }
                | EventKind::FaultEnd { .. } => {}
            }
        }

        for (k, bin) in bins.iter().enumerate() {
            if let Some(bin) = bin {
                self.bin_mark(&mut lanes[k], bin, self.lane_top(k));
            }
        }

        for (k, body) in lanes.iter().enumerate() {
            let _ = writeln!(
                s,
                "<g class=\"lane\" data-client=\"{}\">\n{body}</g>",
                esc(self.lanes[k])
            );
        }
    }
}
