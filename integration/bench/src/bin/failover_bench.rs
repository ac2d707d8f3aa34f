//! failover-bench: how long a lock stays unusable after its holder dies,
//! ours beside each backend's anchor, at several lease lengths.
//!
//! For each backend, TTL and run: a holder process takes the lock, a
//! candidate process queues behind it, the holder gets SIGKILL (no release,
//! no goodbye: the lease must run out), and the time from the kill to the
//! candidate's announcement that it holds is the failover. Both processes
//! of a side are the same program, and the parent reads both sides' lines
//! the same way, so the figures compare like with like:
//!
//! - ours: the `holder` binary (any backend, through `fencing::connect`)
//!   with the TTL in its URL (`ttl=` on every backend);
//! - etcd: Go's `concurrency.Mutex`, `etcd-mutex hold` (session TTL);
//! - ZooKeeper: Curator's `InterProcessMutex`, `curator-mutex.jar hold`
//!   (session timeout);
//! - Kubernetes: client-go's leader election (`client-go-elector`) with
//!   lease duration TTL and the renew deadline and retry period scaled with
//!   client-go's proportions, which is also what our `ttl=` does.
//!
//! Reported per side, backend and TTL: min / median / max failover over the
//! runs, and the median as a fraction of the TTL. The floor is the TTL
//! itself (the server or the candidate must see the lease run out); what
//! lies above it is detection: etcd's lease expiry sweep, ZooKeeper's
//! session tick, a Kubernetes candidate's poll. Figures, not a check.

use std::num::{NonZeroU32, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use fencing::LeaderTimings;
use fencing_bench::{main_with, min_median_max, BoxError};
use fencing_harness::cache::cache_dir;
use fencing_harness::etcd::cluster::{EtcdCluster, EtcdVersion};
use fencing_harness::kubernetes::cluster::{client_go_elector_binary, KubeUser};
use fencing_harness::kubernetes::fixture::KubeFixture;
use fencing_harness::zk::ensemble::{ZkEnsemble, ZkVersion};
use fencing_harness::Reaped;
use rustix::process::Signal;

/// From a holder's start to its announcement (a JVM start included).
const START_LIMIT: Duration = Duration::from_secs(60);
/// Between the candidate's start and the kill: the candidate has connected
/// and queued (its lock node or key exists, or it has read the Lease once).
const QUEUE_WAIT: Duration = Duration::from_secs(3);
/// A candidate that does not hold within 3 TTLs plus this has failed.
const SLACK: Duration = Duration::from_secs(30);
/// How long the holder would hold if nobody killed it.
const HOLD: Duration = Duration::from_secs(600);
/// How long the candidate holds (client-go's elector reads 0 as "until
/// stdin closes", which for a child with no stdin is at once).
const CANDIDATE_HOLD: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Backend {
    Etcd,
    Zk,
    Kube,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Etcd => "etcd",
            Backend::Zk => "zk",
            Backend::Kube => "kube",
        }
    }
}

#[derive(clap::Parser)]
#[command(about = "Time from a lock holder's SIGKILL to the next grant, ours beside each anchor")]
struct Args {
    /// Backends, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "etcd,zk,kube"
    )]
    backend: Vec<Backend>,
    /// Lease lengths (TTL, session timeout, lease duration) in seconds.
    #[arg(long, value_delimiter = ',', default_value = "2,5,15")]
    ttls: Vec<NonZeroU32>,
    /// Failovers per side, backend and TTL.
    #[arg(long, default_value = "3")]
    runs: NonZeroUsize,
    /// Also write one CSV row per backend, TTL and side here.
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// A running cluster of one backend, and how each side's programs reach it.
enum Cluster {
    Etcd(EtcdCluster),
    Zk(ZkEnsemble),
    Kube(Box<KubeFixture>),
}

/// Whose lock: ours or the backend's anchor.
#[derive(Clone, Copy)]
enum Side {
    Ours,
    Anchor,
}

/// The programs each side runs.
struct Programs {
    holder: PathBuf,
    etcd_mutex: PathBuf,
    curator: PathBuf,
    client_go: PathBuf,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    main_with("failover-bench", run(args))
}

