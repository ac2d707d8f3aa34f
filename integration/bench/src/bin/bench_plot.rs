//! bench-plot: one SVG line chart from a benchmark CSV (header row, plain
//! comma-separated fields), one curve per value of the `--series` column.
//! Rows of one curve that share an x (one per run) make one point, their
//! median.
//!
//! Usage: bench-plot --csv F --x COL --y COL --series COL --title T
//!                   [--x-label L] [--y-label L] [--log-x] --out F.svg

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use fencing_bench::plot::{medians, Chart, Series};

#[derive(clap::Parser)]
#[command(about = "One SVG line chart from a benchmark CSV")]
struct Args {
    #[arg(long)]
    csv: PathBuf,
    /// The column of the x values.
    #[arg(long)]
    x: String,
    /// The column of the y values.
    #[arg(long)]
    y: String,
    /// The column naming each row's curve.
    #[arg(long)]
    series: String,
    #[arg(long)]
    title: String,
    #[arg(long = "x-label")]
    x_label: Option<String>,
    #[arg(long = "y-label")]
    y_label: Option<String>,
    #[arg(long = "log-x")]
    log_x: bool,
    #[arg(long)]
    out: PathBuf,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-plot: {}: {e}", args.csv.display());
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let text = std::fs::read_to_string(&args.csv).map_err(|e| e.to_string())?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().ok_or("empty file")?.split(',').collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h.trim() == name)
            .ok_or_else(|| format!("no column {name:?} in {header:?}"))
    };
    let (xi, yi, si) = (column(&args.x)?, column(&args.y)?, column(&args.series)?);
    let mut curves: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (n, line) in lines.enumerate() {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let field = |i: usize| {
            fields
                .get(i)
                .copied()
                .ok_or_else(|| format!("row {}: only {} fields", n + 2, fields.len()))
        };
        let number = |i: usize| -> Result<f64, String> {
            let f = field(i)?;
            f.parse()
                .map_err(|_| format!("row {}: {f:?} is not a number", n + 2))
        };
        curves
            .entry(field(si)?.to_owned())
            .or_default()
            .push((number(xi)?, number(yi)?));
    }
    let chart = Chart {
        title: args.title.clone(),
        x_label: args.x_label.clone().unwrap_or_else(|| args.x.clone()),
        y_label: args.y_label.clone().unwrap_or_else(|| args.y.clone()),
        log_x: args.log_x,
        series: curves
            .into_iter()
            .map(|(name, points)| Series {
                name,
                points: medians(points),
            })
            .collect(),
    };
    std::fs::write(&args.out, chart.to_svg()).map_err(|e| format!("{}: {e}", args.out.display()))
}
