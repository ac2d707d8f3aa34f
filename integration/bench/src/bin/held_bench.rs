//! held-bench: many locks held at once from one source, beside the anchor
//! with one session, on the same real 3-member cluster: `--backend etcd`
//! (etcd 3.6, Go's `concurrency.Mutex`, `etcd-mutex held`) or `--backend
//! zk` (ZooKeeper 3.9, N of Curator's `InterProcessMutex` on one
//! CuratorFramework, `curator-mutex.jar held`).
//!
//! Usage: held-bench [--backend etcd|zk] [--sizes 10,100,1000,10000]
//! [--in-flight 1,16,256] [--idle-secs 10] [--runs R] [--csv FILE]
//!
//! Each side runs in a process of its own, started afresh for every point,
//! so memory and CPU time are that side's alone: the anchor's `held`
//! subcommand, and this binary re-run as `held-bench child` (one
//! `EtcdSource` or `ZkSource`); both speak the same event lines. On etcd
//! both use one lease with a 10 s TTL, renewed every TTL/3 (our session
//! loop every 3.33 s; Go's lessor once 3.33 s have passed, checked every
//! 500 ms); on ZooKeeper one session with a 10 s timeout (Curator's client
//! pings after a third of it without traffic; we also heartbeat every
//! third). Curator first takes and releases 500 locks unreported, so that
//! the JIT has compiled its paths. For each N and each in-flight count F,
//! each side takes N distinct locks, F acquires at a time, and reports:
//!
//! - grants/s over the acquires;
//! - CPU per grant over the acquires: the side's own process
//!   (`cli us/g`) and the three members' (`srv us/g`, from
//!   /proc/PID/stat at 10 ms resolution, from the side's "connected" to its
//!   "held", so on our side with the 300 ms in which the last own-key
//!   watches start); `cores` is their sum times grants/s, how many of the
//!   host's CPUs the point kept busy ("-" when the members' share is under
//!   200 ms, too few ticks to tell);
//! - resident memory per held grant (RSS growth over the acquires / N; the
//!   Rust child weighs it 300 ms after the last grant, once etcd's own-key
//!   watches, which start 100 ms after a grant, are all in place);
//! - what the servers keep while they are held: etcd's watch streams and
//!   watchers, ZooKeeper's client connections and watches;
//! - once per N and side, while the locks of the last F are held and
//!   nothing else runs, the process's CPU time over an idle window of
//!   `--idle-secs` (getrusage in Go, the JVM's process CPU time in Java,
//!   both at 10 ms resolution; CLOCK_PROCESS_CPUTIME_ID here) as CPU ms per
//!   wall second, the members' CPU ms/s meanwhile, and the requests that
//!   kept the session alive meanwhile (etcd: LeaseKeepAlive messages,
//!   `grpc_server_msg_received_total`, 2 or 3 in 10 s per side; ZooKeeper:
//!   every packet, `zk_packets_received`). Our figure includes the idle
//!   tokio runtime, the anchors' their runtime's background work;
//!
//! then it releases them all, 64 at a time. The Rust side runs the largest N
//! at the last F three times on one source: memory after the third release
//! should be within 10 % of the second (memory comes back; the first cycle
//! raises the allocator's high-water mark). Figures are printed, not
//! asserted. With `--runs R` every point is measured R times over (run
//! after run on the same cluster) and the ratios' min / median / max over
//! the runs close the output. The CSV has one row per N, F, side and run:
//! n, in_flight, side,
//! series ("side F", for one curve per side and F), grants_per_s,
//! kb_per_grant, streams, watchers, host_busy_pct (the whole host's, other
//! load included, from /proc/stat: coarse under 1 s), client_cpu_us_per_grant,
//! server_cpu_us_per_grant, idle_cpu_ms_per_s, idle_server_cpu_ms_per_s,
//! idle_keepalives, run; the idle figures, measured once per N and side,
//! are repeated on each of that N's rows.
//!
//! Limits on etcd, on the 2-core host the members and both sides share:
//! with one acquire in flight every grant waits for its own raft commit,
//! and the members spend 1.7-2.4 ms of CPU on each (WAL writes and fsyncs
//! on three members, raft messages, gRPC): both sides make 270-820
//! grants/s, the same within run-to-run noise, whatever N is. With 16 and
//! 256 in flight raft batches, the members' CPU per grant falls to 170-700
//! us, and the members plus the client (60-200 us per grant) keep the
//! host's CPUs busy (`cores` 1.3-2.1; other sessions' work took the rest):
//! the host's CPU is the limit, at 2,800-7,700 grants/s with 256 in
//! flight. Idle CPU is flat in N on both sides (ours 0.35-0.51 ms/s, Go
//! 1.26-1.80 ms/s from 10 to 10,000 locks): a renewal moves one deadline
//! that every grant of the session shares (`LeaseGroup` in fencing-core).
//! The members' idle CPU is the same for both sides and every N (45-75
//! ms/s, as with 10 locks held): N idle watchers cost them nothing
//! measurable.

