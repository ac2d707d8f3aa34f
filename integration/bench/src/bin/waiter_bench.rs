//! waiter-bench: how a hand-over's cost grows with the queue, on one real
//! cluster, ours beside the backend's reference lock (the "anchor").
//!
//! Usage: waiter-bench [--backend etcd|zk|kube] [--counts 1,4,16,64,256] [--runs N] [--csv FILE]
//!
//! For each W in `--counts`, a holder takes the lock, W waiters (each its
//! own session) queue behind it, and the holder releases. The lock then
//! passes down the queue, each waiter releasing as soon as it holds.
//! Reported per side and W: the median gap between consecutive grants (the
//! first measured from the holder's release), the time from the release to
//! the last grant, and the requests the servers received per hand-over,
//! read just before the release and after the last grant. With `--runs N`
//! each side is measured N times per W (the side that goes first
//! alternating, so drift of the machine hits both) and the table gives the
//! median with min-max, and the ratio's min / median / max over the paired
//! runs. Figures are printed, not asserted.
//!
//! - etcd (3.6, 3 members): EtcdSource, one per waiter, vs Go's
//!   `concurrency.Mutex` (`etcd-mutex waiters`, one client, a session per
//!   waiter); requests = `grpc_server_msg_received_total` summed over the
//!   members. See [`etcd`].
//! - zk (ZooKeeper 3.9, 3 servers): ZkSource, one per waiter, vs Apache
//!   Curator's `InterProcessMutex` (`curator-mutex.jar waiters`, one
//!   CuratorFramework client per waiter, each acquiring in its own thread);
//!   requests = `zk_packets_received` of `mntr` summed over the servers.
//!   See [`zk`].
//! - kube (one kube-apiserver): KubeLeaseSource, one per waiter, vs
//!   client-go's leader election; requests = `apiserver_request_total`.
//!   See [`kube`].
//!
//! `--csv FILE` writes one row per W and side; one run covers one backend,
//! so keep one file per backend. Columns:
//! `backend,waiters,side,gap_us,chain_ms,requests_per_handover,runs,gap_us_min,gap_us_max,requests_min,requests_max`
//! (medians over the runs, then their spread), with side `rust` or the
//! anchor's language (`go` for etcd and kube, `java` for zk).

// A crate root's modules would live beside it in src/bin/, shared by every
// binary there; these are waiter-bench's own (Cargo.toml stays as it was).
#[path = "waiter_bench/etcd.rs"]
mod etcd;
#[path = "waiter_bench/kube.rs"]
mod kube;
#[path = "waiter_bench/zk.rs"]
mod zk;

use std::fs::File;
use std::future::Future;
use std::io::Write as _;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use fencing_bench::{main_with, min_median_max, next_event, BoxError, OP_TIMEOUT};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Bounds queueing W waiters, and the whole chain of W hand-overs.
const PHASE_LIMIT: Duration = Duration::from_secs(120);
/// After the queue is complete and before the release, so every waiter is
/// watching (etcd: its watch is in the synced group, an unsynced one being
/// served every 100 ms; ZooKeeper: a node exists a moment before its
/// owner's watch on the predecessor).
const SETTLE: Duration = Duration::from_millis(300);
const RESOURCE: &str = "bench";

