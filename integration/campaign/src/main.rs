//! `campaign`: a seeded fault campaign against a real cluster whose members
//! and clients live in network namespaces; the recorded history is checked
//! for the fencing safety properties and drawn as an HTML time line.
//!
//! ```text
//! campaign run --backend zk --seconds 60 [--seed N] [--out DIR]
//! campaign run --backend zk --until-floors --min-grants 300 --min-faults 40 --seconds 300
//! campaign run --backend zk --seconds 600 --faults depose-leader,kill-leader
//! ```
//! Exit status: 0 when every property held, 1 on a violation (the seed and
//! the offending events are printed), 2 when the campaign could not run, 3
//! when every property held but the run fell short of a floor (too little
//! exercised to prove much).
//! Needs root (namespaces, iptables) and the cluster binaries that
//! scripts/test.sh installs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use fencing_campaign::kube::AdminAction;
use fencing_campaign::nemesis::parse_faults;
use fencing_campaign::run::{self, lock_names, Config, Workload, MAX_LOCKS};
use fencing_campaign::storage;
use fencing_campaign::{admin, client_process, fence_run};
use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::namespaced::Kind;
use fencing_harness::zk::ensemble::ZkVersion;

#[derive(Parser)]
#[command(about = "Fault campaign: real partitions, pauses and kills; the history checked")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, Debug)]
enum Backend {
    /// LocalSource on a shared directory (client and clock faults only)
    Local,
    /// ZooKeeper 3.9
    Zk,
    /// ZooKeeper 3.8
    Zk38,
    /// etcd 3.6
    Etcd,
    /// etcd 3.4
    Etcd34,
    /// kube-apiserver on three etcd 3.6 members
    Kube,
    /// PostgreSQL: a primary and its synchronous streaming standby
    Pg,
}

