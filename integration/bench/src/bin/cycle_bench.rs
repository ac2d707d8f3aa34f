//! cycle-bench: what one uncontended etcd lock cycle (acquire + release)
//! costs, three ways on one real 3-member cluster:
//!
//! - `rust`: `EtcdSource::acquire` then `Grant::release`;
//! - `go`: Go's `concurrency.Mutex` Lock then Unlock (`etcd-mutex cycles`);
//! - `floor`: the two commits any such lock needs, sent raw with etcd-client
//!   to the raft leader (a write sent to a follower costs a forwarding hop
//!   and the follower's apply): one txn that creates the key on a lease and
//!   reads the oldest key, and one delete.
//!
//! The sides take turns in blocks of `--block` cycles (the order rotates
//! every block), so a shared machine's drift hits all three alike. Between
//! blocks the members' `grpc_server_msg_received_total` counters are read,
//! so every request a side sends is counted by method, unary or stream
//! message. Each run reports each side's median and the ratios; the summary
//! gives their min / median / max over `--runs` runs. Figures are printed,
//! not asserted: this is a benchmark, not a test.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_etcd::etcd_client::{
    Client, Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_harness::cache::cached_bin;
use fencing_harness::etcd::cluster::{EtcdCluster, EtcdVersion};
use fencing_harness::member::MemberCluster;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use fencing_bench::{bounded, main_with, median, min_median_max, next_event, BoxError, OP_TIMEOUT};

/// Sessions outlive a run: no renewal is ever late.
const TTL: Duration = Duration::from_secs(60);
const METRIC: &str = "grpc_server_msg_received_total";

#[derive(clap::Parser)]
#[command(about = "Uncontended etcd lock cycles: EtcdSource, Go's Mutex and the two-commit floor")]
struct Args {
    /// Runs; the summary gives min / median / max over them.
    #[arg(long, default_value = "5")]
    runs: NonZeroUsize,
    /// Blocks per side per run.
    #[arg(long, default_value = "10")]
    blocks: NonZeroUsize,
    /// Cycles per block.
    #[arg(long, default_value = "20")]
    block: NonZeroUsize,
    /// The etcd release: 3.6 or 3.4.
    #[arg(long, default_value = "3.6")]
    version: String,
    /// Also write one CSV row per run and side here.
    #[arg(long)]
    csv: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Side {
    Rust,
    Go,
    Floor,
}

const SIDES: [Side; 3] = [Side::Rust, Side::Go, Side::Floor];

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Rust => "rust",
            Side::Go => "go",
            Side::Floor => "floor",
        }
    }
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    main_with("cycle-bench", run(args))
}

