//! From etcd's Go `concurrency` package: an election whose leader writes
//! its data in etcd. In Go:
//!
//! ```go
//! session, _ := concurrency.NewSession(cli, concurrency.WithTTL(15))
//! election := concurrency.NewElection(session, "/fencing/scheduler")
//! election.Campaign(ctx, "node-a")
//! cli.Txn(ctx).If(/* nothing ties the write to the term */).
//!     Then(clientv3.OpPut("scheduler/plan", "v1")).Commit()
//! election.Resign(ctx)
//! ```
//!
//! Here each put is one txn that applies only while this term's key still
//! has its create revision (the term's token), so a leader paused past
//! its session's TTL cannot overwrite its successor.
//!
//! Run: cargo run -p fencing-examples --bin from-etcd-concurrency -- [ETCD_URL]

use std::time::Duration;

use fencing::election::{ElectionConfig, LeaderElector};
use fencing::etcd::etcd_client::TxnOp;
use fencing::etcd::EtcdSource;
use fencing::{FencingSource, ResourceName};

#[tokio::main]
async fn main() -> fencing::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or("etcd://127.0.0.1:2379/fencing".into());
    // NewSession(cli, WithTTL(ttl)): the session's TTL is the election's
    // lease duration (15 s by default, above its 10 s renew deadline).
    let source = EtcdSource::from_url(&url).await?;
    // NewElection(session, pfx): the keys are the ones Go's election
    // writes, so Go and Rust candidates can share one election.
    let config = ElectionConfig::new("node-a");
    let elector = LeaderElector::new(source.clone(), ResourceName::new("scheduler")?, config)?;

    // Campaign(ctx, val)
    let leadership = elector.campaign().await?;
    println!("leading with token {}", leadership.token());
    for round in 1..=3 {
        let put = TxnOp::put("scheduler/plan", format!("v{round}"), None);
        // Err(Lost) when a newer term holds the election: nothing written.
        source.guarded_txn(leadership.grant(), vec![put]).await?;
        println!("wrote plan v{round}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Resign(ctx)
    leadership.resign().await?;
    source.close().await
}
