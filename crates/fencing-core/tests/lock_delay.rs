//! Lock-delay on LocalSource: a lease that ran out unreleased keeps the
//! lock from being granted again for the delay; a released one does not.
#![cfg(feature = "local")]

use std::time::Duration;

use fencing_core::{AcquireOptions, FencingSource, LocalSource, ResourceName};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_holder_delays_the_next_grant_and_a_released_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        LocalSource::open(dir.path()).unwrap(),
        LocalSource::open(dir.path()).unwrap(),
    );
    let r = ResourceName::new("r").unwrap();
    let ttl = Duration::from_millis(600);
    let delay = Duration::from_millis(1500);
    let delayed = AcquireOptions::new().ttl(ttl).lock_delay(delay);

    // A's process "freezes": its lease runs out without a release. Its
    // record expires a TTL after it was written, which is after `before`.
    let before = Instant::now();
    let first = a
        .acquire(&r, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    a.pause_renewals(true);
    first.lost().await;
    assert!(
        b.try_acquire(&r, &delayed).await.unwrap().is_none(),
        "granted inside the lock-delay"
    );
    let second = b.acquire(&r, &delayed).await.unwrap();
    assert!(
        before.elapsed() >= ttl + delay,
        "granted {:?} after the expired grant was asked for; the lease plus the delay is {:?}",
        before.elapsed(),
        ttl + delay
    );
    assert!(second.token() > first.token());

    // A clean release: the next grant does not wait for the delay.
    second.release().await.unwrap();
    let long = AcquireOptions::new()
        .ttl(ttl)
        .lock_delay(Duration::from_secs(60));
    let third = tokio::time::timeout(Duration::from_secs(30), a.acquire(&r, &long))
        .await
        .expect("a released lock waited for the lock-delay")
        .unwrap();
    third.release().await.unwrap();
}
