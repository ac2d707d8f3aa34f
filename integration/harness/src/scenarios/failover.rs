//! A holder's member fails: its leader is lost, or the whole cluster restarts.

use super::*;

/// The leader dies while `a` holds the lock and `b` waits for it: `a` keeps
/// its grant, `b` does not get in before `a` releases, and the tokens of
/// `a`, `b` and then `c` (after the old leader is back) strictly increase.
/// Returns the three tokens. The leader dies only once the cluster has
/// queued `b` on the lock (`leader-kill`).
pub async fn leader_loss<F: Fixture>(version: F::Version, ttl: Duration) -> [FencingToken; 3] {
    let mut f = F::start(version).await;
    let [a, b, c] = [f.source().await, f.source().await, f.source().await];
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30));
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
    while f.queued(&c, "leader-kill").await < 2 {
        assert!(
            tokio::time::Instant::now() < patience,
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let leader = f
        .cluster_mut()
        .kill_leader()
        .await
        .expect("kill the leader");
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
    f.cluster_mut().restart(leader).await.expect("restart");
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
/// last one handed out before. Each grant is a fresh client's (clients of
/// the old processes are not reused).
pub async fn full_restart<F: Fixture>(version: F::Version) {
    let mut f = F::start(version).await;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(30));
    let lock = ResourceName::new("restart-all").unwrap();
    let g = f.source().await.acquire(&lock, &opts).await.unwrap();
    let before = g.token();
    g.release().await.unwrap();
    f.cluster_mut().restart_all().await.expect("restart all");
    let g = f.source().await.acquire(&lock, &opts).await.unwrap();
    assert!(
        g.token() > before,
        "token {} after restart, {before} before",
        g.token()
    );
    g.release().await.unwrap();
}
