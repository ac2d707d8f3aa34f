//! Scenarios shared by the backends' tests: each takes what differs (how to
//! make a client, how to count contenders) and checks the same property.

use std::future::Future;
use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, FencingToken, Gate, ResourceName};
use fencing_testkit::History;

use crate::member::MemberCluster;

/// Waiters in the herd test.
pub const HERD: usize = 64;

/// 64 waiters queue behind one holder; the lock is handed down the queue.
/// Each hand-over must wake exactly one waiter: the sum of `wakeups` over
/// all waiters is 64 (a herd would be about 64 * 63 / 2). Grants must not
/// overlap and tokens must increase.
pub async fn no_thundering_herd<S, C, CF>(
    holder: S,
    waiters: Vec<S>,
    contenders: C,
    wakeups: fn(&S) -> u64,
) where
    S: FencingSource + Clone + 'static,
    C: Fn() -> CF,
    CF: Future<Output = usize>,
{
    assert_eq!(waiters.len(), HERD);
    let lock = ResourceName::new("herd").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .timeout(Duration::from_secs(60));
    let first = holder.acquire(&lock, &opts).await.unwrap();
    let history = History::new();
    let gate = std::sync::Arc::new(fencing::MemoryGate::new());
    let mut tasks = Vec::new();
    for (id, s) in waiters.iter().cloned().enumerate() {
        let (lock, history, opts, gate) =
            (lock.clone(), history.clone(), opts.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let g = s.acquire(&lock, &opts).await.expect("waiter acquire");
            history.granted(id + 1, g.token()).await;
            // A critical section with a gated write: a second holder granted
            // meanwhile shows as an overlap, and its write as a verdict.
            // The verdict is judged on the history: a refusal here means a
            // newer holder already wrote, which the grant check reports.
            let _ = history.write(&*gate, &lock, id + 1, g.token()).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            history.released(id + 1, g.token()).await;
            g.release().await.unwrap();
        }));
    }
    // Every waiter is queued before the first hand-over.
    for _ in 0..400 {
        if contenders().await == HERD + 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    history.granted(0, first.token()).await;
    history.released(0, first.token()).await;
    first.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(90), t)
            .await
            .expect("waiters finish")
            .unwrap();
    }
    history.check().await.unwrap();
    let total: u64 = waiters.iter().map(wakeups).sum();
    eprintln!("{HERD} waiters, {total} wake-ups");
    assert_eq!(
        total, HERD as u64,
        "each hand-over must wake exactly one waiter"
    );
}

/// One critical section of an interop test: the token held, the shared
/// counter value read inside, and whether the other language held it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Held {
    /// The token of the grant.
    pub token: u64,
    /// The counter read under the lock.
    pub read: u64,
    /// True for the Go or Java side.
    pub anchor: bool,
}

impl Held {
    /// Parses the anchor program's `{"event":"held","token":T,"read":R}` line.
    pub fn from_anchor_line(line: &str) -> Held {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        Held {
            token: v["token"].as_u64().expect("token"),
            read: v["read"].as_u64().expect("read"),
            anchor: true,
        }
    }
}

/// Checks an interop history: by token order the unprotected counter reads
/// 0, 1, 2, ... (mutual exclusion held and tokens follow the lock order),
/// and the lock really passed between the languages.
pub fn check_interop(mut held: Vec<Held>, label: &str) {
    held.sort();
    let reads: Vec<u64> = held.iter().map(|h| h.read).collect();
    let expected: Vec<u64> = (0..held.len() as u64).collect();
    assert_eq!(
        reads, expected,
        "by token order the counter must read 0, 1, 2, ...: {held:?}"
    );
    let switches = held
        .windows(2)
        .filter(|w| w[0].anchor != w[1].anchor)
        .count();
    eprintln!(
        "{label}: {} critical sections, the lock changed language {switches} times",
        held.len()
    );
    assert!(
        switches >= 2,
        "the two sides never really contended: {held:?}"
    );
}

