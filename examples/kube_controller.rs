//! A kube-runtime `Controller` that runs only while this replica leads,
//! with every write of a reconcile carrying the term's fencing token.
//!
//! When leadership may be lost the controller shuts down gracefully: it
//! takes no new reconciles, lets the ones in flight finish (their writes
//! carry the old token, so the storage's gate refuses them if a newer
//! leader wrote), and the replica campaigns again. Ctrl-C resigns the term
//! first, so the next leader need not wait out the lease.
//!
//! Run (in a pod, or with a kubeconfig): cargo run -p fencing-examples --bin kube-controller

use std::sync::Arc;
use std::time::Duration;

use fencing::election::{ElectionConfig, LeaderElector};
use fencing::kube::{KubeLeaseSource, LeaseOptions};
use fencing::{default_holder_identity, FencingSource, FencingToken, ResourceName};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "my-app";

/// What every reconcile of one term sees.
struct Term {
    token: FencingToken,
}

async fn reconcile(config_map: Arc<ConfigMap>, term: Arc<Term>) -> Result<Action, kube::Error> {
    // Send `term.token` with every write this makes (a gate in your store,
    // a `FencedUpdate`, a `Fencing-Token` header), never the bare value.
    println!(
        "reconcile {:?} with token {}",
        config_map.metadata.name, term.token
    );
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_: Arc<ConfigMap>, _: &kube::Error, _: Arc<Term>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::try_default().await?;
    // The source id is the cluster's (namespace kube-system's UID).
    let source =
        KubeLeaseSource::from_client(client.clone(), NAMESPACE, LeaseOptions::default()).await?;
    let election = ResourceName::new("my-controller")?;
    let elector = LeaderElector::new(
        source.clone(),
        election,
        ElectionConfig::new(default_holder_identity()),
    )?;

    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        }
    });

    while !stop.is_cancelled() {
        let leadership = tokio::select! {
            won = elector.campaign() => won?,
            () = stop.cancelled() => break,
        };
        // The controller stops taking reconciles once leadership may be
        // lost or on Ctrl-C, whichever comes first.
        let term_over = stop.child_token();
        let watch = leadership.context();
        let over = term_over.clone();
        let watching = tokio::spawn(async move {
            tokio::select! {
                reason = watch.lost() => println!("leadership may be lost: {reason:?}"),
                () = over.cancelled() => {}
            }
            over.cancel();
        });
        let term = Arc::new(Term {
            token: leadership.token(),
        });
        Controller::new(
            Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE),
            watcher::Config::default(),
        )
        .graceful_shutdown_on(term_over.clone().cancelled_owned())
        .run(reconcile, error_policy, term)
        .for_each(|_| async {})
        .await;
        term_over.cancel();
        watching.await?;
        leadership.resign().await?;
    }
    source.close().await?;
    Ok(())
}
