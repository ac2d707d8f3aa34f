//! held-bench: many locks held at once from one etcd source, beside Go's
//! `concurrency.Mutex` with one session (`etcd-mutex held`), on the same
//! real 3-member etcd 3.6 cluster.
//!
//! Usage: held-bench [--sizes 10,100,1000,10000] [--in-flight 64]
//!
//! For each N, each side takes N distinct locks (`--in-flight` acquires at a
//! time) and reports grants/s, resident memory per held grant, and the watch
//! streams and watchers the members count while the locks are held; then it
//! releases them all. The Rust side runs the largest N three times on one
//! source: memory after the third release should be within 10 % of the
//! second (memory comes back; the first cycle raises the allocator's
//! high-water mark). Figures are printed, not asserted.

use std::io::Write as _;
use std::num::NonZeroUsize;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::AcquireOptions;
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_integration::cache::cached_bin;
use fencing_integration::etcd::cluster::{EtcdCluster, EtcdVersion};
use fencing_integration::scenarios;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use fencing_integration::bench::{main_with, next_event, BoxError};

const TTL: Duration = Duration::from_secs(60);
/// Bounds each step of the Go side (taking or releasing 10,000 locks).
const EVENT_LIMIT: Duration = Duration::from_secs(120);

/// N locks held at once from one source, against Go with one session.
#[derive(clap::Parser)]
struct Args {
    /// The numbers of locks held at once, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000")]
    sizes: Vec<NonZeroUsize>,
    /// Acquires in flight at once.
    #[arg(long = "in-flight", default_value = "64")]
    in_flight: NonZeroUsize,
    /// Also write one CSV row per N and side here.
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
}

/// What one side measured for one N.
struct Figures {
    grants_per_s: f64,
    kb_per_grant: f64,
    streams: f64,
    watchers: f64,
    rss_after_kb: i64,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    main_with("held-bench", run(args))
}

async fn run(args: Args) -> Result<(), BoxError> {
    let in_flight = args.in_flight.get();
    let go = cached_bin("etcd-mutex");
    if !go.exists() {
        return Err(format!(
            "{} missing: run scripts/install/go-interop.sh",
            go.display()
        )
        .into());
    }
    let cluster = EtcdCluster::start(EtcdVersion::V3_6, 3).await?;
    println!(
        "held-bench: etcd 3.6, 3 members, EtcdSource vs Go concurrency.Mutex (one session), {} in flight",
        in_flight
    );
    println!(
        "{:>6} {:>5} {:>10} {:>10} {:>8} {:>9} {:>12}",
        "N", "side", "grants/s", "KB/grant", "streams", "watchers", "RSS after KB"
    );
    let mut csv = args.csv.as_ref().map(std::fs::File::create).transpose()?;
    if let Some(f) = csv.as_mut() {
        writeln!(f, "n,side,grants_per_s,kb_per_grant,streams,watchers")?;
    }
    let sizes: Vec<usize> = args.sizes.iter().map(|n| n.get()).collect();
    let largest = *sizes.iter().max().unwrap_or(&0);
    for &n in &sizes {
        let go_fig = go_side(&go, &cluster, n, in_flight).await?;
        print_row(n, "go", &go_fig);
        let source = connect(&cluster, &format!("/held-rust-{n}")).await?;
        let rust = rust_side(&source, &cluster, n, in_flight).await?;
        print_row(n, "rust", &rust);
        if let Some(f) = csv.as_mut() {
            for (side, fig) in [("go", &go_fig), ("rust", &rust)] {
                writeln!(
                    f,
                    "{n},{side},{:.0},{:.3},{},{}",
                    fig.grants_per_s, fig.kb_per_grant, fig.streams, fig.watchers
                )?;
            }
        }
        println!(
            "held-bench: N={n} grants/s ratio {:.2}, memory per grant ratio {:.2} (rust / go)",
            rust.grants_per_s / go_fig.grants_per_s,
            rust.kb_per_grant / go_fig.kb_per_grant.max(0.001),
        );
        if n == largest {
            // Memory comes back when a later cycle ends where an earlier
            // one did: the allocator keeps what the first cycle touched,
            // so the second and third are compared.
            let mut after = Vec::new();
            for side in ["rust2", "rust3"] {
                let again = rust_side(&source, &cluster, n, in_flight).await?;
                print_row(n, side, &again);
                after.push(again.rss_after_kb as f64);
            }
            println!(
                "held-bench: N={n} RSS after the third release / after the second {:.2}",
                after[1] / after[0]
            );
        }
    }
    Ok(())
}

