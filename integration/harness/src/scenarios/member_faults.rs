//! Holders and waiters ride through faults of single members.

use super::*;

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
    let hold = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30));
    let held = holder.acquire(&lock, &hold).await.unwrap();
    let wait = AcquireOptions::new()
        .ttl(ttl)
        .wait(Duration::from_secs(3600));
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
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30));
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
