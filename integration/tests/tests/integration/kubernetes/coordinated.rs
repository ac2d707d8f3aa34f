//! Coordinated leader election (KEP-4355) with kube-apiserver's own
//! election controller: our candidates publish LeaseCandidates, the
//! controller picks the holder by its strategy, moves leadership to a
//! better candidate through `preferredHolder`, and the yielded holder's
//! late write is refused by the gate. Runs on the `lease_fields`
//! apiserver (started with the CoordinatedLeaderElection gate and
//! `coordination.k8s.io/v1beta1`).

use std::time::Duration;

use fencing::{
    AcquireOptions, Error, FencingSource, Gate, Grant, LossReason, MemoryGate, ResourceName,
};
use fencing_harness::kubernetes::cluster::{client_go_elector_binary, KubeUser};
use fencing_harness::kubernetes::fixture::{client_go_timing_flags, KubeFixture};
use fencing_harness::Reaped;
use fencing_kube::{Candidacy, KubeLeaseSource};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;

const LEASE: &str = "coordinated";

/// The controller's election takes a few of its own steps (ping the
/// candidates, wait for their answers): generous, as a bound only.
const ELECTION: Duration = Duration::from_secs(60);

async fn candidate(f: &KubeFixture, binary: &str, emulation: &str) -> KubeLeaseSource {
    let me = Candidacy::new(binary)
        .and_then(|c| c.emulation_version(emulation))
        .unwrap();
    let options = f.options().coordinated(me);
    KubeLeaseSource::connect(f.config(KubeUser::LeaseCandidate).options(options))
        .await
        .unwrap()
}

fn acquire_on(
    lease: &'static str,
    source: &KubeLeaseSource,
    holder: &str,
) -> tokio::task::JoinHandle<fencing::Result<Grant>> {
    let (source, opts) = (
        source.clone(),
        AcquireOptions::new().holder(holder).wait(ELECTION),
    );
    tokio::spawn(async move { source.acquire(&ResourceName::new(lease)?, &opts).await })
}

fn acquire(
    source: &KubeLeaseSource,
    holder: &str,
) -> tokio::task::JoinHandle<fencing::Result<Grant>> {
    acquire_on(LEASE, source, holder)
}

/// The acquire, if it has not ended (a second holder, or an error).
async fn still_waiting(
    acquire: tokio::task::JoinHandle<fencing::Result<Grant>>,
) -> tokio::task::JoinHandle<fencing::Result<Grant>> {
    if acquire.is_finished() {
        panic!(
            "only one holder; this acquire ended with {:?}",
            acquire.await
        );
    }
    acquire
}

/// The LeaseCandidates in the test namespace.
async fn candidate_names(f: &KubeFixture) -> Vec<String> {
    let candidates: Api<LeaseCandidate> =
        Api::namespaced(f.cluster(|c| c.admin_client()), f.namespace());
    let list = candidates.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect()
}

