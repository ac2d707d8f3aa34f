//! Scenarios shared by the backends' tests: each takes what differs (how to
//! make a client, how to count contenders) and checks the same property.

use std::future::Future;
use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, FencingToken, Gate, ResourceName};
use fencing_testkit::History;

use crate::fixture::Fixture;
use crate::member::MemberCluster;

mod failover;
mod member_faults;
mod sessions;

pub use failover::*;
pub use member_faults::*;
pub use sessions::*;

/// Waiters in the herd test.
pub const HERD: usize = 64;

/// 64 waiters queue behind one holder; the lock is handed down the queue.
/// Each hand-over must wake exactly one waiter: the sum of `wakeups` over
/// all waiters is 64 (a herd would be about 64 * 63 / 2). Grants must not
/// overlap and tokens must increase.
pub async fn no_thundering_herd<F: Fixture>(version: F::Version) {
    let f = F::start(version).await;
    let holder = f.source().await;
    let mut waiters = Vec::new();
    for _ in 0..HERD {
        waiters.push(f.source().await);
    }
    let contenders = || f.queued(&holder, "herd");
    let wakeups = F::waiter_wakeups;
    assert_eq!(waiters.len(), HERD);
    let lock = ResourceName::new("herd").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(60));
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
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30));
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
