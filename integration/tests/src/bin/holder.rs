//! A lock holder in its own process, for the pause tests. It takes the lock
//! and reports its first write, then waits until the file named by GO exists
//! (the test freezes it with SIGSTOP meanwhile) and sends a second write
//! with the same, by then stale, token. The writes go to the test, which
//! plays the storage and runs the gates: the check lives where the data
//! lives, not in the client.
//!
//! Usage: holder URL RESOURCE GO_FILE [HOLDER] (any URL `fencing::connect`
//! opens; HOLDER is the holder identity, the source's default without it)
//!
//! With `--drop-and-close` for GO_FILE it takes the lock, prints `GRANTED
//! <token>`, drops the grant, closes the source and exits at once: what a
//! `main` that returns right after its work does.
//! Prints: `GRANTED <token>` / `WRITE <token>` / `READY` / `WRITE <token>`

use std::path::PathBuf;
use std::time::Duration;

use fencing::{AcquireOptions, ResourceName};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (url, resource, go, holder) = match args.as_slice() {
        [url, resource, go] => (url, resource, go, None),
        [url, resource, go, holder] => (url, resource, go, Some(holder.clone())),
        _ => return Err("usage: holder URL RESOURCE GO_FILE [HOLDER]".into()),
    };
    let source = fencing::connect(url).await?;
    let resource = ResourceName::new(resource.as_str())?;
    if go == "--drop-and-close" {
        let grant = source.lock(resource.as_str()).await?;
        println!("GRANTED {}", grant.token());
        drop(grant);
        source.close().await?;
        return Ok(());
    }
    // Long enough for a waiting candidate to outlast a killed holder's
    // 15 s lease (failover-bench).
    let mut options = AcquireOptions::new().wait(Duration::from_secs(60));
    if let Some(holder) = holder {
        options = options.holder(holder);
    }
    let grant = source.acquire(&resource, &options).await?;
    println!("GRANTED {}", grant.token());
    println!("WRITE {}", grant.token());
    println!("READY");
    let go = PathBuf::from(go);
    for _ in 0..1200 {
        if go.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Deliberately no look at grant.is_live(): this is the paused client
    // that still believes in its lease.
    println!("WRITE {}", grant.token());
    std::mem::forget(grant);
    Ok(())
}
