//! anchor-bench: lock latency of a Rust source next to its backend's
//! reference lock (the "anchor") on the same real 3-member cluster,
//! measured the same way.
//!
//! Usage: anchor-bench [--backend etcd|zk|kube] [--version 3.6|3.4 (etcd), 3.9|3.8 (zk)]
//!                     [--iterations N=200] [--settle-ms 150]
//!
//! - etcd: EtcdSource vs Go's `concurrency.Mutex`, the anchor being
//!   `etcd-mutex bench` (integration/anchors/go/etcd-mutex/bench.go);
//! - zk: ZkSource vs Apache Curator's `InterProcessMutex`, the anchor being
//!   `java -jar curator-mutex.jar bench` (integration/anchors/java/curator-mutex,
//!   Bench.java);
//! - kube: KubeLeaseSource vs client-go's leader election with a LeaseLock
//!   (`client-go-elector`, integration/anchors/go/client-go-elector) on one
//!   real kube-apiserver: acquire and release latency (uncontended) and crash
//!   failover (holder SIGKILLed -> next holder), see the `kube_bench` module.
//!
//! The Rust side mirrors the anchor's method step for step (which session
//! is warmed up, what lies between t0 and t1, the settle wait). The two run
//! alternately (anchor, Rust, Rust, anchor) so that slow drift of a shared
//! machine hits both; each metric reports the median of the rounds'
//! medians. The ratio is reported, not asserted: this is a benchmark, not
//! a test.

mod kube;

use std::future::Future;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_bench::{bounded, median, OP_TIMEOUT};
use fencing_etcd::etcd_client::{Client, GetOptions};
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_harness::cache::cache_dir;
use fencing_harness::etcd::cluster::{EtcdCluster, EtcdVersion};
use fencing_harness::zk::ensemble::{ZkEnsemble, ZkVersion};
use fencing_zookeeper::{ZkConfig, ZkSource};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Same bounds as the anchors: a (possibly contended) acquire, and any other request.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// etcd: same session TTL as etcd-mutex's bench.go (long enough that no renewal is ever late).
const ETCD_TTL: Duration = Duration::from_secs(60);
/// ZooKeeper: the session timeout of Curator's bench (its default
/// --session-timeout-ms), passed to both sides.
const ZK_SESSION_TIMEOUT: Duration = Duration::from_millis(4000);
/// Same poll interval as the anchors' wait for the queued waiter.
const POLL: Duration = Duration::from_micros(200);
const ROUNDS: usize = 2;
const RESOURCE: &str = "bench";

#[derive(Clone, Copy, Debug)]
enum Backend {
    Etcd(EtcdVersion),
    Zk(ZkVersion),
    Kube,
}

#[derive(clap::Parser)]
#[command(about = "Our backends against their Go/Java anchors on one cluster, figures and ratios")]
struct Cli {
    /// Which backend and anchor: etcd (Go concurrency.Mutex), zk (Curator
    /// InterProcessMutex) or kube (client-go leaderelection).
    #[arg(long, value_enum, default_value = "etcd")]
    backend: BackendName,
    /// The server release: 3.6 or 3.4 for etcd, 3.9 or 3.8 for zk (kube runs
    /// the one release it builds).
    #[arg(long)]
    version: Option<String>,
    /// Timed rounds per side.
    #[arg(long, default_value = "200")]
    iterations: std::num::NonZeroUsize,
    /// Pause before each timed hand-over, so the waiter is queued, in ms.
    #[arg(long = "settle-ms", default_value_t = 150)]
    settle_ms: u64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BackendName {
    Etcd,
    Zk,
    Kube,
}

struct Args {
    backend: Backend,
    iterations: usize,
    settle: Duration,
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
        match args.backend {
            Backend::Kube => rt.block_on(kube::run(args)),
            _ => rt.block_on(run(args)),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("anchor-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_args() -> Result<Args, BoxError> {
    use clap::Parser;
    let cli = Cli::parse();
    let backend = match (cli.backend, cli.version.as_deref()) {
        (BackendName::Etcd, None | Some("3.6")) => Backend::Etcd(EtcdVersion::V3_6),
        (BackendName::Etcd, Some("3.4")) => Backend::Etcd(EtcdVersion::V3_4),
        (BackendName::Zk, None | Some("3.9")) => Backend::Zk(ZkVersion::V3_9),
        (BackendName::Zk, Some("3.8")) => Backend::Zk(ZkVersion::V3_8),
        (BackendName::Kube, None) => Backend::Kube,
        (_, Some(v)) => return Err(format!("--version {v:?} is not one for this --backend").into()),
    };
    Ok(Args {
        backend,
        iterations: cli.iterations.get(),
        settle: Duration::from_millis(cli.settle_ms),
    })
}

async fn run(args: Args) -> Result<(), BoxError> {
    // Checked before the cluster starts: a missing program fails fast.
    let anchor = Anchor::find(args.backend)?;
    // Lives until the end of this function, also on `?`: dropping it kills the servers.
    let cluster = Cluster::start(args.backend).await?;
    let label = format!(
        "{}, N={}, settle {} ms",
        cluster.describe().await?,
        args.iterations,
        args.settle.as_millis()
    );
    println!("anchor-bench: {label}");

    let (mut anchor_runs, mut rust_runs) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        // Fresh lock paths per side and round: no run sees another's nodes.
        // The side that goes first alternates (anchor, Rust, Rust, anchor,
        // ...) so neither always runs on a cluster the other has just warmed up.
        for anchor_turn in if round % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        } {
            if anchor_turn {
                let path = format!("/bench-{}-{round}/{RESOURCE}", anchor.side);
                let run = anchor.bench(&cluster, &path, &args).await?;
                print_run(anchor.side, round, &run);
                anchor_runs.push(run);
            } else {
                let run = cluster
                    .rust_bench(&format!("/bench-rust-{round}"), &args)
                    .await?;
                print_run("rust", round, &run);
                rust_runs.push(run);
            }
        }
    }

