//! held-bench: many locks held at once from one etcd source, beside Go's
//! `concurrency.Mutex` with one session (`etcd-mutex held`), on the same
//! real 3-member etcd 3.6 cluster.
//!
//! Usage: held-bench [--sizes 10,100,1000,10000] [--in-flight 1,16,256]
//! [--idle-secs 10] [--csv FILE]
//!
//! Each side runs in a process of its own, started afresh for every point,
//! so memory and CPU time are that side's alone: Go is `etcd-mutex held`,
//! Rust is this binary re-run as `held-bench child` (one `EtcdSource`); both
//! speak the same event lines. Both use one lease with a 10 s TTL, renewed
//! every TTL/3 (our session loop every 3.33 s; Go's lessor once 3.33 s have
//! passed, checked every 500 ms). For each N and each in-flight count F,
//! each side takes N distinct locks, F acquires at a time, and reports:
//!
//! - grants/s over the acquires;
//! - CPU per grant over the acquires: the side's own process
//!   (`cli us/g`) and the three members' (`etcd us/g`, from
//!   /proc/PID/stat at 10 ms resolution, from the side's "connected" to its
//!   "held", so on our side with the 300 ms in which the last own-key
//!   watches start); `cores` is their sum times grants/s, how many of the
//!   host's CPUs the point kept busy ("-" when the members' share is under
//!   200 ms, too few ticks to tell);
//! - resident memory per held grant (RSS growth over the acquires / N; the
//!   Rust child weighs it 300 ms after the last grant, once the own-key
//!   watches, which start 100 ms after a grant, are all in place);
//! - the watch streams and watchers the members count while they are held;
//! - once per N and side, while the locks of the last F are held and
//!   nothing else runs, the process's CPU time over an idle window of
//!   `--idle-secs` (getrusage in Go, CLOCK_PROCESS_CPUTIME_ID here) as CPU
//!   ms per wall second, the members' CPU ms/s meanwhile (about 50 ms/s
//!   with 10 idle locks: raft heartbeats and housekeeping), and the
//!   LeaseKeepAlive messages the members received meanwhile
//!   (`grpc_server_msg_received_total`: 2 or 3 in 10 s per side, one lease
//!   each). Our figure includes the idle tokio runtime and watch stream,
//!   Go's its runtime's background work;
//!
//! then it releases them all, 64 at a time. The Rust side runs the largest N
//! at the last F three times on one source: memory after the third release
//! should be within 10 % of the second (memory comes back; the first cycle
//! raises the allocator's high-water mark). Figures are printed, not
//! asserted. The CSV has one row per N, F and side: n, in_flight, side,
//! series ("side F", for one curve per side and F), grants_per_s,
//! kb_per_grant, streams, watchers, host_busy_pct (the whole host's, other
//! load included, from /proc/stat: coarse under 1 s), client_cpu_us_per_grant,
//! etcd_cpu_us_per_grant, idle_cpu_ms_per_s, idle_etcd_cpu_ms_per_s,
//! idle_keepalives; the idle figures, measured once per N and side, are
//! repeated on each of that N's rows.
//!
//! Limits, on the 2-core host the members and both sides share: with one
//! acquire in flight every grant waits for its own raft commit, and the
//! members spend 1.7-2.4 ms of CPU on each (WAL writes and fsyncs on three
//! members, raft messages, gRPC): both sides make 270-820 grants/s, the
//! same within run-to-run noise, whatever N is. With 16 and 256 in flight
//! raft batches, the members' CPU per grant falls to 170-700 us, and the
//! members plus the client (60-200 us per grant) keep the host's CPUs busy
//! (`cores` 1.3-2.1; other sessions' work took the rest): the host's CPU
//! is the limit, at 2,800-7,700 grants/s with 256 in flight. Our idle CPU
//! grows with N (0.3 ms/s at 100 locks, 3.2-4.0 ms/s at 10,000; Go 0.6-1.2
//! ms/s): every renewal of the session also renews each grant's tracker
//! (`LeaseGroup::renewed` in fencing-core), about 1 us per held grant every
//! 3.33 s; Go's Mutex keeps no per-lock state. The members' idle CPU is the
//! same for both sides and every N (45-75 ms/s, as with 10 locks held): N
//! idle watchers cost them nothing measurable.