// A crate root's modules would live beside it in src/bin/, shared by every
// binary there; these are held-bench's own.
#[path = "held_bench/child.rs"]
mod child;
#[path = "held_bench/cluster.rs"]
mod cluster;
#[path = "held_bench/measure.rs"]
mod measure;

use std::io::Write as _;
use std::num::NonZeroUsize;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use fencing_bench::{main_with, min_median_max, next_event, BoxError};
use fencing_harness::process::die_with_parent;
use rustix::process::Signal;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};

use child::{child, emit, ChildArgs};
use cluster::{Backend, Cluster};
use measure::Members;

/// Both sides' lease TTL: short, so that an idle window sees several
/// renewals (every TTL/3).
const TTL_SECS: u64 = 10;
/// Releases in flight at once (either side), whatever F was.
const RELEASE_IN_FLIGHT: usize = 64;
/// Bounds each step of a side (taking or releasing 10,000 locks).
const EVENT_LIMIT: Duration = Duration::from_secs(120);
/// Bounds a child's answer to a "cpu" line and the wait for its exit.
const OP_LIMIT: Duration = Duration::from_secs(10);
/// The first argument that makes this binary the Rust side's child.
const CHILD: &str = "child";

/// N locks held at once from one source, against the anchor with one
/// session.
#[derive(clap::Parser)]
struct Args {
    /// The cluster, and so the anchor: Go's Mutex on etcd, Curator's
    /// InterProcessMutex on ZooKeeper.
    #[arg(long, value_enum, default_value = "etcd")]
    backend: Backend,
    /// The numbers of locks held at once, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000")]
    sizes: Vec<NonZeroUsize>,
    /// Acquires in flight at once, comma-separated: every N is measured
    /// with each.
    #[arg(long = "in-flight", value_delimiter = ',', default_value = "1,16,256")]
    in_flight: Vec<NonZeroUsize>,
    /// The idle window over which each side's CPU time is measured, per N.
    #[arg(long = "idle-secs", default_value = "10")]
    idle_secs: NonZeroUsize,
    /// Times the whole set of points is measured (on the same cluster);
    /// above 1, the ratios' min / median / max are printed at the end.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    runs: u16,
    /// Also write one CSV row per N, in-flight count, side and run here.
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
}

/// What one side measured for one N and in-flight count.
struct Figures {
    grants_per_s: f64,
    kb_per_grant: f64,
    streams: f64,
    watchers: f64,
    host_busy_pct: f64,
    /// The side's own CPU time over the acquires, per grant.
    client_us_per_grant: f64,
    /// The three members' CPU time over the acquires, per grant.
    server_us_per_grant: f64,
    rss_after_kb: f64,
}

/// One side's idle window.
#[derive(Clone, Copy)]
struct Idle {
    cpu_ms_per_s: f64,
    /// The three members' CPU over the same window.
    server_ms_per_s: f64,
    keepalives: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Anchor,
    Rust,
}

impl Side {
    fn name(self, cluster: &Cluster) -> &'static str {
        match self {
            Side::Anchor => cluster.anchor_name(),
            Side::Rust => "rust",
        }
    }
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(CHILD) {
        let args = <ChildArgs as clap::Parser>::parse_from(std::env::args().skip(1));
        return main_with("held-bench child", async {
            let result = child(args).await;
            if let Err(e) = &result {
                // The driver reads this line where it expected an event.
                emit(json!({"event": "error", "id": "rust", "error": e.to_string()}));
            }
            result
        });
    }
    let args = <Args as clap::Parser>::parse();
    main_with("held-bench", run(args))
}

