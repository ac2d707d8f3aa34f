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

mod axes;
mod faults;
mod html;
mod lanes;
mod overview;
#[cfg(test)]
mod test_support;
mod windows;
mod writes;

use std::collections::{BTreeSet, HashMap};

use super::checker::Report;
use super::history::{Event, EventKind};
use fencing_harness::markup::escape as esc;
use html::page;
use windows::{detail_windows, overview_intro};

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

/// The first and last `at_ns` (0, 0 when empty).
fn run_span(events: &[Event]) -> (u64, u64) {
    let ats = events.iter().map(|e| e.at_ns);
    (ats.clone().min().unwrap_or(0), ats.max().unwrap_or(0))
}

/// Whole seconds in `ns`.
fn secs(ns: u64) -> u64 {
    ns / SEC
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
}

#[cfg(test)]
mod tests {
    use super::super::checker::check;
    use super::test_support::{small, tag_of, MS};
    use super::*;

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
}
