//! Leases that kube-apiserver's coordinated leader election (KEP-4355)
//! manages. The harness's apiserver runs with the CoordinatedLeaderElection
//! feature gate, without which it drops `strategy` and `preferredHolder`
//! from every write. An administrator's client writes the fields here the
//! way the election controller would.

use std::time::{Duration, Instant};

use fencing::{AcquireOptions, Error, FencingSource, LossReason, ResourceName};
use fencing_integration::kubernetes::fixture::{KubeFixture, TEST_LEASE};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;

fn r(name: &str) -> ResourceName {
    ResourceName::new(name).unwrap()
}

/// A Lease with a strategy is refused at once, even by a waiting acquire,
/// with an error that names the strategy, and is left as it was; a holder
/// whose Lease the controller starts to manage (strategy, and a
/// preferredHolder naming someone else) yields: `lost()` fires with
/// `Yielded` while the Lease still names it, and once released and handed
/// back to plain candidates, the next grant has a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_the_coordinated_election_are_left_to_it() {
    let f = KubeFixture::start().await;
    let leases: Api<Lease> = Api::namespaced(f.cluster(|c| c.admin_client()), f.namespace());
    let (a, b) = (f.source().await, f.source().await);

    let managed = Lease {
        metadata: ObjectMeta {
            name: Some("managed".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("kube-controller-manager-1".into()),
            lease_duration_seconds: Some(15),
            strategy: Some("OldestEmulationVersion".into()),
            ..LeaseSpec::default()
        }),
    };
    let written = leases
        .create(&PostParams::default(), &managed)
        .await
        .unwrap();
    let wait = AcquireOptions::new().timeout(Duration::from_secs(20));
    let started = Instant::now();
    match a.acquire(&r("managed"), &wait).await {
        Err(Error::ManagedElsewhere { resource, manager }) => {
            assert_eq!(resource.as_str(), "managed");
            assert!(manager.contains("OldestEmulationVersion"), "{manager}");
        }
        other => panic!("a Lease with a strategy: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused at once, not after the wait"
    );
    let after = leases.get("managed").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        written.metadata.resource_version
    );

    let moved = r("moved");
    let grant = a.acquire(&moved, &wait).await.unwrap();
    // The election controller taking the Lease over: a strategy, and the
    // candidate it prefers (the apiserver refuses the second without the first).
    let ask = serde_json::json!({ "spec": {
        "strategy": "OldestEmulationVersion",
        "preferredHolder": "someone-else",
    } });
    leases
        .patch("moved", &PatchParams::default(), &Patch::Merge(&ask))
        .await
        .unwrap();
    let reason = tokio::time::timeout(TEST_LEASE, grant.lost())
        .await
        .expect("the holder yields within a few renewals");
    assert_eq!(reason, LossReason::Yielded);
    assert!(
        a.validate(&grant).await.unwrap(),
        "it yielded while the Lease still named it"
    );
    let token = grant.token();
    grant.release().await.unwrap();
    assert!(matches!(
        b.acquire(&moved, &wait).await,
        Err(Error::ManagedElsewhere { .. })
    ));
    // Handed back to plain candidates: the next grant has a higher token.
    let back = serde_json::json!({ "spec": { "strategy": null, "preferredHolder": null } });
    leases
        .patch("moved", &PatchParams::default(), &Patch::Merge(&back))
        .await
        .unwrap();
    let next = b.acquire(&moved, &wait).await.unwrap();
    assert!(next.token() > token, "{} after {token}", next.token());
    next.release().await.unwrap();
}