async fn run(args: Args) -> Result<(), BoxError> {
    let in_flights: Vec<usize> = args.in_flight.iter().map(|f| f.get()).collect();
    let sizes: Vec<usize> = args.sizes.iter().map(|n| n.get()).collect();
    let cluster = Cluster::start(args.backend).await?;
    let bench = Bench {
        rust: std::env::current_exe()?,
        idle: Duration::from_secs(args.idle_secs.get() as u64),
        largest: *sizes.iter().max().unwrap_or(&0),
        last_f: *in_flights.last().unwrap_or(&1),
        members: Members::find(cluster.dir(), cluster.member_count())?,
        in_flights,
        cluster,
    };
    println!(
        "held-bench: {}, idle window {} s at {} in flight, {} run(s)",
        bench.cluster.describe(),
        bench.idle.as_secs(),
        bench.last_f,
        args.runs
    );
    print_header();
    let mut csv = args.csv.as_ref().map(std::fs::File::create).transpose()?;
    if let Some(f) = csv.as_mut() {
        writeln!(
            f,
            "n,in_flight,side,series,grants_per_s,kb_per_grant,streams,watchers,\
             host_busy_pct,client_cpu_us_per_grant,server_cpu_us_per_grant,\
             idle_cpu_ms_per_s,idle_server_cpu_ms_per_s,idle_keepalives,run"
        )?;
    }
    let mut ratios = Ratios::default();
    for run in 1..=args.runs {
        for &n in &sizes {
            let rows = bench.size(n, &mut ratios).await?;
            if let Some(file) = csv.as_mut() {
                rows.write_csv(file, n, run, &bench.cluster)?;
            }
        }
    }
    if args.runs > 1 {
        ratios.print(args.runs, bench.cluster.anchor_name());
    }
    Ok(())
}

/// What every point of a run shares.
struct Bench {
    /// This binary, re-run as the Rust side's child.
    rust: std::path::PathBuf,
    cluster: Cluster,
    members: Members,
    in_flights: Vec<usize>,
    idle: Duration,
    largest: usize,
    last_f: usize,
}

/// One N's figures: a row per in-flight count and side, and each side's
/// idle window.
struct SizeRows {
    rows: Vec<(usize, Side, Figures)>,
    idles: Vec<(Side, Idle)>,
}

impl Bench {
    /// Every in-flight count at `n`, both sides; prints the rows and the
    /// ratios (also kept in `ratios`).
    async fn size(&self, n: usize, ratios: &mut Ratios) -> Result<SizeRows, BoxError> {
        let cluster = &self.cluster;
        let mut out = SizeRows {
            rows: Vec::new(),
            idles: Vec::new(),
        };
        for &f in &self.in_flights {
            let mut pair = Vec::new();
            for side in [Side::Anchor, Side::Rust] {
                let last = n == self.largest && f == self.last_f;
                let point = Point {
                    n,
                    in_flight: f,
                    cycles: if side == Side::Rust && last { 3 } else { 1 },
                    idle: (f == self.last_f).then_some(self.idle),
                };
                let (figs, idle_fig) =
                    run_side(&self.rust, side, cluster, &self.members, &point).await?;
                print_row(n, f, side.name(cluster), &figs[0], idle_fig.as_ref());
                if let Some(i) = idle_fig {
                    out.idles.push((side, i));
                }
                if figs.len() == 3 {
                    for (name, fig) in ["rust2", "rust3"].iter().zip(&figs[1..]) {
                        print_row(n, f, name, fig, None);
                    }
                    // Memory comes back when a later cycle ends where an
                    // earlier one did: the allocator keeps what the first
                    // cycle touched, so the second and third are compared.
                    println!(
                        "held-bench: N={n} RSS after the third release / after the second {:.2}",
                        figs[2].rss_after_kb / figs[1].rss_after_kb
                    );
                }
                pair.push(figs.into_iter().next().ok_or("no figures")?);
            }
            let (ours, anchor) = (&pair[1], &pair[0]);
            let grants = ours.grants_per_s / anchor.grants_per_s;
            let memory = ours.kb_per_grant / anchor.kb_per_grant.max(0.001);
            println!(
                "held-bench: N={n} F={f} grants/s ratio {grants:.2}, memory per grant ratio {memory:.2} (rust / {})",
                cluster.anchor_name(),
            );
            ratios.add(format!("N={n} F={f} grants/s"), grants);
            ratios.add(format!("N={n} F={f} memory per grant"), memory);
            let mut pair = pair.into_iter();
            for side in [Side::Anchor, Side::Rust] {
                out.rows.push((f, side, pair.next().ok_or("missing side")?));
            }
        }
        if let (Some(g), Some(r)) = (out.idle(Side::Anchor), out.idle(Side::Rust)) {
            print_idle(n, &r, &g, cluster.anchor_name());
            if g.cpu_ms_per_s > 0.0 {
                ratios.add(format!("N={n} idle CPU"), r.cpu_ms_per_s / g.cpu_ms_per_s);
            }
        }
        Ok(out)
    }
}

impl SizeRows {
    fn idle(&self, side: Side) -> Option<Idle> {
        self.idles.iter().find(|(s, _)| *s == side).map(|(_, i)| *i)
    }