fn print_row(n: usize, side: &str, f: &Figures) {
    println!(
        "{n:>6} {side:>5} {:>10.0} {:>10.2} {:>8} {:>9} {:>12}",
        f.grants_per_s, f.kb_per_grant, f.streams, f.watchers, f.rss_after_kb
    );
}

async fn connect(cluster: &EtcdCluster, prefix: &str) -> Result<Arc<EtcdSource>, BoxError> {
    let cfg = EtcdConfig::new(cluster.endpoints(), prefix)?
        .ttl(TTL)
        .request_timeout(Duration::from_secs(5));
    Ok(Arc::new(EtcdSource::connect(cfg).await?))
}

async fn watch_counts(cluster: &EtcdCluster) -> Result<(f64, f64), BoxError> {
    Ok((
        cluster
            .metric("etcd_debugging_mvcc_watch_stream_total")
            .await?,
        cluster.metric("etcd_debugging_mvcc_watcher_total").await?,
    ))
}

async fn rust_side(
    source: &Arc<EtcdSource>,
    cluster: &EtcdCluster,
    n: usize,
    in_flight: usize,
) -> Result<Figures, BoxError> {
    let opts = AcquireOptions::new().timeout(Duration::from_secs(60));
    let before = rss_kb();
    let started = Instant::now();
    let grants = scenarios::acquire_many(source.clone(), n, in_flight, &opts).await?;
    let seconds = started.elapsed().as_secs_f64();
    // A grant's own-key watch starts 100 ms after it: count and weigh the
    // held grants with their watches.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = rss_kb();
    let (streams, watchers) = watch_counts(cluster).await?;
    for g in grants {
        g.release().await?;
    }
    Ok(Figures {
        grants_per_s: n as f64 / seconds,
        kb_per_grant: (held - before) as f64 / n as f64,
        streams,
        watchers,
        rss_after_kb: rss_kb(),
    })
}

async fn go_side(
    program: &std::path::Path,
    cluster: &EtcdCluster,
    n: usize,
    in_flight: usize,
) -> Result<Figures, BoxError> {
    let mut child = tokio::process::Command::new(program)
        .args(["held", "--endpoints", &cluster.endpoints().join(",")])
        .args(["--prefix", &format!("/held-go-{n}")])
        .args([
            "--count",
            &n.to_string(),
            "--in-flight",
            &in_flight.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let held = next_event(&mut lines, "etcd-mutex", "held", EVENT_LIMIT).await?;
    let (streams, watchers) = watch_counts(cluster).await?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    stdin.write_all(b"release\n").await?;
    let released = next_event(&mut lines, "etcd-mutex", "released", EVENT_LIMIT).await?;
    tokio::time::timeout(Duration::from_secs(30), child.wait()).await??;
    let number = |v: &serde_json::Value, k: &str| v[k].as_f64().ok_or(format!("no {k} in {v}"));
    Ok(Figures {
        grants_per_s: n as f64 / number(&held, "seconds")?,
        kb_per_grant: (number(&held, "rss_kb_held")? - number(&held, "rss_kb_before")?) / n as f64,
        streams,
        watchers,
        rss_after_kb: number(&released, "rss_kb_after")? as i64,
    })
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