#[derive(clap::Args)]
struct RunArgs {
    #[arg(long, value_enum)]
    backend: Backend,
    /// How long faults are injected (with --until-floors: at most)
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Stop injecting faults once the run has made --min-grants grants,
    /// injected --min-faults faults and drawn every fault kind of its
    /// lanes; --seconds is then the cap (a run stopped by the cap short
    /// of a floor fails as too little exercised, not as a violation)
    #[arg(long)]
    until_floors: bool,
    /// Replays a schedule; a random one is picked and printed otherwise
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Spread the clients over this many locks (client i takes lock
    /// i % N): more locks, more grants per hour for a soak
    #[arg(long, default_value_t = 2, value_parser = locks_in_range)]
    locks: usize,
    /// Fail when the run makes fewer grants than this
    #[arg(long, default_value_t = 0)]
    min_grants: usize,
    /// Fail when the nemesis injects fewer faults than this
    #[arg(long, default_value_t = 0)]
    min_faults: usize,
    /// Where the history, the time line and the logs go
    #[arg(long)]
    out: Option<PathBuf>,
    /// What the clients do: take the lock, campaign as LeaderElector
    /// candidates (`LeaderElector::run` with gated work), run `fence run`
    /// whose command writes with FENCING_TOKEN, or (kube) stand in two
    /// elections of the apiserver's coordinated leader election at once
    #[arg(long, value_enum, default_value_t = Workload::Lock)]
    workload: Workload,
    /// The last client is an anchor instead (lock workload): Go's
    /// concurrency.Mutex on etcd, Curator's InterProcessMutex on ZooKeeper,
    /// client-go's leader election on Kubernetes, on the same lock; it
    /// hears of a lost lease late, and its stale writes must be refused
    #[arg(long)]
    anchor: bool,
    /// Every storage write also goes to a PostgreSQL server through
    /// `FencedUpdate` (a fence column), which the nemesis crashes and
    /// pauses
    #[arg(long)]
    postgres: bool,
    /// Draw only these fault kinds (comma-separated, named as the report
    /// names them, e.g. depose-leader,partition-leader), each of one of
    /// the backend's lanes (cluster, client, storage); a lane left without
    /// a kind draws nothing, and --until-floors waits for these kinds only
    #[arg(long, value_name = "KIND[,KIND...]")]
    faults: Option<String>,
}

#[derive(clap::Args)]
struct ClientArgs {
    #[arg(long)]
    name: String,
    #[arg(long)]
    source: String,
    #[arg(long)]
    gate: String,
    #[arg(long)]
    lock: String,
    #[arg(long)]
    ttl_ms: u64,
    #[arg(long)]
    seed: u64,
    /// Be a LeaderElector candidate rather than a lock user
    #[arg(long)]
    elect: bool,
    /// Run `fence run` over and over rather than use the library
    #[arg(long, conflicts_with = "elect")]
    fence_run: bool,
    /// Ignore the grant's loss and write through the whole hold
    #[arg(long, conflicts_with_all = ["elect", "fence_run"])]
    careless: bool,
    /// Also stand in a second coordinated election, on this lock (the
    /// source URL makes the client a coordinated candidate)
    #[arg(long, conflicts_with_all = ["elect", "fence_run", "careless"])]
    coordinated: Option<String>,
}

impl From<ClientArgs> for client_process::ClientOptions {
    fn from(a: ClientArgs) -> Self {
        client_process::ClientOptions {
            name: a.name,
            source: a.source,
            gate: a.gate,
            lock: a.lock,
            ttl: Duration::from_millis(a.ttl_ms),
            seed: a.seed,
            elect: a.elect,
            fence_run: a.fence_run,
            careless: a.careless,
            coordinated: a.coordinated,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run one campaign
    Run(RunArgs),
    /// Checks a recorded history again (durability, which needs the
    /// storage's contents, is not checked)
    Check {
        /// A run's history.jsonl
        history: PathBuf,
        /// Fail when a lock goes longer than this without a grant after a
        /// fault heals (fault-free time)
        #[arg(long)]
        heal_bound_ms: Option<u64>,
    },
    /// One client (started by `run` inside its namespace)
    #[command(hide = true)]
    Client(ClientArgs),
    /// The command of a `fence run` client: holds with FENCING_TOKEN
    #[command(hide = true)]
    Child {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        lock: String,
        #[arg(long)]
        hold_ms: u64,
        /// Ignore SIGTERM
        #[arg(long)]
        stubborn: bool,
    },
    /// The storage the clients write to: a FileGate and one register per
    /// lock in --dir (started by `run`)
    #[command(hide = true)]
    Storage {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Compacts an etcd member's history up to now and defragments it
    /// (started by `run` inside the member's namespace)
    #[command(hide = true)]
    Maintain {
        #[arg(long)]
        endpoint: String,
    },
    /// Asks the etcd leader at --endpoint to hand leadership to the member
    /// named --to (run inside the leader's namespace)
    #[command(hide = true)]
    MoveLeader {
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        to: String,
    },
    /// Deletes the key or node of each lock's holder through the member at
    /// --endpoint (run inside its namespace)
    #[command(hide = true)]
    DeleteHolders {
        #[arg(long)]
        endpoint: String,
        /// ZooKeeper, not etcd
        #[arg(long)]
        zookeeper: bool,
        /// The run's --locks
        #[arg(long, value_parser = locks_in_range)]
        locks: usize,
    },
    /// Asks the apiserver to be ready, or deletes the campaign's Leases
    /// (started by `run` inside the apiserver's namespace)
    #[command(hide = true)]
    KubeAdmin {
        #[arg(long)]
        kubeconfig: PathBuf,
        #[arg(long, value_enum)]
        action: AdminAction,
        /// The run's --locks
        #[arg(long, value_parser = locks_in_range)]
        locks: usize,
    },
    /// Prints a holder of the campaign's locks, or `none` as soon as there
    /// is none (waiting at most --within-ms)
    #[command(hide = true)]
    Inspect {
        #[arg(long)]
        source: String,
        #[arg(long, default_value_t = 0)]
        within_ms: u64,
        /// The run's --locks
        #[arg(long, value_parser = locks_in_range)]
        locks: usize,
        /// The process ids of the clients the run killed
        #[arg(long, value_delimiter = ',')]
        killed: Vec<u32>,
    },
}

/// `--locks`: from 1 to [`MAX_LOCKS`].
fn locks_in_range(arg: &str) -> Result<usize, String> {
    match arg.parse::<usize>() {
        Ok(n) if (1..=MAX_LOCKS).contains(&n) => Ok(n),
        _ => Err(format!("expected a number of locks from 1 to {MAX_LOCKS}")),
    }
}

/// With `RUST_LOG` set, a client logs the library to its stderr (its log
/// file in the run's folder), each line stamped with the monotonic
/// nanoseconds the history's `at_ns` uses, so that a loss or a grant can
/// be laid against the history and the members' logs.
fn log_on_the_history_clock() {
    struct HistoryClock;
    impl tracing_subscriber::fmt::time::FormatTime for HistoryClock {
        fn format_time(
            &self,
            w: &mut tracing_subscriber::fmt::format::Writer<'_>,
        ) -> std::fmt::Result {
            write!(w, "{}", fencing_campaign::client::monotonic_ns())
        }
    }
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_timer(HistoryClock)
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .try_init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => campaign(args).await,
            Command::Check {
                history,
                heal_bound_ms,
            } => check_history(&history, heal_bound_ms.map(Duration::from_millis)),
            Command::Client(args) => {
                log_on_the_history_clock();
                match client_process::run_client(args.into()).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("{e}");
                        ExitCode::from(2)
                    }
                }
            }
            Command::Child {
                socket,
                lock,
                hold_ms,
                stubborn,
            } => child_main(socket, lock, hold_ms, stubborn).await,
            Command::Storage { dir } => match storage::serve(&dir).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("storage: {e}");
                    ExitCode::from(2)
                }
            },
            Command::Inspect {
                source,
                within_ms,
                locks,
                killed,
            } => {
                let within = Duration::from_millis(within_ms);
                match admin::inspect(&source, within, &lock_names(locks), &killed).await {
                    Ok(answer) => {
                        println!("{answer}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("inspect: {e}");
                        ExitCode::from(2)
                    }
                }
            }
            Command::Maintain { endpoint } => {
                helper_answer("maintain", admin::maintain(&endpoint)).await
            }
            Command::MoveLeader { endpoint, to } => move_leader(endpoint, to).await,
            Command::DeleteHolders {
                endpoint,
                zookeeper,
                locks,
            } => delete_holders(endpoint, zookeeper, &lock_names(locks)).await,
            Command::KubeAdmin {
                kubeconfig,
                action,
                locks,
            } => kube_admin(kubeconfig, action, &lock_names(locks)).await,
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

async fn campaign(args: RunArgs) -> ExitCode {
    let RunArgs {
        backend,
        seconds,
        until_floors,
        seed,
        clients,
        locks,
        out,
        min_grants,
        min_faults,
        workload,
        anchor,
        postgres,
        faults,
    } = args;
    let (kind, ttl) = kind_and_ttl(backend);
    if let Err(e) = workload.fits(kind, locks, anchor) {
        eprintln!("campaign: {e}");
        return ExitCode::from(2);
    }
    let parsed = faults
        .as_deref()
        .map(|list| parse_faults(list, kind, postgres));
    let allowed = match parsed.transpose() {
        Ok(allowed) => allowed,
        Err(e) => {
            eprintln!("campaign: --faults: {e}");
            return ExitCode::from(2);
        }
    };
    let seed = seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        t.map(|d| d.as_nanos() as u64).unwrap_or(1) ^ u64::from(std::process::id())
    });
    let length = match until_floors {
        true => format!("until its floors, at most {seconds} s"),
        false => format!("{seconds} s"),
    };
    let only = faults.map_or_else(String::new, |list| format!(", only {list}"));
    println!(
        "campaign seed {seed} ({backend:?}, {workload:?}, {length}{only}; \
         replay with --seed {seed})"
    );
    let out = out.unwrap_or_else(|| std::env::temp_dir().join(format!("campaign-{seed}")));
    // Members and clients run in other directories: a relative --out would
    // name a different place for each.
    let out = match std::path::absolute(&out) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("campaign: --out {}: {e}", out.display());
            return ExitCode::from(2);
        }
    };
    let cfg = Config {
        kind,
        duration: Duration::from_secs(seconds),
        until_floors,
        seed,
        clients,
        locks,
        out,
        ttl,
        min_grants,
        min_faults,
        workload,
        anchor,
        postgres,
        faults: allowed,
    };
    let outcome = tokio::select! {
        r = run::run(cfg) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted (everything started was removed)".into()),
    };
    match outcome {
        Ok(outcome) => {
            println!("{}", outcome.report);
            if let Some(holder) = &outcome.leftover_holder {
                println!(
                    "hygiene: FAIL, the lock is still held after every client stopped: {holder}"
                );
            } else {
                println!("hygiene: pass (no holder left)");
            }
            for exit in &outcome.member_exits {
                println!("member down: {exit}");
            }
            for shortfall in &outcome.shortfalls {
                println!("too little exercised: {shortfall}");
            }
            println!("faults injected for {:.0} s", outcome.faulted.as_secs_f64());
            let (report_starts, history_starts) = &outcome.clock_origins;
            println!(
                "history: {} (UTC, the members' log time: the report's t = 0 ms is {report_starts}, \
                 the history's at_ns = 0 is {history_starts})",
                outcome.history.display(),
            );
            println!("timeline: {}", outcome.timeline.display());
            if !outcome.held() {
                println!("VIOLATION with seed {seed}");
                ExitCode::from(1)
            } else if !outcome.passed() {
                println!(
                    "TOO LITTLE EXERCISED with seed {seed}: every property held, \
                     but the run fell short of a floor (a slow machine? raise --seconds)"
                );
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("campaign: {e} (seed {seed})");
            ExitCode::from(2)
        }
    }
}