    fn write_csv(
        &self,
        file: &mut std::fs::File,
        n: usize,
        run: u16,
        cluster: &Cluster,
    ) -> Result<(), BoxError> {
        for (f, side, fig) in &self.rows {
            let i = self.idle(*side);
            writeln!(
                file,
                "{n},{f},{s},{s} {f},{:.0},{:.3},{},{},{:.0},{:.1},{:.1},{},{},{},{run}",
                fig.grants_per_s,
                fig.kb_per_grant,
                fig.streams,
                fig.watchers,
                fig.host_busy_pct,
                fig.client_us_per_grant,
                fig.server_us_per_grant,
                i.map_or(String::new(), |i| format!("{:.3}", i.cpu_ms_per_s)),
                i.map_or(String::new(), |i| format!("{:.2}", i.server_ms_per_s)),
                i.map_or(String::new(), |i| i.keepalives.to_string()),
                s = side.name(cluster),
            )?;
        }
        Ok(())
    }
}

/// Every ratio (ours / the anchor's) by what it compares, one value per
/// run, in the order first seen.
#[derive(Default)]
struct Ratios(Vec<(String, Vec<f64>)>);

impl Ratios {
    fn add(&mut self, what: String, ratio: f64) {
        match self.0.iter_mut().find(|(w, _)| *w == what) {
            Some((_, v)) => v.push(ratio),
            None => self.0.push((what, vec![ratio])),
        }
    }

    fn print(&self, runs: u16, anchor: &str) {
        println!("held-bench: rust / {anchor} over {runs} runs, min / median / max:");
        for (what, v) in &self.0 {
            let (min, median, max) = min_median_max(v.clone());
            println!("held-bench:   {what}: {min:.2} / {median:.2} / {max:.2}");
        }
    }
}

fn print_header() {
    println!(
        "{:>6} {:>5} {:>5} {:>8} {:>8} {:>11} {:>5} {:>8} {:>8} {:>8} {:>8} {:>6} {:>9}",
        "N",
        "in-fl",
        "side",
        "grants/s",
        "KB/grant",
        "str/watch",
        "cores",
        "cli us/g",
        "srv us/g",
        "idle ms/s",
        "srv ms/s",
        "keepal",
        "RSS after"
    );
}

fn print_idle(n: usize, r: &Idle, g: &Idle, anchor: &str) {
    // The anchors' CPU clocks tick in 10 ms: no tick in the window is no
    // figure to divide by.
    let ratio = if g.cpu_ms_per_s > 0.0 {
        format!("ratio {:.2}", r.cpu_ms_per_s / g.cpu_ms_per_s)
    } else {
        "no ratio: the anchor's 10 ms CPU clock did not tick".to_string()
    };
    println!(
        "held-bench: N={n} idle CPU ms/s rust {:.2} {anchor} {:.2} ({ratio}), servers meanwhile {:.1} / {:.1}, keep-alive requests rust {} {anchor} {}",
        r.cpu_ms_per_s,
        g.cpu_ms_per_s,
        r.server_ms_per_s,
        g.server_ms_per_s,
        r.keepalives,
        g.keepalives,
    );
}

fn print_row(n: usize, f: usize, side: &str, fig: &Figures, idle: Option<&Idle>) {
    let (cpu, etcd, ka) = idle.map_or(("-".into(), "-".into(), "-".into()), |i| {
        (
            format!("{:.2}", i.cpu_ms_per_s),
            format!("{:.1}", i.server_ms_per_s),
            i.keepalives.to_string(),
        )
    });
    let watches = format!("{}/{}", fig.streams, fig.watchers);
    // Under 20 ticks of the members' CPU clock, a share says nothing.
    let cores = if fig.server_us_per_grant * n as f64 >= 200_000.0 {
        let used = (fig.client_us_per_grant + fig.server_us_per_grant) * fig.grants_per_s;
        format!("{:.2}", used / 1e6)
    } else {
        "-".into()
    };
    println!(
        "{n:>6} {f:>5} {side:>5} {:>8.0} {:>8.2} {watches:>11} {cores:>5} {:>8.0} {:>9.0} {cpu:>9} {etcd:>9} {ka:>6} {:>9}",
        fig.grants_per_s,
        fig.kb_per_grant,
        fig.client_us_per_grant,
        fig.server_us_per_grant,
        fig.rss_after_kb
    );
}

/// One measurement: N locks, F in flight, how many take-hold-release
/// cycles, and the idle window if this point measures one.
struct Point {
    n: usize,
    in_flight: usize,
    cycles: usize,
    idle: Option<Duration>,
}

