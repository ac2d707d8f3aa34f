//! etcd-bench: lock latency of EtcdSource next to Go's `concurrency.Mutex`
//! on the same real 3-member etcd cluster, measured the same way.
//!
//! Usage: etcd-bench [--iterations N=200] [--settle-ms 150] [--version 3.6|3.4]
//!
//! The Go side is `etcd-mutex bench` (integration/go/etcd-mutex/main.go); the
//! Rust side below mirrors its method step for step. The two run
//! alternately (Go, Rust, Go, Rust) so that slow drift of a shared machine
//! hits both; each metric reports the median of the rounds' medians. The
//! ratio is reported, not asserted: this is a benchmark, not a test.

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_etcd::etcd_client::{Client, GetOptions};
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_integration::etcd_cluster::{cache_dir, EtcdCluster, EtcdVersion};

type BoxError = Box<dyn std::error::Error>;

/// Same bounds as main.go: a (possibly contended) acquire, and any other request.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);
const OP_TIMEOUT: Duration = Duration::from_secs(5);
/// Same session TTL as main.go (long enough that no renewal is ever late).
const TTL: Duration = Duration::from_secs(60);
/// Same poll interval as main.go's waitKeys.
const POLL: Duration = Duration::from_micros(200);
const ROUNDS: usize = 2;
const RESOURCE: &str = "bench";

struct Args {
    iterations: usize,
    settle: Duration,
    version: EtcdVersion,
}

/// Median and 90th percentile of one metric, in µs.
#[derive(Clone, Copy, Debug)]
struct Stats {
    median_us: f64,
    p90_us: f64,
}

/// One run of one side.
#[derive(Clone, Copy, Debug)]
struct Run {
    uncontended: Stats,
    handover: Stats,
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|args| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        rt.block_on(run(args))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("etcd-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        iterations: 200,
        settle: Duration::from_millis(150),
        version: EtcdVersion::V3_6,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--iterations" => args.iterations = value()?.parse().map_err(|e| format!("--iterations: {e}"))?,
            "--settle-ms" => args.settle = Duration::from_millis(value()?.parse().map_err(|e| format!("--settle-ms: {e}"))?),
            "--version" => {
                args.version = match value()?.as_str() {
                    "3.6" => EtcdVersion::V3_6,
                    "3.4" => EtcdVersion::V3_4,
                    other => return Err(format!("--version must be 3.6 or 3.4, not {other:?}").into()),
                }
            }
            _ => return Err(format!("unknown argument {flag:?}; usage: etcd-bench [--iterations N] [--settle-ms MS] [--version 3.6|3.4]").into()),
        }
    }
    if args.iterations == 0 {
        return Err("--iterations must be > 0".into());
    }
    Ok(args)
}

async fn run(args: Args) -> Result<(), BoxError> {
    // Checked before the cluster starts: a missing binary fails fast.
    let go = go_binary()?;
    // Lives until the end of this function, also on `?`: dropping it kills the members.
    let cluster = EtcdCluster::start(args.version, 3).await?;
    let endpoints = cluster.endpoints();
    let mut client = cluster.client().await?;
    let status = bounded("status", client.status()).await??;
    let label = format!(
        "etcd {}, 3 members, N={}, settle {} ms",
        status.version(),
        args.iterations,
        args.settle.as_millis()
    );
    println!("etcd-bench: {label}");

    let (mut go_runs, mut rust_runs) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        // Fresh prefixes per side and round: no run sees another's keys.
        // The side that goes first alternates (Go, Rust, Rust, Go, ...) so
        // neither always runs on a cluster the other has just warmed up.
        let go_prefix = format!("/bench-go-{round}/{RESOURCE}");
        let rust_prefix = format!("/bench-rust-{round}");
        for go_turn in if round % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        } {
            if go_turn {
                let run = go_bench(&go, &endpoints, &go_prefix, &args).await?;
                print_run("go", round, &run);
                go_runs.push(run);
            } else {
                let run = rust_bench(&endpoints, &rust_prefix, &client, &args).await?;
                print_run("rust", round, &run);
                rust_runs.push(run);
            }
        }
    }

    let (rust, go) = (combine(&rust_runs), combine(&go_runs));
    println!();
    println!(
        "{:<12} {:>12} {:>10} {:>12} {:>10} {:>8}",
        "metric", "rust median", "rust p90", "go median", "go p90", "rust/go"
    );
    let unc = print_metric("uncontended", rust.uncontended, go.uncontended);
    let hand = print_metric("handover", rust.handover, go.handover);
    println!("etcd-bench: uncontended ratio {unc:.2}, handover ratio {hand:.2} ({label})");
    Ok(())
}

