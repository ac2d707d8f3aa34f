//! pg-bench: PgSource beside the pattern users run today,
//! `pg_try_advisory_lock`, on one real PostgreSQL server.
//!
//! - cycle: one uncontended acquire + release (`PgSource::try_acquire` and
//!   `Grant::release`; `pg_try_advisory_lock` and `pg_advisory_unlock`),
//!   the sides taking turns in blocks so drift hits both alike;
//! - failover: the holder's connections are closed (as the kernel closes
//!   them when its process is killed) while a second client waits; the time
//!   until the waiter holds. An advisory lock ends with its session, at
//!   once; a PgSource lock runs out at its TTL (the price of a lease that a
//!   paused holder cannot lose without knowing).
//!
//! Figures are printed, with the ratios, not asserted.

use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use fencing::postgres::{PgConfig, PgSource};
use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_bench::{bounded, main_with, median, BoxError};
use fencing_harness::net::proxy::Proxy;
use fencing_harness::postgres::server::PgServer;

#[derive(clap::Parser)]
#[command(about = "PgSource vs pg_try_advisory_lock: lock cycles and failover")]
struct Args {
    /// Blocks per side.
    #[arg(long, default_value = "10")]
    blocks: NonZeroUsize,
    /// Cycles per block.
    #[arg(long, default_value = "50")]
    block: NonZeroUsize,
    /// Failovers per side.
    #[arg(long, default_value = "3")]
    failovers: NonZeroUsize,
    /// PgSource's lease in the failover runs, in seconds.
    #[arg(long, default_value = "2")]
    ttl: f64,
}

fn main() -> ExitCode {
    let args: Args = clap::Parser::parse();
    main_with("pg-bench", run(args))
}

fn url(port: u16, ttl: f64) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres?table=bench_locks&ttl={ttl}")
}

async fn run(args: Args) -> Result<(), BoxError> {
    let server = PgServer::start().await?;
    let port = server.port();
    PgSource::create_schema(&PgConfig::from_url(&url(port, 15.0))?).await?;
    let source = PgSource::connect_url(&url(port, 15.0)).await?;
    let advisory = server.client().await?;
    let r = ResourceName::new("cycle")?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for b in 0..args.blocks.get() {
        for side in [b % 2, 1 - b % 2] {
            let t = Instant::now();
            for _ in 0..args.block.get() {
                if side == 0 {
                    let g = bounded(
                        "try_acquire",
                        source.try_acquire(&r, &AcquireOptions::new()),
                    )
                    .await??
                    .ok_or("the cycle lock was held")?;
                    bounded("release", g.release()).await??;
                } else {
                    let took: bool = advisory
                        .query_one("SELECT pg_try_advisory_lock(7)", &[])
                        .await?
                        .get(0);
                    if !took {
                        return Err("the advisory lock was held".into());
                    }
                    advisory
                        .execute("SELECT pg_advisory_unlock(7)", &[])
                        .await?;
                }
            }
            let per_cycle = t.elapsed().as_secs_f64() * 1e3 / args.block.get() as f64;
            if side == 0 { &mut ours } else { &mut theirs }.push(per_cycle);
        }
    }
    let (o, a) = (median(ours), median(theirs));
    println!(
        "cycle (acquire + release), median of {} blocks of {}:",
        args.blocks, args.block
    );
    println!("  PgSource              {o:8.3} ms");
    println!("  pg_try_advisory_lock  {a:8.3} ms");
    println!("  ratio PgSource/advisory {:.2}", o / a);

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..args.failovers.get() {
        ours.push(failover_pg(port, args.ttl, i).await?);
        theirs.push(failover_advisory(&server, i).await?);
    }
    let (o, a) = (median(ours), median(theirs));
    println!(
        "failover after the holder's connections close, median of {}:",
        args.failovers
    );
    println!("  PgSource (TTL {} s)    {o:8.1} ms", args.ttl);
    println!("  pg_advisory_lock      {a:8.1} ms");
    println!("  ratio PgSource/advisory {:.0}", o / a);
    Ok(())
}

/// The holder behind a proxy whose connections are closed and refused from
/// then on; the time until a waiter straight to the server holds.
async fn failover_pg(port: u16, ttl: f64, i: usize) -> Result<f64, BoxError> {
    let proxy = Proxy::start(format!("127.0.0.1:{port}").parse()?).await?;
    let holder = PgSource::connect_url(&url(proxy.addr().port(), ttl)).await?;
    let waiter = PgSource::connect_url(&url(port, ttl)).await?;
    let r = ResourceName::new(format!("failover-{i}"))?;
    let held = holder.acquire(&r, &AcquireOptions::new()).await?;
    proxy.set_blackhole(true);
    proxy.cut_connections();
    let t = Instant::now();
    let next = bounded_long(waiter.acquire(&r, &AcquireOptions::new())).await??;
    let took = t.elapsed().as_secs_f64() * 1e3;
    next.release().await?;
    drop(held);
    Ok(took)
}

async fn failover_advisory(server: &PgServer, i: usize) -> Result<f64, BoxError> {
    let proxy = Proxy::start(format!("127.0.0.1:{}", server.port()).parse()?).await?;
    let config = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        proxy.addr().port()
    );
    let (holder, conn) = tokio_postgres::connect(&config, tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(conn);
    let key = 1000 + i as i64;
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await?;
    let waiter = server.client().await?;
    let waiting = tokio::spawn(async move {
        waiter
            .execute("SELECT pg_advisory_lock($1)", &[&key])
            .await?;
        Ok::<_, tokio_postgres::Error>(Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.set_blackhole(true);
    proxy.cut_connections();
    let t = Instant::now();
    let granted = bounded_long(waiting).await???;
    driver.abort();
    Ok(granted.saturating_duration_since(t).as_secs_f64() * 1e3)
}

async fn bounded_long<T>(fut: impl std::future::Future<Output = T>) -> Result<T, BoxError> {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .map_err(|_| "a failover took longer than 60 s".into())
}
