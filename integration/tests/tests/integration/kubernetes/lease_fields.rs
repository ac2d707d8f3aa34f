//! What we write into a Lease's fields, and which written by others we
//! honour: the lease duration in whole seconds, and the fields of
//! kube-apiserver's coordinated leader election (KEP-4355). The harness's
//! apiserver runs with the CoordinatedLeaderElection feature gate, without
//! which it drops `strategy` and `preferredHolder` from every write. An
//! administrator's client writes those fields here the way the election
//! controller would. One apiserver for both checks.

use std::time::{Duration, Instant};

use fencing::{AcquireOptions, Error, FencingSource, LossReason};
use fencing_harness::fixture::resource as r;
use fencing_harness::kubernetes::cluster::KubeUser;
use fencing_harness::kubernetes::fixture::{KubeFixture, TEST_LEASE};
use fencing_kube::{KubeLeaseSource, LeaseOptions};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_fields_are_written_whole_and_honoured() {
    let f = KubeFixture::start().await;
    let leases: Api<Lease> = Api::namespaced(f.cluster(|c| c.admin_client()), f.namespace());
    a_fractional_lease_duration_is_written_rounded_up(&f, &leases).await;
    leases_of_the_coordinated_election_are_left_to_it(&f, &leases).await;
    super::coordinated::a_coordinated_acquire_names_what_is_missing(&f).await;
    super::coordinated::the_controller_elects_and_moves_leadership(&f).await;
    super::coordinated::client_go_and_ours_share_an_election(&f).await;
    super::coordinated::a_second_acquire_of_a_leading_identity_is_not_granted(&f).await;
    super::coordinated::one_identity_stands_for_one_lease(&f).await;
    super::coordinated::a_renew_time_far_ahead_does_not_outlive_its_holder(&f).await;
    a_shortened_lease_duration_is_written_back(&f, &leases).await;
    the_identity_names_the_cluster_not_the_address(&f).await;
}

/// The source identity names the cluster, not the address a client reached
/// it at (issue 55, item 4): with no `cluster` option, a client that may
/// read namespace kube-system (which the coordinated tests above created)
/// gets its UID, the same straight and through a proxy; one that may not
/// gets the apiserver's URL from `connect`, and `from_client` refuses with
/// `Error::Config` rather than name every cluster alike.
async fn the_identity_names_the_cluster_not_the_address(f: &KubeFixture) {
    let mut unnamed = f.options();
    unnamed.cluster = None;
    let connect =
        |kubeconfig| KubeLeaseSource::connect(f.config_with(kubeconfig).options(unnamed.clone()));
    let direct = connect(f.kubeconfig(KubeUser::Admin)).await.unwrap();
    let proxy = f.proxy().await;
    let via = f.kubeconfig_via(KubeUser::Admin, &proxy.endpoint());
    let proxied = connect(via).await.unwrap();
    assert_eq!(direct.identity(), proxied.identity());
    assert!(
        !direct.identity().as_str().contains("https://"),
        "{}",
        direct.identity()
    );

    let user = connect(f.kubeconfig(KubeUser::LeaseUser)).await.unwrap();
    assert!(
        user.identity().as_str().contains(f.server_url()),
        "{}",
        user.identity()
    );
    let client = user.client();
    match KubeLeaseSource::from_client(client, f.namespace(), unnamed.clone()).await {
        Err(Error::Config(msg)) => assert!(msg.contains("LeaseOptions::cluster"), "{msg}"),
        other => panic!("from_client without a readable cluster id: {other:?}"),
    }
    let admin = direct.client();
    let from_admin = KubeLeaseSource::from_client(admin, f.namespace(), unnamed)
        .await
        .unwrap();
    assert_eq!(from_admin.identity(), direct.identity());
}

/// Other candidates wait `leaseDurationSeconds`, so it must never be written
/// shorter than the lease the holder counts on. Timings set through the
/// public field (which neither builder nor URL parser rounds): lease 1.9 s,
/// renew deadline 1.5 s. The Lease said 1 s when the seconds were
/// truncated, so others could take it at 1 s while `lost()` fired at 1.35 s.
async fn a_fractional_lease_duration_is_written_rounded_up(f: &KubeFixture, leases: &Api<Lease>) {
    let mut options = f.options();
    options.timings.lease_duration = Duration::from_millis(1_900);
    options.timings.renew_deadline = Duration::from_millis(1_500);
    options.timings.retry_period = Duration::from_millis(500);
    let source = KubeLeaseSource::connect(f.config(KubeUser::LeaseUser).options(options))
        .await
        .unwrap();
    let grant = source
        .acquire(&r("fractional"), &AcquireOptions::new())
        .await
        .unwrap();
    let lease = leases.get("fractional").await.unwrap();
    let seconds = lease.spec.and_then(|s| s.lease_duration_seconds);
    assert_eq!(seconds, Some(2), "1.9 s written as whole seconds");
    grant.release().await.unwrap();
}

/// A Lease with a strategy is refused at once, even by a waiting acquire,
/// with an error that names the strategy, and is left as it was; a holder
/// whose Lease the controller starts to manage (strategy, and a
/// preferredHolder naming someone else) yields: `lost()` fires with
/// `Yielded` while the Lease still names it, and once released and handed
/// back to plain candidates, the next grant has a higher token.
async fn leases_of_the_coordinated_election_are_left_to_it(f: &KubeFixture, leases: &Api<Lease>) {
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
    let wait = AcquireOptions::new().wait(Duration::from_secs(20));
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

/// An administrator shortens a held Lease's leaseDurationSeconds to 1 s.
/// The holder's next renewal writes its own duration again (issue 54,
/// item 7: it kept the 1 s it re-read after the 409, on every renewal, so a
/// candidate polling faster than the holder renews took the Lease between
/// two renewals and was granted before the holder's `lost()`). From then
/// on a candidate polling every 200 ms is not granted while the holder
/// renews every 2 s. (Between the administrator's write and that renewal
/// only the gate protects: other candidates count from what they read.)
async fn a_shortened_lease_duration_is_written_back(f: &KubeFixture, leases: &Api<Lease>) {
    let slow = LeaseOptions::default()
        .request_timeout(Duration::from_secs(2))
        .cluster(f.options().cluster.unwrap());
    let holder = KubeLeaseSource::connect(f.config(KubeUser::LeaseUser).options(slow))
        .await
        .unwrap();
    let fast = f
        .options()
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_secs(1))
        .retry_period(Duration::from_millis(200));
    let eager = KubeLeaseSource::connect(f.config(KubeUser::LeaseUser).options(fast))
        .await
        .unwrap();
    let lease = r("shortened");
    let held = holder
        .acquire(&lease, &AcquireOptions::new())
        .await
        .unwrap();
    let written = |l: Lease| l.spec.and_then(|s| s.lease_duration_seconds);
    let short = serde_json::json!({ "spec": { "leaseDurationSeconds": 1 } });
    leases
        .patch("shortened", &PatchParams::default(), &Patch::Merge(&short))
        .await
        .unwrap();
    let restored = async {
        while written(leases.get("shortened").await.unwrap()) != Some(15) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), restored)
        .await
        .unwrap_or_else(|_| panic!("the holder kept writing the shortened duration"));
    let wait = AcquireOptions::new().wait(Duration::from_secs(5));
    match eager.acquire(&lease, &wait).await {
        Err(Error::Contended { .. }) => {}
        other => panic!("a candidate got the Lease its holder renews: {other:?}"),
    }
    assert!(held.is_live(), "{:?}", held.lease().loss_reason());
    held.release().await.unwrap();
}
