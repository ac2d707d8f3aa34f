//! A self-contained HTML page showing a history on a time line: inline CSS
//! and inline SVG, no scripts, nothing loaded from elsewhere.
//!
//! One horizontal lane per client (sorted by name), time to the right:
//!
//! - a hold is a bar from its grant to its `Lost`, `Release` or `Crash`
//!   (paler when it lasts to the end), labelled with its token; a dashed
//!   line leads from the acquire's start (a small circle) to the grant;
//! - writes are ticks below the bars: accepted green, refused an orange x,
//!   unknown grey;
//! - a lost grant ends in a small triangle, a crash is a black cross;
//! - faults are shaded bands: across every lane, named in the row above
//!   the lanes, or on the lane of the client they target;
//! - everything involved in a violation is red, and the violations are
//!   listed below the picture.
//!
//! Every drawn event carries `data-ev="<index>"` (its index in the slice
//! given to [`render_html`], as in the [`Report`]) and a tooltip. The plot
//! is as wide as the run is long (up to a cap) and scrolls horizontally;
//! the lane names stay put.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;

use super::checker::Report;
use super::heal::heal_waits;
use super::history::{
    fault_spans, holds, sorted_order, Event, EventKind, FaultSpan, HoldEnd, WriteOutcome,
};
use crate::plot::escape as esc;

const RED: &str = "#d62728";
const GREEN: &str = "#2ca02c";
const ORANGE: &str = "#ff7f0e";
const GREY: &str = "#999999";
const BLUE: &str = "#4c78a8";
const GLOBAL_FAULT: &str = "#9467bd";
const CLIENT_FAULT: &str = "#e7ba52";

/// Width of the lane-name column.
const LABEL_W: f64 = 160.0;
/// Height of the time axis.
const AXIS_H: f64 = 28.0;
/// Height of the row naming the faults that span all lanes.
const FAULT_H: f64 = 30.0;
const LANE_H: f64 = 34.0;
/// Margin left of the plot...
const PAD: f64 = 12.0;
/// ...and right of it (room for the last tick's label).
const PAD_RIGHT: f64 = 48.0;
/// Pixels per millisecond for short runs...
const PX_PER_MS: f64 = 2.0;
/// ...within these bounds on the plot's width.
const MIN_W: f64 = 800.0;
const MAX_W: f64 = 16_000.0;
/// Violations listed below the picture.
const LISTED: usize = 500;
/// Runs longer than this get an overview and detail windows instead of one
/// page with every event (a night's soak would make hundreds of MB)...
pub const DETAIL_SPAN_NS: u64 = 10 * 60 * SEC;
/// ...windows this long...
const WINDOW_NS: u64 = 60 * SEC;
/// ...around the first violations, the longest gap and the end.
const VIOLATION_WINDOWS: usize = 5;
/// An overview's width, and its columns' (one summary per lane each).
const OVERVIEW_MAX_W: f64 = 8_000.0;
const CELL_PX: f64 = 4.0;
const SEC: u64 = 1_000_000_000;

/// The page for `events` (any order) and the `report` the checker made of
/// the same slice: every event of the run drawn.
pub fn render_html(events: &[Event], report: &Report, title: &str) -> String {
    page(title, report, &Plot::new(events, report), "")
}

/// One HTML file of a run's timeline.
#[derive(Debug)]
pub struct Page {
    /// The file's name, e.g. `timeline.html`.
    pub file: String,
    pub html: String,
}

/// A run's timeline: `timeline.html` with every event (see
/// [`render_html`]); or, for a run longer than [`DETAIL_SPAN_NS`], an
/// overview of per-column summaries that links detail windows
/// (`timeline-<s>s.html`, from `s` seconds after the start) around the
/// first violations, the longest gap between grants, the longest wait after
/// a heal, and the end.
pub fn render_pages(events: &[Event], report: &Report, title: &str) -> Vec<Page> {
    let (origin, end) = run_span(events);
    if end - origin <= DETAIL_SPAN_NS {
        let html = render_html(events, report, title);
        return vec![Page {
            file: "timeline.html".into(),
            html,
        }];
    }
    let windows = detail_windows(events, report);
    let overview = Plot::part(events, report, origin, end, true);
    let mut pages = vec![Page {
        file: "timeline.html".into(),
        html: page(
            title,
            report,
            &overview,
            &overview_intro(&overview, &windows),
        ),
    }];
    for w in windows {
        let (a, z) = (secs(w.from - origin), secs(w.to - origin));
        let intro = format!(
            "<p class=\"intro\">{a} s to {z} s of the run, every event drawn ({}). \
             <a href=\"timeline.html\">The whole run</a>.</p>\n",
            esc(&w.why.join("; "))
        );
        let plot = Plot::part(events, report, w.from, w.to, false);
        pages.push(Page {
            file: w.file(origin),
            html: page(&format!("{title}, {a} s to {z} s"), report, &plot, &intro),
        });
    }
    pages
}

