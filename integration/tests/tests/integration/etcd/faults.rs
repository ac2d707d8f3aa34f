//! EtcdSource under faults on real 3-member clusters, on etcd 3.4 and 3.6:
//! leader loss, full restarts, a holder process frozen past its TTL, a key
//! deleted behind the holder's back, 64 waiters on one lock.

use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, ResourceName};
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::etcd::fixture::EtcdFixture;
use fencing_harness::fixture::resource as r;
use fencing_harness::fixture::Fixture;
use fencing_harness::scenarios;

fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30))
}

/// The leader dies while one client holds the lock and another waits:
/// tokens keep increasing and the lock never has two holders.
async fn leader_killed_while_held_and_waited_for(version: EtcdVersion) {
    scenarios::leader_loss::<EtcdFixture>(version, Duration::from_secs(5)).await;
}

/// Every member restarts (same data): tokens continue upward.
async fn all_members_restarted(version: EtcdVersion) {
    scenarios::full_restart::<EtcdFixture>(version).await;
}

/// The reference's pause with real processes: a holder frozen past its TTL
/// writes after a second holder did; EtcdGate and a FileGate refuse it.
async fn frozen_holder_process_is_fenced(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let url = format!(
        "etcd://{}{}?ttl=2",
        f.cluster.endpoints().join(","),
        f.prefix
    );
    let b = f.source().await;
    let gate = b.gate("/fencing-test-gate").unwrap();
    let holder = std::path::Path::new(env!("CARGO_BIN_EXE_holder"));
    fencing_harness::frozen::frozen_holder_is_fenced(holder, &url, &b, &gate).await;
}

