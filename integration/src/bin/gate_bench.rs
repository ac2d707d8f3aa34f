//! Gate benchmarks (figures, not a pass/fail check):
//!
//! 1. a guarded UPDATE (`FencedUpdate`, fence column) against the same plain
//!    UPDATE on the same PostgreSQL server, in one run, alternating rounds:
//!    the ratio is the price of fencing a write (target <= 1.1);
//! 2. `MemoryGate::admit_now` (unbound) and `admit_from_now` (bound) per
//!    call on one thread (target < 50 ns) and on 2 threads sharing the gate;
//! 3. `ValidatingGate` over a `MemoryGate` with a `LocalSource` against the
//!    plain `MemoryGate`: the first admit of each grant (a raise, which
//!    costs the validating gate one `holder()` lookup) and retries at the
//!    mark (no lookup).
//!
//! Usage: gate-bench [--iterations N] (default 2000 updates per round)

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::{
    AcquireOptions, FencingSource, FencingToken, Gate, LocalSource, MemoryGate, ResourceName,
    SourceId, ValidatingGate,
};
use fencing_integration::postgres::server::PgServer;
use fencing_postgres::FencedUpdate;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const ROUNDS: usize = 4;
const ADMITS: u64 = 5_000_000;
/// Grants whose first admit is timed on each gate.
const GRANTS: usize = 300;
/// Retries at the mark timed on each gate.
const RETRIES: u32 = 200_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gate-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Guarded against plain PostgreSQL UPDATEs, and the in-memory gates.
#[derive(clap::Parser)]
struct Args {
    /// Timed statements per kind and connection count.
    #[arg(long, default_value = "2000")]
    iterations: std::num::NonZeroUsize,
}

async fn run() -> Res<()> {
    let iterations = <Args as clap::Parser>::parse().iterations.get();
    postgres(iterations).await?;
    memory_gate();
    validating_gate().await?;
    Ok(())
}

/// The statements timed against each other.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// `UPDATE plain SET balance = $2 WHERE id = $1`.
    Plain,
    /// The bare conditional `UPDATE ... WHERE id = $1 AND fence <= $3`
    /// that `FencedUpdate` sent before it reported refusals in the same
    /// statement (a refusal then cost a second query; here none is refused).
    Bare,
    /// `FencedUpdate`: lock, decide and report in one statement.
    Guarded,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Bare => "bare",
            Kind::Guarded => "guarded",
        }
    }
}

/// Median latency of the guarded, the bare fenced and the plain UPDATE,
/// rounds rotating which goes first so none always runs on a warmer server.
async fn postgres(iterations: usize) -> Res<()> {
    let pg = PgServer::start().await?;
    let client = pg.client().await?;
    client
        .batch_execute(
            "CREATE TABLE plain (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL);
             CREATE TABLE fenced (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0);
             INSERT INTO plain VALUES (1, 0); INSERT INTO fenced (id, balance) VALUES (1, 0);",
        )
        .await?;
    let plain = client
        .prepare("UPDATE plain SET balance = $2 WHERE id = $1")
        .await?;
    let bare = client
        .prepare("UPDATE fenced SET balance = $2, fence = $3 WHERE id = $1 AND fence <= $3")
        .await?;
    let guarded = FencedUpdate::new("fenced", "id", "fence", &["balance"])?
        .prepare(&client)
        .await?;
    let kinds = [Kind::Plain, Kind::Bare, Kind::Guarded];
    let mut medians: Vec<Vec<Duration>> = vec![Vec::new(); kinds.len()];
    let mut token = 0i64;
    for round in 0..ROUNDS {
        for turn in 0..kinds.len() {
            let k = (turn + round) % kinds.len();
            let kind = kinds[k];
            let mut samples = Vec::with_capacity(iterations);
            for i in 0..iterations {
                let balance = i as i64;
                token += 1;
                let started = Instant::now();
                match kind {
                    Kind::Plain => client.execute(&plain, &[&1i64, &balance]).await?,
                    Kind::Bare => client.execute(&bare, &[&1i64, &balance, &token]).await?,
                    Kind::Guarded => {
                        let t = FencingToken::new(token as u64);
                        guarded.execute(&client, &1i64, &[&balance], t).await?
                    }
                };
                samples.push(started.elapsed());
            }
            let m = median(&mut samples);
            println!(
                "round {} {:<7}: median {:>6.1} µs",
                round + 1,
                kind.name(),
                micros(m)
            );
            medians[k].push(m);
        }
    }
    let [p, b, g] = [0, 1, 2].map(|k| median(&mut medians[k]));
    println!(
        "gate-bench: PostgreSQL {} guarded UPDATE {:.1} µs vs plain {:.1} µs, ratio {:.2} (target <= 1.1); bare fenced UPDATE (no report) {:.1} µs, ratio {:.2} (N={iterations} x {ROUNDS} rounds)",
        pg.major_version(),
        micros(g),
        micros(p),
        g.as_secs_f64() / p.as_secs_f64(),
        micros(b),
        b.as_secs_f64() / p.as_secs_f64(),
    );
    Ok(())
}

