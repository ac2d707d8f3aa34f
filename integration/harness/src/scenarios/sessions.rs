//! A client's session or connection blips while it releases, acquires or waits.

use super::*;

/// A release during a network blip must not leave the lock blocked while
/// the holder's session lives on: the holder (behind a partition) is cut
/// off for 4 s, longer than its request timeout so a delete attempt
/// fails, but shorter than its 15 s lease, so its session survives and keeps the
/// key alive. Twice: once the release is awaited (it must be retried), once
/// its caller gives up on it during the cut (`timeout(..., release())`: it
/// must go on without the caller). Each time `waiter` must be granted soon
/// after the network is back, before the holder's lease could have run out.
pub async fn release_during_a_blip_still_releases<F: Fixture>(version: F::Version) {
    let (ttl, blip) = (Duration::from_secs(15), Duration::from_secs(4));
    let f = F::start(version).await;
    let (holder, partition) = f.partitionable_source().await;
    let waiter = f.source().await;
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(60));
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
pub async fn abandoned_acquire_leaves_nothing_behind<F: Fixture>(
    version: F::Version,
    ttl: Duration,
    give_up: Duration,
    lost_after: Duration,
    wait: Duration,
) {
    let f = F::start(version).await;
    let (a, partition) = f.partitionable_source().await;
    let b = f.source().await;
    let lock = ResourceName::new("abandoned").unwrap();
    let opts = |timeout| AcquireOptions::new().ttl(ttl).wait(timeout);
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

/// A waiter (behind a partition) is cut off for twice its 3 s TTL while it is
/// queued, so its session is lost. It must start a new session and queue
/// again rather than give up: once the holder releases, it is granted,
/// within its own 60 s wait bound.
pub async fn waiter_requeues_after_losing_its_session<F: Fixture>(version: F::Version) {
    let ttl = Duration::from_secs(3);
    let f = F::start(version).await;
    let holder = f.source().await;
    let (waiter, partition) = f.partitionable_source().await;
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(60));
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
