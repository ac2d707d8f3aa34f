//! The checks every FencingSource must pass. Each panics with a message
//! naming the broken property.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencing_core::{AcquireOptions, Error, FileGate, Gate, Grant, MemoryGate, ResourceName};
use tokio::time::Instant;

use crate::harness::{Client, Harness};
use crate::history::History;

fn opts(h: &dyn Harness) -> AcquireOptions {
    AcquireOptions::new().ttl(h.ttl()).wait(h.ttl() * 10)
}

async fn acquire(client: &Client, h: &dyn Harness, resource: &fencing_core::ResourceName) -> Grant {
    client
        .source
        .acquire(resource, &opts(h))
        .await
        .expect("acquire")
}

/// Tokens of successive grants on one resource strictly increase.
pub async fn sequential_grants_strictly_increase(h: &dyn Harness) {
    let r = h.resource("sequential");
    let c = h.client().await;
    let mut last = None;
    for _ in 0..5 {
        let g = acquire(&c, h, &r).await;
        if let Some(prev) = last {
            assert!(
                g.token() > prev,
                "token {} did not increase past {prev}",
                g.token()
            );
        }
        last = Some(g.token());
        g.release().await.expect("release");
    }
}

/// N contenders, several rounds each: never two live grants at once, tokens
/// increase in grant order, and every holder's write passes the gate.
pub async fn one_live_grant_under_contention(h: &dyn Harness) {
    const CONTENDERS: usize = 4;
    const ROUNDS: usize = 4;
    let r = h.resource("contention");
    let history = History::new();
    let gate = Arc::new(MemoryGate::new());
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for id in 0..CONTENDERS {
        let c = h.client().await;
        let (r, history, gate, inside, o) = (
            r.clone(),
            history.clone(),
            gate.clone(),
            inside.clone(),
            opts(h),
        );
        tasks.push(tokio::spawn(async move {
            // Move the whole client in: it owns what keeps it connected
            // (a closure would otherwise capture only `c.source`).
            let c = c;
            for _ in 0..ROUNDS {
                let g = c.source.acquire(&r, &o).await.expect("acquire");
                history.granted(id, g.token()).await;
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders inside at once"
                );
                history
                    .write(gate.as_ref(), &r, id, g.token())
                    .await
                    .expect("holder's write refused");
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                history.released(id, g.token()).await;
                g.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender task");
    }
    history.check().await.expect("contention history");
}

/// A holder that stops renewing loses the grant; the next contender gets a
/// higher token, and only after the old holder's `lost()` has fired.
pub async fn expiry_regrants_with_higher_token(h: &dyn Harness) {
    let r = h.resource("expiry");
    let (a, b) = (h.client().await, h.client().await);
    let ga = acquire(&a, h, &r).await;
    a.stall().await;
    let lost_at = tokio::spawn({
        let ga = Arc::new(ga);
        async move {
            ga.lost().await;
            (Instant::now(), ga)
        }
    });
    let gb = acquire(&b, h, &r).await;
    let granted_at = Instant::now();
    let (lost_at, ga) = lost_at.await.expect("lost watcher");
    assert!(
        gb.token() > ga.token(),
        "re-grant {} not above {}",
        gb.token(),
        ga.token()
    );
    assert!(
        lost_at <= granted_at,
        "old holder learned of its loss after the re-grant"
    );
    gb.release().await.expect("release");
}

/// Returns once `n` contenders are queued on `resource` where the backend
/// shows its queue; elsewhere (a polling waiter, no queue to see) after
/// half a TTL, time for a waiter's first attempt.
async fn wait_until_queued(h: &dyn Harness, resource: &ResourceName, n: usize) {
    let patience = Instant::now() + Duration::from_secs(30);
    loop {
        match h.queued(resource).await {
            None => return tokio::time::sleep(h.ttl() / 2).await,
            Some(queued) if queued >= n => return,
            Some(queued) => assert!(
                Instant::now() < patience,
                "only {queued} of {n} contenders queued after 30 s"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Release hands the resource to a waiting contender at once, with a
/// higher token, without waiting for the lease to run out.
pub async fn release_hands_over_to_waiter(h: &dyn Harness) {
    let r = h.resource("handover");
    let (a, b) = (h.client().await, h.client().await);
    let ga = acquire(&a, h, &r).await;
    let waiter = tokio::spawn({
        let (src, r, o) = (b.source.clone(), r.clone(), opts(h));
        async move { src.acquire(&r, &o).await.map(|g| (g, Instant::now())) }
    });
    wait_until_queued(h, &r, 2).await;
    // Queued means its key or node exists; give it time to look at the
    // lock and start waiting on its predecessor, so that the hand-over
    // below goes through that wait (a release right after the queueing
    // can beat the waiter's first look, which then finds the lock free).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "waiter got the resource while it was held"
    );
    let first = ga.token();
    let released_at = Instant::now();
    ga.release().await.expect("release");
    let (gb, granted_at) = waiter.await.expect("waiter task").expect("waiter acquire");
    assert!(gb.token() > first);
    let wait = granted_at - released_at;
    assert!(
        wait < h.ttl(),
        "hand-over took {wait:?}: the waiter waited for expiry, not release"
    );
    gb.release().await.expect("release");
}

/// The reference's pause: the stalled holder's write is refused by a gate
/// (in memory and on disk) while the new holder's write and its retry pass.
pub async fn stale_holder_write_is_rejected(h: &dyn Harness) {
    let r = h.resource("stale");
    let (a, b) = (h.client().await, h.client().await);
    let dir = tempfile::tempdir().expect("temp dir");
    let file_gate = FileGate::open(dir.path().join("gate")).expect("file gate");
    let memory_gate = MemoryGate::new();
    let gates: [&dyn Gate; 2] = [&memory_gate, &file_gate];
    let history = History::new();

    let ga = acquire(&a, h, &r).await;
    history.granted(0, ga.token()).await;
    for gate in gates {
        history
            .write(gate, &r, 0, ga.token())
            .await
            .expect("first write");
    }
    a.stall().await;
    // The old holder stops when its lost() fires, seen by a watcher while
    // the new holder acquires, so the history shows which came first.
    let (old_token, ga) = (ga.token(), Arc::new(ga));
    let loss = tokio::spawn({
        let (ga, history) = (ga.clone(), history.clone());
        async move {
            ga.lost().await;
            history.released_at(0, ga.token(), Instant::now()).await;
        }
    });
    let gb = acquire(&b, h, &r).await;
    history.granted(1, gb.token()).await;
    loss.await.expect("loss watcher");
    for gate in gates {
        history
            .write(gate, &r, 1, gb.token())
            .await
            .expect("new holder's write");
        match history.write(gate, &r, 0, old_token).await {
            Err(Error::Stale { presented, highest }) => {
                assert_eq!((presented, highest), (old_token, gb.token()));
            }
            other => panic!("stale write was not refused: {other:?}"),
        }
        history
            .write(gate, &r, 1, gb.token())
            .await
            .expect("retry with the current token");
    }
    history.check().await.expect("stale-write history");
    gb.release().await.expect("release");
}

/// `validate` says true while held and false once the grant is lost.
pub async fn validate_turns_false_after_loss(h: &dyn Harness) {
    let r = h.resource("validate");
    let (a, b) = (h.client().await, h.client().await);
    let ga = acquire(&a, h, &r).await;
    assert!(
        a.source.validate(&ga).await.expect("validate"),
        "fresh grant not valid"
    );
    assert!(b
        .source
        .validate(&ga)
        .await
        .expect("validate from another client"));
    a.stall().await;
    let gb = acquire(&b, h, &r).await;
    assert!(
        !b.source.validate(&ga).await.expect("validate"),
        "superseded grant still valid"
    );
    assert!(!ga.is_live(), "superseded grant still live locally");
    assert!(b.source.validate(&gb).await.expect("validate"));
    gb.release().await.expect("release");
}

/// `lost()` fires no later than TTL after the last renewal could have been
/// sent (the moment of the stall).
pub async fn lost_fires_by_the_local_deadline(h: &dyn Harness) {
    let r = h.resource("deadline");
    let a = h.client().await;
    let ga = acquire(&a, h, &r).await;
    a.stall().await;
    let stalled_at = Instant::now();
    ga.lost().await;
    let late = Instant::now().saturating_duration_since(stalled_at + h.ttl());
    assert!(late.is_zero(), "lost() fired {late:?} after stall + TTL");
    assert!(!ga.is_live());
}

/// `holder` names the holder and its token; `try_acquire` and a bounded
/// `acquire` do not get past it.
pub async fn holder_and_try_acquire_respect_the_holder(h: &dyn Harness) {
    let r = h.resource("holder");
    let (a, b) = (h.client().await, h.client().await);
    let ga = a
        .source
        .acquire(&r, &opts(h).holder("holder-a"))
        .await
        .expect("acquire");
    let seen = b
        .source
        .holder(&r)
        .await
        .expect("holder")
        .expect("a holder is shown");
    assert_eq!((seen.holder.as_str(), seen.token), ("holder-a", ga.token()));
    assert!(b
        .source
        .try_acquire(&r, &opts(h))
        .await
        .expect("try_acquire")
        .is_none());
    let short = AcquireOptions::new()
        .ttl(h.ttl())
        .wait(Duration::from_millis(300));
    // The cluster answered that someone holds it: contention, not a
    // silent cluster's timeout.
    match b.source.acquire(&r, &short).await {
        Err(Error::Contended { holder, .. }) => assert!(holder.is_some()),
        other => panic!("bounded acquire of a held resource: {other:?}"),
    }
    ga.release().await.expect("release");
    let gb = b
        .source
        .try_acquire(&r, &opts(h))
        .await
        .expect("try_acquire")
        .expect("free after release");
    gb.release().await.expect("release");
    assert_eq!(b.source.holder(&r).await.expect("holder"), None);
}

/// `lock` and `lock_within` take a name: a name off the portable rule is
/// refused before any request, a held lock makes `lock_within` end with
/// `Contended`, and a free one is granted with a higher token.
pub async fn lock_by_name(h: &dyn Harness) {
    let r = h.resource("by-name");
    let (a, b) = (h.client().await, h.client().await);
    match a.source.lock("Not Portable").await {
        Err(Error::InvalidResource { .. }) => {}
        other => panic!("lock with a bad name: {other:?}"),
    }
    let ga = a.source.lock(r.as_str()).await.expect("lock");
    match b
        .source
        .lock_within(r.as_str(), Duration::from_millis(300))
        .await
    {
        Err(Error::Contended { .. }) => {}
        other => panic!("lock_within of a held lock: {other:?}"),
    }
    let first = ga.token();
    ga.release().await.expect("release");
    let gb = b
        .source
        .lock_within(r.as_str(), h.ttl() * 10)
        .await
        .expect("lock_within after release");
    assert!(gb.token() > first, "{} after {first}", gb.token());
    gb.release().await.expect("release");
}

/// Lock-delay: where the backend supports it, a lock whose holder's lease
/// ran out is not granted again until the delay has passed, while a
/// released lock is granted at once; where it does not, the option is
/// refused with [`Error::Config`] before anything is queued.
pub async fn lock_delay_follows_an_expiry_not_a_release(h: &dyn Harness) {
    let r = h.resource("lock-delay");
    let (a, b) = (h.client().await, h.client().await);
    let delay = h.ttl() * 2;
    let delayed = opts(h).lock_delay(delay);
    match b.source.try_acquire(&r, &delayed).await {
        Err(Error::Config(msg)) => {
            assert!(msg.contains("lock_delay"), "{msg}");
            let left = b.source.holder(&r).await.expect("holder");
            assert!(left.is_none(), "a refused acquire left {left:?}");
            return;
        }
        Ok(Some(g)) => g.release().await.expect("release"),
        other => panic!("try_acquire of a free resource with a lock-delay: {other:?}"),
    }

    // Released: the next grant does not wait, however long the delay.
    acquire(&a, h, &r).await.release().await.expect("release");
    let long = opts(h).lock_delay(Duration::from_secs(3600));
    let g = tokio::time::timeout(h.ttl() * 5, b.source.acquire(&r, &long))
        .await
        .expect("a released lock waited for the lock-delay")
        .expect("acquire");
    g.release().await.expect("release");

    // Ran out: the next grant waits for the delay too. The lease ends at
    // least 2/3 TTL after the stall (the last renewal came at most a
    // renewal interval before it); without the delay the grant would come
    // about one TTL after the stall, so half a TTL is a safe margin.
    let ga = acquire(&a, h, &r).await;
    a.stall().await;
    let stalled = Instant::now();
    let gb = b.source.acquire(&r, &delayed).await.expect("acquire");
    let waited = stalled.elapsed();
    assert!(
        waited >= delay + h.ttl() / 2,
        "granted {waited:?} after the holder stalled; TTL {:?}, lock-delay {delay:?}",
        h.ttl()
    );
    assert!(gb.token() > ga.token());
    gb.release().await.expect("release");
}