fn page(title: &str, report: &Report, plot: &Plot, intro: &str) -> String {
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

/// The first and last `at_ns` (0, 0 when empty).
fn run_span(events: &[Event]) -> (u64, u64) {
    let ats = events.iter().map(|e| e.at_ns);
    (ats.clone().min().unwrap_or(0), ats.max().unwrap_or(0))
}

/// Whole seconds in `ns`.
fn secs(ns: u64) -> u64 {
    ns / SEC
}

/// A part of a long run drawn in detail, and why.
struct Window {
    from: u64,
    to: u64,
    why: Vec<String>,
}

impl Window {
    fn file(&self, origin: u64) -> String {
        format!("timeline-{}s.html", secs(self.from - origin))
    }
}

/// Windows of [`WINDOW_NS`] on whole seconds, in time order: around each
/// of the first violations (ending a half window after its last event),
/// the longest gap between grants and the longest wait after a heal (from
/// a little before each) and the end.
fn detail_windows(events: &[Event], report: &Report) -> Vec<Window> {
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
fn overview_intro(plot: &Plot, windows: &[Window]) -> String {
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

/// The SVG part.
struct Plot<'a> {
    events: &'a [Event],
    /// The run's first event: tooltips give times from here.
    origin: u64,
    /// The part of the run drawn (the whole run unless a window).
    from: u64,
    to: u64,
    /// Per-pixel summaries instead of one mark per event (a long run).
    overview: bool,
    /// Plot width in pixels (without the margins).
    width: f64,
    lanes: Vec<&'a str>,
    lane_of: HashMap<&'a str, usize>,
    viol: BTreeSet<usize>,
    several_resources: bool,
}

impl<'a> Plot<'a> {
    /// The whole run in detail.
    fn new(events: &'a [Event], report: &Report) -> Self {
        let (origin, end) = run_span(events);
        Self::part(events, report, origin, end, false)
    }

    /// `from..=to` of the run, in detail or (`overview`) summarised per
    /// pixel column.
    fn part(events: &'a [Event], report: &Report, from: u64, to: u64, overview: bool) -> Self {
        let (origin, _) = run_span(events);
        // Lanes: every client with an event other than a fault.
        let lanes: BTreeSet<&str> = events
            .iter()
            .filter(|e| {
                !matches!(
                    e.kind,
                    EventKind::FaultStart { .. } | EventKind::FaultEnd { .. }
                )
            })
            .map(|e| e.client.as_str())
            .collect();
        let lanes: Vec<&str> = lanes.into_iter().collect();
        let lane_of = lanes.iter().enumerate().map(|(k, &c)| (c, k)).collect();
        let resources: BTreeSet<&str> = events.iter().filter_map(|e| e.kind.resource()).collect();
        let span_ms = to.saturating_sub(from) as f64 / 1e6;
        let max_w = if overview { OVERVIEW_MAX_W } else { MAX_W };
        Plot {
            events,
            origin,
            from,
            to,
            overview,
            width: (span_ms * PX_PER_MS).clamp(MIN_W, max_w),
            lanes,
            lane_of,
            viol: report
                .violating_events()
                .into_iter()
                .filter(|&i| i < events.len())
                .collect(),
            several_resources: resources.len() > 1,
        }
    }

    /// The x of `ns`, held to the drawn part.
    fn x(&self, ns: u64) -> f64 {
        let span = self.to.saturating_sub(self.from).max(1) as f64;
        PAD + (ns.clamp(self.from, self.to) - self.from) as f64 / span * self.width
    }

    /// Whether `from_ns..=to_ns` (`None`: to the end) shows in the part.
    fn shows(&self, from_ns: u64, to_ns: Option<u64>) -> bool {
        from_ns <= self.to && to_ns.is_none_or(|t| t >= self.from)
    }

    fn lane_top(&self, k: usize) -> f64 {
        AXIS_H + FAULT_H + k as f64 * LANE_H
    }

    fn height(&self) -> f64 {
        self.lane_top(self.lanes.len()) + 4.0
    }

    /// Class suffix and colour for event `i`: red when in a violation.
    fn paint(&self, i: usize, color: &'static str) -> (&'static str, &'static str) {
        if self.viol.contains(&i) {
            (" viol", RED)
        } else {
            ("", color)
        }
    }

    fn t(&self, ns: u64) -> String {
        format!("{:.3} ms", ns.saturating_sub(self.origin) as f64 / 1e6)
    }

    fn svg(&self) -> String {
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

    fn faults(&self, s: &mut String, h: f64) {
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

    /// An overview's lanes: per column, one summary of what the client
    /// did; then each violating event on its own, in red.
    fn overview_lanes(&self, s: &mut String) {
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

    fn lanes_content(&self, s: &mut String) {
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

    /// One write, drawn on its own: refused, unknown, in a violation, or
    /// alone in its pixel column.
    fn write_mark(&self, out: &mut String, i: usize, top: f64) {
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
    fn bin_mark(&self, out: &mut String, bin: &WriteBin, top: f64) {
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

/// Accepted writes of one lane in one pixel column.
struct WriteBin {
    px: i64,
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
    fn new(px: i64, first: usize, start_ns: u64, at_ns: u64, token: u64) -> Self {
        WriteBin {
            px,
            first,
            count: 1,
            start_ns,
            end_ns: at_ns,
            tokens: (token, token),
        }
    }

    fn add(&mut self, start_ns: u64, at_ns: u64, token: u64) {
        self.count += 1;
        self.start_ns = self.start_ns.min(start_ns);
        self.end_ns = self.end_ns.max(at_ns);
        self.tokens = (self.tokens.0.min(token), self.tokens.1.max(token));
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
    use super::super::checker::check;
    use super::super::history::NEMESIS;
    use super::*;

    const MS: u64 = 1_000_000;

    fn ev(at_ms: u64, client: &str, kind: EventKind) -> Event {
        Event::new(at_ms * MS, client, kind)
    }

    fn grant(at: u64, c: &str, token: u64) -> Event {
        ev(
            at,
            c,
            EventKind::Grant {
                resource: "r".into(),
                token,
            },
        )
    }

    fn write(sent: u64, at: u64, c: &str, token: u64, outcome: WriteOutcome) -> Event {
        ev(
            at,
            c,
            EventKind::Write {
                resource: "r".into(),
                token,
                gate: "g".into(),
                start_ns: sent * MS,
                outcome,
                value: at,
            },
        )
    }

    /// c1 holds 1 past c2's grant of 2 (a violation), c3 crashes under a
    /// pause, a partition spans all lanes.
    fn small() -> Vec<Event> {
        vec![
            ev(
                0,
                "c1",
                EventKind::AcquireStart {
                    resource: "r".into(),
                },
            ),
            grant(1, "c1", 1),
            write(2, 3, "c1", 1, WriteOutcome::Accepted),
            ev(
                3,
                NEMESIS,
                EventKind::FaultStart {
                    fault: "partition-leader".into(),
                    target: "n1".into(),
                    id: 1,
                },
            ),
            ev(
                4,
                "c2",
                EventKind::AcquireStart {
                    resource: "r".into(),
                },
            ),
            grant(10, "c2", 2),
            write(11, 12, "c2", 2, WriteOutcome::Accepted),
            ev(
                13,
                "c1",
                EventKind::Lost {
                    resource: "r".into(),
                    token: 1,
                    reason: "<expired> & \"gone\"".into(),
                },
            ),
            write(14, 15, "c1", 1, WriteOutcome::Refused),
            write(14, 16, "c2", 2, WriteOutcome::Unknown),
            ev(16, NEMESIS, EventKind::FaultEnd { id: 1 }),
            ev(
                17,
                NEMESIS,
                EventKind::FaultStart {
                    fault: "pause-client".into(),
                    target: "c3".into(),
                    id: 2,
                },
            ),
            ev(18, "c3", EventKind::Crash {}),
            ev(19, NEMESIS, EventKind::FaultEnd { id: 2 }),
            ev(
                20,
                "c2",
                EventKind::Release {
                    resource: "r".into(),
                    token: 2,
                },
            ),
        ]
    }

    /// The opening tag of the element carrying `data-ev="i"`.
    fn tag_of(html: &str, i: usize) -> &str {
        let at = html
            .find(&format!("data-ev=\"{i}\""))
            .unwrap_or_else(|| panic!("event {i} is drawn"));
        let start = html[..at].rfind('<').unwrap();
        let end = at + html[at..].find('>').unwrap();
        &html[start..=end]
    }

    #[test]
    fn small_history_renders() {
        let events = small();
        let report = check(&events);
        assert!(!report.passed(), "the overlap is a violation");
        let html = render_html(&events, &report, "run <1> & more");

        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<title>run &lt;1&gt; &amp; more</title>"));
        // One lane per client; the nemesis has none.
        assert_eq!(html.matches("class=\"lane\"").count(), 3, "{html}");
        for c in ["c1", "c2", "c3"] {
            assert!(html.contains(&format!("data-client=\"{c}\"")), "{c}");
        }
        assert!(!html.contains("data-client=\"nemesis\""));

        // Every <svg has its </svg>, and tags of groups balance.
        assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
        assert!(html.matches("<svg").count() >= 2);
        assert_eq!(
            html.matches("<g ").count() + html.matches("<g>").count(),
            html.matches("</g>").count()
        );

        // The violation (c1's grant 1, c2's grant 2, c1's late Lost) is red.
        let v = &report
            .property("loss-before-next-grant")
            .unwrap()
            .violations;
        assert_eq!(v[0].events, vec![1, 5, 7]);
        for &i in &v[0].events {
            assert!(tag_of(&html, i).contains("viol"), "{}", tag_of(&html, i));
        }
        assert!(html.contains(&format!("fill=\"{RED}\" fill-opacity")));
        // Events outside violations are not.
        assert!(!tag_of(&html, 2).contains("viol"));
        assert!(tag_of(&html, 2).contains("accepted"));
        assert!(tag_of(&html, 8).contains("refused"));
        assert!(tag_of(&html, 9).contains("unknown"));
        assert!(tag_of(&html, 12).contains("crash"));
        // Faults: the partition across all lanes, the pause on c3's lane.
        assert!(tag_of(&html, 3).contains("global-fault"));
        assert!(tag_of(&html, 11).contains("client-fault"));
        assert!(html.contains(">partition-leader</text>"));

        // The list below names the violation, escaped.
        assert!(html.contains(
            "<li class=\"violation\"><span class=\"prop\">loss-before-next-grant</span>"
        ));
        assert!(html.contains("lost (&lt;expired&gt; &amp; &quot;gone&quot;)"));
        assert!(!html.contains("<expired>"));
        // Self-contained.
        assert!(!html.contains("<script"));
        assert!(!html.contains("http:") && !html.contains("https:"));
        // An axis with ms ticks.
        assert!(html.contains(">0 ms</text>"));
        assert!(html.contains(">10 ms</text>"));
    }

    #[test]
    fn clean_history_has_no_red() {
        let mut events = small();
        events[7].at_ns = 9 * MS; // c1 notices before c2's grant
        let report = check(&events);
        assert!(report.passed(), "{report}");
        let html = render_html(&events, &report, "clean");
        assert!(!html.contains("viol\""), "no element is marked");
        assert!(!html.contains(&format!("\"{RED}\"")), "nothing is red");
        assert!(html.contains("Violations (0)"));
    }

    /// A soak's hundreds of thousands of accepted writes: one mark per lane
    /// and pixel column; a refused write keeps its own.
    #[test]
    fn accepted_writes_share_a_mark_per_pixel() {
        let mut events = vec![grant(0, "c1", 1)];
        // 50,000 writes over 5 s: 10,000 px wide, about 5 writes a pixel.
        for k in 0..50_000u64 {
            events.push(write(k / 10, k / 10 + 1, "c1", 1, WriteOutcome::Accepted));
        }
        events.push(write(4000, 4001, "c1", 1, WriteOutcome::Refused));
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
            events.push(write(at + 10, at + 20, &c, k + 1, WriteOutcome::Accepted));
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
