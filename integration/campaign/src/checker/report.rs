//! The [`Report`]'s `Display`: the verdict table, the figures, and each
//! property's notes and first violations.

use std::fmt;

use super::Report;

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
