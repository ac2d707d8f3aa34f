//! From Apache Curator's `InterProcessMutex`: a lock whose holder writes
//! its data in ZooKeeper. In Java:
//!
//! ```java
//! InterProcessMutex mutex = new InterProcessMutex(client, "/fencing/ledger");
//! if (mutex.acquire(10, TimeUnit.SECONDS)) {
//!     try { client.setData().forPath("/ledger", bytes); }  // not tied to the lock
//!     finally { mutex.release(); }
//! }
//! ```
//!
//! Here the lock nodes are the ones `InterProcessMutex` writes (Java and
//! Rust contenders share one lock), a wait that runs out is
//! `Error::Contended` instead of `false`, and the write is one multi that
//! first checks the holder's lock node: a holder whose session expired
//! while it was paused cannot overwrite the next holder's data.
//!
//! Run: cargo run -p fencing-examples --bin from-curator -- [ZK_URL]

use std::time::Duration;

use fencing::zookeeper::zookeeper_client::{Acls, CreateMode, Error as ZkError};
use fencing::zookeeper::ZkSource;
use fencing::{AcquireOptions, Error, FencingSource, ResourceName};

const DATA: &str = "/ledger-data";

#[tokio::main]
async fn main() -> fencing::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or("zk://127.0.0.1:2181/fencing".into());
    let source = ZkSource::from_url(&url).await?;
    let ledger = ResourceName::new("ledger")?;

    // mutex.acquire(10, SECONDS)
    let wait = AcquireOptions::new().wait(Duration::from_secs(10));
    let grant = match source.acquire(&ledger, &wait).await {
        Ok(grant) => grant,
        Err(Error::Contended { holder, .. }) => {
            println!("still held by {holder:?} after 10 s");
            return source.close().await;
        }
        Err(e) => return Err(e),
    };
    println!("holding {ledger} with token {}", grant.token());

    // The data node, made once (Curator: creatingParentsIfNeeded()).
    let create = CreateMode::Persistent.with_acls(Acls::anyone_all());
    match source.client().await?.create(DATA, b"", &create).await {
        Ok(_) | Err(ZkError::NodeExists) => {}
        Err(e) => return Err(Error::backend("create the data node", e)),
    }
    // setData, in one multi with the check of the holder's lock node.
    let data = format!("balance=100 token={}", grant.token());
    source
        .guarded_multi(&grant, |multi| {
            multi.add_set_data(DATA, data.as_bytes(), None)
        })
        .await?;
    println!("wrote {data}");

    // mutex.release()
    grant.release().await?;
    source.close().await
}