async fn run(args: Args) -> Result<(), BoxError> {
    let version = match args.version.as_str() {
        "3.6" => EtcdVersion::V3_6,
        "3.4" => EtcdVersion::V3_4,
        v => return Err(format!("--version {v:?}: want 3.6 or 3.4").into()),
    };
    let go_program = cached_bin("etcd-mutex");
    if !go_program.exists() {
        return Err(format!(
            "{} is missing: run bash scripts/install/go-interop.sh",
            go_program.display()
        )
        .into());
    }
    // Dropping the cluster (also on `?`) kills the members.
    let cluster = EtcdCluster::start(version, 3).await?;
    let mut sides = Sides::start(&cluster, &go_program).await?;
    let (runs, blocks, block) = (args.runs.get(), args.blocks.get(), args.block.get());
    println!(
        "cycle-bench: etcd {}, 3 members, {runs} runs of {blocks} blocks x {block} cycles per side",
        args.version
    );
    let mut csv = args.csv.as_ref().map(std::fs::File::create).transpose()?;
    if let Some(f) = csv.as_mut() {
        writeln!(f, "run,side,median_us,p90_us,cycles")?;
    }
    let mut requests: BTreeMap<Side, BTreeMap<String, f64>> = BTreeMap::new();
    let mut ratios: (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        let mut times: BTreeMap<Side, Vec<Duration>> = BTreeMap::new();
        let mut counters = cluster.metric_by(METRIC, Some("grpc_method")).await?;
        for b in 0..blocks {
            for k in 0..SIDES.len() {
                let side = SIDES[(b + k + run) % SIDES.len()];
                let took = sides.block(side, block).await?;
                times.entry(side).or_default().extend(took);
                let now = cluster.metric_by(METRIC, Some("grpc_method")).await?;
                let sent = requests.entry(side).or_default();
                for (method, v) in &now {
                    *sent.entry(method.clone()).or_default() +=
                        v - counters.get(method).unwrap_or(&0.0);
                }
                counters = now;
            }
        }
        let stats: BTreeMap<Side, (f64, f64)> =
            times.into_iter().map(|(s, t)| (s, median_p90(t))).collect();
        let med = |s: Side| stats[&s].0;
        let (vs_go, vs_floor) = (
            med(Side::Rust) / med(Side::Go),
            med(Side::Rust) / med(Side::Floor),
        );
        println!(
            "run {run}: median rust {:.0} µs, go {:.0} µs, floor {:.0} µs; rust/go {vs_go:.3}, rust/floor {vs_floor:.3}",
            med(Side::Rust),
            med(Side::Go),
            med(Side::Floor)
        );
        if let Some(f) = csv.as_mut() {
            for (side, (median, p90)) in &stats {
                writeln!(
                    f,
                    "{run},{},{median:.0},{p90:.0},{}",
                    side.name(),
                    blocks * block
                )?;
            }
        }
        ratios.0.push(vs_go);
        ratios.1.push(vs_floor);
    }
    sides.close().await?;

    let cycles = (runs * blocks * block) as f64;
    print_requests(&requests, cycles);
    let at_or_below = ratios.0.iter().filter(|r| **r <= 1.0).count();
    println!(
        "cycle-bench: rust/go {} (at or below 1.0 in {at_or_below} of {runs} runs); rust/floor {} (etcd {})",
        spread(&ratios.0),
        spread(&ratios.1),
        args.version
    );
    Ok(())
}

/// The three sides, each on its own session, its own lock.
struct Sides {
    rust: EtcdSource,
    resource: ResourceName,
    go: GoCycles,
    floor: Floor,
}

impl Sides {
    async fn start(cluster: &EtcdCluster, go_program: &std::path::Path) -> Result<Sides, BoxError> {
        let cfg = EtcdConfig::new(cluster.endpoints(), "/cycle-rust")?
            .ttl(TTL)
            .request_timeout(OP_TIMEOUT);
        let mut sides = Sides {
            rust: EtcdSource::connect(cfg).await?,
            resource: ResourceName::new("bench")?,
            go: GoCycles::start(go_program, &cluster.endpoints().join(",")).await?,
            floor: Floor::start(cluster.member_client(cluster.leader().await?).await?).await?,
        };
        // Each side's session exists before anything is timed or counted.
        for side in SIDES {
            sides.block(side, 1).await?;
        }
        Ok(sides)
    }

    /// `n` timed cycles of one side.
    async fn block(&mut self, side: Side, n: usize) -> Result<Vec<Duration>, BoxError> {
        match side {
            Side::Go => self.go.block(n).await,
            Side::Rust => {
                let opts = AcquireOptions::new().wait(OP_TIMEOUT);
                let mut took = Vec::with_capacity(n);
                for _ in 0..n {
                    let t0 = Instant::now();
                    let grant = self.rust.acquire(&self.resource, &opts).await?;
                    bounded("release", grant.release()).await??;
                    took.push(t0.elapsed());
                }
                Ok(took)
            }
            Side::Floor => {
                let mut took = Vec::with_capacity(n);
                for _ in 0..n {
                    took.push(self.floor.cycle().await?);
                }
                Ok(took)
            }
        }
    }

    async fn close(self) -> Result<(), BoxError> {
        bounded("close", self.rust.close()).await??;
        self.go.close().await?;
        let mut client = self.floor.client;
        bounded("revoke", client.lease_revoke(self.floor.lease)).await??;
        Ok(())
    }
}

