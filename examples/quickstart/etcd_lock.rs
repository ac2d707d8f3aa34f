use std::time::Duration;

use fencing::etcd::etcd_client::TxnOp;
use fencing::etcd::EtcdSource;
use fencing::{AcquireOptions, FencingSource, ResourceName};

#[tokio::main]
async fn main() -> fencing::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or("etcd://127.0.0.1:2379/fencing".into());
    let value = args.next().unwrap_or("balance=100".into());

    let source = EtcdSource::from_url(&url).await?;
    let ledger = ResourceName::new("ledger")?;
    let wait = AcquireOptions::new().wait(Duration::from_secs(30));
    let grant = source.acquire(&ledger, &wait).await?;
    println!("holding {ledger} with token {}", grant.token());

    // The work that computes the value. A pause here (a GC, a VM
    // migration, SIGSTOP) can outlive the lease while we still hold
    // `grant` and believe in it.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // One step: etcd applies the put only if the lock key still carries
    // this grant's token. Checking first and writing after would be two
    // steps, and a pause between them is the failure fencing exists for.
    let put = TxnOp::put("ledger/value", value.as_str(), None);
    match source.guarded_txn(&grant, vec![put]).await {
        Ok(_) => println!("wrote {value} with token {}", grant.token()),
        // Someone newer holds the lock: nothing was written. Re-acquire
        // and redo the work (`fencing::fenced` does that for you).
        Err(e) if e.needs_reacquire() => println!("refused: {e}"),
        Err(e) => return Err(e),
    }
    grant.release().await?;
    source.close().await
}