#[derive(clap::Parser)]
#[command(
    about = "Hand-over down a queue of W waiters on one lock, ours beside the backend's anchor"
)]
struct Args {
    /// Which backend and anchor: etcd (Go concurrency.Mutex), zk (Curator
    /// InterProcessMutex) or kube (client-go leader election).
    #[arg(long, value_enum, default_value = "etcd")]
    backend: Backend,
    /// The queue lengths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256")]
    counts: Vec<NonZeroUsize>,
    /// Measurements of each side per W.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    runs: u16,
    /// Also write one CSV row per W and side here.
    #[arg(long)]
    csv: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Backend {
    Etcd,
    Zk,
    Kube,
}

/// What one side measured for one W.
struct Figures {
    /// Median gap between consecutive grants, in µs.
    gap_us: f64,
    /// Release of the holder to the last grant, in ms.
    chain_ms: f64,
    /// Requests received by the servers per hand-over.
    requests: f64,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    main_with("waiter-bench", run(args))
}

async fn run(args: Args) -> Result<(), BoxError> {
    let counts: Vec<usize> = args.counts.iter().map(|w| w.get()).collect();
    let (name, anchor) = match args.backend {
        Backend::Etcd => ("etcd", "go"),
        Backend::Zk => ("zk", "java"),
        Backend::Kube => ("kube", "go"),
    };
    let mut report = Report::new(name, anchor, usize::from(args.runs), args.csv.as_deref())?;
    match args.backend {
        Backend::Etcd => etcd::run(&counts, &mut report).await,
        Backend::Zk => zk::run(&counts, &mut report).await,
        Backend::Kube => kube::run(&counts, &mut report).await,
    }
}

/// Measures both sides at one W `report.runs` times, the side that goes
/// first alternating from run to run, and reports them.
async fn measure<A, FA, R, FR>(
    report: &mut Report,
    w: usize,
    mut anchor: A,
    mut rust: R,
) -> Result<(), BoxError>
where
    A: FnMut() -> FA,
    FA: Future<Output = Result<Figures, BoxError>>,
    R: FnMut() -> FR,
    FR: Future<Output = Result<Figures, BoxError>>,
{
    let (mut a, mut r) = (Vec::new(), Vec::new());
    for run in 0..report.runs {
        if run % 2 == 0 {
            a.push(anchor().await?);
            r.push(rust().await?);
        } else {
            r.push(rust().await?);
            a.push(anchor().await?);
        }
    }
    report.rows(w, &a, &r)
}

/// Min, median and max of one figure over the runs.
fn spread(runs: &[Figures], figure: impl Fn(&Figures) -> f64) -> (f64, f64, f64) {
    min_median_max(runs.iter().map(figure).collect())
}

/// The table on stdout and the optional CSV file.
struct Report {
    backend: &'static str,
    anchor: &'static str,
    /// Measurements of each side per W.
    runs: usize,
    csv: Option<File>,
}

impl Report {
    fn new(
        backend: &'static str,
        anchor: &'static str,
        runs: usize,
        csv: Option<&std::path::Path>,
    ) -> Result<Report, BoxError> {
        let mut csv = csv.map(File::create).transpose()?;
        if let Some(f) = csv.as_mut() {
            writeln!(
                f,
                "backend,waiters,side,gap_us,chain_ms,requests_per_handover,runs,gap_us_min,gap_us_max,requests_min,requests_max"
            )?;
        }
        Ok(Report {
            backend,
            anchor,
            runs,
            csv,
        })
    }

    /// The title line (what runs, who is compared) and the table header.
    fn title(&self, what: &str) {
        println!(
            "waiter-bench: {what}; {} run(s) per side and W, medians (min-max)",
            self.runs
        );
        println!(
            "{:>5} {:>5} {:>22} {:>10} {:>20}",
            "W", "side", "gap µs", "chain ms", "requests/hand"
        );
    }