/// The controller runs only once the apiserver has elected itself in
/// `kube-system`, which the harness does not create.
async fn start_the_controller(f: &KubeFixture) {
    let namespaces: Api<Namespace> = Api::all(f.cluster(|c| c.admin_client()));
    let system = Namespace {
        metadata: ObjectMeta {
            name: Some("kube-system".into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &system).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create kube-system: {e}"),
    }
}

/// Three candidates; the controller names the one with the oldest
/// emulation version. A fourth, older still, joins: the controller asks
/// the holder to yield, its `lost()` says `Yielded`, it releases, and the
/// fourth leads with a higher token, after which the gate refuses the
/// yielded holder's write. The waiting candidates' acquires, dropped,
/// leave no LeaseCandidate behind once their sources are closed.
pub(super) async fn the_controller_elects_and_moves_leadership(f: &KubeFixture) {
    start_the_controller(f).await;
    let (a, b, c, d) = (
        candidate(f, "1.36.0", "1.36.0").await,
        candidate(f, "1.36.0", "1.35.0").await,
        candidate(f, "1.37.0", "1.36.0").await,
        candidate(f, "1.36.0", "1.34.0").await,
    );
    // The controller elects as soon as one candidate shows up: the Lease
    // is held by a placeholder until all three have, then freed.
    let leases: Api<Lease> = Api::namespaced(f.cluster(|c| c.admin_client()), f.namespace());
    let placeholder = serde_json::json!({
        "metadata": { "name": LEASE },
        "spec": {
            "holderIdentity": "placeholder",
            "strategy": "OldestEmulationVersion",
            "leaseDurationSeconds": 60,
        },
    });
    let mut held: Lease = serde_json::from_value(placeholder).unwrap();
    held.spec.as_mut().unwrap().renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    leases.create(&PostParams::default(), &held).await.unwrap();
    let waiting_a = acquire(&a, "cand-a");
    let elected = acquire(&b, "cand-b");
    let waiting_c = acquire(&c, "cand-c");
    while candidate_names(f).await.len() < 3 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let free = serde_json::json!({ "spec": { "holderIdentity": "" } });
    leases
        .patch(LEASE, &PatchParams::default(), &Patch::Merge(&free))
        .await
        .unwrap();
    let first = elected
        .await
        .unwrap()
        .expect("the oldest emulation version is elected");
    let (waiting_a, waiting_c) = (
        still_waiting(waiting_a).await,
        still_waiting(waiting_c).await,
    );
    assert!(b.validate(&first).await.unwrap());

    let gate = MemoryGate::new();
    let resource = ResourceName::new(LEASE).unwrap();
    gate.admit_any_source(&resource, first.token())
        .await
        .unwrap();

    let better = acquire(&d, "cand-d");
    let reason = tokio::time::timeout(ELECTION, first.lost())
        .await
        .expect("the controller asks the holder to yield");
    assert_eq!(reason, LossReason::Yielded);
    let yielded = first.token();
    first.release().await.unwrap();
    let next = better
        .await
        .unwrap()
        .expect("the better candidate is elected");
    assert!(next.token() > yielded, "{} after {yielded}", next.token());
    gate.admit_any_source(&resource, next.token())
        .await
        .unwrap();
    match gate.admit_any_source(&resource, yielded).await {
        Err(Error::Stale { .. }) => {}
        other => panic!("the yielded holder's late write: {other:?}"),
    }

    for waiting in [waiting_a, waiting_c] {
        waiting.abort();
        // Dropped once the abort is seen: its candidate's deletion is then
        // a task of the source, which close() waits for.
        assert!(waiting.await.unwrap_err().is_cancelled());
    }
    next.release().await.unwrap();
    for source in [&a, &b, &c, &d] {
        source.close().await.unwrap();
    }
    let names = candidate_names(f).await;
    assert!(names.is_empty(), "candidates left behind: {names:?}");
}

/// A client-go candidate (`NewCandidate` and `Coordinated: true`) and ours
/// in one election. client-go's candidate leads alone; ours joins with an
/// older emulation version, so the controller asks client-go's leader to
/// yield (`preferredHolder`); it stops leading and releases, and ours is
/// elected with a higher token than the one client-go read back.
pub(super) async fn client_go_and_ours_share_an_election(f: &KubeFixture) {
    const MIXED: &str = "coordinated-mixed";
    let binary = client_go_elector_binary().unwrap_or_else(|e| panic!("{e}"));
    let go = Reaped::spawn(
        f.client_go_elector(&binary, KubeUser::Admin, MIXED, "go-cand")
            .args(["--coordinated", "1.36.0", "--hold", "60s"])
            .args(client_go_timing_flags()),
    )
    .expect("start client-go-elector");
    let (go, mut lines) = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        while let Some(line) = go.next_line(ELECTION) {
            let event = serde_json::from_str::<serde_json::Value>(&line).unwrap_or_default();
            let leading = event["event"] == "leading";
            lines.push(event);
            if leading {
                break;
            }
        }
        (go, lines)
    })
    .await
    .unwrap();
    let leading = lines
        .last()
        .filter(|l| l["event"] == "leading")
        .unwrap_or_else(|| panic!("client-go's candidate alone is never elected: {lines:?}"));
    let go_token: u64 = leading["token"].as_str().unwrap().parse().unwrap();

    let ours = candidate(f, "1.36.0", "1.35.0").await;
    let grant = acquire_on(MIXED, &ours, "rust-cand")
        .await
        .unwrap()
        .expect("ours, the older emulation version, is elected");
    assert!(
        grant.token().get() > go_token,
        "{} after {go_token}",
        grant.token()
    );
    lines.extend(
        tokio::task::spawn_blocking(move || {
            std::iter::from_fn(|| go.next_line(ELECTION))
                .map(|l| serde_json::from_str::<serde_json::Value>(&l).unwrap_or_default())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap(),
    );
    let events: Vec<_> = lines
        .iter()
        .map(|l| l["event"].as_str().unwrap_or("?"))
        .collect();
    assert!(
        events.ends_with(&["stopped_leading", "done"]),
        "client-go stepped down and ended its round: {events:?}"
    );
    grant.release().await.unwrap();
    ours.close().await.unwrap();
    // client-go leaves its candidate behind (the controller's collector
    // removes it after hours); ours is gone.
    assert_eq!(candidate_names(f).await, ["go-cand"]);
}

/// What a coordinated acquire refuses before it waits: a holder identity
/// that cannot name a LeaseCandidate (a typed configuration error), and a
/// user whose Role grants Leases but not LeaseCandidates (a permission
/// error naming the resource and the verb it lacks).
pub(super) async fn a_coordinated_acquire_names_what_is_missing(f: &KubeFixture) {
    let me = Candidacy::new("1.36.0").unwrap();
    let coordinated = |user| f.config(user).options(f.options().coordinated(me.clone()));
    let admin = KubeLeaseSource::connect(coordinated(KubeUser::Admin))
        .await
        .unwrap();
    let lock = ResourceName::new("coordinated-refused").unwrap();
    let wait = |holder: &str| AcquireOptions::new().holder(holder).wait(ELECTION);
    match admin.acquire(&lock, &wait("Not_A_Name")).await {
        Err(Error::Config(msg)) => assert!(msg.contains("DNS-1123"), "{msg}"),
        other => panic!("a holder that cannot name a LeaseCandidate: {other:?}"),
    }
    let user = KubeLeaseSource::connect(coordinated(KubeUser::LeaseUser))
        .await
        .unwrap();
    match user.acquire(&lock, &wait("lease-user-0")).await {
        Err(Error::PermissionDenied(msg)) => {
            assert!(msg.contains("leasecandidates.coordination.k8s.io"), "{msg}");
            assert!(msg.contains("\"create\""), "{msg}");
        }
        other => panic!("a user without LeaseCandidate rights: {other:?}"),
    }
}

/// The LeaseCandidate named `name`, if any.
async fn candidate_named(f: &KubeFixture, name: &str) -> Option<LeaseCandidate> {
    let candidates: Api<LeaseCandidate> =
        Api::namespaced(f.cluster(|c| c.admin_client()), f.namespace());
    candidates.get_opt(name).await.unwrap()
}

/// A second acquire of an identity that leads is not granted while the
/// first grant lives: the same source at once, before the first renewal
/// records the token (issue 54, item 1: it was granted, and the first
/// grant learned of it only at its next renewal), and another source of
/// the same identity, a pod restarted under its old name. The same
/// source's unanswered `try_acquire` leaves the shared candidacy alone
/// (item 2: it deleted the LeaseCandidate the first grant stands on).
pub(super) async fn a_second_acquire_of_a_leading_identity_is_not_granted(f: &KubeFixture) {
    const SAME: &str = "coordinated-same";
    let source = candidate(f, "1.36.0", "1.36.0").await;
    let first = acquire_on(SAME, &source, "a-0")
        .await
        .unwrap()
        .expect("a-0 is elected");
    let lease = ResourceName::new(SAME).unwrap();
    let as_a0 = AcquireOptions::new().holder("a-0");
    match source.try_acquire(&lease, &as_a0).await {
        Ok(None) => {}
        other => panic!("a second grant of a-0 while the first is live: {other:?}"),
    }
    assert!(
        candidate_named(f, "a-0").await.is_some(),
        "the first grant's candidacy was deleted"
    );
    let restarted = candidate(f, "1.36.0", "1.36.0").await;
    match restarted.try_acquire(&lease, &as_a0).await {
        Ok(None) => {}
        other => panic!("a restarted a-0 granted while the first is live: {other:?}"),
    }
    assert!(first.is_live(), "{:?}", first.lease().loss_reason());
    assert!(source.validate(&first).await.unwrap());
    first.release().await.unwrap();
    for s in [&source, &restarted] {
        s.close().await.unwrap();
    }
}

/// One source, holder "x", two Leases at once: the controller writes the
/// candidate's name, the identity, into holderIdentity, so one identity
/// stands for one Lease at a time in a namespace. The second acquire is
/// refused by name, and x's candidacy still names the first Lease (item 2:
/// it was moved to the second, and deleted when that acquire ended).
pub(super) async fn one_identity_stands_for_one_lease(f: &KubeFixture) {
    let source = candidate(f, "1.36.0", "1.36.0").await;
    let first = acquire_on("coordinated-x-a", &source, "x")
        .await
        .unwrap()
        .expect("x is elected for the first Lease");
    let other = ResourceName::new("coordinated-x-b").unwrap();
    match source
        .try_acquire(&other, &AcquireOptions::new().holder("x"))
        .await
    {
        Err(Error::Config(msg)) => {
            assert!(msg.contains("one Lease at a time"), "{msg}");
            assert!(msg.contains("coordinated-x-a"), "{msg}");
        }
        other => panic!("x for a second Lease: {other:?}"),
    }
    let standing = candidate_named(f, "x").await.expect("x's candidacy");
    assert_eq!(standing.spec.unwrap().lease_name, "coordinated-x-a");
    first.release().await.unwrap();
    source.close().await.unwrap();
    assert!(
        candidate_named(f, "x").await.is_none(),
        "released and closed, x left its candidate"
    );
}

/// A renewTime an hour ahead (a wall clock once wrong) is brought back by
/// the holder's next renewal: after the holder is killed, the controller,
/// which judges expiry by renewTime + leaseDurationSeconds on its own
/// clock, elects another candidate within 30 s (issue 54, item 4: every
/// renewal wrote the last renewTime plus a microsecond, an hour ahead).
pub(super) async fn a_renew_time_far_ahead_does_not_outlive_its_holder(f: &KubeFixture) {
    const AHEAD: &str = "coordinated-ahead";
    let holder_bin = std::path::Path::new(env!("CARGO_BIN_EXE_holder"));
    let url = format!(
        "{}&coordinated=true&binary_version=1.36.0",
        f.url(KubeUser::LeaseCandidate)
    );
    let dir = tempfile::tempdir().unwrap();
    let holder = Reaped::spawn(
        std::process::Command::new(holder_bin)
            .args([url.as_str(), AHEAD])
            .arg(dir.path().join("go"))
            .arg("old-0"),
    )
    .expect("start the holder");
    let (holder, granted) = tokio::task::spawn_blocking(move || {
        let line = holder.next_line(ELECTION);
        (holder, line)
    })
    .await
    .unwrap();
    assert!(
        granted.as_deref().is_some_and(|l| l.starts_with("GRANTED")),
        "the holder is elected: {granted:?}"
    );
    let leases: Api<Lease> = Api::namespaced(f.cluster(|c| c.admin_client()), f.namespace());
    let hour_ahead =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1);
    let ahead = serde_json::json!({ "spec": { "renewTime": MicroTime(hour_ahead) } });
    leases
        .patch(AHEAD, &PatchParams::default(), &Patch::Merge(&ahead))
        .await
        .unwrap();
    // Two retry periods: the holder's renewal meets the 409, re-reads, and
    // writes again.
    let renew_time = || async {
        let lease = leases.get(AHEAD).await.unwrap();
        lease.spec.and_then(|s| s.renew_time).unwrap().0
    };
    let settled = async {
        while renew_time().await
            > k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(60)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), settled)
        .await
        .unwrap_or_else(|_| panic!("the holder kept writing a renewTime an hour ahead"));
    let next = candidate(f, "1.36.0", "1.36.0").await;
    let waiting = acquire_on(AHEAD, &next, "new-0");
    drop(holder.kill_and_collect());
    let killed = std::time::Instant::now();
    let grant = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("another candidate elected within 30 s of the kill")
        .unwrap()
        .expect("new-0 is elected");
    println!(
        "new-0 elected {} ms after the holder was killed",
        killed.elapsed().as_millis()
    );
    grant.release().await.unwrap();
    next.close().await.unwrap();
}
