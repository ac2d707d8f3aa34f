//! `MemoryGate` admits across std threads, on one resource and on one
//! resource per thread.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

use fencing::{FencingToken, MemoryGate, ResourceName, SourceId};
use fencing_bench::median;

use crate::Res;

/// Admits per `--iterations` unit at each point (2000 → 5 M admits, about
/// 0.15 s on one thread).
pub const ADMITS_PER_ITERATION: u64 = 2500;
/// Thread counts of the curve.
const THREADS: [usize; 5] = [1, 2, 4, 8, 16];
/// Each point is the median of this many runs, so one descheduled run does
/// not make the curve.
const REPEATS: usize = 3;

/// Where the threads' admits go.
#[derive(Clone, Copy)]
enum Layout {
    /// Every thread on the same resource: one compare-and-swap word shared.
    OneResource,
    /// Thread t on resource `bench-t`: only the gate's map is shared.
    Distinct,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::OneResource => "one_resource",
            Layout::Distinct => "distinct",
        }
    }
}

/// One measured point.
struct Point {
    /// Wall time × threads / admits.
    ns_per_admit: f64,
    /// Share of admits refused as stale (threads on one resource interleave
    /// their tokens, so one may overtake another).
    stale: f64,
}

/// The curve for both layouts, unbound and bound; returns the unbound
/// curve's CSV rows `threads,layout,ns_per_admit`.
///
/// Both are measured because they take different paths: an unbound admit
/// holds the resource's writer mutex, a bound one is a lock-free
/// compare-and-swap. The CSV keeps the unbound one (`admit_now`, the
/// figure the issue names); the bound curve is printed beside it.
pub fn run(admits: u64) -> Res<Vec<String>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "gate-bench: MemoryGate, ns per admit = wall time × threads / admits, {admits} admits per point shared among the threads, median of {REPEATS} runs; {cores} cores, so above {cores} threads a thread also waits for a core"
    );
    println!(
        "{:>7} {:>22} {:>17} {:>20} {:>15} {:>12}",
        "threads",
        "unbound one_resource",
        "unbound distinct",
        "bound one_resource",
        "bound distinct",
        "stale share"
    );
    let source = SourceId::new("etcd:bench");
    let mut rows = Vec::new();
    let mut curves: [Vec<f64>; 4] = Default::default();
    for threads in THREADS {
        let unbound_one = repeated(threads, Layout::OneResource, admits, None)?;
        let unbound_own = repeated(threads, Layout::Distinct, admits, None)?;
        let bound_one = repeated(threads, Layout::OneResource, admits, Some(&source))?;
        let bound_own = repeated(threads, Layout::Distinct, admits, Some(&source))?;
        println!(
            "{threads:>7} {:>22.1} {:>17.1} {:>20.1} {:>15.1} {:>11.1}%",
            unbound_one.ns_per_admit,
            unbound_own.ns_per_admit,
            bound_one.ns_per_admit,
            bound_own.ns_per_admit,
            unbound_one.stale * 100.0
        );
        for (layout, p) in [
            (Layout::OneResource, &unbound_one),
            (Layout::Distinct, &unbound_own),
        ] {
            rows.push(format!("{threads},{},{:.2}", layout.name(), p.ns_per_admit));
        }
        for (curve, p) in
            curves
                .iter_mut()
                .zip([&unbound_one, &unbound_own, &bound_one, &bound_own])
        {
            curve.push(p.ns_per_admit);
        }
    }
    summarize(&curves);
    println!(
        "gate-bench: MemoryGate on 1 thread: admit_now (unbound) {:.1} ns/call, admit_from_now (bound) {:.1} ns/call (target < 50)",
        curves[0][0], curves[2][0]
    );
    Ok(rows)
}

/// One summary line per mode and layout: the curve over `THREADS`.
fn summarize(curves: &[Vec<f64>; 4]) {
    let threads: Vec<String> = THREADS.iter().map(ToString::to_string).collect();
    let names = [
        "admit_now (unbound) one_resource",
        "admit_now (unbound) distinct",
        "admit_from_now (bound) one_resource",
        "admit_from_now (bound) distinct",
    ];
    for (name, curve) in names.iter().zip(curves) {
        let figures: Vec<String> = curve.iter().map(|ns| format!("{ns:.1}")).collect();
        println!(
            "gate-bench: MemoryGate {name} ns/admit at {} threads: {}",
            threads.join("/"),
            figures.join(" / ")
        );
    }
}

