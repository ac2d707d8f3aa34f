//! Gate benchmarks (figures, not a pass/fail check):
//!
//! 1. a guarded UPDATE (`FencedUpdate`, fence column) against the same plain
//!    UPDATE on the same PostgreSQL server, in one run, alternating rounds:
//!    the ratio is the price of fencing a write (target <= 1.1);
//! 2. `MemoryGate::admit_now` per call on one thread (target < 50 ns) and
//!    on 2 threads sharing the gate.
//!
//! Usage: gate-bench [--iterations N] (default 2000 updates per round)

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::{FencingToken, MemoryGate, ResourceName};
use fencing_integration::pg_server::PgServer;
use fencing_postgres::FencedUpdate;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const ROUNDS: usize = 4;
const ADMITS: u64 = 5_000_000;

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

async fn run() -> Res<()> {
    let iterations: usize = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => 2000,
        [flag, n] if flag == "--iterations" => n.parse()?,
        _ => return Err("usage: gate-bench [--iterations N]".into()),
    };
    postgres(iterations).await?;
    memory_gate();
    Ok(())
}

/// Median latency of the guarded and the plain UPDATE, rounds alternating
/// which goes first so neither always runs on a warmer server.
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
    let guarded = FencedUpdate::new("fenced", "id", "fence", &["balance"])?
        .prepare(&client)
        .await?;
    let (mut plain_medians, mut guarded_medians) = (Vec::new(), Vec::new());
    let mut token = 0u64;
    for round in 0..ROUNDS {
        for guarded_turn in if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        } {
            let mut samples = Vec::with_capacity(iterations);
            for i in 0..iterations {
                let balance = i as i64;
                let started = Instant::now();
                if guarded_turn {
                    token += 1;
                    guarded
                        .execute(&client, &1i64, &[&balance], FencingToken::new(token))
                        .await?;
                } else {
                    client.execute(&plain, &[&1i64, &balance]).await?;
                }
                samples.push(started.elapsed());
            }
            let m = median(&mut samples);
            println!(
                "round {} {:<7}: median {:>6.1} µs",
                round + 1,
                if guarded_turn { "guarded" } else { "plain" },
                micros(m)
            );
            if guarded_turn {
                guarded_medians.push(m)
            } else {
                plain_medians.push(m)
            }
        }
    }
    let (p, g) = (median(&mut plain_medians), median(&mut guarded_medians));
    println!(
        "gate-bench: PostgreSQL {} guarded UPDATE {:.1} µs vs plain {:.1} µs, ratio {:.2} (target <= 1.1, N={iterations} x {ROUNDS} rounds)",
        pg.major_version(),
        micros(g),
        micros(p),
        g.as_secs_f64() / p.as_secs_f64()
    );
    Ok(())
}

/// ns per `admit_now` on one thread, then with 2 threads on one gate.
fn memory_gate() {
    let gate = Arc::new(MemoryGate::new());
    let r = ResourceName::new("bench").expect("valid name");
    gate.admit_now(&r, FencingToken::new(1))
        .expect("first admit");
    let single = time_admits(&gate, &r, 0, ADMITS);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (gate, r) = (&gate, &r);
            s.spawn(move || time_admits(gate, r, t, ADMITS / 2));
        }
    });
    let shared = started.elapsed().as_nanos() as f64 / ADMITS as f64;
    println!(
        "gate-bench: MemoryGate admit {single:.1} ns/call on 1 thread (target < 50), {shared:.1} ns/call of wall time with 2 threads sharing one resource"
    );
}

/// Admits increasing tokens (every call raises the mark: the slow path of
/// the compare-and-swap, not a retry); returns ns per call.
fn time_admits(gate: &MemoryGate, r: &ResourceName, offset: u64, n: u64) -> f64 {
    let started = Instant::now();
    for i in 0..n {
        // Two threads interleave tokens, so some calls are refused as stale.
        let _ = black_box(gate.admit_now(r, FencingToken::new(2 + i * 2 + offset)));
    }
    started.elapsed().as_nanos() as f64 / n as f64
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