/// ns per admit on one thread, then with 2 threads on one gate; unbound
/// (`admit_now`) and bound (`admit_from_now`).
fn memory_gate() {
    for bound in [false, true] {
        let gate = Arc::new(MemoryGate::new());
        let r = ResourceName::new("bench").expect("valid name");
        let source = bound.then(|| SourceId::new("etcd:bench"));
        admit(&gate, &r, source.as_ref(), 1).expect("first admit");
        let single = time_admits(&gate, &r, source.as_ref(), 0, ADMITS);
        let started = Instant::now();
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let (gate, r, source) = (&gate, &r, source.as_ref());
                s.spawn(move || time_admits(gate, r, source, t, ADMITS / 2));
            }
        });
        let shared = started.elapsed().as_nanos() as f64 / ADMITS as f64;
        println!(
            "gate-bench: MemoryGate {} {single:.1} ns/call on 1 thread (target < 50), {shared:.1} ns/call of wall time with 2 threads sharing one resource",
            if bound { "admit_from (bound)" } else { "admit (unbound)" }
        );
    }
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

/// Admits increasing tokens (every call raises the mark: the slow path of
/// the compare-and-swap, not a retry); returns ns per call.
fn time_admits(
    gate: &MemoryGate,
    r: &ResourceName,
    source: Option<&SourceId>,
    offset: u64,
    n: u64,
) -> f64 {
    let started = Instant::now();
    for i in 0..n {
        // Two threads interleave tokens, so some calls are refused as stale.
        let _ = black_box(admit(gate, r, source, 2 + i * 2 + offset));
    }
    started.elapsed().as_nanos() as f64 / n as f64
}

/// The price of asking the source before a raise: median first admit of a
/// grant and mean retry, on the plain and the validating gate.
async fn validating_gate() -> Res<()> {
    let dir = tempfile::tempdir()?;
    let source = Arc::new(LocalSource::open(dir.path())?);
    let plain = MemoryGate::new();
    let validating = ValidatingGate::new(MemoryGate::new(), source.clone());
    let r = ResourceName::new("bench")?;
    let (mut plain_raises, mut validating_raises) = (Vec::new(), Vec::new());
    for _ in 0..GRANTS {
        let grant = source.acquire(&r, &AcquireOptions::new()).await?;
        plain_raises.push(timed(plain.admit_grant(grant.info())).await?);
        validating_raises.push(timed(validating.admit_grant(grant.info())).await?);
        grant.release().await?;
    }
    let grant = source.acquire(&r, &AcquireOptions::new()).await?;
    plain.admit_grant(grant.info()).await?;
    validating.admit_grant(grant.info()).await?;
    let plain_retry = time_retries(&plain, grant.info()).await?;
    let validating_retry = time_retries(&validating, grant.info()).await?;
    grant.release().await?;
    let (p, v) = (median(&mut plain_raises), median(&mut validating_raises));
    println!(
        "gate-bench: ValidatingGate(MemoryGate, LocalSource) first admit of a grant {:.1} µs vs plain MemoryGate {:.2} µs (median of {GRANTS}); retry at the mark {validating_retry:.0} ns vs {plain_retry:.0} ns per call",
        micros(v),
        micros(p)
    );
    Ok(())
}

async fn timed(admit: impl std::future::Future<Output = fencing::Result<()>>) -> Res<Duration> {
    let started = Instant::now();
    admit.await?;
    Ok(started.elapsed())
}

/// ns per retried admit of the same grant.
async fn time_retries(gate: &dyn Gate, grant: &fencing::GrantInfo) -> Res<f64> {
    let started = Instant::now();
    for _ in 0..RETRIES {
        gate.admit_grant(black_box(grant)).await?;
    }
    Ok(started.elapsed().as_nanos() as f64 / f64::from(RETRIES))
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