    let (rust, theirs) = (combine(&rust_runs), combine(&anchor_runs));
    let side = anchor.side;
    print_header(side);
    let unc = print_metric("uncontended", rust.uncontended, theirs.uncontended);
    let hand = print_metric("handover", rust.handover, theirs.handover);
    println!("anchor-bench: uncontended ratio {unc:.2}, handover ratio {hand:.2} ({label})");
    Ok(())
}

/// A running cluster, and how each side reaches it.
#[allow(clippy::large_enum_variant)] // one value per process: size does not matter
enum Cluster {
    Etcd {
        _members: EtcdCluster,
        endpoints: Vec<String>,
        client: Client,
    },
    Zk {
        servers: ZkEnsemble,
        hosts: Vec<String>,
    },
}

impl Cluster {
    async fn start(backend: Backend) -> Result<Cluster, BoxError> {
        Ok(match backend {
            Backend::Etcd(version) => {
                let members = EtcdCluster::start(version, 3).await?;
                Cluster::Etcd {
                    endpoints: members.endpoints(),
                    client: members.client().await?,
                    _members: members,
                }
            }
            Backend::Kube => return Err("kube runs its own bench (kube_bench)".into()),
            Backend::Zk(version) => {
                let servers = ZkEnsemble::start(version, 3).await?;
                Cluster::Zk {
                    hosts: servers.endpoints(),
                    servers,
                }
            }
        })
    }

    /// The server release and who is compared, for the report.
    async fn describe(&self) -> Result<String, BoxError> {
        Ok(match self {
            Cluster::Etcd { client, .. } => {
                let status = bounded("status", client.clone().status()).await??;
                format!(
                    "etcd {}, 3 members, EtcdSource vs Go concurrency.Mutex",
                    status.version()
                )
            }
            Cluster::Zk { servers, .. } => format!(
                "ZooKeeper {}, 3 servers, ZkSource vs Curator InterProcessMutex",
                servers.version().release()
            ),
        })
    }

    /// The anchor's flags that say where the cluster and the lock are.
    fn anchor_flags(&self, path: &str) -> [String; 4] {
        match self {
            Cluster::Etcd { endpoints, .. } => [
                "--endpoints".into(),
                endpoints.join(","),
                "--prefix".into(),
                path.into(),
            ],
            Cluster::Zk { hosts, .. } => [
                "--connect".into(),
                hosts.join(","),
                "--path".into(),
                path.into(),
            ],
        }
    }

