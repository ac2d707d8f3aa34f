//! ZkSource under faults on real 3-server ensembles, on ZooKeeper 3.8 and
//! 3.9: leader loss, full restarts, a holder process frozen past its session
//! timeout, a lock parent deleted and recreated, a node deleted behind the
//! holder's back, 64 waiters, ACLs and bad input.

use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, FencingToken, ResourceName};
use fencing_harness::fixture::resource as r;
use fencing_harness::fixture::Fixture;
use fencing_harness::net::proxy::Proxy;
use fencing_harness::scenarios;
use fencing_harness::zk::ensemble::{ZkOptions, ZkVersion};
use fencing_harness::zk::fixture::ZkFixture;
use fencing_zookeeper::{ZkConfig, ZkSource};

fn opts(session_timeout: Duration) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(session_timeout)
        .wait(Duration::from_secs(30))
}

/// The leader dies while one client holds the lock and another waits:
/// tokens keep increasing across the new epoch; never two holders.
async fn leader_killed_while_held_and_waited_for(version: ZkVersion) {
    let [first, _, third] =
        scenarios::leader_loss::<ZkFixture>(version, Duration::from_secs(6)).await;
    let epoch = |t: FencingToken| t.get() >> 32;
    assert!(
        epoch(third) > epoch(first),
        "no new epoch in the zxid after the leader change"
    );
}

/// Every server restarts (same data): tokens continue upward.
async fn all_servers_restarted(version: ZkVersion) {
    scenarios::full_restart::<ZkFixture>(version).await;
}

/// The reference's pause with real processes: a holder frozen past its
/// session timeout writes after a second holder did; ZkGate and a FileGate
/// refuse it.
async fn frozen_holder_process_is_fenced(version: ZkVersion) {
    let f = ZkFixture::start(version).await;
    let url = format!(
        "zk://{}{}?ttl=2&ensemble={}",
        f.ensemble.connect_string(),
        f.path,
        f.name
    );
    let b = f.source().await;
    let gate = b.gate("/fencing-test/gate").unwrap();
    let holder = std::path::Path::new(env!("CARGO_BIN_EXE_holder"));
    fencing_harness::frozen::frozen_holder_is_fenced(holder, &url, &b, &gate).await;
}

/// The lock's parent is deleted and recreated between grants: the sequence
/// suffix restarts at 0, the czxid token still increases.
async fn parent_recreated_tokens_still_increase(version: ZkVersion) {
    let f = ZkFixture::start(version).await;
    let s = f.source().await;
    let lock = r("recreated");
    let g1 = s
        .acquire(&lock, &opts(Duration::from_secs(2)))
        .await
        .unwrap();
    let (t1, key1) = (g1.token(), g1.key().to_owned());
    g1.release().await.unwrap();
    let dir = format!("{}/recreated", f.path);
    s.client().await.unwrap().delete(&dir, None).await.unwrap();
    let g2 = s
        .acquire(&lock, &opts(Duration::from_secs(2)))
        .await
        .unwrap();
    let suffix = |k: &str| k.rsplit("lock-").next().unwrap().to_owned();
    assert_eq!(
        suffix(&key1),
        suffix(g2.key()),
        "the sequence restarted with the new parent"
    );
    assert!(g2.token() > t1, "token {} after {t1}", g2.token());
    g2.release().await.unwrap();
}

/// A lock node deleted by someone else: the grant is lost at once.
async fn node_deleted_behind_our_back(version: ZkVersion) {
    let f = ZkFixture::start(version).await;
    let a = f.source().await;
    let g = a
        .acquire(&r("deleted"), &opts(Duration::from_secs(6)))
        .await
        .unwrap();
    f.source()
        .await
        .client()
        .await
        .unwrap()
        .delete(g.key(), None)
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("lost() did not fire");
    assert_eq!(reason, fencing::LossReason::DeletedAtServer);
    assert!(!a.validate(&g).await.unwrap());
}