async fn run(args: Args) -> Result<(), BoxError> {
    let programs = Programs::find()?;
    let mut rows = Vec::new();
    for &backend in &args.backend {
        let cluster = Cluster::start(backend).await?;
        println!(
            "failover-bench {}: {} runs per side and TTL",
            backend.name(),
            args.runs
        );
        for ttl in &args.ttls {
            let ttl = Duration::from_secs(u64::from(ttl.get()));
            for side in [Side::Ours, Side::Anchor] {
                // Plain threads and sleeps from here: off the runtime's workers.
                let times = tokio::task::block_in_place(|| {
                    failovers(&cluster, &programs, side, ttl, args.runs.get())
                })?;
                rows.push(report(backend, side, ttl, times));
            }
        }
    }
    if let Some(path) = &args.csv {
        write_csv(path, &rows)?;
    }
    Ok(())
}

impl Programs {
    fn find() -> Result<Programs, BoxError> {
        let holder = std::env::current_exe()?.with_file_name("holder");
        let bin = cache_dir().join("bin");
        let programs = Programs {
            holder,
            etcd_mutex: bin.join("etcd-mutex"),
            curator: bin.join("curator-mutex.jar"),
            client_go: client_go_elector_binary()?,
        };
        for (file, how) in [
            (
                &programs.holder,
                "cargo build --release -p fencing-integration-tests --bin holder",
            ),
            (&programs.etcd_mutex, "bash scripts/install/go-interop.sh"),
            (&programs.curator, "bash scripts/install/curator-interop.sh"),
        ] {
            if !file.is_file() {
                return Err(format!("{} is missing: {how}", file.display()).into());
            }
        }
        Ok(programs)
    }
}

impl Cluster {
    async fn start(backend: Backend) -> Result<Cluster, BoxError> {
        Ok(match backend {
            Backend::Etcd => Cluster::Etcd(EtcdCluster::start(EtcdVersion::V3_6, 3).await?),
            Backend::Zk => Cluster::Zk(ZkEnsemble::start(ZkVersion::V3_9, 3).await?),
            Backend::Kube => Cluster::Kube(Box::new(KubeFixture::start().await)),
        })
    }

    /// The command of one process of `side` that takes `lock` with a lease
    /// of `ttl` and holds it for `hold`.
    fn command(
        &self,
        p: &Programs,
        side: Side,
        lock: &str,
        ttl: Duration,
        hold: Duration,
    ) -> Command {
        match side {
            Side::Ours => {
                let mut cmd = Command::new(&p.holder);
                // The holder writes its second line once this file exists:
                // it never does, so it holds until killed.
                cmd.args([&self.url(ttl), lock, "/nonexistent/failover-bench"]);
                cmd
            }
            Side::Anchor => self.anchor(p, lock, ttl, hold),
        }
    }

    fn url(&self, ttl: Duration) -> String {
        let secs = ttl.as_secs();
        match self {
            Cluster::Etcd(c) => format!("etcd://{}/failover?ttl={secs}", c.endpoints().join(",")),
            Cluster::Zk(z) => format!("zk://{}/failover?ttl={secs}", z.endpoints().join(",")),
            Cluster::Kube(f) => f.url_with_ttl(KubeUser::LeaseUser, ttl),
        }
    }

    fn anchor(&self, p: &Programs, lock: &str, ttl: Duration, hold: Duration) -> Command {
        let ms = |d: Duration| d.as_millis().to_string();
        match self {
            Cluster::Etcd(c) => {
                let mut cmd = Command::new(&p.etcd_mutex);
                cmd.args(["hold", "--endpoints", &c.endpoints().join(",")])
                    .args(["--prefix", &format!("/failover/{lock}")])
                    .args(["--ttl", &ttl.as_secs().to_string(), "--hold-ms", &ms(hold)]);
                cmd
            }
            Cluster::Zk(z) => {
                let mut cmd = Command::new("java");
                cmd.arg("-jar")
                    .arg(&p.curator)
                    .args(["hold", "--connect", &z.connect_string()])
                    .args(["--path", &format!("/failover/{lock}")])
                    .args(["--session-timeout-ms", &ms(ttl), "--hold-ms", &ms(hold)]);
                cmd
            }
            Cluster::Kube(f) => {
                let t = LeaderTimings::scaled_to(ttl);
                let id = format!("{lock}-{}", hold.as_millis());
                let mut cmd = f.client_go_elector(&p.client_go, KubeUser::LeaseUser, lock, &id);
                cmd.args(["--rounds", "1", "--hold", &format!("{}ms", ms(hold))])
                    .args(["--lease-duration", &format!("{}ms", ms(t.lease_duration))])
                    .args(["--renew-deadline", &format!("{}ms", ms(t.renew_deadline))])
                    .args(["--retry-period", &format!("{}ms", ms(t.retry_period))])
                    // klog reports every acquire attempt there.
                    .stderr(Stdio::null());
                cmd
            }
        }
    }
}

