//! The elector on LocalSource: hand-over, tokens per term, cancellation on
//! loss, observation of changes, release on drop, cancel-safe campaigns.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencing_core::{
    Error, FencingSource, FencingToken, Gate, HolderInfo, LocalSource, LossReason, MemoryGate,
    ResourceName,
};
use fencing_election::{ElectionConfig, Leader, LeaderElector, Observer};
use tokio::time::{timeout, Instant};

/// Generous bound for anything that should happen "soon" on a shared,
/// noisy machine; never a performance target.
const PATIENCE: Duration = Duration::from_secs(20);

fn election() -> ResourceName {
    ResourceName::new("election").unwrap()
}

/// Short timings so a lost lease shows within a second: LocalSource renews
/// every lease/3 (about 333 ms), well inside the 600 ms renew deadline.
fn short(identity: &str) -> ElectionConfig {
    ElectionConfig::new(identity)
        .lease_duration(Duration::from_secs(1))
        .renew_deadline(Duration::from_millis(600))
        .retry_period(Duration::from_millis(100))
}

fn elector(source: &LocalSource, config: ElectionConfig) -> LeaderElector {
    LeaderElector::new(Arc::new(source.clone()), election(), config).unwrap()
}

/// Two handles on one directory, as two processes would have.
fn two_sources() -> (tempfile::TempDir, LocalSource, LocalSource) {
    let dir = tempfile::tempdir().unwrap();
    let a = LocalSource::open(dir.path()).unwrap();
    let b = LocalSource::open(dir.path()).unwrap();
    (dir, a, b)
}