/// 64 waiters on one lock: each hand-over wakes exactly one waiter.
async fn sixty_four_waiters_no_herd(version: ZkVersion) {
    scenarios::no_thundering_herd::<ZkFixture>(version).await;
}

/// Grants and gates refuse tokens of another ensemble.
async fn foreign_ensemble_is_refused(version: ZkVersion) {
    let (x, y) = (
        ZkFixture::start_with(version, 1).await,
        ZkFixture::start_with(version, 1).await,
    );
    let (sx, sy) = (x.source().await, y.source().await);
    let gate = sy.gate("/fencing-test/gate").unwrap();
    scenarios::foreign_grant_is_refused(&sx, &sy, &gate, Duration::from_secs(2)).await;
}

/// A guarded multi writes only while the grant's node exists.
async fn guarded_multi_refuses_a_superseded_grant(version: ZkVersion) {
    use fencing_zookeeper::zookeeper_client::{Acls, CreateMode};
    let f = ZkFixture::start(version).await;
    let (a, partition) = f.partitionable_source().await;
    let b = f.source().await;
    b.client()
        .await
        .unwrap()
        .create(
            "/data",
            b"",
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    let lock = r("guarded");
    let ga = a
        .acquire(&lock, &opts(Duration::from_secs(2)))
        .await
        .unwrap();
    a.guarded_multi(&ga, |w| w.add_set_data("/data", b"from-a", None))
        .await
        .unwrap();
    partition.set(true);
    let gb = b
        .acquire(&lock, &opts(Duration::from_secs(2)))
        .await
        .unwrap();
    b.guarded_multi(&gb, |w| w.add_set_data("/data", b"from-b", None))
        .await
        .unwrap();
    partition.set(false);
    // The partitioned client's session is gone; a fresh client of A's
    // configuration (same identity) carries its stale grant's write.
    let late = f.source().await;
    match late
        .guarded_multi(&ga, |w| w.add_set_data("/data", b"late-a", None))
        .await
    {
        Err(Error::Lost { .. }) => {}
        other => panic!("superseded guarded write: {other:?}"),
    }
    let (data, _) = b.client().await.unwrap().get_data("/data").await.unwrap();
    assert_eq!(data, b"from-b");
    gb.release().await.unwrap();
}

/// With digest credentials lock nodes are creator-only: a client with other
/// credentials can neither delete the holder's node nor take the lock.
async fn digest_acls_protect_lock_nodes(version: ZkVersion) {
    let f = ZkFixture::start_with(version, 1).await;
    let cfg = |user: &str, pw: &str| f.config(f.ensemble.endpoints()).digest(user, pw);
    let owner = ZkSource::connect(cfg("fencer", "secret")).await.unwrap();
    let g = owner
        .acquire(&r("acl"), &opts(Duration::from_secs(2)))
        .await
        .unwrap();
    let intruder = ZkSource::connect(cfg("fencer", "wrong")).await.unwrap();
    let deleted = intruder.client().await.unwrap().delete(g.key(), None).await;
    assert!(
        matches!(
            deleted,
            Err(fencing_zookeeper::zookeeper_client::Error::NoAuth)
        ),
        "{deleted:?}"
    );
    match intruder
        .try_acquire(&r("acl"), &opts(Duration::from_secs(2)))
        .await
    {
        Err(Error::PermissionDenied(msg)) => assert!(msg.contains("ZooKeeper"), "{msg}"),
        other => panic!("wrong password took part in the lock: {other:?}"),
    }
    assert!(owner.validate(&g).await.unwrap());
    g.release().await.unwrap();
}

/// A release during a 4 s network blip (longer than the request timeout,
/// shorter than the 15 s lease) goes through once the network is back,
/// whether its caller waits for it or gives up on it.
async fn release_during_a_blip_still_releases(version: ZkVersion) {
    scenarios::release_during_a_blip_still_releases::<ZkFixture>(version).await;
}

/// A release is the delete of the lock node and nothing else: the grant's
/// own-node watch is left to fire on that delete rather than removed first
/// (a removeWatches request, and a second one for the event that arrived
/// anyway). Measured as `zk_packets_received` across the release, beside a
/// plain delete of another node; the minimum of three tries of each, as a
/// session's ping can fall into any window.
async fn a_release_sends_only_the_delete(version: ZkVersion) {
    let f = ZkFixture::start(version).await;
    let source = f.source().await;
    let raw = f.source().await.client().await.unwrap();
    let packets = || async { f.ensemble.mntr_sum("zk_packets_received").await.unwrap() };
    let (mut release, mut delete) = (f64::MAX, f64::MAX);
    // The fewest of five tries: a session's ping can land in a window (3
    // tries once counted 5 packets for every plain delete, 4 for a release).
    for i in 0..5 {
        let g = source
            .acquire(&r("one-request"), &opts(Duration::from_secs(30)))
            .await
            .unwrap();
        // The holder's own-node watch is set once the servers count it.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while f.ensemble.mntr_sum("zk_watch_count").await.unwrap() < 1.0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no watch on the lock node"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = packets().await;
        g.release().await.unwrap();
        release = release.min(packets().await - before);

        let path = format!("{}/plain-{i}", f.path);
        let mode = fencing_zookeeper::zookeeper_client::CreateMode::Persistent
            .with_acls(fencing_zookeeper::zookeeper_client::Acls::anyone_all());
        raw.create(&path, b"", &mode).await.unwrap();
        let before = packets().await;
        raw.delete(&path, None).await.unwrap();
        delete = delete.min(packets().await - before);
    }
    assert_eq!(
        release, delete,
        "packets received for a release ({release}) and for a plain delete ({delete})"
    );
}

/// An acquire dropped while its create is unanswered (the replies are lost,
/// the acquire times out) must not leave its node behind.
async fn abandoned_create_leaves_no_node(version: ZkVersion) {
    scenarios::abandoned_acquire_leaves_nothing_behind::<ZkFixture>(
        version,
        Duration::from_secs(15),
        Duration::from_millis(1500),
        Duration::ZERO,
        Duration::from_secs(10),
    )
    .await;
}

/// A grant whose session timeout the ensemble capped (100 s asked, 60 s
/// allowed): a guarded multi must use an open session, not open a new one
/// on every call because no session is filed under the negotiated timeout.
async fn guarded_multi_opens_no_extra_session(version: ZkVersion) {
    let f = ZkFixture::start(version).await;
    let s = f.source().await;
    let g = s
        .acquire(&r("capped"), &opts(Duration::from_secs(100)))
        .await
        .unwrap();
    assert_eq!(
        g.ttl(),
        Duration::from_secs(60),
        "maxSessionTimeout caps it"
    );
    let before = s.open_sessions().await;
    for i in 0..3 {
        s.guarded_multi(&g, |w| {
            w.add_create(
                &format!("/fencing-test/capped-{i}"),
                b"",
                &fencing_zookeeper::zookeeper_client::CreateMode::Persistent
                    .with_acls(fencing_zookeeper::zookeeper_client::Acls::anyone_all()),
            )
        })
        .await
        .unwrap();
    }
    assert_eq!(
        s.open_sessions().await,
        before,
        "guarded_multi opened sessions"
    );
    g.release().await.unwrap();
}

/// A waiter whose session is lost while it is queued (a partition longer
/// than the TTL) queues again with a new session instead of giving up.
async fn waiter_requeues_after_losing_its_session(version: ZkVersion) {
    scenarios::waiter_requeues_after_losing_its_session::<ZkFixture>(version).await;
}

/// A lease declared lost frees the lock at the server, whatever the holder
/// does with its grant. The leader is stopped (SIGSTOP) past the holder's
/// lease window (0.75 of its 4 s session) but within syncLimit (6 s), so
/// no election follows; it is resumed once the holder reported the loss.
/// The holder's client pinged a follower all along, so the session lived
/// on at the server; the holder keeps its lost grant, as a user still in
/// its work would, yet another client must be granted within one session
/// timeout, and the holder's gate (made before) must admit that client's
/// token and refuse the holder's.
async fn a_lease_lost_to_a_stalled_leader_frees_the_lock(version: ZkVersion) {
    use fencing::{Gate, LossReason};
    use fencing_harness::member::MemberCluster;
    let session = Duration::from_secs(4);
    let f = ZkFixture::start_options(ZkOptions::new(version, 3).sync_limit(30)).await;
    let leader = f.ensemble.leader().await.unwrap();
    let followers = (0..3)
        .filter(|&i| i != leader)
        .map(|i| f.ensemble.endpoint(i));
    let a = ZkSource::connect(f.config(followers.collect()).ttl(session))
        .await
        .unwrap();
    let gate = a.gate("/fencing-test/marks").unwrap();
    let held = a.acquire(&r("stall"), &opts(session)).await.unwrap();
    gate.admit_grant(held.info()).await.unwrap();

    f.ensemble.pause(leader);
    let lost = tokio::time::timeout(session, held.lost()).await;
    f.ensemble.resume(leader);
    assert_eq!(
        lost.ok(),
        Some(LossReason::ExpiredLocally),
        "the holder's loss"
    );

    let b = f.source().await;
    let next = b
        .acquire(&r("stall"), &AcquireOptions::new().wait(session))
        .await
        .expect("another client is granted within one session timeout of the loss");
    assert!(next.token() > held.token());
    gate.admit_grant(next.info())
        .await
        .expect("the gate admits again after its session ended");
    assert!(matches!(
        gate.admit_grant(held.info()).await,
        Err(Error::Stale { .. })
    ));
    held.release().await.unwrap();
    next.release().await.unwrap();
}

/// `close()` ends the source's sessions at the server and waits: its
/// grant is lost at once (released) and another client is granted without
/// waiting for a session timeout (30 s here).
async fn close_ends_the_sessions_and_frees_the_locks(version: ZkVersion) {
    let f = ZkFixture::start(version).await;
    let (a, b) = (f.source().await, f.source().await);
    let held = a
        .acquire(&r("closed"), &opts(Duration::from_secs(30)))
        .await
        .unwrap();
    a.close().await.unwrap();
    assert_eq!(
        held.lease().loss_reason(),
        Some(fencing::LossReason::Released)
    );
    let next = b
        .acquire(
            &r("closed"),
            &AcquireOptions::new().wait(Duration::from_secs(3)),
        )
        .await
        .expect("granted at once, not after the closed session's 30 s timeout");
    assert!(next.token() > held.token());
    next.release().await.unwrap();
}

/// Bad input: unreachable ensembles time out naming the hosts; bad paths
/// and resource names are refused.
async fn bad_input_is_refused(version: ZkVersion) {
    let f = ZkFixture::start_with(version, 1).await;
    let dead = Proxy::start(f.ensemble.endpoints()[0].parse().unwrap())
        .await
        .unwrap();
    dead.set_blackhole(true);
    let cfg = f
        .config(vec![dead.endpoint()])
        .request_timeout(Duration::from_millis(800));
    scenarios::unreachable_endpoint_times_out(ZkSource::connect(cfg), &dead.endpoint()).await;
    for path in ["relative", "/ends/", "/a//b", "/a/./b", "/a/../b", "/"] {
        assert!(
            matches!(
                ZkConfig::new(f.ensemble.endpoints(), path),
                Err(Error::Config(_))
            ),
            "{path}"
        );
    }
    let s = f.source().await;
    for bad in ["a/b", "..", "."] {
        assert!(
            matches!(
                s.acquire(
                    &ResourceName::nonportable(bad).unwrap(),
                    &opts(Duration::from_secs(2))
                )
                .await,
                Err(Error::InvalidResource { .. })
            ),
            "{bad}"
        );
    }
}

/// An ensemble whose `maxSessionTimeout` (4 s) is below the TTL asked for
/// (20 s) negotiates the session down: the holder must count the 4 s the
/// servers keep, not the 20 s it asked for, or it would go on working for
/// 14 s after the session expired.
async fn a_lease_counts_the_negotiated_timeout(version: ZkVersion) {
    use fencing_harness::zk::ensemble::ZkEnsemble;
    const MAX: Duration = Duration::from_secs(4);
    let options = ZkOptions::new(version, 1).max_session_timeout(MAX);
    let ensemble = ZkEnsemble::start_with(options)
        .await
        .expect("start ZooKeeper");
    let source = fencing::connect(&format!("zk://{}/negotiated", ensemble.connect_string()))
        .await
        .expect("connect");
    let asked = Duration::from_secs(20);
    let sent = tokio::time::Instant::now();
    let g = source
        .acquire(&r("negotiated"), &opts(asked))
        .await
        .expect("acquire");
    let counted = g.deadline() - sent;
    assert!(
        counted <= MAX,
        "asked for {asked:?}, the servers keep at most {MAX:?}, the holder counts {counted:?}"
    );
    g.release().await.expect("release");
    source.close().await.expect("close");
}

/// Ports that accept connections and never answer (a dead server behind a
/// proxy, the published port of a disconnected container).
struct SilentPorts {
    addrs: Vec<String>,
    task: tokio::task::JoinHandle<()>,
}

impl SilentPorts {
    async fn bind(n: usize) -> SilentPorts {
        let mut listeners = Vec::new();
        for _ in 0..n {
            listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let addrs = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                for l in &listeners {
                    if let Ok(Ok((socket, _))) =
                        tokio::time::timeout(Duration::from_millis(20), l.accept()).await
                    {
                        held.push(socket);
                    }
                }
            }
        });
        SilentPorts { addrs, task }
    }
}

