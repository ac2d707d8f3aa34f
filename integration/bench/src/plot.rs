//! Line charts as self-contained SVG, for the benchmark results: one chart
//! per curve, ours and the anchor's on the same axes. Hand-written (a few
//! dozen lines of SVG) rather than a plotting crate: the charts need
//! lines, points, axes with ticks and a legend, nothing more.

use std::fmt::Write as _;

use fencing_harness::markup::escape;

use crate::median;

/// One named curve: (x, y) points, drawn in the order given.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// What a chart shows.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// A logarithmic x axis (for sizes such as 1, 16, 256, 10000).
    pub log_x: bool,
    pub series: Vec<Series>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

impl Chart {
    /// The chart as an SVG document. Points with a non-finite coordinate
    /// (or x <= 0 on a log axis) are left out; an empty chart still renders.
    #[must_use]
    pub fn to_svg(&self) -> String {
        let fx = |x: f64| if self.log_x { x.log10() } else { x };
        let usable =
            |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!self.log_x || x > 0.0);
        let points: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied().filter(usable))
            .map(|(x, y)| (fx(x), y))
            .collect();
        let (x0, x1) = span(points.iter().map(|p| p.0), false);
        let (y0, y1) = span(points.iter().map(|p| p.1), true);
        let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        let px = |x: f64| LEFT + (fx(x) - x0) / (x1 - x0) * pw;
        let py = |y: f64| TOP + ph - (y - y0) / (y1 - y0) * ph;

        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = write!(
            svg,
            r#"<rect width="100%" height="100%" fill="white"/><text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            escape(&self.title)
        );
        self.axes(&mut svg, (x0, x1), (y0, y1), &px, &py);
        for (i, s) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let pts: Vec<String> = s
                .points
                .iter()
                .filter(|p| usable(p))
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
            for p in &pts {
                let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = write!(
                    svg,
                    r#"<circle cx="{cx}" cy="{cy}" r="3" fill="{colour}"/>"#
                );
            }
            let ly = TOP + 14.0 + 20.0 * i as f64;
            let lx = WIDTH - RIGHT + 16.0;
            let _ = write!(
                svg,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                escape(&s.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    fn axes(
        &self,
        svg: &mut String,
        (x0, x1): (f64, f64),
        (y0, y1): (f64, f64),
        px: &dyn Fn(f64) -> f64,
        py: &dyn Fn(f64) -> f64,
    ) {
        let (bottom, right) = (HEIGHT - BOTTOM, WIDTH - RIGHT);
        let _ = write!(
            svg,
            r##"<path d="M{LEFT},{TOP} V{bottom} H{right}" fill="none" stroke="#333"/>"##
        );
        for i in 0..=5 {
            let y = y0 + (y1 - y0) * f64::from(i) / 5.0;
            let _ = write!(
                svg,
                r##"<line x1="{LEFT}" y1="{0:.1}" x2="{right}" y2="{0:.1}" stroke="#ddd"/><text x="{1}" y="{2:.1}" text-anchor="end">{3}</text>"##,
                py(y),
                LEFT - 6.0,
                py(y) + 4.0,
                label(y)
            );
        }
        let ticks: Vec<f64> = if self.log_x {
            let (lo, hi) = (x0.floor() as i32, x1.ceil() as i32);
            (lo..=hi).map(|e| 10f64.powi(e)).collect()
        } else {
            (0..=5)
                .map(|i| x0 + (x1 - x0) * f64::from(i) / 5.0)
                .collect()
        };
        for x in ticks {
            let at = px(x);
            if !(LEFT - 0.5..=right + 0.5).contains(&at) {
                continue;
            }
            let _ = write!(
                svg,
                r#"<text x="{at:.1}" y="{}" text-anchor="middle">{}</text>"#,
                bottom + 18.0,
                label(x)
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
            LEFT + (right - LEFT) / 2.0,
            HEIGHT - 16.0,
            escape(&self.x_label),
            TOP + (bottom - TOP) / 2.0,
            escape(&self.y_label)
        );
    }
}

/// The range to draw: the data's, padded, never empty; from zero for
/// values that are all positive when `from_zero`.
fn span(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero && lo > 0.0 {
        lo = 0.0;
    }
    if hi - lo <= 0.0 {
        hi = lo + 1.0;
    }
    let pad = if from_zero { (hi - lo) * 0.05 } else { 0.0 };
    (lo, hi + pad)
}

fn label(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The points in x order, one per x: the median of the y values that
/// share it.
pub fn medians(mut points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
        .chunk_by(|a, b| a.0 == b.0)
        .map(|same_x| (same_x[0].0, median(same_x.iter().map(|p| p.1).collect())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(series: Vec<Series>, log_x: bool) -> Chart {
        Chart {
            title: "a <b> & c".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x,
            series,
        }
    }

    #[test]
    fn draws_each_series_with_its_points_and_escapes_text() {
        let svg = chart(
            vec![
                Series {
                    name: "rust".into(),
                    points: vec![(1.0, 10.0), (16.0, 12.0), (256.0, 11.0)],
                },
                Series {
                    name: "go".into(),
                    points: vec![(1.0, 9.0), (16.0, 20.0)],
                },
            ],
            true,
        )
        .to_svg();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 5);
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(svg.contains(">rust<") && svg.contains(">go<"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn bad_points_are_left_out_and_empty_charts_render() {
        let svg = chart(
            vec![Series {
                name: "s".into(),
                points: vec![
                    (0.0, 1.0),
                    (f64::NAN, 2.0),
                    (10.0, f64::INFINITY),
                    (10.0, 3.0),
                ],
            }],
            true,
        )
        .to_svg();
        assert_eq!(svg.matches("<circle").count(), 1);
        let empty = chart(Vec::new(), false).to_svg();
        assert!(empty.starts_with("<svg") && empty.ends_with("</svg>\n"));
        assert!(!empty.contains("NaN"));
    }

    #[test]
    fn rows_sharing_an_x_make_one_point_at_their_median() {
        let points = vec![
            (10.0, 5.0),
            (1.0, 2.0),
            (10.0, 1.0),
            (10.0, 9.0),
            (1.0, 4.0),
        ];
        assert_eq!(medians(points), vec![(1.0, 3.0), (10.0, 5.0)]);
    }
}