/// Whether `line` is the program's announcement that it holds the lock:
/// ours prints `GRANTED <token>`, the anchors a JSON event.
fn holds(line: &str) -> bool {
    if line.starts_with("GRANTED ") {
        return true;
    }
    serde_json::from_str::<serde_json::Value>(line)
        .map(|v| v["event"] == "locked" || v["event"] == "leading")
        .unwrap_or(false)
}

/// Blocks until `p` announces that it holds, at most `limit`.
fn wait_until_held(p: &Reaped, what: &str, limit: Duration) -> Result<Instant, BoxError> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = p
            .next_line(left)
            .ok_or_else(|| format!("the {what} did not hold within {limit:?}"))?;
        if holds(&line) {
            return Ok(Instant::now());
        }
    }
}

/// `runs` failovers of one side: each on a fresh lock, so no run inherits
/// the previous one's dead lease.
fn failovers(
    cluster: &Cluster,
    p: &Programs,
    side: Side,
    ttl: Duration,
    runs: usize,
) -> Result<Vec<Duration>, BoxError> {
    let mut times = Vec::with_capacity(runs);
    for run in 0..runs {
        let lock = format!("failover-{}-{}-{run}", side_name(side), ttl.as_secs());
        let holder = Reaped::spawn(&mut cluster.command(p, side, &lock, ttl, HOLD))?;
        wait_until_held(&holder, "holder", START_LIMIT)?;
        let candidate = Reaped::spawn(&mut cluster.command(p, side, &lock, ttl, CANDIDATE_HOLD))?;
        std::thread::sleep(QUEUE_WAIT);
        while let Some(line) = candidate.next_line(Duration::ZERO) {
            if holds(&line) {
                return Err(format!("{lock}: the candidate holds while the holder lives").into());
            }
        }
        let killed = Instant::now();
        holder.signal(Signal::KILL);
        let granted = wait_until_held(&candidate, "candidate", ttl * 3 + SLACK)?;
        times.push(granted - killed);
    }
    Ok(times)
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Ours => "ours",
        Side::Anchor => "anchor",
    }
}

/// One printed line and CSV row: min / median / max over the runs.
struct Row {
    backend: &'static str,
    side: &'static str,
    ttl_s: u64,
    min_ms: f64,
    median_ms: f64,
    max_ms: f64,
}

fn report(backend: Backend, side: Side, ttl: Duration, times: Vec<Duration>) -> Row {
    let ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let (min_ms, median_ms, max_ms) = min_median_max(ms);
    let row = Row {
        backend: backend.name(),
        side: side_name(side),
        ttl_s: ttl.as_secs(),
        min_ms,
        median_ms,
        max_ms,
    };
    println!(
        "  {:<4} ttl {:>2} s {:<6}: failover min {:>6.0} / median {:>6.0} / max {:>6.0} ms, median {:.2} x TTL",
        row.backend,
        row.ttl_s,
        row.side,
        row.min_ms,
        row.median_ms,
        row.max_ms,
        row.median_ms / (row.ttl_s as f64 * 1e3),
    );
    row
}

fn write_csv(path: &Path, rows: &[Row]) -> Result<(), BoxError> {
    let mut out = String::from("backend,ttl_s,side,min_ms,median_ms,max_ms,median_per_ttl\n");
    for r in rows {
        out.push_str(&format!(
            "{},{},{}-{},{:.1},{:.1},{:.1},{:.3}\n",
            r.backend,
            r.ttl_s,
            r.backend,
            r.side,
            r.min_ms,
            r.median_ms,
            r.max_ms,
            r.median_ms / (r.ttl_s as f64 * 1e3)
        ));
    }
    std::fs::write(path, out)?;
    Ok(())
}