#[test]
fn new_refuses_an_invalid_config_by_rule() {
    let dir = tempfile::tempdir().unwrap();
    let source: Arc<dyn FencingSource> = Arc::new(LocalSource::open(dir.path()).unwrap());
    let bad = ElectionConfig::new("a").renew_deadline(Duration::from_secs(20));
    match LeaderElector::new(source, election(), bad) {
        Err(Error::Config(m)) => assert!(m.contains("renew_deadline"), "{m}"),
        other => panic!("expected Config, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_hands_over_to_the_waiting_candidate() {
    let (_dir, sa, sb) = two_sources();
    let a = elector(&sa, ElectionConfig::new("a"));
    let b = elector(&sb, ElectionConfig::new("b"));
    let first = a.campaign().await.unwrap();
    assert_eq!(first.identity(), "a");
    let waiting = tokio::spawn(async move {
        let l = b.campaign().await.unwrap();
        (Instant::now(), l)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "b was elected while a led");
    let first_token = first.token();
    let resigned_at = Instant::now();
    first.resign().await.unwrap();
    let (elected_at, second) = timeout(PATIENCE, waiting).await.unwrap().unwrap();
    let handover = elected_at - resigned_at;
    eprintln!("LocalSource hand-over after resign: {handover:?}");
    assert_eq!(second.identity(), "b");
    assert!(
        second.token() > first_token,
        "{second:?} after {first_token}"
    );
    assert!(
        handover < Duration::from_secs(15),
        "hand-over took a whole lease ({handover:?}): resign did not release"
    );
    second.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_term_has_a_larger_token() {
    let (_dir, sa, sb) = two_sources();
    let candidates = [elector(&sa, short("a")), elector(&sb, short("b"))];
    let mut last = FencingToken::ZERO;
    // The same identity twice in a row is a new term too.
    for c in [0, 0, 1, 0, 1, 1] {
        let term = candidates[c].campaign().await.unwrap();
        assert!(term.token() > last, "term {:?} after {last}", term);
        last = term.token();
        term.resign().await.unwrap();
    }
}

/// Sets its flag when dropped: proves the work future was cancelled.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_cancels_the_work_when_renewals_stop() {
    let (_dir, sa, sb) = two_sources();
    let a = elector(&sa, short("a"));
    let dropped = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(MemoryGate::new());
    let (flag, stalled, g) = (dropped.clone(), sa.clone(), gate.clone());
    let started = Instant::now();
    let outcome = timeout(
        PATIENCE,
        a.run(|ctx| async move {
            let _flag = DropFlag(flag);
            g.admit_any_source(&election(), ctx.token()).await.unwrap();
            stalled.pause_renewals(true); // a renewer that froze
            std::future::pending::<()>().await;
        }),
    )
    .await
    .expect("run never noticed the loss");
    let took = started.elapsed();
    eprintln!("work cancelled {took:?} after the election (renew deadline 600 ms)");
    match outcome {
        Err(Error::Lost { reason, .. }) => {
            assert_eq!(reason, LossReason::RenewDeadlinePassed.to_string())
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(dropped.load(Ordering::SeqCst), "the work was not dropped");
    // The next leader's writes pass, and the old term's token is refused.
    let b = elector(&sb, short("b"));
    let next = timeout(PATIENCE, b.campaign()).await.unwrap().unwrap();
    gate.admit_any_source(&election(), next.token())
        .await
        .unwrap();
    let old = FencingToken::new(next.token().get() - 1);
    assert!(matches!(
        gate.admit_any_source(&election(), old).await,
        Err(Error::Stale { .. })
    ));
    next.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_returns_the_output_and_resigns() {
    let (_dir, sa, _) = two_sources();
    let a = elector(&sa, ElectionConfig::new("a"));
    let (token, leading, ctx) = a
        .run(|ctx| async move { (ctx.token(), ctx.is_leader(), ctx) })
        .await
        .unwrap();
    assert!(leading && token > FencingToken::ZERO);
    assert!(!ctx.is_leader(), "a context outlived its resigned term");
    assert_eq!(sa.holder(&election()).await.unwrap(), None);
}

/// The observer's next report, within [`PATIENCE`].
async fn next(o: &mut Observer) -> Option<Leader> {
    timeout(PATIENCE, o.changed())
        .await
        .expect("no change seen")
        .unwrap()
}

/// The same through the `Stream` implementation.
async fn poll(o: &mut Observer) -> Option<fencing_core::Result<Option<Leader>>> {
    std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *o), cx)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_reports_none_then_each_leader() {
    let (_dir, sa, sb) = two_sources();
    let (a, b) = (elector(&sa, short("a")), elector(&sb, short("b")));
    let mut observer = a.observe();
    assert_eq!(next(&mut observer).await, None);
    let term_a = a.campaign().await.unwrap();
    let seen_a = next(&mut observer).await;
    assert_eq!(
        seen_a,
        Some(Leader::from(HolderInfo::new("a", term_a.token())))
    );
    term_a.resign().await.unwrap();
    assert_eq!(next(&mut observer).await, None);
    let term_b = b.campaign().await.unwrap();
    assert_eq!(
        next(&mut observer).await,
        Some(Leader::from(HolderInfo::new("b", term_b.token())))
    );
    // The same identity in a new term is a change: its token differs. Read
    // it through the Stream implementation this time.
    term_b.resign().await.unwrap();
    let term_b2 = b.campaign().await.unwrap();
    let mut stream = b.observe();
    let first = timeout(PATIENCE, poll(&mut stream)).await.unwrap();
    assert_eq!(
        first.unwrap().unwrap(),
        Some(Leader::from(HolderInfo::new("b", term_b2.token())))
    );
    let stale = term_b2.token();
    drop(term_b2);
    let term_b3 = timeout(PATIENCE, b.campaign()).await.unwrap().unwrap();
    loop {
        let seen = timeout(PATIENCE, poll(&mut stream))
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if seen.as_ref().is_some_and(|l| l.token != stale) {
            assert_eq!(
                seen,
                Some(Leader::from(HolderInfo::new("b", term_b3.token())))
            );
            break;
        }
    }
    term_b3.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_leadership_is_released() {
    let (_dir, sa, sb) = two_sources();
    let a = elector(&sa, ElectionConfig::new("a"));
    let b = elector(&sb, ElectionConfig::new("b"));
    let term = a.campaign().await.unwrap();
    let ctx = term.context();
    let dropped_at = Instant::now();
    drop(term);
    assert!(!ctx.is_leader());
    // A 15 s lease: getting it well before that means the drop released it.
    let next = timeout(Duration::from_secs(10), b.campaign())
        .await
        .expect("the dropped term was not released")
        .unwrap();
    eprintln!(
        "LocalSource hand-over after drop: {:?}",
        dropped_at.elapsed()
    );
    next.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_campaign_leaves_no_leadership() {
    let (_dir, sa, sb) = two_sources();
    let a = elector(&sa, ElectionConfig::new("a"));
    let b = elector(&sb, ElectionConfig::new("b"));
    let term = a.campaign().await.unwrap();
    assert!(timeout(Duration::from_millis(300), b.campaign())
        .await
        .is_err());
    term.resign().await.unwrap();
    // Nothing of b's cancelled campaign holds the election.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sb.holder(&election()).await.unwrap(), None);
    let again = a.campaign().await.unwrap();
    assert_eq!(again.identity(), "a");
    again.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_returns_a_config_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let source = LocalSource::open(dir.path()).unwrap();
    // LocalSource refuses control characters in a holder identity; retrying
    // cannot fix that, so campaign must not retry.
    let bad = elector(&source, ElectionConfig::new("line\nbreak"));
    let err = timeout(Duration::from_secs(5), bad.campaign())
        .await
        .expect("campaign retried a configuration error")
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
}

#[test]
fn elector_futures_are_send() {
    fn send<T: Send>(_: T) {}
    let dir = tempfile::tempdir().unwrap();
    let source = LocalSource::open(dir.path()).unwrap();
    let e = elector(&source, ElectionConfig::new("a"));
    send(e.campaign());
    send(e.run(|ctx| async move { ctx.token() }));
    let mut o = e.observe();
    send(o.changed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_fails_only_while_a_held_term_is_overdue() {
    let (_dir, sa, _sb) = two_sources();
    let a = elector(&sa, short("a"));
    // A clone's handle sees the terms of every clone.
    let health = a.clone().health(Duration::from_millis(200));
    health.check().expect("not leading is healthy");

    let leadership = a.campaign().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    health
        .check()
        .expect("a leader whose lease renews is healthy");

    // The election loop "hangs": nothing renews, nobody drops the term.
    sa.pause_renewals(true);
    let stalled = Instant::now();
    health.check().expect("not overdue yet");
    let error = loop {
        match health.check() {
            Err(e) => break e,
            Ok(()) if stalled.elapsed() < PATIENCE => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(()) => panic!("a held term overdue by {PATIENCE:?} still counts as healthy"),
        }
    };
    // Not before TTL (1 s) + tolerance (200 ms) after the last renewal.
    // Measured from the renewal itself, not from the stall: on a loaded
    // machine the last renewal may have come late, well before the stall.
    let overdue = leadership.grant().lease().last_renewal().elapsed();
    assert!(
        overdue >= Duration::from_millis(1200),
        "failed after {overdue:?}"
    );
    let Error::Lost { reason, .. } = &error else {
        panic!("expected Lost, got {error:?}")
    };
    assert!(reason.contains("stuck"), "{reason}");

    drop(leadership);
    health.check().expect("a term given up is healthy again");
}

/// `run_until`: a shutdown while leading drops the work and resigns at
/// once (the next candidate is elected by its first attempt, not a lease
/// later), and a shutdown while campaigning gives up the campaign; both
/// return `Ok(None)` (issue 55, item 3).
#[tokio::test]
async fn run_until_a_shutdown_resigns_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let source = fencing_core::LocalSource::open(dir.path()).unwrap();
    let election = fencing_core::ResourceName::new("until").unwrap();
    let elector =
        LeaderElector::new(source.clone(), election.clone(), ElectionConfig::new("a")).unwrap();
    let (stop, shutdown) = tokio::sync::oneshot::channel::<()>();
    let (led_tx, led) = tokio::sync::oneshot::channel();
    let leading = tokio::spawn({
        let elector = elector.clone();
        async move {
            elector
                .run_until(
                    async {
                        let _ = shutdown.await;
                    },
                    |_ctx| async move {
                        led_tx.send(()).unwrap();
                        std::future::pending::<()>().await
                    },
                )
                .await
        }
    });
    led.await.unwrap();
    stop.send(()).unwrap();
    assert!(
        leading.await.unwrap().unwrap().is_none(),
        "resigned, not finished"
    );
    let next = source
        .try_acquire(&election, &fencing_core::AcquireOptions::new())
        .await
        .unwrap();
    assert!(next.is_some(), "the election is free at once");
    drop(next);

    // Shut down while another leads: the campaign gives up.
    let held = source.lock("until").await.unwrap();
    let waiting = elector.run_until(std::future::ready(()), |_| async {});
    assert!(waiting.await.unwrap().is_none());
    held.release().await.unwrap();
    source.close().await.unwrap();
}
