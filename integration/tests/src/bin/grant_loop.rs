//! Acquires and releases one LocalSource resource in a tight loop, printing
//! each token once its grant has returned. The crash test kills it with
//! SIGKILL at random moments, mostly in the middle of granting.
//!
//! With `--gate`, admits rising tokens to a FileGate in DIR instead,
//! printing each once its admit has returned (the durability test traces
//! both).
//!
//! Usage: `grant-loop DIR RESOURCE [ROUNDS] [--gate]`

use std::io::Write;
use std::time::Duration;

use fencing::{
    AcquireOptions, FencingSource, FencingToken, FileGate, Gate, LocalSource, ResourceName,
};

const MAX_ROUNDS: usize = 100_000;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(resource)) = (args.next(), args.next()) else {
        return Err("usage: grant-loop DIR RESOURCE [ROUNDS]".into());
    };
    let rounds = match args.next() {
        Some(n) => n.parse()?,
        None => MAX_ROUNDS,
    };
    let resource = ResourceName::new(resource)?;
    if args.next().as_deref() == Some("--gate") {
        return admit_loop(&dir, &resource, rounds).await;
    }
    let source = LocalSource::open(dir)?;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_millis(300))
        .wait(Duration::from_secs(20));
    let mut out = std::io::stdout().lock();
    for _ in 0..rounds {
        let grant = source.acquire(&resource, &opts).await?;
        writeln!(out, "{}", grant.token())?;
        out.flush()?;
        grant.release().await?;
    }
    Ok(())
}

/// Admits tokens 1..=rounds to a FileGate kept in `dir`.
async fn admit_loop(
    dir: &str,
    resource: &ResourceName,
    rounds: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let gate = FileGate::open(std::path::Path::new(dir).join("marks"))?;
    let mut out = std::io::stdout().lock();
    for token in 1..=u64::try_from(rounds)? {
        gate.admit_any_source(resource, FencingToken::new(token))
            .await?;
        writeln!(out, "{token}")?;
        out.flush()?;
    }
    Ok(())
}