/// The median of `REPEATS` measurements (by ns per admit).
fn repeated(threads: usize, layout: Layout, admits: u64, source: Option<&SourceId>) -> Res<Point> {
    let mut points = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        points.push(measure(threads, layout, admits, source)?);
    }
    let ns = median(points.iter().map(|p| p.ns_per_admit).collect());
    let stale = median(points.iter().map(|p| p.stale).collect());
    Ok(Point {
        ns_per_admit: ns,
        stale,
    })
}

/// `threads` threads admit `admits / threads` increasing tokens each on a
/// fresh gate, released together by a barrier. Each thread reads the clock
/// itself after the barrier and when done, and the wall time runs from the
/// first start to the last end: a clock read by the spawning thread would
/// also count the time it waited for a core (on 2 cores, with 16 threads,
/// the first ones can be done before it runs again).
fn measure(threads: usize, layout: Layout, admits: u64, source: Option<&SourceId>) -> Res<Point> {
    let gate = MemoryGate::new();
    let names = resources(threads, layout)?;
    // The first admit of a resource inserts it under the map's write lock:
    // done here, so only admits to known resources are timed.
    for r in &names {
        admit(&gate, r, source, 1)?;
    }
    let per_thread = (admits / threads as u64).max(1);
    let barrier = Barrier::new(threads);
    let runs: Result<Vec<Run>, _> = std::thread::scope(|s| {
        let workers: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(t, r)| {
                let (gate, barrier) = (&gate, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let refused = admit_many(gate, r, source, t as u64, threads as u64, per_thread);
                    Run {
                        start,
                        end: Instant::now(),
                        refused,
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join()).collect()
    });
    let runs = runs.map_err(|_| "a MemoryGate admit thread panicked")?;
    let first = runs
        .iter()
        .map(|r| r.start)
        .min()
        .ok_or("no admit thread ran")?;
    let last = runs
        .iter()
        .map(|r| r.end)
        .max()
        .ok_or("no admit thread ran")?;
    let refused: u64 = runs.iter().map(|r| r.refused).sum();
    let total = per_thread * threads as u64;
    let wall = (last - first).as_nanos() as f64;
    Ok(Point {
        ns_per_admit: wall * threads as f64 / total as f64,
        stale: refused as f64 / total as f64,
    })
}

/// What one admit thread reports.
struct Run {
    start: Instant,
    end: Instant,
    refused: u64,
}

/// One resource name per thread: all the same, or `bench-<t>`.
fn resources(threads: usize, layout: Layout) -> Res<Vec<ResourceName>> {
    (0..threads)
        .map(|t| {
            let name = match layout {
                Layout::OneResource => "bench".to_owned(),
                Layout::Distinct => format!("bench-{t}"),
            };
            Ok(ResourceName::new(name)?)
        })
        .collect()
}

/// Thread `t` of `of` admits tokens `2 + i × of + t`: increasing for each
/// thread and distinct across threads, so every admit is a raise (the
/// compare-and-swap path, not a retry) unless another thread on the same
/// resource got ahead. Returns how many were refused.
fn admit_many(
    gate: &MemoryGate,
    r: &ResourceName,
    source: Option<&SourceId>,
    t: u64,
    of: u64,
    n: u64,
) -> u64 {
    let mut refused = 0;
    for i in 0..n {
        if black_box(admit(gate, r, source, 2 + i * of + t)).is_err() {
            refused += 1;
        }
    }
    refused
}

fn admit(
    gate: &MemoryGate,
    r: &ResourceName,
    source: Option<&SourceId>,
    token: u64,
) -> fencing::Result<()> {
    let token = FencingToken::new(token);
    match source {
        Some(s) => gate.admit_from_now(r, s, token),
        None => gate.admit_now(r, token),
    }
}