    /// The Rust side with its locks under `path` (so the lock itself is
    /// `path/RESOURCE`), following the anchor's method.
    async fn rust_bench(&self, path: &str, args: &Args) -> Result<Run, BoxError> {
        let dir = format!("{path}/{RESOURCE}");
        match self {
            Cluster::Etcd {
                endpoints, client, ..
            } => {
                let connect = || async {
                    let cfg = EtcdConfig::new(endpoints.to_vec(), path)?
                        .ttl(ETCD_TTL)
                        .request_timeout(OP_TIMEOUT);
                    EtcdSource::connect(cfg).await
                };
                // Two sources, so A and B have separate sessions (leases), like Go's sa and sb.
                let (a, b) = (connect().await?, connect().await?);
                // Go's waitKeys: count the keys under the lock prefix.
                let contenders = || {
                    let (mut client, dir) = (client.clone(), format!("{dir}/"));
                    async move {
                        let opts = GetOptions::new().with_prefix().with_count_only();
                        Ok(usize::try_from(client.get(dir, Some(opts)).await?.count())?)
                    }
                };
                // Go creates both sessions before timing; EtcdSource creates its
                // session on the first acquire, so one untimed cycle on each does
                // the same. Go unlocks B after receiving its time.
                let run = measure(&a, &b, &[&a, &b], false, contenders, &dir, args).await?;
                // Like Go's deferred Session.Close: revoke the leases.
                bounded("close A", a.close()).await??;
                bounded("close B", b.close()).await??;
                Ok(run)
            }
            Cluster::Zk { hosts, .. } => {
                let connect = || async {
                    let cfg = ZkConfig::new(hosts.iter().cloned(), path)?
                        .ttl(ZK_SESSION_TIMEOUT)
                        .request_timeout(OP_TIMEOUT);
                    ZkSource::connect(cfg).await
                };
                // Two sources, so A and B have separate sessions, like Curator's
                // clients a and b; both connect before timing, as there.
                let (a, b) = (connect().await?, connect().await?);
                // Curator's waitChildren: list the lock znode's children with A's client.
                let zk = a.client().await?;
                let contenders = || {
                    let (zk, dir) = (zk.clone(), dir.clone());
                    async move { Ok(zk.list_children(&dir).await?.len()) }
                };
                // Curator warms up A only (which also creates the parents), and
                // B releases in its own thread right after taking t1.
                measure(&a, &b, &[&a], true, contenders, &dir, args).await
                // Dropping the sources closes their sessions, like Curator's close().
            }
        }
    }
}

/// The anchor program of a backend.
struct Anchor {
    /// Its language, naming its side in the report.
    side: &'static str,
    /// Its name in messages.
    name: &'static str,
    /// How to start it: the program and its leading arguments.
    command: Vec<PathBuf>,
}

impl Anchor {
    fn find(backend: Backend) -> Result<Anchor, BoxError> {
        let bin = cache_dir().join("bin");
        let (side, name, file, installer) = match backend {
            Backend::Etcd(_) => (
                "go",
                "etcd-mutex bench",
                bin.join("etcd-mutex"),
                "go-interop.sh",
            ),
            Backend::Zk(_) => (
                "java",
                "curator-mutex bench",
                bin.join("curator-mutex.jar"),
                "curator-interop.sh",
            ),
            Backend::Kube => return Err("kube runs its own bench (kube_bench)".into()),
        };
        if !file.is_file() {
            return Err(format!(
                "{} is missing: run bash scripts/install/{installer}",
                file.display()
            )
            .into());
        }
        let command = match backend {
            Backend::Etcd(_) => vec![file],
            Backend::Zk(_) => vec!["java".into(), "-jar".into(), file],
            Backend::Kube => vec![file],
        };
        Ok(Anchor {
            side,
            name,
            command,
        })
    }

    /// Runs the anchor's bench once on the lock `path` and reads its one
    /// JSON result line.
    async fn bench(&self, cluster: &Cluster, path: &str, args: &Args) -> Result<Run, BoxError> {
        let mut cmd = tokio::process::Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .arg("bench")
            .args(cluster.anchor_flags(path))
            .args([
                "--iterations",
                &args.iterations.to_string(),
                "--settle-ms",
                &args.settle.as_millis().to_string(),
            ]);
        if let Cluster::Zk { .. } = cluster {
            let ms = ZK_SESSION_TIMEOUT.as_millis().to_string();
            cmd.args(["--session-timeout-ms", &ms]);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true); // a timed-out run must not outlive us
                                 // Generous: each handover iteration costs the settle time plus a few round trips.
        let per_iteration = args.settle + Duration::from_millis(500);
        let limit = Duration::from_secs(30) + per_iteration * u32::try_from(args.iterations)?;
        let name = self.name;
        let out = tokio::time::timeout(limit, cmd.output())
            .await
            .map_err(|_| format!("{name} did not finish within {limit:?}"))??;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let events: Vec<serde_json::Value> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if let Some(e) = events.iter().find(|e| e["event"] == "error") {
            let why = e["error"].as_str().unwrap_or("unknown error");
            return Err(format!("{name}: {why}").into());
        }
        let Some(b) = events
            .iter()
            .find(|e| e["event"] == "bench")
            .filter(|_| out.status.success())
        else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(format!("{name} failed ({}): {}", out.status, stderr.trim()).into());
        };
        let stats = |metric: &str| -> Result<Stats, String> {
            let field = |suffix: &str| {
                let key = format!("{metric}_{suffix}_us");
                b[&key]
                    .as_f64()
                    .ok_or_else(|| format!("{name}: no {key} in {b}"))
            };
            Ok(Stats {
                median_us: field("median")?,
                p90_us: field("p90")?,
            })
        };
        Ok(Run {
            uncontended: stats("uncontended")?,
            handover: stats("handover")?,
        })
    }
}