/// The leader dies while `a` holds the lock and `b` waits for it: `a` keeps
/// its grant, `b` does not get in before `a` releases, and the tokens of
/// `a`, `b` and then `c` (after the old leader is back) strictly increase.
/// Returns the three tokens.
/// `queued` counts the contenders the coordinator has queued on the lock
/// (`leader-kill`), so the leader dies only once `b` really waits.
pub async fn leader_loss<S, Q, QF>(
    cluster: &mut impl MemberCluster,
    [a, b, c]: [S; 3],
    queued: Q,
    ttl: Duration,
) -> [FencingToken; 3]
where
    S: FencingSource + Clone + 'static,
    Q: Fn() -> QF,
    QF: Future<Output = usize>,
{
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .timeout(Duration::from_secs(30));
    let history = History::new();
    let lock = ResourceName::new("leader-kill").unwrap();
    let ga = a.acquire(&lock, &opts).await.unwrap();
    history.granted(0, ga.token()).await;
    let waiter = tokio::spawn({
        let (lock, history, opts) = (lock.clone(), history.clone(), opts.clone());
        async move {
            let g = b.acquire(&lock, &opts).await.expect("waiter acquire");
            history.granted(1, g.token()).await;
            g
        }
    });
    let patience = tokio::time::Instant::now() + Duration::from_secs(30);
    while queued().await < 2 {
        assert!(
            tokio::time::Instant::now() < patience,
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let leader = cluster.kill_leader().await.expect("kill the leader");
    assert!(
        !waiter.is_finished(),
        "waiter got the lock while it was held"
    );
    assert!(
        a.validate(&ga).await.unwrap(),
        "holder lost its lock to a leader change"
    );
    let first = ga.token();
    history.released(0, first).await;
    ga.release().await.unwrap();
    let gb = waiter.await.unwrap();
    cluster.restart(leader).await.expect("restart");
    let second = gb.token();
    history.released(1, second).await;
    gb.release().await.unwrap();
    let gc = c.acquire(&lock, &opts).await.unwrap();
    let third = gc.token();
    history.granted(2, third).await;
    gc.release().await.unwrap();
    history.check().await.unwrap();
    assert!(
        first < second && second < third,
        "tokens {first}, {second}, {third}"
    );
    [first, second, third]
}

/// Every member restarts on its data: the next grant's token is above the
/// last one handed out before. `connect` makes a fresh client (clients of
/// the old processes are not reused).
pub async fn full_restart<S, C, CF>(cluster: &mut impl MemberCluster, connect: C)
where
    S: FencingSource,
    C: Fn() -> CF,
    CF: Future<Output = S>,
{
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .timeout(Duration::from_secs(30));
    let lock = ResourceName::new("restart-all").unwrap();
    let g = connect().await.acquire(&lock, &opts).await.unwrap();
    let before = g.token();
    g.release().await.unwrap();
    cluster.restart_all().await.expect("restart all");
    let g = connect().await.acquire(&lock, &opts).await.unwrap();
    assert!(
        g.token() > before,
        "token {} after restart, {before} before",
        g.token()
    );
    g.release().await.unwrap();
}

/// A release during a network blip must not leave the lock blocked while
/// the holder's session lives on: the holder (behind `partition`) is cut
/// off for `blip`, longer than its request timeout so a delete attempt
/// fails, but shorter than its lease, so its session survives and keeps the
/// key alive. Twice: once the release is awaited (it must be retried), once
/// its caller gives up on it during the cut (`timeout(..., release())`: it
/// must go on without the caller). Each time `waiter` must be granted soon
/// after the network is back, before the holder's lease could have run out.
pub async fn release_during_a_blip_still_releases<S>(
    holder: S,
    partition: &crate::etcd::fixture::Partition,
    waiter: S,
    ttl: Duration,
    blip: Duration,
) where
    S: FencingSource + Clone + 'static,
{
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .timeout(Duration::from_secs(60));
    for abandoned in [false, true] {
        let lock = ResourceName::new(if abandoned {
            "release-abandoned"
        } else {
            "release-blip"
        })
        .unwrap();
        let held = holder.acquire(&lock, &opts).await.unwrap();
        let waiting = tokio::spawn({
            let (waiter, lock, opts) = (waiter.clone(), lock.clone(), opts.clone());
            async move { waiter.acquire(&lock, &opts).await }
        });
        partition.set(true);
        let cut_at = tokio::time::Instant::now();
        let awaited = if abandoned {
            let gave_up = tokio::time::timeout(blip / 4, held.release()).await;
            assert!(gave_up.is_err(), "the release went through a cut network");
            None
        } else {
            Some(tokio::spawn(held.release()))
        };
        tokio::time::sleep_until(cut_at + blip).await;
        partition.set(false);
        // The holder's last renewal before the cut was at most ttl/3
        // earlier, so its lease could not have expired before cut + 2/3 ttl.
        let bound = ttl * 2 / 3;
        let granted = tokio::time::timeout_at(cut_at + bound, waiting)
            .await
            .unwrap_or_else(|_| {
                panic!("the waiter was not granted within {bound:?} of the cut (release abandoned: {abandoned}): the holder's key still blocks the lock")
            })
            .unwrap()
            .expect("waiter acquire");
        eprintln!(
            "waiter granted {:?} after the cut (release abandoned: {abandoned})",
            cut_at.elapsed()
        );
        if let Some(release) = awaited {
            tokio::time::timeout(Duration::from_secs(10), release)
                .await
                .expect("release still running 10 s after the waiter was granted")
                .unwrap()
                .expect("the retried release reports success");
        }
        granted.release().await.unwrap();
    }
}

/// An acquire given up while every answer to it is lost: the cluster
/// applied its create, so its key or node stands first in the queue on the
/// source's live session, and would block everyone for as long as that
/// session lives. `a` (behind `partition`) gives up after `give_up`; the
/// answers stay lost `lost_after` longer (so a clean-up's first requests
/// are lost too); then `b` must be granted within `wait`, long before `a`'s
/// session, renewed again, could end.
pub async fn abandoned_acquire_leaves_nothing_behind<S: FencingSource>(
    a: S,
    partition: &crate::etcd::fixture::Partition,
    b: S,
    ttl: Duration,
    give_up: Duration,
    lost_after: Duration,
    wait: Duration,
) {
    let lock = ResourceName::new("abandoned").unwrap();
    let opts = |timeout| AcquireOptions::new().ttl(ttl).timeout(timeout);
    // The session (and on ZooKeeper the lock's parent) exist before the fault.
    let warm = a.acquire(&lock, &opts(wait)).await.unwrap();
    warm.release().await.unwrap();
    partition.set_replies_dropped(true);
    let abandoned = a.acquire(&lock, &opts(give_up)).await;
    assert!(
        matches!(abandoned, Err(Error::Timeout { .. })),
        "granted without answers: {abandoned:?}"
    );
    tokio::time::sleep(lost_after).await;
    partition.set_replies_dropped(false);
    let started = tokio::time::Instant::now();
    let granted = b.acquire(&lock, &opts(wait)).await;
    let waited = started.elapsed();
    let g = match granted {
        Ok(g) => g,
        Err(e) => {
            let head = b.holder(&lock).await;
            panic!("the abandoned acquire's key still heads the queue: {e}; holder {head:?}")
        }
    };
    eprintln!("granted {waited:?} after the fault ended");
    g.release().await.unwrap();
    drop(a);
}

/// A waiter (behind `partition`) is cut off for twice the TTL while it is
/// queued, so its session is lost. It must start a new session and queue
/// again rather than give up: once the holder releases, it is granted,
/// within its own 60 s wait bound.
pub async fn waiter_requeues_after_losing_its_session<S>(
    holder: S,
    waiter: S,
    partition: &crate::etcd::fixture::Partition,
    ttl: Duration,
) where
    S: FencingSource + Clone + 'static,
{
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .timeout(Duration::from_secs(60));
    let lock = ResourceName::new("requeue").unwrap();
    let held = holder.acquire(&lock, &opts).await.unwrap();
    let waiting = tokio::spawn({
        let (lock, opts) = (lock.clone(), opts.clone());
        async move { waiter.acquire(&lock, &opts).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    partition.set(true);
    tokio::time::sleep(ttl * 2).await;
    partition.set(false);
    if waiting.is_finished() {
        let outcome = waiting.await.unwrap();
        panic!("the waiter stopped waiting after losing its session: {outcome:?}");
    }
    let first = held.token();
    held.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("granted after the release")
        .unwrap()
        .expect("the waiter's acquire");
    assert!(granted.token() > first, "{} after {first}", granted.token());
    granted.release().await.unwrap();
}

/// One single-member fault of [`ride_through_member_faults`].
#[derive(Clone, Copy, Debug)]
pub enum MemberFault {
    /// SIGKILL, down for a while, started again on its data.
    Kill,
    /// SIGSTOP for a while, then SIGCONT.
    Pause,
    /// SIGKILL and an immediate start on its data.
    Restart,
}

/// What [`ride_through_member_faults`] saw.
#[derive(Debug, Default)]
pub struct RideThrough {
    /// Faults injected.
    pub faults: usize,
    /// For each fault: from the fault to the holder's first renewal sent
    /// after it and confirmed, in ms (`None`: the grant was lost).
    pub renewal_ms: Vec<Option<u128>>,
    /// Waiters whose acquire returned an error before the end.
    pub waiters_gave_up: usize,
}

/// One holder and four waiters on a lock while every member in turn is
/// killed, paused and restarted `rounds` times (one member at a time, so
/// quorum holds; each fault lasts `down`). Counts leases lost, waiters that
/// gave up early, and how long after each fault the holder's lease was
/// renewed again. At the end the holder releases and every waiter must be
/// granted in turn.
pub async fn ride_through_member_faults<S>(
    cluster: &mut impl MemberCluster,
    holder: S,
    waiters: Vec<S>,
    ttl: Duration,
    rounds: usize,
    down: Duration,
) -> RideThrough
where
    S: FencingSource + Clone + 'static,
{
    let lock = ResourceName::new("ride-through").unwrap();
    let hold = AcquireOptions::new()
        .ttl(ttl)
        .timeout(Duration::from_secs(30));
    let held = holder.acquire(&lock, &hold).await.unwrap();
    let wait = AcquireOptions::new()
        .ttl(ttl)
        .timeout(Duration::from_secs(3600));
    let queue: Vec<_> = waiters
        .into_iter()
        .map(|w| {
            let (lock, wait) = (lock.clone(), wait.clone());
            // Each waiter gives the lock back at once, so the next in line
            // is not stuck behind a task nobody has joined yet.
            tokio::spawn(async move { w.acquire(&lock, &wait).await?.release().await })
        })
        .collect();
    let mut seen = RideThrough::default();
    for _ in 0..rounds {
        for member in 0..cluster.member_count() {
            for fault in [MemberFault::Kill, MemberFault::Pause, MemberFault::Restart] {
                let at = tokio::time::Instant::now();
                let renewed = tokio::spawn(first_renewal_after(held.lease().clone(), at));
                inject(cluster, member, fault, down).await;
                let ms = renewed.await.unwrap();
                eprintln!("{fault:?} of member {member}: renewed after {ms:?} ms");
                seen.faults += 1;
                seen.renewal_ms.push(ms);
            }
        }
    }
    held.release().await.unwrap();
    for waiter in queue {
        match tokio::time::timeout(Duration::from_secs(60), waiter).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                eprintln!("a waiter gave up: {e}");
                seen.waiters_gave_up += 1;
            }
            other => panic!("waiter not granted a minute after the release: {other:?}"),
        }
    }
    seen
}

async fn inject(
    cluster: &mut impl MemberCluster,
    member: usize,
    fault: MemberFault,
    down: Duration,
) {
    match fault {
        MemberFault::Kill => {
            cluster.kill(member);
            tokio::time::sleep(down).await;
            cluster.restart(member).await.expect("restart");
        }
        MemberFault::Pause => {
            cluster.pause(member);
            tokio::time::sleep(down).await;
            cluster.resume(member);
        }
        MemberFault::Restart => {
            cluster.kill(member);
            cluster.restart(member).await.expect("restart");
        }
    }
    cluster
        .wait_healthy()
        .await
        .expect("the cluster serves again");
}

/// Ms from `at` until a renewal sent after `at` was confirmed; `None` when
/// the grant was lost first.
pub async fn first_renewal_after(
    lease: fencing::LeaseView,
    at: tokio::time::Instant,
) -> Option<u128> {
    loop {
        if !lease.is_live() {
            return None;
        }
        if lease.last_renewal() > at {
            return Some(at.elapsed().as_millis());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// With each member in turn killed just before the first release, `a` and
/// `b` hand the lock back and forth `per_member` times: one waits, the
/// other releases. Returns, in ms, the time from the start of each release
/// to the waiter's grant.
pub async fn handover_with_a_member_dead<S>(
    cluster: &mut impl MemberCluster,
    a: S,
    b: S,
    ttl: Duration,
    per_member: usize,
) -> Vec<u128>
where
    S: FencingSource + Clone + 'static,
{
    let lock = ResourceName::new("handover-dead-member").unwrap();
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .timeout(Duration::from_secs(30));
    let mut samples = Vec::new();
    for member in 0..cluster.member_count() {
        let mut holder = a.acquire(&lock, &opts).await.unwrap();
        let (mut me, mut other) = (a.clone(), b.clone());
        for round in 0..per_member {
            let waiting = tokio::spawn({
                let (other, lock, opts) = (other.clone(), lock.clone(), opts.clone());
                async move {
                    let g = other.acquire(&lock, &opts).await;
                    (g, tokio::time::Instant::now())
                }
            });
            // Let the waiter queue (a hand-over to a queued waiter is what
            // is measured; its first attempt sees the lock held).
            tokio::time::sleep(Duration::from_millis(300)).await;
            if round == 0 {
                // Killed just before the first release: the clients' open
                // connections to it are the ones a release could stall on.
                cluster.kill(member);
            }
            let released = tokio::time::Instant::now();
            holder.release().await.unwrap();
            let (granted, at) = waiting.await.unwrap();
            holder = granted.unwrap();
            samples.push((at - released).as_millis());
            std::mem::swap(&mut me, &mut other);
        }
        holder.release().await.unwrap();
        cluster.restart(member).await.expect("restart");
        cluster
            .wait_healthy()
            .await
            .expect("the cluster serves again");
    }
    samples
}

/// Takes locks `lock-0` .. `lock-{n-1}` from one source, `in_flight`
/// acquires at a time; the first failure ends it, naming the lock.
pub async fn acquire_many<S>(
    source: std::sync::Arc<S>,
    n: usize,
    in_flight: usize,
    options: &AcquireOptions,
) -> Result<Vec<fencing::Grant>, String>
where
    S: FencingSource + ?Sized + 'static,
{
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..in_flight.min(n) {
        let (source, options) = (source.clone(), options.clone());
        workers.spawn(async move {
            let mut grants = Vec::new();
            for i in (worker..n).step_by(in_flight) {
                let name = ResourceName::new(format!("lock-{i}")).map_err(|e| e.to_string())?;
                let grant = source.acquire(&name, &options).await;
                grants.push(grant.map_err(|e| format!("acquire {name}: {e}"))?);
            }
            Ok::<_, String>(grants)
        });
    }
    let mut all = Vec::with_capacity(n);
    while let Some(done) = workers.join_next().await {
        all.extend(done.map_err(|e| format!("acquire worker: {e}"))??);
    }
    Ok(all)
}

/// A grant of one cluster shown to a source of another: `validate` and a
/// gate of the other cluster refuse it as foreign, and the gate writes
/// nothing.
pub async fn foreign_grant_is_refused(
    minter: &impl FencingSource,
    other: &impl FencingSource,
    other_gate: &impl Gate,
    ttl: Duration,
) {
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .timeout(Duration::from_secs(30));
    let g = minter
        .acquire(&ResourceName::new("foreign").unwrap(), &opts)
        .await
        .unwrap();
    assert!(matches!(
        other.validate(&g).await,
        Err(Error::ForeignSource { .. })
    ));
    assert!(matches!(
        other_gate.admit_grant(g.info()).await,
        Err(Error::ForeignSource { .. })
    ));
    assert_eq!(
        other_gate.high_water(g.resource()).await.unwrap(),
        None,
        "nothing was written"
    );
    g.release().await.unwrap();
}

/// Connecting to an endpoint that answers nothing fails with a timeout that
/// names the endpoint, well within 10 s (the request timeout is shorter).
pub async fn unreachable_endpoint_times_out<S: std::fmt::Debug>(
    connect: impl Future<Output = fencing::Result<S>>,
    endpoint: &str,
) {
    let started = tokio::time::Instant::now();
    match connect.await {
        Err(Error::Timeout { operation, .. }) => {
            assert!(operation.contains(endpoint), "{operation}")
        }
        other => panic!("unreachable endpoint {endpoint}: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}
