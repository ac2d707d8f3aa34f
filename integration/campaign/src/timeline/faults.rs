//! Faults: shaded bands across every lane (named in the row above the
//! lanes) or on the lane of the client they target.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use super::{Plot, AXIS_H, CLIENT_FAULT, GLOBAL_FAULT, LANE_H, RED};
use crate::history::{fault_spans, FaultSpan};
use fencing_harness::markup::escape as esc;

impl Plot<'_> {
    pub(super) fn faults(&self, s: &mut String, h: f64) {
        s.push_str("<g class=\"faults\">\n");
        let spans: Vec<FaultSpan> = fault_spans(self.events)
            .into_iter()
            .filter(|f| self.shows(f.start_ns, f.end_ns))
            .collect();
        let mut global = 0usize;
        for group in self.fault_groups(&spans) {
            self.fault_band(s, h, &group, &mut global);
        }
        s.push_str("</g>\n");
    }

    /// One band per fault; in an overview, one per row (a client's lane, or
    /// the row of faults on all lanes) for faults whose bands touch.
    fn fault_groups<'s>(&self, spans: &'s [FaultSpan]) -> Vec<Vec<&'s FaultSpan>> {
        if !self.overview {
            return spans.iter().map(|f| vec![f]).collect();
        }
        let mut groups: Vec<(Vec<&FaultSpan>, f64)> = Vec::new();
        let mut last_of_row: HashMap<Option<usize>, usize> = HashMap::new();
        for f in spans {
            let row = self.lane_of.get(f.target.as_str()).copied();
            let (x1, x2) = self.band(f);
            match last_of_row.get(&row) {
                Some(&g) if x1 <= groups[g].1 + 1.0 => {
                    groups[g].0.push(f);
                    groups[g].1 = groups[g].1.max(x2);
                }
                _ => {
                    last_of_row.insert(row, groups.len());
                    groups.push((vec![f], x2));
                }
            }
        }
        groups.into_iter().map(|(g, _)| g).collect()
    }

    /// The x range of a fault's band, at least a pixel wide.
    fn band(&self, f: &FaultSpan) -> (f64, f64) {
        let x1 = self.x(f.start_ns);
        (x1, self.x(f.end_ns.unwrap_or(self.to)).max(x1 + 1.0))
    }

    fn fault_band(&self, s: &mut String, h: f64, group: &[&FaultSpan], global: &mut usize) {
        let f = group[0];
        let x1 = self.band(f).0;
        let x2 = group
            .iter()
            .map(|g| self.band(g).1)
            .fold(x1 + 1.0, f64::max);
        let w = x2 - x1;
        let until = |f: &FaultSpan| match f.end_ns {
            Some(end) => self.t(end),
            None => "the end".to_string(),
        };
        let (tip, label) = if let [f] = group {
            let tip = format!(
                "{} {} on {} from {} to {}",
                f.fault,
                f.id,
                f.target,
                self.t(f.start_ns),
                until(f)
            );
            (tip, f.fault.clone())
        } else {
            let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
            for g in group {
                *kinds.entry(g.fault.as_str()).or_default() += 1;
            }
            let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} x{n}")).collect();
            let last = group.iter().max_by_key(|g| g.end_ns.unwrap_or(u64::MAX));
            let tip = format!(
                "{} faults on {} from {} to {}: {}",
                group.len(),
                f.target,
                self.t(f.start_ns),
                last.map_or_else(|| "the end".to_string(), |g| until(g)),
                kinds.join(", ")
            );
            (tip, format!("{} faults", group.len()))
        };
        let tip = esc(&tip);
        // An overview labels only the bands wide enough to read.
        let label = if self.overview && w < 40.0 {
            String::new()
        } else {
            label
        };
        let in_viol = group
            .iter()
            .any(|f| self.viol.contains(&f.start) || f.end.is_some_and(|e| self.viol.contains(&e)));
        let stroke = if in_viol {
            format!(" stroke=\"{RED}\" stroke-width=\"2\"")
        } else {
            String::new()
        };
        let ev = f.start;
        match self.lane_of.get(f.target.as_str()).copied() {
            Some(k) => {
                let y = self.lane_top(k);
                let _ = writeln!(
                    s,
                    "<g class=\"fault client-fault\" data-ev=\"{ev}\"><title>{tip}</title>\
                     <rect x=\"{x1:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{CLIENT_FAULT}\" fill-opacity=\"0.35\"{stroke}/>\
                     <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#7a5c00\">{}</text></g>",
                    y + 1.0,
                    LANE_H - 2.0,
                    x1 + 2.0,
                    y + 9.0,
                    esc(&label)
                );
            }
            None => {
                let y0 = AXIS_H + 1.0;
                let label_y = AXIS_H + 11.0 + (*global % 2) as f64 * 12.0;
                *global += 1;
                let _ = writeln!(
                    s,
                    "<g class=\"fault global-fault\" data-ev=\"{ev}\"><title>{tip}</title>\
                     <rect x=\"{x1:.1}\" y=\"{y0:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{GLOBAL_FAULT}\" fill-opacity=\"0.13\"{stroke}/>\
                     <text x=\"{:.1}\" y=\"{label_y:.1}\" fill=\"#5b3d8a\">{}</text></g>",
                    h - y0,
                    x1 + 2.0,
                    esc(&label)
                );
            }
        }
        // A fault end that a violation names (the last one, for liveness)
        // is marked on its own.
        for f in group {
            if let Some(e) = f.end.filter(|e| self.viol.contains(e)) {
                let x = self.band(f).1;
                let tip = esc(&format!(
                    "{} {} on {} ended at {}",
                    f.fault,
                    f.id,
                    f.target,
                    until(f)
                ));
                let _ = writeln!(
                    s,
                    "<line class=\"viol\" data-ev=\"{e}\" x1=\"{x:.1}\" y1=\"{AXIS_H}\" x2=\"{x:.1}\" y2=\"{h:.1}\" \
                     stroke=\"{RED}\" stroke-width=\"2\" stroke-dasharray=\"4 3\"><title>{tip}</title></line>"
                );
            }
        }
    }
}