/// The Rust side's timed part, the same for every backend: `warm_up` each
/// take one untimed acquire and release; then `args.iterations` uncontended
/// cycles on A; then as many handovers from A to B. `count` tells how many
/// contenders are queued on the lock `dir`. With `b_releases_in_waiter`, B
/// releases in its own task right after taking t1 (Curator); otherwise the
/// main task does, after receiving t1 (Go).
async fn measure<S, C, F>(
    a: &S,
    b: &S,
    warm_up: &[&S],
    b_releases_in_waiter: bool,
    count: C,
    dir: &str,
    args: &Args,
) -> Result<Run, BoxError>
where
    S: FencingSource + Clone + 'static,
    C: Fn() -> F,
    F: Future<Output = Result<usize, BoxError>>,
{
    let resource = ResourceName::new(RESOURCE)?;
    let opts = AcquireOptions::new().wait(LOCK_TIMEOUT);
    for s in warm_up {
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

    // One handover: A holds, B queues behind it, A releases; the time from
    // just before A's release is sent until B's acquire returns.
    let mut hand = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        let held = a.acquire(&resource, &opts).await?;
        let waiter = {
            let (b, resource, opts) = (b.clone(), resource.clone(), opts.clone());
            // The time is taken in the task, as the anchors' waiter does, so
            // the measurement does not include waking this task.
            tokio::spawn(async move {
                let granted = b.acquire(&resource, &opts).await?;
                let t1 = Instant::now();
                if !b_releases_in_waiter {
                    return Ok((Some(granted), t1));
                }
                bounded("release B", granted.release()).await??;
                Ok::<_, BoxError>((None, t1))
            })
        };
        // B is queued once its node exists; settling then lets its watch on
        // its predecessor get established (etcd-mutex's bench.go explains
        // why Go needs > 100 ms).
        wait_contenders(&count, 2, dir).await?;
        tokio::time::sleep(args.settle).await;
        let t0 = Instant::now();
        bounded("release A", held.release()).await??;
        let (granted, t1) = tokio::time::timeout(LOCK_TIMEOUT, waiter)
            .await
            .map_err(|_| format!("B was not granted within {LOCK_TIMEOUT:?} of A's release"))???;
        if let Some(granted) = granted {
            bounded("release B", granted.release()).await??;
        }
        hand.push(t1.saturating_duration_since(t0));
    }
    Ok(Run {
        uncontended: stats(unc),
        handover: stats(hand),
    })
}

/// Polls (bounded, like the anchors) until `n` contenders are queued on `dir`.
async fn wait_contenders<C, F>(count: &C, n: usize, dir: &str) -> Result<(), BoxError>
where
    C: Fn() -> F,
    F: Future<Output = Result<usize, BoxError>>,
{
    let deadline = Instant::now() + OP_TIMEOUT;
    loop {
        let found = bounded("count waiters", count()).await??;
        if found >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "waiter did not queue within {OP_TIMEOUT:?} ({found} contenders on {dir:?})"
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Median and p90 by nearest rank, exactly as the anchors' stats (whole µs).
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

fn print_run(side: &str, round: usize, r: &Run) {
    println!(
        "round {round} {side:<4}: uncontended {:>6.0} / {:>6.0} µs, handover {:>6.0} / {:>6.0} µs (median / p90)",
        r.uncontended.median_us, r.uncontended.p90_us, r.handover.median_us, r.handover.p90_us
    );
}

/// Prints the header of the figures table; `side` names the anchor.
fn print_header(side: &str) {
    println!();
    println!(
        "{:<22} {:>12} {:>10} {:>17} {:>14} {:>14}",
        "metric",
        "rust median",
        "rust p90",
        format!("{side} median"),
        format!("{side} p90"),
        format!("rust/{side}")
    );
}

/// Prints one table row and returns the ratio of the medians.
fn print_metric(name: &str, rust: Stats, theirs: Stats) -> f64 {
    let ratio = rust.median_us / theirs.median_us;
    println!(
        "{name:<22} {:>9.0} µs {:>7.0} µs {:>14.0} µs {:>11.0} µs {ratio:>14.2}",
        rust.median_us, rust.p90_us, theirs.median_us, theirs.p90_us
    );
    ratio
}
