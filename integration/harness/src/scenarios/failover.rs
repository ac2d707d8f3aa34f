//! A holder's member fails: its leader is lost, or the whole cluster restarts.

use super::*;

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