use std::io::Write as _;
use std::num::NonZeroUsize;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::{AcquireOptions, FencingSource as _, ResourceName};
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_integration::bench::{main_with, next_event, BoxError};
use fencing_integration::cache::cached_bin;
use fencing_integration::etcd::cluster::{EtcdCluster, EtcdVersion};
use fencing_integration::process::die_with_parent;
use fencing_integration::scenarios;
use rustix::process::Signal;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};

/// Both sides' lease TTL: short, so that an idle window sees several
/// renewals (every TTL/3).
const TTL_SECS: u64 = 10;
/// Releases in flight at once (either side), whatever F was.
const RELEASE_IN_FLIGHT: usize = 64;
/// Bounds each step of a side (taking or releasing 10,000 locks).
const EVENT_LIMIT: Duration = Duration::from_secs(120);
/// Bounds a child's answer to a "cpu" line, connecting, one release, and
/// the wait for a child's exit.
const OP_LIMIT: Duration = Duration::from_secs(10);
/// The first argument that makes this binary the Rust side's child.
const CHILD: &str = "child";

/// N locks held at once from one source, against Go with one session.
#[derive(clap::Parser)]
struct Args {
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
    /// Also write one CSV row per N, in-flight count and side here.
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
}

/// The Rust side of one point, run as `held-bench child ...`; it speaks the
/// protocol of `etcd-mutex held` on stdin and stdout.
#[derive(clap::Parser)]
struct ChildArgs {
    #[arg(long)]
    endpoints: String,
    #[arg(long)]
    prefix: String,
    #[arg(long)]
    count: NonZeroUsize,
    #[arg(long = "in-flight")]
    in_flight: NonZeroUsize,
    /// Take, hold and release the locks this many times on one source.
    #[arg(long, default_value = "1")]
    cycles: NonZeroUsize,
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
    etcd_us_per_grant: f64,
    rss_after_kb: f64,
}

/// One side's idle window.
#[derive(Clone, Copy)]
struct Idle {
    cpu_ms_per_s: f64,
    /// The three members' CPU over the same window.
    etcd_ms_per_s: f64,
    keepalives: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Go,
    Rust,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Go => "go",
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
    let go = cached_bin("etcd-mutex");
    if !go.exists() {
        return Err(format!(
            "{} missing: run scripts/install/go-interop.sh",
            go.display()
        )
        .into());
    }
    let programs = Programs {
        go,
        rust: std::env::current_exe()?,
    };
    let idle = Duration::from_secs(args.idle_secs.get() as u64);
    let in_flights: Vec<usize> = args.in_flight.iter().map(|f| f.get()).collect();
    let sizes: Vec<usize> = args.sizes.iter().map(|n| n.get()).collect();
    let largest = *sizes.iter().max().unwrap_or(&0);
    let last_f = *in_flights.last().unwrap_or(&1);
    let cluster = EtcdCluster::start(EtcdVersion::V3_6, 3).await?;
    let members = Members::find(&cluster)?;
    println!(
        "held-bench: etcd 3.6, 3 members, EtcdSource vs Go concurrency.Mutex (one session each), \
         TTL {TTL_SECS} s (renewed every TTL/3), idle window {} s at {last_f} in flight",
        idle.as_secs()
    );
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
        "etcd us/g",
        "idle ms/s",
        "etcd ms/s",
        "keepal",
        "RSS after"
    );
    let mut csv = args.csv.as_ref().map(std::fs::File::create).transpose()?;
    if let Some(f) = csv.as_mut() {
        writeln!(
            f,
            "n,in_flight,side,series,grants_per_s,kb_per_grant,streams,watchers,\
             host_busy_pct,client_cpu_us_per_grant,etcd_cpu_us_per_grant,\
             idle_cpu_ms_per_s,idle_etcd_cpu_ms_per_s,idle_keepalives"
        )?;
    }
    for &n in &sizes {
        let mut rows: Vec<(usize, Side, Figures)> = Vec::new();
        let mut idles: Vec<(Side, Idle)> = Vec::new();
        for &f in &in_flights {
            let measure_idle = (f == last_f).then_some(idle);
            let mut pair = Vec::new();
            for side in [Side::Go, Side::Rust] {
                let cycles = if side == Side::Rust && n == largest && f == last_f {
                    3
                } else {
                    1
                };
                let point = Point {
                    n,
                    in_flight: f,
                    cycles,
                    idle: measure_idle,
                };
                let (figs, idle_fig) =
                    run_side(&programs, side, &cluster, &members, &point).await?;
                print_row(n, f, side.name(), &figs[0], idle_fig.as_ref());
                if let Some(i) = idle_fig {
                    idles.push((side, i));
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
                let first = figs.into_iter().next().ok_or("no figures")?;
                pair.push(first);
            }
            let (rust, go_fig) = (&pair[1], &pair[0]);
            println!(
                "held-bench: N={n} F={f} grants/s ratio {:.2}, memory per grant ratio {:.2} (rust / go)",
                rust.grants_per_s / go_fig.grants_per_s,
                rust.kb_per_grant / go_fig.kb_per_grant.max(0.001),
            );
            let mut pair = pair.into_iter();
            for side in [Side::Go, Side::Rust] {
                rows.push((f, side, pair.next().ok_or("missing side")?));
            }
        }
        let idle_of = |side: Side| idles.iter().find(|(s, _)| *s == side).map(|(_, i)| *i);
        if let (Some(g), Some(r)) = (idle_of(Side::Go), idle_of(Side::Rust)) {
            println!(
                "held-bench: N={n} idle CPU ms/s rust {:.2} go {:.2} (ratio {:.2}), etcd meanwhile {:.1} / {:.1}, keep-alives rust {} go {}",
                r.cpu_ms_per_s,
                g.cpu_ms_per_s,
                r.cpu_ms_per_s / g.cpu_ms_per_s.max(0.001),
                r.etcd_ms_per_s,
                g.etcd_ms_per_s,
                r.keepalives,
                g.keepalives
            );
        }
        if let Some(file) = csv.as_mut() {
            for (f, side, fig) in &rows {
                let i = idle_of(*side);
                writeln!(
                    file,
                    "{n},{f},{s},{s} {f},{:.0},{:.3},{},{},{:.0},{:.1},{:.1},{},{},{}",
                    fig.grants_per_s,
                    fig.kb_per_grant,
                    fig.streams,
                    fig.watchers,
                    fig.host_busy_pct,
                    fig.client_us_per_grant,
                    fig.etcd_us_per_grant,
                    i.map_or(String::new(), |i| format!("{:.3}", i.cpu_ms_per_s)),
                    i.map_or(String::new(), |i| format!("{:.2}", i.etcd_ms_per_s)),
                    i.map_or(String::new(), |i| i.keepalives.to_string()),
                    s = side.name(),
                )?;
            }
        }
    }
    Ok(())
}