impl Drop for SilentPorts {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Two silent servers listed before a live one do not use up the connect
/// timeout: the client gives each server a share of it and moves on.
async fn silent_servers_before_a_live_one_are_skipped(version: ZkVersion) {
    let f = ZkFixture::start_with(version, 1).await;
    let silent = SilentPorts::bind(2).await;
    let mut hosts = silent.addrs.clone();
    hosts.extend(f.ensemble.endpoints());
    for attempt in 0..3 {
        // The defaults (10 s session, 5 s requests): with a short session
        // the client's own per-server limit is short anyway.
        let cfg = f
            .config(hosts.clone())
            .ttl(fencing_zookeeper::DEFAULT_SESSION_TIMEOUT)
            .request_timeout(fencing_zookeeper::DEFAULT_REQUEST_TIMEOUT);
        if let Err(e) = ZkSource::connect(cfg).await {
            panic!("connect {attempt} with silent servers listed first: {e}");
        }
    }
}

fencing_harness::on_both_zk_versions!(
    leader_killed_while_held_and_waited_for,
    all_servers_restarted,
    frozen_holder_process_is_fenced,
    parent_recreated_tokens_still_increase,
    node_deleted_behind_our_back,
    sixty_four_waiters_no_herd,
    foreign_ensemble_is_refused,
    guarded_multi_refuses_a_superseded_grant,
    digest_acls_protect_lock_nodes,
    a_release_sends_only_the_delete,
    waiter_requeues_after_losing_its_session,
    abandoned_create_leaves_no_node,
    guarded_multi_opens_no_extra_session,
    bad_input_is_refused,
);

// What only our client decides (which server it tries, when it deletes,
// when it closes a session) runs on the newest release only: the servers'
// part is the same on both, and each of these costs 4-10 s.
fencing_harness::version_tests!(
    fencing_harness::zk::ensemble::ZkVersion::V3_9,
    v3_9_client,
    [
        silent_servers_before_a_live_one_are_skipped,
        a_lease_counts_the_negotiated_timeout,
        release_during_a_blip_still_releases,
        a_lease_lost_to_a_stalled_leader_frees_the_lock,
        close_ends_the_sessions_and_frees_the_locks
    ]
);
