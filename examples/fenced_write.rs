//! A writer that takes a lock, writes through a durable gate, and handles a
//! rejection by re-acquiring instead of carrying on.
//!
//! Run: cargo run -p fencing-examples --example fenced_write -- [STATE_DIR]

use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, FileGate, Gate, LocalSource, ResourceName};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let state = std::env::args()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    let source = LocalSource::open(state.join("fencing-example-locks"))?;
    // The gate belongs to the storage; here the storage is this process.
    let gate = FileGate::open(state.join("fencing-example.gate"))?;
    let ledger = ResourceName::new("ledger")?;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .timeout(Duration::from_secs(30));

    for attempt in 1..=3 {
        let grant = source.acquire(&ledger, &opts).await?;
        match gate.admit(&ledger, grant.token()).await {
            Ok(()) => {
                println!("attempt {attempt}: wrote with token {}", grant.token());
                return grant.release().await;
            }
            // Someone with a newer grant wrote first: start over.
            Err(e) if e.needs_reacquire() => println!("attempt {attempt}: {e}; re-acquiring"),
            Err(e) => return Err(e),
        }
    }
    Err(Error::Config("gave up after 3 attempts".into()))
}