fn go_binary() -> Result<PathBuf, BoxError> {
    let path = cache_dir().join("bin").join("etcd-mutex");
    if !path.is_file() {
        return Err(format!(
            "{} is missing: run bash scripts/install/go-interop.sh",
            path.display()
        )
        .into());
    }
    Ok(path)
}

/// Runs `etcd-mutex bench` once and reads its one JSON result line.
async fn go_bench(
    go: &PathBuf,
    endpoints: &[String],
    prefix: &str,
    args: &Args,
) -> Result<Run, BoxError> {
    let mut cmd = tokio::process::Command::new(go);
    cmd.arg("bench")
        .args(["--endpoints", &endpoints.join(","), "--prefix", prefix])
        .args([
            "--iterations",
            &args.iterations.to_string(),
            "--settle-ms",
            &args.settle.as_millis().to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true); // a timed-out run must not outlive us
                             // Generous: each handover iteration costs the settle time plus a few round trips.
    let per_iteration = args.settle + Duration::from_millis(500);
    let limit = Duration::from_secs(30) + per_iteration * u32::try_from(args.iterations)?;
    let out = tokio::time::timeout(limit, cmd.output())
        .await
        .map_err(|_| format!("etcd-mutex bench did not finish within {limit:?}"))??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if let Some(e) = events.iter().find(|e| e["event"] == "error") {
        return Err(format!(
            "etcd-mutex bench: {}",
            e["error"].as_str().unwrap_or("unknown error")
        )
        .into());
    }
    let Some(b) = events
        .iter()
        .find(|e| e["event"] == "bench")
        .filter(|_| out.status.success())
    else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "etcd-mutex bench failed ({}): {}",
            out.status,
            stderr.trim()
        )
        .into());
    };
    let field = |name: &str| {
        b[name]
            .as_f64()
            .ok_or_else(|| format!("etcd-mutex bench: no {name} in {b}"))
    };
    Ok(Run {
        uncontended: Stats {
            median_us: field("uncontended_median_us")?,
            p90_us: field("uncontended_p90_us")?,
        },
        handover: Stats {
            median_us: field("handover_median_us")?,
            p90_us: field("handover_p90_us")?,
        },
    })
}

/// The Rust side, step for step as main.go's bench.
async fn rust_bench(
    endpoints: &[String],
    prefix: &str,
    counter: &Client,
    args: &Args,
) -> Result<Run, BoxError> {
    let connect = || async {
        let cfg = EtcdConfig::new(endpoints.to_vec(), prefix)?
            .ttl(TTL)
            .request_timeout(OP_TIMEOUT);
        EtcdSource::connect(cfg).await
    };
    // Two sources, so A and B have separate sessions (leases), like Go's sa and sb.
    let (a, b) = (connect().await?, connect().await?);
    let resource = ResourceName::new(RESOURCE)?;
    let opts = AcquireOptions::new().timeout(LOCK_TIMEOUT);

    // Go creates both sessions before timing; EtcdSource creates its session
    // on the first acquire, so one untimed cycle on each does the same.
    for s in [&a, &b] {
        bounded(
            "warm-up release",
            s.acquire(&resource, &opts).await?.release(),
        )
        .await??;
    }

    let mut unc = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        let t0 = Instant::now();
        let grant = a.acquire(&resource, &opts).await?;
        bounded("release", grant.release()).await??;
        unc.push(t0.elapsed());
    }

    let dir = format!("{prefix}/{RESOURCE}/");
    let mut hand = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        hand.push(handover(&a, &b, &resource, &opts, counter, &dir, args.settle).await?);
    }

    // Like Go's deferred Session.Close: revoke the leases.
    bounded("close A", a.close()).await??;
    bounded("close B", b.close()).await??;
    Ok(Run {
        uncontended: stats(unc),
        handover: stats(hand),
    })
}