/// A lock key deleted by someone else: the grant is lost at once.
async fn key_deleted_behind_our_back(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let a = f.source().await;
    let g = a
        .acquire(&r("deleted"), &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    a.client().delete(g.key(), None).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("lost() did not fire");
    assert_eq!(reason, fencing::LossReason::DeletedAtServer);
    assert!(!a.validate(&g).await.unwrap());
}

/// A waiter's own key is deleted behind its back while it waits (an admin,
/// or its lease revoked): when the holder releases, the waiter must not be
/// granted on the key that is gone (the Jepsen etcd 3.4.3 bug); it queues
/// again and is granted later with a new key and a higher token.
async fn waiter_whose_key_is_deleted_is_not_granted_on_it(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let (holder, waiter) = (f.source().await, f.source().await);
    let mut observer = f.source().await.client();
    let lock = r("waiter-key-deleted");
    let held = holder
        .acquire(&lock, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let queued = {
        let (waiter, lock) = (waiter.clone(), lock.clone());
        tokio::spawn(async move {
            let opts = opts(Duration::from_secs(10)).wait(Duration::from_secs(20));
            waiter.acquire(&lock, &opts).await
        })
    };
    let dir = format!("{}/waiter-key-deleted/", f.prefix);
    let only_count = || {
        etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while observer
        .get(dir.as_str(), Some(only_count()))
        .await
        .unwrap()
        .count()
        < 2
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all = etcd_client::GetOptions::new().with_prefix();
    let keys = observer.get(dir.as_str(), Some(all)).await.unwrap();
    let (key, deleted_rev) = keys
        .kvs()
        .iter()
        .find(|kv| kv.key() != held.key().as_bytes())
        .map(|kv| (kv.key().to_vec(), kv.create_revision()))
        .expect("the waiter's key");
    observer.delete(key, None).await.unwrap();
    held.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(25), queued)
        .await
        .expect("the waiter was never granted")
        .unwrap()
        .expect("the waiter queues again and is granted");
    let token = i64::try_from(granted.token()).unwrap();
    assert!(
        token > deleted_rev,
        "granted with token {token} on its deleted key (created at {deleted_rev})"
    );
    let now = observer.get(granted.key(), None).await.unwrap();
    assert_eq!(
        now.kvs().first().map(|kv| kv.create_revision()),
        Some(token)
    );
    granted.release().await.unwrap();
}

/// The lock requests go to the raft leader once it is known (a write sent
/// to a follower costs a forwarding hop and the follower's apply).
async fn lock_requests_go_to_the_leader(version: EtcdVersion) {
    use fencing_harness::member::MemberCluster;
    let f = EtcdFixture::start(version).await;
    let source = f.source().await;
    let lock = r("to-the-leader");
    let cycle = || async {
        let g = source
            .acquire(&lock, &opts(Duration::from_secs(10)))
            .await
            .unwrap();
        g.release().await.unwrap();
    };
    // The first cycle starts the leader lookup; the pause is long enough
    // for a lookup that failed once under load to be retried (after 1 s).
    cycle().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let leader = f.cluster.leader().await.unwrap();
    let txns = |i: usize| {
        let cluster = &f.cluster;
        async move {
            let by = cluster
                .member_metric_by(i, "grpc_server_handled_total", Some("grpc_method"))
                .await
                .unwrap();
            by.get("Txn").copied().unwrap_or(0.0) + by.get("DeleteRange").copied().unwrap_or(0.0)
        }
    };
    let mut before = Vec::new();
    for i in 0..3 {
        before.push(txns(i).await);
    }
    const CYCLES: usize = 20;
    for _ in 0..CYCLES {
        cycle().await;
    }
    for (i, before) in before.into_iter().enumerate() {
        let served = txns(i).await - before;
        if i == leader {
            assert!(
                served >= (2 * CYCLES) as f64,
                "the leader (member {i}) served only {served} of {} lock requests",
                2 * CYCLES
            );
        } else {
            assert_eq!(served, 0.0, "follower {i} served {served} lock requests");
        }
    }
}

/// A held key is deleted while the source's watch stream is down, and the
/// history is compacted before the stream comes back: the re-created watch
/// cannot replay the delete (the server cancels it), so the key must be
/// read, and the grant lost. Another grant's watch, cancelled the same way,
/// must come back and still see a later delete.
async fn key_deleted_and_compacted_while_the_watch_stream_is_down(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let (a, partition) = f.partitionable_source().await;
    let mut observer = f.source().await.client();
    let long = opts(Duration::from_secs(10));
    let deleted = a.acquire(&r("compacted"), &long).await.unwrap();
    let kept = a.acquire(&r("compacted-kept"), &long).await.unwrap();

    partition.set(true);
    partition.cut_connections();
    observer.delete(deleted.key(), None).await.unwrap();
    let rev = observer.put("/compact-me", "x", None).await.unwrap();
    let rev = rev.header().unwrap().revision();
    let physical = etcd_client::CompactionOptions::new().with_physical();
    observer.compact(rev, Some(physical)).await.unwrap();
    partition.set(false);

    tokio::time::timeout(Duration::from_secs(5), deleted.lost())
        .await
        .expect("a key deleted before a compaction went unnoticed");
    assert!(kept.is_live(), "the kept grant was lost");
    observer.delete(kept.key(), None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), kept.lost())
        .await
        .expect("the watch of the kept grant did not come back after the compaction");
}

/// A source reaching two members through proxies: the first, `late`, to
/// hold requests on; the other, `direct`, to re-send them through.
async fn late_and_direct(
    f: &EtcdFixture,
) -> (
    fencing_harness::net::proxy::Proxy,
    fencing_harness::net::proxy::Proxy,
    EtcdSource,
) {
    use fencing_harness::net::proxy::Proxy;
    let members = f.cluster.endpoints();
    let (late, direct) = (
        Proxy::start(members[0].parse().unwrap()).await.unwrap(),
        Proxy::start(members[1].parse().unwrap()).await.unwrap(),
    );
    let source = EtcdSource::connect(f.config(vec![late.endpoint(), direct.endpoint()]))
        .await
        .expect("connect");
    (late, direct, source)
}

/// A release's delete that reaches the cluster late (held in the network
/// while the client gave up on it and re-sent it to another member, its
/// cancellation lost) must not delete the grant the same source made
/// meanwhile: same lease, so the same key name. The fault campaign found
/// this with a plain delete (etcd 3.6, seed 12).
async fn late_release_delete_spares_the_next_grant(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let (late, _direct, source) = late_and_direct(&f).await;
    let mut observer = f.source().await.client();
    let lock = r("late-delete");
    let long = opts(Duration::from_secs(10));
    // The client picks a member per request; try until a release's first
    // send went to the held one (the release then needed a re-send).
    for _ in 0..20 {
        let first = source.acquire(&lock, &long).await.unwrap();
        late.set_requests_held(true);
        let started = std::time::Instant::now();
        first
            .release()
            .await
            .expect("release (re-sent to the other member)");
        let resent = started.elapsed() >= Duration::from_millis(200);
        let next = if resent {
            Some(source.acquire(&lock, &long).await.unwrap())
        } else {
            None
        };
        late.set_requests_held(false);
        let Some(next) = next else { continue };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let key = observer.get(next.key(), None).await.unwrap();
        let created = key.kvs().first().map(|kv| kv.create_revision());
        assert_eq!(
            created,
            Some(i64::try_from(next.token()).unwrap()),
            "the late delete removed the next grant's key"
        );
        assert!(next.is_live(), "the next grant was lost to a late delete");
        next.release().await.unwrap();
        return;
    }
    panic!("no release was sent to the held member first in 20 tries");
}

/// 64 waiters on one lock: each hand-over wakes exactly one waiter.
async fn sixty_four_waiters_no_herd(version: EtcdVersion) {
    scenarios::no_thundering_herd::<EtcdFixture>(version).await;
}

/// Grants and gates refuse tokens of another cluster.
async fn foreign_cluster_is_refused(version: EtcdVersion) {
    let (x, y) = (
        EtcdFixture::start(version).await,
        EtcdFixture::start(version).await,
    );
    let (sx, sy) = (x.source().await, y.source().await);
    let gate = sy.gate("/fencing-test-gate").unwrap();
    scenarios::foreign_grant_is_refused(&sx, &sy, &gate, Duration::from_secs(5)).await;
}

/// A guarded txn writes only while the grant holds the lock.
async fn guarded_txn_refuses_a_superseded_grant(version: EtcdVersion) {
    use fencing_etcd::etcd_client::TxnOp;
    let f = EtcdFixture::start(version).await;
    let (a, partition) = f.partitionable_source().await;
    let b = f.source().await;
    let lock = r("guarded");
    let ga = a
        .acquire(&lock, &opts(Duration::from_secs(2)))
        .await
        .unwrap();
    a.guarded_txn(&ga, vec![TxnOp::put("/data/x", "from-a", None)])
        .await
        .unwrap();
    partition.set(true);
    let gb = b
        .acquire(&lock, &opts(Duration::from_secs(2)))
        .await
        .unwrap();
    b.guarded_txn(&gb, vec![TxnOp::put("/data/x", "from-b", None)])
        .await
        .unwrap();
    partition.set(false);
    // The first send after the heal may meet the connection the partition
    // broke: an unknown outcome is the honest answer then, and the value
    // check below catches a late write that did apply.
    let mut result = Err(Error::backend("test", "not sent"));
    for _ in 0..5 {
        result = a
            .guarded_txn(&ga, vec![TxnOp::put("/data/x", "late-a", None)])
            .await;
        if !matches!(result, Err(Error::OutcomeUnknown { .. })) {
            break;
        }
    }
    match result {
        Err(Error::Lost { .. }) => {}
        other => panic!("superseded guarded write: {other:?}"),
    }
    let value = b.client().get("/data/x", None).await.unwrap().kvs()[0]
        .value()
        .to_vec();
    assert_eq!(value, b"from-b");
    gb.release().await.unwrap();
}

/// The answer to a guarded txn is lost after the cluster applied it (the
/// replies are dropped, then the connection is cut). The txn must not be
/// sent again: its lock compare still holds, so a second copy would apply
/// the caller's operations twice. The caller learns the outcome is unknown.
async fn guarded_txn_is_never_applied_twice(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let (a, partition) = f.partitionable_source().await;
    let mut observer = f.source().await.client();
    let g = a
        .acquire(&r("once"), &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let data = "/fencing-test-data/once";
    partition.set_replies_dropped(true);
    let write = tokio::spawn(async move {
        let put = fencing_etcd::etcd_client::TxnOp::put(data, "v", None);
        let result = a.guarded_txn(&g, vec![put]).await;
        (result, g)
    });
    let applied = tokio::time::Instant::now() + Duration::from_secs(10);
    while observer.get(data, None).await.unwrap().kvs().is_empty() {
        assert!(
            tokio::time::Instant::now() < applied,
            "the txn never applied"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    partition.cut_connections();
    partition.set_replies_dropped(false);
    let (result, _g) = write.await.unwrap();
    let times = observer.get(data, None).await.unwrap().kvs()[0].version();
    assert_eq!(
        times, 1,
        "applied {times} times; guarded_txn returned {result:?}"
    );
    assert!(
        matches!(result, Err(Error::OutcomeUnknown { .. })),
        "a txn whose answer was lost must report an unknown outcome: {result:?}"
    );
}

/// An acquire given up while the answers to it are lost (issue 39 item 6):
/// the answers stay lost 5 s more, so the clean-up's first read is lost
/// too (it gave up after that one read before).
async fn an_abandoned_acquire_leaves_no_key_behind(version: EtcdVersion) {
    scenarios::abandoned_acquire_leaves_nothing_behind::<EtcdFixture>(
        version,
        Duration::from_secs(10),
        Duration::from_secs(1),
        Duration::from_secs(5),
        Duration::from_secs(8),
    )
    .await;
}

/// A release during a 4 s network blip (longer than the request timeout,
/// shorter than the 15 s lease) goes through once the network is back,
/// whether its caller waits for it or gives up on it.
async fn release_during_a_blip_still_releases(version: EtcdVersion) {
    scenarios::release_during_a_blip_still_releases::<EtcdFixture>(version).await;
}

/// A waiter whose session is lost while it is queued (a partition longer
/// than the TTL) queues again with a new session instead of giving up.
async fn waiter_requeues_after_losing_its_session(version: EtcdVersion) {
    scenarios::waiter_requeues_after_losing_its_session::<EtcdFixture>(version).await;
}

/// Bad input: unreachable endpoints time out naming them; a bad prefix and
/// a resource with '/' are refused.
async fn bad_input_is_refused(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let (_, partition) = f.partitionable_source().await;
    partition.set(true);
    let dead = fencing_harness::net::proxy::Proxy::start(f.cluster.endpoints()[0].parse().unwrap())
        .await
        .unwrap();
    dead.set_blackhole(true);
    let cfg = EtcdConfig::new([dead.endpoint()], "/p")
        .unwrap()
        .request_timeout(Duration::from_millis(800));
    scenarios::unreachable_endpoint_times_out(EtcdSource::connect(cfg), &dead.endpoint()).await;
    assert!(matches!(
        EtcdConfig::new(f.cluster.endpoints(), ""),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        EtcdConfig::new(f.cluster.endpoints(), "/a\0b"),
        Err(Error::Config(_))
    ));
    let s = f.source().await;
    assert!(matches!(
        s.acquire(
            &ResourceName::nonportable("a/b").unwrap(),
            &opts(Duration::from_secs(2))
        )
        .await,
        Err(Error::InvalidResource { .. })
    ));
}

/// A renewal counts from when its keep-alive was sent, never from when
/// its answer came: with every reply held 100 ms by the network, a renewal
/// observed at `M` was sent at least 200 ms before (the keep-alive's reply
/// and the vouching read's each took 100 ms), so the deadline it sets is
/// at most `M - 200 ms + TTL - margin`. Counted from the answer, it would
/// be 200 ms later: past the lease's end at the server by as much.
async fn a_renewal_counts_from_its_send(version: EtcdVersion) {
    use fencing_harness::net::proxy::Proxy;
    use tokio::time::Instant;
    const TTL: Duration = Duration::from_secs(6);
    // Under the fixture's per-attempt timeout (250 ms) for the read.
    const DELAY: Duration = Duration::from_millis(100);
    let f = EtcdFixture::start(version).await;
    let proxy = Proxy::start(f.cluster.endpoints()[0].parse().unwrap())
        .await
        .unwrap();
    let source = EtcdSource::connect(f.config(vec![proxy.endpoint()]))
        .await
        .expect("connect");
    let g = source
        .acquire(&r("slow-replies"), &opts(TTL))
        .await
        .unwrap();
    // Each wait ends at the instant the deadline moves (a renewal), seen
    // within 5 ms.
    let held = &g;
    let next_renewal = |after: Instant, what: &'static str| async move {
        let patience = Instant::now() + TTL;
        while held.deadline() == after {
            assert!(
                Instant::now() < patience,
                "no renewal {what} within {TTL:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (held.deadline(), Instant::now())
    };
    // Right after a renewal, so that the next one is sent under the delay.
    let (renewed, _) = next_renewal(g.deadline(), "before the delay").await;
    proxy.set_reply_delay(DELAY);
    let (deadline, seen) = next_renewal(renewed, "with replies delayed").await;
    let latest_send = seen - 2 * DELAY;
    let bound = latest_send + TTL - TTL / 10;
    assert!(
        deadline <= bound,
        "the deadline runs {:?} past TTL - margin from the renewal's latest possible send",
        deadline - bound
    );
    proxy.set_reply_delay(Duration::ZERO);
    g.release().await.unwrap();
}

/// A lock key written to after its creation (an operator, another
/// client's tool) keeps naming its grant: the token is the key's create
/// revision, which a later write does not change.
async fn a_rewritten_lock_key_keeps_its_token(version: EtcdVersion) {
    use fencing_etcd::etcd_client::PutOptions;
    let f = EtcdFixture::start(version).await;
    let source = f.source().await;
    let lock = r("rewritten");
    let g = source
        .acquire(&lock, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let mut admin = f.source().await.client();
    admin
        .put(
            g.key(),
            "edited",
            Some(PutOptions::new().with_ignore_lease()),
        )
        .await
        .unwrap();
    let holder = source.holder(&lock).await.unwrap().expect("a holder");
    assert_eq!(
        holder.token,
        g.token(),
        "holder() names another token than the grant's after its key was written to"
    );
    g.release().await.unwrap();
}

/// An acquire that finds its own key already there (a lock txn of this
/// session applied whose answer was lost, and the txn re-sent) deletes that
/// leftover and creates the key again under the same name. A delete of the
/// leftover that reaches the cluster late (held in the network while it
/// was re-sent elsewhere) must not delete the new grant's key: the delete
/// compares the leftover's create revision. The leftover is made here by
/// writing the key on the session's lease, as the lost txn would have.
async fn a_late_delete_of_a_leftover_key_spares_the_new_grant(version: EtcdVersion) {
    use fencing_etcd::etcd_client::PutOptions;
    let f = EtcdFixture::start(version).await;
    let (late, _direct, source) = late_and_direct(&f).await;
    let mut admin = f.source().await.client();
    let lock = r("leftover");
    let long = opts(Duration::from_secs(10));
    // The client picks a member per request, and the request held may be
    // the lock txn rather than the delete: check every acquire that had a
    // request re-sent, until four were.
    let mut checked = 0;
    for _ in 0..30 {
        let first = source.acquire(&lock, &long).await.unwrap();
        let key = first.key().to_owned();
        let lease = i64::from_str_radix(key.rsplit('/').next().unwrap(), 16).unwrap();
        first.release().await.unwrap();
        admin
            .put(
                key.as_str(),
                "leftover",
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .unwrap();
        late.set_requests_held(true);
        let started = std::time::Instant::now();
        let next = source.acquire(&lock, &long).await.unwrap();
        let resent = started.elapsed() >= Duration::from_millis(200);
        late.set_requests_held(false);
        if next.key() != key || !resent {
            // Another session, or nothing was held: no late delete to spare.
            next.release().await.unwrap();
            continue;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = admin.get(next.key(), None).await.unwrap();
        assert_eq!(
            now.kvs().first().map(|kv| kv.create_revision()),
            Some(i64::try_from(next.token()).unwrap()),
            "a late delete of the leftover removed the new grant's key"
        );
        assert!(next.is_live(), "the new grant was lost to a late delete");
        next.release().await.unwrap();
        checked += 1;
        if checked == 4 {
            return;
        }
    }
    panic!("only {checked} acquires re-sent a request held at the first member in 30 tries");
}

/// A release whose delete was answered keeps its session: the next grant
/// of the same lock reuses the lease (the same key name), with no new
/// lease granted. A session is retired only when a delete may still be
/// applied late.
async fn a_release_keeps_its_session(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let source = f.source().await;
    let lock = r("kept-session");
    let first = source
        .acquire(&lock, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let key = first.key().to_owned();
    first.release().await.unwrap();
    let next = source
        .acquire(&lock, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(
        next.key(),
        key,
        "the release retired a session it did not have to"
    );
    next.release().await.unwrap();
}

/// `close()` ends the session at the server: a lock still held when its
/// source closes is free for others at once, not after the lease's TTL.
async fn close_frees_a_held_lock_at_once(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let (a, b) = (f.source().await, f.source().await);
    let lock = r("closed-while-held");
    let held = a
        .acquire(&lock, &opts(Duration::from_secs(30)))
        .await
        .unwrap();
    a.close().await.expect("close");
    let next = b
        .try_acquire(&lock, &AcquireOptions::new().ttl(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(next.is_some(), "the lock stayed held after close()");
    assert!(!held.is_live(), "a grant outlived its source's close()");
    next.unwrap().release().await.unwrap();
}

/// `close()` with the cluster out of reach fails: it could not end the
/// session, so the lock may stay held until the lease runs out, and the
/// caller must be told (an answer other than "lease not found" is not a
/// revoke).
async fn close_out_of_reach_is_an_error(version: EtcdVersion) {
    use fencing_harness::net::proxy::Proxy;
    let f = EtcdFixture::start(version).await;
    let proxy = Proxy::start(f.cluster.endpoints()[0].parse().unwrap())
        .await
        .unwrap();
    let source = EtcdSource::connect(f.config(vec![proxy.endpoint()]))
        .await
        .expect("connect");
    let held = source
        .acquire(&r("closed-unreachable"), &opts(Duration::from_secs(30)))
        .await
        .unwrap();
    // Connections refused from now on: every request fails at once.
    drop(proxy);
    let closed = source.close().await;
    assert!(
        closed.is_err(),
        "close() reported the session ended: {closed:?}"
    );
    drop(held);
}

/// A waiter watches its predecessor and writes nothing while it waits: the
/// store's revision stands still for the second it waits. A waiter that
/// gave up its place and queued again (a new key each time) would hand
/// the lock over as fast, and this is what tells it apart.
async fn a_waiter_writes_nothing_while_it_waits(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let (a, b) = (f.source().await, f.source().await);
    let lock = r("quiet-waiter");
    let held = a
        .acquire(&lock, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { b.acquire(&lock, &opts(Duration::from_secs(10))).await }
    });
    let observer = f.source().await;
    let revision = || async {
        let resp = observer.client().get("/", None).await.unwrap();
        resp.header().unwrap().revision()
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = revision().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = revision().await;
    assert_eq!(
        before, after,
        "the store was written to while one waiter waited"
    );
    assert!(!waiter.is_finished(), "the waiter was granted a held lock");
    held.release().await.unwrap();
    let next = waiter.await.unwrap().expect("the waiter's grant");
    next.release().await.unwrap();
}

// What only our client decides runs on the newest release only.
fencing_harness::version_tests!(
    fencing_harness::etcd::cluster::EtcdVersion::V3_6,
    v3_6_client,
    [
        a_renewal_counts_from_its_send,
        a_rewritten_lock_key_keeps_its_token,
        a_late_delete_of_a_leftover_key_spares_the_new_grant,
        a_release_keeps_its_session,
        close_frees_a_held_lock_at_once,
        close_out_of_reach_is_an_error,
        a_waiter_writes_nothing_while_it_waits
    ]
);

fencing_harness::on_both_etcd_versions!(
    leader_killed_while_held_and_waited_for,
    all_members_restarted,
    frozen_holder_process_is_fenced,
    key_deleted_behind_our_back,
    key_deleted_and_compacted_while_the_watch_stream_is_down,
    late_release_delete_spares_the_next_grant,
    waiter_whose_key_is_deleted_is_not_granted_on_it,
    lock_requests_go_to_the_leader,
    sixty_four_waiters_no_herd,
    foreign_cluster_is_refused,
    guarded_txn_refuses_a_superseded_grant,
    guarded_txn_is_never_applied_twice,
    release_during_a_blip_still_releases,
    an_abandoned_acquire_leaves_no_key_behind,
    waiter_requeues_after_losing_its_session,
    bad_input_is_refused,
);