fn print_row(n: usize, f: usize, side: &str, fig: &Figures, idle: Option<&Idle>) {
    let (cpu, etcd, ka) = idle.map_or(("-".into(), "-".into(), "-".into()), |i| {
        (
            format!("{:.2}", i.cpu_ms_per_s),
            format!("{:.1}", i.etcd_ms_per_s),
            i.keepalives.to_string(),
        )
    });
    let watches = format!("{}/{}", fig.streams, fig.watchers);
    // Under 20 ticks of the members' CPU clock, a share says nothing.
    let cores = if fig.etcd_us_per_grant * n as f64 >= 200_000.0 {
        let used = (fig.client_us_per_grant + fig.etcd_us_per_grant) * fig.grants_per_s;
        format!("{:.2}", used / 1e6)
    } else {
        "-".into()
    };
    println!(
        "{n:>6} {f:>5} {side:>5} {:>8.0} {:>8.2} {watches:>11} {cores:>5} {:>8.0} {:>9.0} {cpu:>9} {etcd:>9} {ka:>6} {:>9}",
        fig.grants_per_s,
        fig.kb_per_grant,
        fig.client_us_per_grant,
        fig.etcd_us_per_grant,
        fig.rss_after_kb
    );
}

struct Programs {
    go: std::path::PathBuf,
    rust: std::path::PathBuf,
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
    programs: &Programs,
    side: Side,
    cluster: &EtcdCluster,
    members: &Members,
    p: &Point,
) -> Result<(Vec<Figures>, Option<Idle>), BoxError> {
    let (n, f) = (p.n, p.in_flight);
    let mut cmd = match side {
        Side::Go => {
            let mut c = std::process::Command::new(&programs.go);
            c.arg("held")
                .args(["--release-in-flight", &RELEASE_IN_FLIGHT.to_string()])
                .args(["--ttl", &TTL_SECS.to_string()]);
            c
        }
        Side::Rust => {
            let mut c = std::process::Command::new(&programs.rust);
            c.arg(CHILD).args(["--cycles", &p.cycles.to_string()]);
            c
        }
    };
    cmd.args(["--endpoints", &cluster.endpoints().join(",")])
        .args(["--prefix", &format!("/held-{}-{n}-{f}", side.name())])
        .args(["--count", &n.to_string(), "--in-flight", &f.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    die_with_parent(&mut cmd, Signal::KILL);
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()?;
    let program = match side {
        Side::Go => "etcd-mutex held",
        Side::Rust => "held-bench child",
    };
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut figures = Vec::new();
    let mut idle = None;
    next_event(&mut lines, program, "connected", OP_LIMIT).await?;
    // The members' CPU from here to "held": the acquires and, on our side,
    // the 300 ms in which the own-key watches start.
    let mut etcd_from = members.cpu_us();
    for cycle in 0..p.cycles {
        let held = next_event(&mut lines, program, "held", EVENT_LIMIT).await?;
        let etcd_us = members.cpu_us() - etcd_from;
        let (streams, watchers) = watch_counts(cluster).await?;
        if let (0, Some(window)) = (cycle, p.idle) {
            let ka_before = keepalives(cluster).await?;
            let etcd_before = members.cpu_us();
            let before = cpu_sample(&mut stdin, &mut lines, program).await?;
            tokio::time::sleep(window).await;
            let after = cpu_sample(&mut stdin, &mut lines, program).await?;
            let etcd_after = members.cpu_us();
            let ka_after = keepalives(cluster).await?;
            let wall_s = (after.1 - before.1) / 1e6;
            idle = Some(Idle {
                cpu_ms_per_s: (after.0 - before.0) / 1e3 / wall_s,
                etcd_ms_per_s: (etcd_after - etcd_before) / 1e3 / wall_s,
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
            etcd_us_per_grant: etcd_us / n as f64,
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

async fn watch_counts(cluster: &EtcdCluster) -> Result<(f64, f64), BoxError> {
    Ok((
        cluster
            .metric("etcd_debugging_mvcc_watch_stream_total")
            .await?,
        cluster.metric("etcd_debugging_mvcc_watcher_total").await?,
    ))
}

/// LeaseKeepAlive messages the members have received so far.
async fn keepalives(cluster: &EtcdCluster) -> Result<f64, BoxError> {
    let by = cluster
        .metric_by("grpc_server_msg_received_total", Some("grpc_method"))
        .await?;
    Ok(by.get("LeaseKeepAlive").copied().unwrap_or(0.0))
}

/// The Rust side: one source, `--count` locks `--in-flight` at a time, the
/// events and stdin lines of `etcd-mutex held`.
async fn child(a: ChildArgs) -> Result<(), BoxError> {
    let started = Instant::now();
    let (n, in_flight) = (a.count.get(), a.in_flight.get());
    let cfg = EtcdConfig::new(a.endpoints.split(','), a.prefix)?
        .ttl(Duration::from_secs(TTL_SECS))
        .request_timeout(Duration::from_secs(5));
    let source = tokio::time::timeout(OP_LIMIT, EtcdSource::connect(cfg))
        .await
        .map_err(|_| "connect: timed out")??;
    let source = Arc::new(source);
    let opts = AcquireOptions::new().timeout(Duration::from_secs(60));
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    // The session (its lease) starts with the first grant: take one before
    // timing, as Go grants its session's lease before it starts the clock.
    let warm_up = ResourceName::new("warm-up")?;
    tokio::time::timeout(OP_LIMIT, source.acquire(&warm_up, &opts))
        .await
        .map_err(|_| "warm-up acquire: timed out")??
        .release()
        .await?;
    emit(json!({"event": "connected"}));
    for _ in 0..a.cycles.get() {
        let before = rss_kb();
        let host_before = HostTicks::read();
        let cpu_before = cpu_micros();
        let t0 = Instant::now();
        let grants = tokio::time::timeout(
            EVENT_LIMIT,
            scenarios::acquire_many(source.clone(), n, in_flight, &opts),
        )
        .await
        .map_err(|_| format!("{n} acquires took over {EVENT_LIMIT:?}"))??;
        let seconds = t0.elapsed().as_secs_f64();
        let cpu_us_acquire = cpu_micros() - cpu_before;
        let host_busy_pct = HostTicks::read().busy_pct_since(&host_before);
        // A grant's own-key watch starts 100 ms after it: weigh the held
        // grants with their watches.
        tokio::time::sleep(Duration::from_millis(300)).await;
        emit(json!({"event": "held", "count": n, "seconds": seconds,
            "rss_kb_before": before, "rss_kb_held": rss_kb(), "host_busy_pct": host_busy_pct,
            "cpu_us_acquire": cpu_us_acquire}));
        loop {
            let line = stdin
                .next_line()
                .await?
                .ok_or("stdin closed before the release line")?;
            if line.trim() != "cpu" {
                break;
            }
            emit(json!({"event": "cpu", "cpu_us": cpu_micros(),
                "wall_us": started.elapsed().as_micros() as u64}));
        }
        release_all(grants).await?;
        emit(json!({"event": "released", "rss_kb_after": rss_kb()}));
    }
    tokio::time::timeout(OP_LIMIT, source.close())
        .await
        .map_err(|_| "close: timed out")??;
    Ok(())
}

/// Releases every grant, [`RELEASE_IN_FLIGHT`] at a time.
async fn release_all(grants: Vec<fencing::Grant>) -> Result<(), BoxError> {
    let mut chunks: Vec<Vec<fencing::Grant>> = (0..RELEASE_IN_FLIGHT).map(|_| Vec::new()).collect();
    for (i, g) in grants.into_iter().enumerate() {
        chunks[i % RELEASE_IN_FLIGHT].push(g);
    }
    let mut workers = tokio::task::JoinSet::new();
    for chunk in chunks {
        workers.spawn(async move {
            for g in chunk {
                tokio::time::timeout(OP_LIMIT, g.release())
                    .await
                    .map_err(|_| format!("release: no answer within {OP_LIMIT:?}"))?
                    .map_err(|e| format!("release: {e}"))?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    Ok(())
}

/// One event line on stdout (Rust's stdout flushes at each newline).
fn emit(v: Value) {
    println!("{v}");
}

/// This process's CPU time (all threads, user and system), in µs.
fn cpu_micros() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
}

/// The host's CPU time from the first line of /proc/stat: all of it, and
/// the part spent neither idle nor waiting for I/O.
struct HostTicks {
    total: u64,
    busy: u64,
}

impl HostTicks {
    fn read() -> Self {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let fields = text.lines().next().unwrap_or("").split_whitespace();
        let mut t = HostTicks { total: 0, busy: 0 };
        // user nice system idle iowait irq softirq steal (guest time is
        // already counted in user and nice).
        for (i, v) in fields.skip(1).take(8).enumerate() {
            let v: u64 = v.parse().unwrap_or(0);
            t.total += v;
            if i != 3 && i != 4 {
                t.busy += v;
            }
        }
        t
    }

    /// Share of all the host's CPUs busy since `earlier`, in percent.
    fn busy_pct_since(&self, earlier: &HostTicks) -> f64 {
        if self.total <= earlier.total {
            return 0.0;
        }
        100.0 * (self.busy - earlier.busy) as f64 / (self.total - earlier.total) as f64
    }
}

/// The cluster's member processes, found by their directory in their
/// command lines, and their CPU time.
struct Members {
    pids: Vec<u32>,
}

impl Members {
    fn find(cluster: &EtcdCluster) -> Result<Self, BoxError> {
        let dir = cluster.dir().to_string_lossy().into_owned();
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc")?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&dir) {
                pids.push(pid);
            }
        }
        if pids.len() != cluster.member_count() {
            return Err(format!(
                "found {} processes under {dir}, expected {} members",
                pids.len(),
                cluster.member_count()
            )
            .into());
        }
        Ok(Members { pids })
    }

    /// The members' CPU time (user and system) so far, in µs, at the
    /// resolution of /proc/PID/stat (10 ms: USER_HZ is 100 on Linux).
    fn cpu_us(&self) -> f64 {
        let ticks: u64 = self
            .pids
            .iter()
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // After "pid (comm) ": state is field 3, utime 14, stime 15.
                let rest = &stat[stat.rfind(')')? + 1..];
                let f: Vec<&str> = rest.split_whitespace().collect();
                Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
            })
            .sum();
        ticks as f64 * 10_000.0
    }
}

/// Resident memory of this process, in KiB.
fn rss_kb() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