/// One handover: A holds, B queues behind it, A releases; the time from
/// just before A's release is sent until B's acquire returns.
async fn handover(
    a: &EtcdSource,
    b: &EtcdSource,
    resource: &ResourceName,
    opts: &AcquireOptions,
    counter: &Client,
    dir: &str,
    settle: Duration,
) -> Result<Duration, BoxError> {
    let held = a.acquire(resource, opts).await?;
    let waiter = {
        let (b, resource, opts) = (b.clone(), resource.clone(), opts.clone());
        // The time is taken in the task, as Go's goroutine does, so the
        // measurement does not include waking this task.
        tokio::spawn(async move {
            let granted = b.acquire(&resource, &opts).await;
            (granted, Instant::now())
        })
    };
    // B is queued once its key exists; settling then lets its predecessor
    // watch get established (main.go explains why Go needs > 100 ms).
    wait_keys(counter, dir, 2).await?;
    tokio::time::sleep(settle).await;
    let t0 = Instant::now();
    bounded("release A", held.release()).await??;
    let (granted, t1) = tokio::time::timeout(LOCK_TIMEOUT, waiter)
        .await
        .map_err(|_| format!("B was not granted within {LOCK_TIMEOUT:?} of A's release"))??;
    let granted = granted?;
    bounded("release B", granted.release()).await??;
    Ok(t1.saturating_duration_since(t0))
}

/// Polls (bounded, like main.go's waitKeys) until `n` keys exist under `dir`.
async fn wait_keys(client: &Client, dir: &str, n: i64) -> Result<(), BoxError> {
    let deadline = Instant::now() + OP_TIMEOUT;
    loop {
        let mut c = client.clone();
        let resp = bounded(
            "count waiters",
            c.get(dir, Some(GetOptions::new().with_prefix().with_count_only())),
        )
        .await??;
        if resp.count() >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "waiter did not queue within {OP_TIMEOUT:?} ({} keys under {dir:?})",
                resp.count()
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Bounds one network call by OP_TIMEOUT.
async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> Result<T, BoxError> {
    tokio::time::timeout(OP_TIMEOUT, fut)
        .await
        .map_err(|_| format!("{what} took longer than {OP_TIMEOUT:?}").into())
}

/// Median and p90 by nearest rank, exactly as main.go's stats (whole µs).
fn stats(mut d: Vec<Duration>) -> Stats {
    d.sort();
    let rank = |p: f64| {
        let i = ((p * d.len() as f64 + 0.999999) as usize).saturating_sub(1);
        d[i].as_micros() as f64
    };
    Stats {
        median_us: rank(0.5),
        p90_us: rank(0.9),
    }
}

/// Per metric, the median over the rounds of each round's median and p90.
fn combine(runs: &[Run]) -> Run {
    let med = |f: &dyn Fn(&Run) -> f64| median(runs.iter().map(f).collect());
    Run {
        uncontended: Stats {
            median_us: med(&|r| r.uncontended.median_us),
            p90_us: med(&|r| r.uncontended.p90_us),
        },
        handover: Stats {
            median_us: med(&|r| r.handover.median_us),
            p90_us: med(&|r| r.handover.p90_us),
        },
    }
}

/// The median; with an even count, the mean of the middle two.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

fn print_run(side: &str, round: usize, r: &Run) {
    println!(
        "round {round} {side:<4}: uncontended {:>6.0} / {:>6.0} µs, handover {:>6.0} / {:>6.0} µs (median / p90)",
        r.uncontended.median_us, r.uncontended.p90_us, r.handover.median_us, r.handover.p90_us
    );
}

/// Prints one table row and returns the ratio of the medians.
fn print_metric(name: &str, rust: Stats, go: Stats) -> f64 {
    let ratio = rust.median_us / go.median_us;
    println!(
        "{name:<12} {:>9.0} µs {:>7.0} µs {:>9.0} µs {:>7.0} µs {ratio:>8.2}",
        rust.median_us, rust.p90_us, go.median_us, go.p90_us
    );
    ratio
}
