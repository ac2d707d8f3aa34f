//! From client-go's `leaderelection`: a controller that leads through a
//! Lease. In Go:
//!
//! ```go
//! lock := &resourcelock.LeaseLock{
//!     LeaseMeta:  metav1.ObjectMeta{Name: "scheduler", Namespace: "my-app"},
//!     Client:     client.CoordinationV1(),
//!     LockConfig: resourcelock.ResourceLockConfig{Identity: id},
//! }
//! leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
//!     Lock: lock, LeaseDuration: 15 * time.Second,
//!     RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
//!     ReleaseOnCancel: true,
//!     Callbacks: leaderelection.LeaderCallbacks{
//!         OnStartedLeading: run,  // no token: a paused leader's writes land
//!         OnStoppedLeading: func() { klog.Info("stopped leading") },
//!         OnNewLeader:      func(id string) { klog.Info("leader: ", id) },
//!     },
//! })
//! ```
//!
//! Here the Lease is the one client-go writes (Go and Rust candidates share
//! one election), with the same defaults; the term's token goes with every
//! write the leader makes, for the storage's gate to check.
//!
//! Run: cargo run -p fencing-examples --bin from-client-go -- 'kube://my-app?kubeconfig=PATH'

use std::time::Duration;

use fencing::election::{ElectionConfig, LeaderElector};
use fencing::{default_holder_identity, FencingSource, ResourceName};

#[tokio::main]
async fn main() -> fencing::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or("kube://my-app?kubeconfig=.compose/kube/kubeconfig.yaml".into());
    // LeaseLock in namespace my-app; the Lease is named after the election.
    let source = fencing::connect(&url).await?;
    // LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s: the defaults.
    let config = ElectionConfig::new(default_holder_identity());
    let elector = LeaderElector::new(source.clone(), ResourceName::new("scheduler")?, config)?;

    // OnNewLeader
    let mut observer = elector.observe();
    let watching = tokio::spawn(async move {
        while let Ok(Some(leader)) = observer.changed().await {
            println!("leader: {} (term {})", leader.identity, leader.token);
        }
    });

    // RunOrDie with ReleaseOnCancel: the work is dropped the moment
    // leadership may be lost (OnStoppedLeading), and on Ctrl-C the term is
    // resigned so the next leader need not wait out the lease.
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let finished = elector
        .run_until(shutdown, |leader| async move {
            // OnStartedLeading(ctx): a real controller loops until told to stop.
            for round in 1..=3 {
                println!("reconcile {round} with token {}", leader.token());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await?;
    if finished.is_none() {
        println!("resigned on Ctrl-C");
    }
    watching.abort();
    source.close().await
}
