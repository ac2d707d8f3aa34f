//! A lock holder in its own process, for the pause test: it takes the lock,
//! writes once through the EtcdGate, then waits until the file named by GO
//! exists (the test freezes it with SIGSTOP meanwhile) and writes again with
//! the same, by then stale, token.
//!
//! Usage: etcd-holder URL RESOURCE GATE_PREFIX GO_FILE
//! Prints: GRANTED <token> / WROTE <token> / READY / WROTE <token> or
//! REJECTED <presented> <highest>.

use std::path::PathBuf;
use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, FencingToken, Gate, ResourceName};
use fencing_etcd::{EtcdGate, EtcdSource};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, resource, gate_prefix, go] = args.as_slice() else {
        return Err("usage: etcd-holder URL RESOURCE GATE_PREFIX GO_FILE".into());
    };
    let source = EtcdSource::from_url(url).await?;
    let resource = ResourceName::new(resource.as_str())?;
    let gate = source.gate(gate_prefix.as_str())?;
    let opts = AcquireOptions::new().timeout(Duration::from_secs(20));
    let grant = source.acquire(&resource, &opts).await?;
    println!("GRANTED {}", grant.token());
    write(&gate, &resource, grant.token()).await?;
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
    write(&gate, &resource, grant.token()).await?;
    std::mem::forget(grant);
    Ok(())
}

async fn write(gate: &EtcdGate, resource: &ResourceName, token: FencingToken) -> Result<(), Error> {
    match gate.admit(resource, token).await {
        Ok(()) => println!("WROTE {token}"),
        Err(Error::Stale { presented, highest }) => println!("REJECTED {presented} {highest}"),
        Err(e) => return Err(e),
    }
    Ok(())
}
