//! A writer that takes a lock, writes to a file-backed store that checks
//! the token, and handles a rejection by re-acquiring instead of carrying
//! on. The backend is chosen by the URL alone.
//!
//! Run: cargo run -p fencing-examples --example fenced_write -- [URL] [STORE_DIR]
//!   URL defaults to a LocalSource in the temp dir; try etcd://127.0.0.1:2379/fencing.

use std::time::Duration;

use fencing::{AcquireOptions, Error, ResourceName};
use fencing_examples::FileStore;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let tmp = std::env::temp_dir();
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| format!("local://{}", tmp.join("fencing-example-locks").display()));
    let store = FileStore::open(
        args.next()
            .map_or_else(|| tmp.join("fencing-example-store"), Into::into),
    )?;

    let source = fencing::connect(&url).await?;
    let ledger = ResourceName::new("ledger")?;
    let options = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(30));

    // `fenced` re-acquires and redoes the work when the store refuses the
    // token (someone newer wrote first) or the grant is lost meanwhile.
    let token = fencing::fenced(&source, &ledger)
        .options(options)
        .attempts(3)
        .run(|grant| {
            let store = &store;
            let ledger = &ledger;
            async move {
                store
                    .write(ledger, grant.token, &grant.holder, "balance=100")
                    .await?;
                Ok(grant.token)
            }
        })
        .await?;
    println!("wrote balance=100 with token {token}");
    println!("store now holds: {:?}", store.read(&ledger)?);
    Ok(())
}