/// Runs one side's child for one point: the figures of each cycle, and of
/// the idle window (in the first cycle) if asked for.
async fn run_side(
    rust: &std::path::Path,
    side: Side,
    cluster: &Cluster,
    members: &Members,
    p: &Point,
) -> Result<(Vec<Figures>, Option<Idle>), BoxError> {
    let (n, f) = (p.n, p.in_flight);
    let prefix = format!("/held-{}-{n}-{f}", side.name(cluster));
    let mut cmd = match side {
        Side::Anchor => cluster.anchor_command(&prefix, n, f),
        Side::Rust => {
            let mut c = std::process::Command::new(rust);
            let backend = match cluster.backend() {
                Backend::Etcd => "etcd",
                Backend::Zk => "zk",
            };
            c.arg(CHILD)
                .args(["--backend", backend, "--cycles", &p.cycles.to_string()])
                .args(["--endpoints", &cluster.endpoints(), "--prefix", &prefix])
                .args(["--count", &n.to_string(), "--in-flight", &f.to_string()]);
            c
        }
    };
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    die_with_parent(&mut cmd, Signal::KILL);
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()?;
    let program = match side {
        Side::Anchor => cluster.anchor_label(),
        Side::Rust => "held-bench child",
    };
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut figures = Vec::new();
    let mut idle = None;
    // "connected" follows the anchor's JVM start and its 500 warm-up
    // acquires, which a busy machine once stretched past 10 s.
    next_event(&mut lines, program, "connected", EVENT_LIMIT).await?;
    // The members' CPU from here to "held": the acquires and, on our side,
    // the 300 ms in which the own-key watches start.
    let mut etcd_from = members.cpu_us();
    for cycle in 0..p.cycles {
        let held = next_event(&mut lines, program, "held", EVENT_LIMIT).await?;
        let etcd_us = members.cpu_us() - etcd_from;
        let (streams, watchers) = cluster.watch_counts().await?;
        if let (0, Some(window)) = (cycle, p.idle) {
            let ka_before = cluster.keepalives().await?;
            let etcd_before = members.cpu_us();
            let before = cpu_sample(&mut stdin, &mut lines, program).await?;
            tokio::time::sleep(window).await;
            let after = cpu_sample(&mut stdin, &mut lines, program).await?;
            let etcd_after = members.cpu_us();
            let ka_after = cluster.keepalives().await?;
            let wall_s = (after.1 - before.1) / 1e6;
            idle = Some(Idle {
                cpu_ms_per_s: (after.0 - before.0) / 1e3 / wall_s,
                server_ms_per_s: (etcd_after - etcd_before) / 1e3 / wall_s,
                keepalives: ka_after - ka_before,
            });
        }
        stdin.write_all(b"release\n").await?;
        let released = next_event(&mut lines, program, "released", EVENT_LIMIT).await?;
        // A further cycle starts acquiring at once.
        etcd_from = members.cpu_us();
        figures.push(Figures {
            grants_per_s: n as f64 / number(&held, "seconds")?,
            kb_per_grant: (number(&held, "rss_kb_held")? - number(&held, "rss_kb_before")?)
                / n as f64,
            streams,
            watchers,
            host_busy_pct: number(&held, "host_busy_pct")?,
            client_us_per_grant: number(&held, "cpu_us_acquire")? / n as f64,
            server_us_per_grant: etcd_us / n as f64,
            rss_after_kb: number(&released, "rss_kb_after")?,
        });
    }
    drop(stdin);
    let status = tokio::time::timeout(OP_LIMIT, child.wait())
        .await
        .map_err(|_| format!("{program} did not exit within {OP_LIMIT:?}"))??;
    if !status.success() {
        return Err(format!("{program} exited with {status}").into());
    }
    Ok((figures, idle))
}

fn number(v: &Value, k: &str) -> Result<f64, BoxError> {
    Ok(v[k].as_f64().ok_or(format!("no {k} in {v}"))?)
}

/// Asks a child for its CPU time and its wall time, both in µs.
async fn cpu_sample<R: tokio::io::AsyncBufRead + Unpin>(
    stdin: &mut tokio::process::ChildStdin,
    lines: &mut Lines<R>,
    program: &str,
) -> Result<(f64, f64), BoxError> {
    stdin.write_all(b"cpu\n").await?;
    let cpu = next_event(lines, program, "cpu", OP_LIMIT).await?;
    Ok((number(&cpu, "cpu_us")?, number(&cpu, "wall_us")?))
}