/// Go's Mutex in `etcd-mutex cycles`, one block per stdin line.
struct GoCycles {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl GoCycles {
    async fn start(program: &std::path::Path, endpoints: &str) -> Result<GoCycles, BoxError> {
        let mut child = tokio::process::Command::new(program)
            .args([
                "cycles",
                "--endpoints",
                endpoints,
                "--prefix",
                "/cycle-go/bench",
            ])
            .args(["--ttl", &TTL.as_secs().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut go = GoCycles {
            child,
            stdin,
            lines,
        };
        next_event(&mut go.lines, "etcd-mutex", "ready", OP_TIMEOUT).await?;
        Ok(go)
    }

    async fn block(&mut self, n: usize) -> Result<Vec<Duration>, BoxError> {
        self.stdin.write_all(format!("{n}\n").as_bytes()).await?;
        let limit = OP_TIMEOUT * u32::try_from(n)?;
        let done = next_event(&mut self.lines, "etcd-mutex", "cycles", limit).await?;
        let us = done["us"]
            .as_array()
            .ok_or("no \"us\" in the cycles event")?;
        us.iter()
            .map(|v| {
                v.as_u64()
                    .map(Duration::from_micros)
                    .ok_or_else(|| format!("bad duration {v}").into())
            })
            .collect()
    }

    /// EOF on stdin: Go closes its session and exits.
    async fn close(mut self) -> Result<(), BoxError> {
        drop(self.stdin);
        let status = tokio::time::timeout(OP_TIMEOUT, self.child.wait()).await??;
        if !status.success() {
            return Err(format!("etcd-mutex cycles exited with {status}").into());
        }
        Ok(())
    }
}

/// The two commits, raw: no session reuse logic, no watch, no checks.
struct Floor {
    client: Client,
    lease: i64,
}

const FLOOR_DIR: &str = "/cycle-floor/bench/";
const FLOOR_KEY: &str = "/cycle-floor/bench/floor";

impl Floor {
    async fn start(mut client: Client) -> Result<Floor, BoxError> {
        let ttl = i64::try_from(TTL.as_secs())? * 10;
        let lease = bounded("lease grant", client.lease_grant(ttl, None)).await??;
        Ok(Floor {
            client,
            lease: lease.id(),
        })
    }

    async fn cycle(&mut self) -> Result<Duration, BoxError> {
        let oldest = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let create = Txn::new()
            .when([Compare::create_revision(FLOOR_KEY, CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    FLOOR_KEY,
                    "",
                    Some(PutOptions::new().with_lease(self.lease)),
                ),
                TxnOp::get(FLOOR_DIR, Some(oldest)),
            ]);
        let t0 = Instant::now();
        bounded("floor txn", self.client.txn(create)).await??;
        bounded("floor delete", self.client.delete(FLOOR_KEY, None)).await??;
        Ok(t0.elapsed())
    }
}

/// Requests per cycle by method, one column per side.
fn print_requests(requests: &BTreeMap<Side, BTreeMap<String, f64>>, cycles: f64) {
    println!();
    println!("requests per cycle (gRPC messages received by the members, by method)");
    println!("{:<16} {:>8} {:>8} {:>8}", "method", "rust", "go", "floor");
    let methods: std::collections::BTreeSet<&String> =
        requests.values().flat_map(|m| m.keys()).collect();
    for method in methods {
        let per = |s: Side| requests.get(&s).and_then(|m| m.get(method)).unwrap_or(&0.0) / cycles;
        if SIDES.iter().all(|s| per(*s) < 0.005) {
            continue;
        }
        println!(
            "{method:<16} {:>8.2} {:>8.2} {:>8.2}",
            per(Side::Rust),
            per(Side::Go),
            per(Side::Floor)
        );
    }
    let total = |s: Side| requests.get(&s).map_or(0.0, |m| m.values().sum::<f64>()) / cycles;
    println!(
        "{:<16} {:>8.2} {:>8.2} {:>8.2}",
        "total",
        total(Side::Rust),
        total(Side::Go),
        total(Side::Floor)
    );
}

/// "min a, median b, max c" of a few ratios.
fn spread(v: &[f64]) -> String {
    let (min, median, max) = min_median_max(v.to_vec());
    format!("min {min:.3}, median {median:.3}, max {max:.3}")
}

/// Median and p90 (nearest rank) in µs.
fn median_p90(mut d: Vec<Duration>) -> (f64, f64) {
    d.sort();
    let us: Vec<f64> = d.iter().map(|d| d.as_micros() as f64).collect();
    let p90 = us[((0.9 * us.len() as f64).ceil() as usize).saturating_sub(1)];
    (median(us), p90)
}
