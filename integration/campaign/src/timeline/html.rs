//! The HTML page around the plot: the summary of the checker's report,
//! the legend and the list of violations.

use std::fmt::Write;

use super::{Plot, BLUE, CLIENT_FAULT, GLOBAL_FAULT, GREEN, GREY, LISTED, ORANGE, RED};
use crate::checker::Report;
use fencing_harness::markup::escape as esc;

pub(super) fn page(title: &str, report: &Report, plot: &Plot, intro: &str) -> String {
    let mut out = String::new();
    let title = esc(title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>{title}</h1>\n"
    );
    summary(&mut out, report);
    out.push_str(intro);
    legend(&mut out, plot.overview);
    out.push_str(&plot.svg());
    violation_list(&mut out, report);
    out.push_str("</body>\n</html>\n");
    out
}

const CSS: &str = "
body { font-family: system-ui, sans-serif; font-size: 14px; margin: 16px; color: #222; }
h1 { font-size: 20px; }
h2 { font-size: 16px; margin-top: 24px; }
table.summary { border-collapse: collapse; margin-bottom: 8px; }
table.summary td, table.summary th { border: 1px solid #ccc; padding: 2px 10px; text-align: left; }
td.pass { color: #2ca02c; font-weight: bold; }
td.fail { color: #d62728; font-weight: bold; }
ul.figures { margin: 4px 0 12px 0; }
.legend span.key { display: inline-block; margin-right: 14px; }
.legend span.sw { display: inline-block; width: 14px; height: 10px; margin-right: 4px; vertical-align: middle; }
.timeline { display: flex; border: 1px solid #ccc; margin-top: 8px; }
.timeline .names { flex: none; background: #fafafa; border-right: 1px solid #ccc; }
.timeline .scroll { flex: 1; overflow-x: auto; }
svg text { font-size: 10px; font-family: ui-monospace, monospace; }
svg .name { font-size: 12px; }
ol.violations li { margin-bottom: 4px; }
ol.violations li .prop { color: #d62728; font-weight: bold; }
.events { color: #777; font-size: 12px; }
";

fn summary(out: &mut String, report: &Report) {
    out.push_str(
        "<table class=\"summary\">\n<tr><th>property</th><th>result</th><th>violations</th><th>notes</th></tr>\n",
    );
    for p in &report.properties {
        let (class, word) = if p.passed {
            ("pass", "pass")
        } else {
            ("fail", "FAIL")
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"{class}\">{word}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.name),
            p.violations.len(),
            esc(&p.notes.join("; "))
        );
    }
    out.push_str("</table>\n<ul class=\"figures\">\n");
    let f = &report.figures;
    let opt = |ms: Option<f64>| ms.map_or_else(|| "-".to_string(), |ms| format!("{ms:.3} ms"));
    let faults: Vec<String> = f
        .faults_by_kind
        .iter()
        .map(|(k, n)| format!("{k} x{n}"))
        .collect();
    let max_hold = f.max_hold.as_ref().map_or_else(
        || "-".to_string(),
        |h| {
            format!(
                "{:.3} ms ({} token {} of {}{})",
                h.ms,
                h.client,
                h.token,
                h.resource,
                if h.open { ", never ended" } else { "" }
            )
        },
    );
    for (k, v) in [
        (
            "events",
            format!(
                "{} over {:.3} ms, {} clients",
                f.events, f.duration_ms, f.clients
            ),
        ),
        ("grants", f.grants.to_string()),
        (
            "writes",
            format!(
                "{} accepted, {} refused, {} unknown",
                f.writes_accepted, f.writes_refused, f.writes_unknown
            ),
        ),
        (
            "faults",
            if faults.is_empty() {
                "none".to_string()
            } else {
                faults.join(", ")
            },
        ),
        ("max hold", max_hold),
        ("recovery after last fault", opt(f.recovery_ms)),
        ("max gap between grants", opt(f.max_grant_gap_ms)),
    ] {
        let _ = writeln!(out, "<li>{}: {}</li>", esc(k), esc(&v));
    }
    out.push_str("</ul>\n");
}

fn legend(out: &mut String, overview: bool) {
    out.push_str("<div class=\"legend\">");
    let keys: &[(&str, &str)] = if overview {
        &[
            (BLUE, "held (darker: more of the column)"),
            (ORANGE, "a write refused"),
            ("#000000", "a crash"),
            (GLOBAL_FAULT, "faults (all lanes)"),
            (CLIENT_FAULT, "faults on a client"),
            (RED, "in a violation"),
        ]
    } else {
        &[
            (BLUE, "held (token)"),
            (GREEN, "write accepted"),
            (ORANGE, "write refused (x)"),
            (GREY, "write unknown"),
            (GLOBAL_FAULT, "fault (all lanes)"),
            (CLIENT_FAULT, "fault on a client"),
            (RED, "in a violation"),
        ]
    };
    for (color, what) in keys {
        let _ = write!(
            out,
            "<span class=\"key\"><span class=\"sw\" style=\"background:{color}\"></span>{what}</span>"
        );
    }
    out.push_str("</div>\n");
}

fn violation_list(out: &mut String, report: &Report) {
    let total = report.violations().count();
    let _ = writeln!(out, "<h2>Violations ({total})</h2>");
    if total == 0 {
        out.push_str("<p>None.</p>\n");
        return;
    }
    out.push_str("<ol class=\"violations\">\n");
    for (name, v) in report.violations().take(LISTED) {
        let evs: Vec<String> = v.events.iter().map(|i| i.to_string()).collect();
        let _ = writeln!(
            out,
            "<li class=\"violation\"><span class=\"prop\">{}</span>: {} <span class=\"events\">(events {})</span></li>",
            esc(name),
            esc(&v.message),
            evs.join(", ")
        );
    }
    out.push_str("</ol>\n");
    if total > LISTED {
        let _ = writeln!(out, "<p>... and {} more.</p>", total - LISTED);
    }
}