    /// The rows of one W (medians over the runs, with their spread), and
    /// the ratios.
    fn rows(&mut self, w: usize, anchor: &[Figures], rust: &[Figures]) -> Result<(), BoxError> {
        for (side, runs) in [(self.anchor, anchor), ("rust", rust)] {
            let gap = spread(runs, |f| f.gap_us);
            let req = spread(runs, |f| f.requests);
            let chain = spread(runs, |f| f.chain_ms).1;
            println!(
                "{w:>5} {side:>5} {:>8.0} ({:>5.0}-{:<6.0}) {chain:>10.1} {:>6.2} ({:>5.2}-{:<5.2})",
                gap.1, gap.0, gap.2, req.1, req.0, req.2
            );
            if let Some(f) = self.csv.as_mut() {
                writeln!(
                    f,
                    "{},{w},{side},{:.0},{chain:.1},{:.2},{},{:.0},{:.0},{:.2},{:.2}",
                    self.backend,
                    gap.1,
                    req.1,
                    runs.len(),
                    gap.0,
                    gap.2,
                    req.0,
                    req.2
                )?;
                f.flush()?;
            }
        }
        let paired: Vec<Figures> = rust
            .iter()
            .zip(anchor)
            .map(|(r, a)| Figures {
                gap_us: r.gap_us / a.gap_us,
                chain_ms: r.chain_ms / a.chain_ms,
                requests: r.requests / a.requests,
            })
            .collect();
        let (gap, req) = (
            spread(&paired, |f| f.gap_us),
            spread(&paired, |f| f.requests),
        );
        println!(
            "waiter-bench: W={w} rust / {}, min / median / max over {} paired runs: gap {:.2} / {:.2} / {:.2}, requests {:.2} / {:.2} / {:.2}",
            self.anchor,
            paired.len(),
            gap.0,
            gap.1,
            gap.2,
            req.0,
            req.1,
            req.2
        );
        Ok(())
    }
}

/// Median gap between consecutive grant times (µs after the release).
/// Releases `held` and waits (bounded) for the W waiters of `queue` to be
/// granted one after the other: each one's grant time, in µs after the release.
async fn pass_down(
    w: usize,
    release: impl Future<Output = Result<(), BoxError>>,
    queue: &mut tokio::task::JoinSet<Result<std::time::Instant, BoxError>>,
) -> Result<Vec<f64>, BoxError> {
    let t0 = std::time::Instant::now();
    release.await?;
    let mut granted_us = Vec::with_capacity(w);
    let drain = async {
        while let Some(done) = queue.join_next().await {
            granted_us.push(done??.duration_since(t0).as_micros() as f64);
        }
        Ok::<_, BoxError>(())
    };
    tokio::time::timeout(PHASE_LIMIT, drain)
        .await
        .map_err(|_| format!("W={w}: the queue did not drain within {PHASE_LIMIT:?}"))??;
    Ok(granted_us)
}

fn figures(mut granted_us: Vec<f64>, requests: f64) -> Figures {
    granted_us.sort_by(f64::total_cmp);
    let mut gaps: Vec<f64> = granted_us
        .iter()
        .scan(0.0, |last, &t| {
            let gap = t - *last;
            *last = t;
            Some(gap)
        })
        .collect();
    gaps.sort_by(f64::total_cmp);
    let n = granted_us.len().max(1) as f64;
    Figures {
        gap_us: gaps.get(gaps.len() / 2).copied().unwrap_or(0.0),
        chain_ms: granted_us.last().copied().unwrap_or(0.0) / 1000.0,
        requests: requests / n,
    }
}

/// Drives an anchor's `waiters` subcommand (etcd-mutex, curator-mutex):
/// waits for `queued`, settles, reads `count`, sends the release line,
/// waits for `done` (the grant times), reads `count` again, then sends the
/// exit line and waits (at most `exit_limit`) for the program to close its
/// sessions and end. The child is killed if anything fails.
async fn anchor_side<F, Fut>(
    mut cmd: tokio::process::Command,
    name: &str,
    w: usize,
    exit_limit: Duration,
    count: F,
) -> Result<Figures, BoxError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<f64, BoxError>>,
{
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    next_event(&mut lines, name, "queued", PHASE_LIMIT).await?;
    tokio::time::sleep(SETTLE).await;
    let before = count().await?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    stdin.write_all(b"release\n").await?;
    stdin.flush().await?;
    let done = next_event(&mut lines, name, "done", PHASE_LIMIT).await?;
    let requests = count().await? - before;
    // Its sessions are closed only now, outside the counted window.
    stdin.write_all(b"exit\n").await?;
    stdin.flush().await?;
    let status = tokio::time::timeout(exit_limit, child.wait())
        .await
        .map_err(|_| format!("{name} did not exit within {exit_limit:?}"))??;
    if !status.success() {
        return Err(format!("{name} exited with {status}").into());
    }
    let granted_us: Vec<f64> = done["granted_us"]
        .as_array()
        .ok_or("no granted_us in the done event")?
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    if granted_us.len() != w {
        return Err(format!(
            "{name} reported {} grants for {w} waiters",
            granted_us.len()
        )
        .into());
    }
    Ok(figures(granted_us, requests))
}
