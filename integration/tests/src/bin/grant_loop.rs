//! Acquires and releases one LocalSource resource in a tight loop, printing
//! each token once its grant has returned. The crash test kills it with
//! SIGKILL at random moments, mostly in the middle of granting.
//!
//! Usage: `grant-loop DIR RESOURCE [ROUNDS]`

use std::io::Write;
use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, LocalSource, ResourceName};

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
    let source = LocalSource::open(dir)?;
    let resource = ResourceName::new(resource)?;
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