/// The backend's kind and its clients' session or lease length.
fn kind_and_ttl(backend: Backend) -> (Kind, Duration) {
    match backend {
        Backend::Local => (Kind::Local, Duration::from_secs(1)),
        Backend::Kube => (Kind::Kube, Duration::from_secs(2)),
        Backend::Pg => (Kind::Pg, Duration::from_secs(2)),
        Backend::Zk => (Kind::Zk(ZkVersion::V3_9), Duration::from_secs(1)),
        Backend::Zk38 => (Kind::Zk(ZkVersion::V3_8), Duration::from_secs(1)),
        Backend::Etcd => (Kind::Etcd(EtcdVersion::V3_6), Duration::from_secs(2)),
        Backend::Etcd34 => (Kind::Etcd(EtcdVersion::V3_4), Duration::from_secs(2)),
    }
}

async fn child_main(socket: PathBuf, lock: String, hold_ms: u64, stubborn: bool) -> ExitCode {
    let hold = Duration::from_millis(hold_ms);
    match fence_run::run_child(&socket, lock, hold, client_process::WRITE_EVERY, stubborn).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("child: {e}");
            ExitCode::from(2)
        }
    }
}

fn check_history(path: &std::path::Path, heal_bound: Option<Duration>) -> ExitCode {
    use fencing_campaign::{checker, history};
    let events = match history::read_jsonl(path) {
        Ok(events) => events,
        Err(e) => {
            eprintln!("campaign check: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let facts = checker::BackendFacts {
        heal_bound,
        ..checker::BackendFacts::default()
    };
    let report = checker::check_with(&events, facts);
    println!("{report}");
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

async fn move_leader(endpoint: String, to: String) -> ExitCode {
    let work = async {
        fencing_harness::etcd::cluster::move_leader(&endpoint, &to).await?;
        Ok::<_, String>(format!("leadership moved to {to}"))
    };
    helper_answer("move-leader", work).await
}

async fn delete_holders(endpoint: String, zookeeper: bool, locks: &[String]) -> ExitCode {
    let work = admin::delete_holders(&endpoint, zookeeper, locks);
    helper_answer("delete-holders", work).await
}

async fn kube_admin(kubeconfig: PathBuf, action: AdminAction, locks: &[String]) -> ExitCode {
    let work = fencing_campaign::kube::admin(&kubeconfig, action, locks);
    helper_answer("kube-admin", work).await
}

/// A hidden helper's answer to `run`, which reads its output: what `work`
/// did on stdout, or why it failed (within 8 s) on stderr and exit 2.
async fn helper_answer<E: std::fmt::Display>(
    name: &str,
    work: impl std::future::Future<Output = Result<String, E>>,
) -> ExitCode {
    match tokio::time::timeout(Duration::from_secs(8), work).await {
        Ok(Ok(done)) => {
            println!("{done}");
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            eprintln!("{name}: {e}");
            ExitCode::from(2)
        }
        Err(_) => {
            eprintln!("{name}: no answer within 8 s");
            ExitCode::from(2)
        }
    }
}
