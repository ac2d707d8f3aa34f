//! LeaderElector on real clusters (a 3-member etcd 3.6 cluster, a 3-server
//! ZooKeeper 3.9 ensemble, a kube-apiserver 1.36) and on LocalSource: hand-over on resign, a
//! SIGKILLed leader process replaced, leadership that never overlaps (judged
//! by a gate on the recorded history), and a follower observing each leader.
//!
//! One release per backend: the backends' own suites cover both releases,
//! and the elector adds nothing version-specific on top of acquire/holder.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fencing::election::{ElectionConfig, Leader, LeaderElector, Observer};
use fencing::{Error, FencingSource, FencingToken, Gate, HolderInfo, MemoryGate, ResourceName};
use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::etcd::fixture::EtcdFixture;
use fencing_harness::fixture::Fixture;
use fencing_harness::kubernetes::cluster::KubeUser;
use fencing_harness::kubernetes::fixture::KubeFixture;
use fencing_harness::zk::ensemble::ZkVersion;
use fencing_harness::zk::fixture::ZkFixture;
use fencing_testkit::{Event, History};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::{timeout, Instant};

/// The election timings of every candidate here: etcd keep-alives and
/// ZooKeeper heartbeats run every lease/3 (1 s), so a healthy leader is
/// renewed twice within the renew deadline.
const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);

/// Bound for anything that should happen soon on a shared 2-core machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// What a failover may take beyond lease + retry period: etcd revokes
/// expired leases in a periodic sweep (every 500 ms) and through raft;
/// ZooKeeper expires sessions at tick boundaries (200 ms here) after the
/// session timeout; LocalSource waiters poll every 50 ms; and the machine
/// runs other tests at the same time.
const FAILOVER_TOLERANCE: Duration = Duration::from_secs(3);

/// A running coordinator and the URL its clients connect with.
struct Backend {
    name: &'static str,
    url: String,
    _running: Running,
}

/// Keeps the cluster (or directory) alive for the test; removed on drop.
#[allow(dead_code)]
enum Running {
    Etcd(EtcdFixture),
    Zk(ZkFixture),
    Kube(Box<KubeFixture>),
    Local(tempfile::TempDir),
}

impl Backend {
    async fn etcd() -> Backend {
        let f = EtcdFixture::start(EtcdVersion::V3_6).await;
        let url = format!("etcd://{}{}", f.cluster.endpoints().join(","), f.prefix);
        Backend {
            name: "etcd 3.6",
            url,
            _running: Running::Etcd(f),
        }
    }

    async fn zk() -> Backend {
        let f = ZkFixture::start(ZkVersion::V3_9).await;
        let url = format!(
            "zk://{}{}?ensemble={}",
            f.ensemble.connect_string(),
            f.path,
            f.name
        );
        Backend {
            name: "ZooKeeper 3.9",
            url,
            _running: Running::Zk(f),
        }
    }

    /// A real kube-apiserver; candidates use the least-privileged user of
    /// deploy/kubernetes/rbac.yaml.
    async fn kube() -> Backend {
        let f = KubeFixture::start().await;
        let url = f.url(KubeUser::LeaseUser);
        Backend {
            name: "Kubernetes 1.36",
            url,
            _running: Running::Kube(Box::new(f)),
        }
    }

    async fn local() -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("local://{}", dir.path().display());
        Backend {
            name: "LocalSource",
            url,
            _running: Running::Local(dir),
        }
    }

    /// A new client connection (its own session or lease), as another
    /// process would have.
    async fn source(&self) -> Arc<dyn FencingSource> {
        fencing::connect(&self.url).await.expect("connect")
    }

    async fn candidate(&self, identity: &str) -> LeaderElector {
        let config = ElectionConfig::new(identity)
            .lease_duration(LEASE)
            .renew_deadline(RENEW)
            .retry_period(RETRY);
        LeaderElector::new(self.source().await, election(), config).unwrap()
    }
}

fn election() -> ResourceName {
    ResourceName::new("election").unwrap()
}

/// A `campaigner` process; SIGKILLed and reaped if the test fails.
struct Campaigner {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Campaigner {
    fn start(backend: &Backend, identity: &str) -> Campaigner {
        let ms = |d: Duration| d.as_millis().to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_campaigner"))
            .args([&backend.url, election().as_str(), identity])
            .args([ms(LEASE), ms(RENEW), ms(RETRY)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start campaigner");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
        Campaigner {
            child,
            stdin,
            stdout,
        }
    }

    async fn line(&mut self) -> String {
        timeout(PATIENCE, self.stdout.next_line())
            .await
            .expect("campaigner printed nothing in time")
            .expect("read campaigner output")
            .expect("campaigner exited")
    }

    /// Waits for `LEADER <token>`.
    async fn elected(&mut self) -> FencingToken {
        let line = self.line().await;
        let token = line
            .strip_prefix("LEADER ")
            .unwrap_or_else(|| panic!("expected LEADER, got {line:?}"));
        token.parse().expect("token")
    }
}

/// A graceful resign hands leadership to the waiting candidate at once,
/// not after the lease runs out.
async fn resign_hands_over(backend: Backend) {
    let a = backend.candidate("a").await;
    let b = backend.candidate("b").await;
    let first = a.campaign().await.unwrap();
    let waiting = tokio::spawn(async move {
        let term = b.campaign().await.unwrap();
        (Instant::now(), term)
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished(), "b was elected while a led");
    let (first_token, resigned_at) = (first.token(), Instant::now());
    first.resign().await.unwrap();
    let (elected_at, second) = timeout(PATIENCE, waiting).await.unwrap().unwrap();
    let handover = elected_at - resigned_at;
    eprintln!("{}: hand-over after resign {handover:?}", backend.name);
    assert!(second.token() > first_token);
    assert!(
        handover < LEASE,
        "{handover:?}: the waiting candidate waited for the lease instead of the resign"
    );
    second.resign().await.unwrap();
}

/// A leader process killed with SIGKILL (no resign, no goodbye) is
/// replaced once its lease runs out: within lease + retry period +
/// FAILOVER_TOLERANCE. Before that, the campaigner's resign path (stdin
/// closed) is checked too.
async fn killed_leader_is_replaced(backend: Backend) {
    let mut polite = Campaigner::start(&backend, "polite");
    let polite_token = polite.elected().await;
    polite.stdin.take(); // closing stdin asks it to resign
    assert_eq!(polite.line().await, "RESIGNED");

    let mut doomed = Campaigner::start(&backend, "doomed");
    let doomed_token = doomed.elected().await;
    assert!(doomed_token > polite_token);
    let gate = MemoryGate::new();
    gate.admit_any_source(&election(), doomed_token)
        .await
        .unwrap();

    let successor = backend.candidate("successor").await;
    let waiting = tokio::spawn(async move {
        let term = successor.campaign().await.unwrap();
        (Instant::now(), term)
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !waiting.is_finished(),
        "elected while the doomed leader lived"
    );
    let killed_at = Instant::now();
    doomed.child.start_kill().expect("SIGKILL");
    doomed.child.wait().await.expect("reap");
    let (elected_at, term) = timeout(PATIENCE, waiting).await.unwrap().unwrap();
    let failover = elected_at - killed_at;
    eprintln!(
        "{}: failover after SIGKILL {failover:?} (lease {LEASE:?}, retry {RETRY:?})",
        backend.name
    );
    assert!(term.token() > doomed_token);
    assert!(
        failover <= LEASE + RETRY + FAILOVER_TOLERANCE,
        "failover took {failover:?}"
    );
    // The dead leader's term is fenced off once the successor wrote.
    gate.admit_any_source(&election(), term.token())
        .await
        .unwrap();
    let late = gate.admit_any_source(&election(), doomed_token).await;
    assert!(matches!(late, Err(Error::Stale { .. })), "{late:?}");
    term.resign().await.unwrap();
}

const CANDIDATES: usize = 3;
const ROUNDS: usize = 4;
const WRITES_PER_TERM: usize = 2;

/// Three candidates, each on its own connection, lead four terms each
/// through `run`, writing through a gate. On the recorded history: terms
/// never overlap and their tokens strictly increase in grant order, and no
/// write with a superseded token is accepted. At the end every candidate
/// replays a write with each of its old tokens: all but the very last term's
/// must be refused.
async fn leadership_never_overlaps(backend: Backend) {
    let history = History::new();
    let gate = Arc::new(MemoryGate::new());
    let mut tasks = Vec::new();
    for id in 0..CANDIDATES {
        let elector = backend.candidate(&format!("c{id}")).await;
        let (history, gate) = (history.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..ROUNDS {
                let (history, gate) = (history.clone(), gate.clone());
                let token = elector
                    .run(|ctx| async move {
                        history.granted(id, ctx.token()).await;
                        for _ in 0..WRITES_PER_TERM {
                            let written = history.write(&*gate, &election(), id, ctx.token()).await;
                            written.expect("a current leader's write was refused");
                            tokio::task::yield_now().await;
                        }
                        history.released(id, ctx.token()).await;
                        ctx.token()
                    })
                    .await
                    .expect("a term ended in loss on a healthy cluster");
                tokens.push(token);
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for (id, task) in tasks.into_iter().enumerate() {
        let tokens = timeout(PATIENCE * 4, task).await.unwrap().unwrap();
        all.extend(tokens.into_iter().map(|t| (id, t)));
    }
    for &(id, token) in &all {
        let _ = history.write(&*gate, &election(), id, token).await;
    }
    history
        .check()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", backend.name));
    let events = history.events().await;
    let grants = events
        .iter()
        .filter(|e| matches!(e, Event::Granted { .. }))
        .count();
    let refused = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Write {
                    accepted: false,
                    ..
                }
            )
        })
        .count();
    let switches = all.windows(2).filter(|w| w[0].0 != w[1].0).count();
    eprintln!(
        "{}: {grants} terms, {refused} stale writes refused, tokens {:?}",
        backend.name,
        all.iter().map(|(_, t)| t.get()).collect::<Vec<_>>()
    );
    assert_eq!(grants, CANDIDATES * ROUNDS);
    assert!(switches > 0);
    assert_eq!(
        refused,
        CANDIDATES * ROUNDS - 1,
        "every replayed token but the newest must be refused"
    );
}

async fn next(observer: &mut Observer) -> Option<Leader> {
    timeout(PATIENCE, observer.changed())
        .await
        .expect("the observer saw no change")
        .expect("observe")
}

/// A follower on its own connection sees no leader, then each leader with
/// its term's token, and the gaps between them.
async fn follower_observes_each_leader(backend: Backend) {
    let follower = LeaderElector::new(
        backend.source().await,
        election(),
        ElectionConfig::new("follower")
            .lease_duration(LEASE)
            .renew_deadline(RENEW)
            .retry_period(Duration::from_millis(200)),
    )
    .unwrap();
    let mut observer = follower.observe();
    assert_eq!(next(&mut observer).await, None);
    for name in ["a", "b", "a"] {
        let candidate = backend.candidate(name).await;
        let term = candidate.campaign().await.unwrap();
        let seen = next(&mut observer).await;
        assert_eq!(
            seen,
            Some(Leader::from(HolderInfo::new(name, term.token())))
        );
        term.resign().await.unwrap();
        assert_eq!(next(&mut observer).await, None);
    }
    eprintln!("{}: the follower saw every term", backend.name);
}

macro_rules! on_each_backend {
    ($($scenario:ident),* $(,)?) => {
        mod local { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() { super::$scenario(super::Backend::local().await).await }
        )* }
        mod etcd_3_6 { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() { super::$scenario(super::Backend::etcd().await).await }
        )* }
        mod zk_3_9 { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() { super::$scenario(super::Backend::zk().await).await }
        )* }
        mod kube_1_36 { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() { super::$scenario(super::Backend::kube().await).await }
        )* }
    };
}

on_each_backend!(
    resign_hands_over,
    killed_leader_is_replaced,
    leadership_never_overlaps,
    follower_observes_each_leader,
);

/// ZooKeeper raises a 3 s session timeout to the servers' 18 s minimum, so
/// heartbeats come every 3 s, and a 2 s renew deadline would end every term
/// between two renewals. The elector must refuse that configuration by
/// name instead of electing leaders that always step down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_negotiated_timeout_too_long_for_the_renew_deadline_is_refused() {
    use fencing_harness::zk::ensemble::{ZkEnsemble, ZkOptions};
    let options = ZkOptions::new(ZkVersion::V3_9, 1).min_session_timeout(Duration::from_secs(18));
    let ensemble = ZkEnsemble::start_with(options)
        .await
        .expect("start ZooKeeper");
    let url = format!("zk://{}/elections", ensemble.connect_string());
    let source = fencing::connect(&url).await.expect("connect");
    let config = ElectionConfig::new("short-deadline")
        .lease_duration(LEASE)
        .renew_deadline(RENEW)
        .retry_period(RETRY);
    let elector = LeaderElector::new(source, election(), config).unwrap();
    match timeout(PATIENCE, elector.campaign())
        .await
        .expect("campaign")
    {
        Err(Error::Config(message)) => {
            assert!(message.contains("renew_deadline"), "{message}");
            eprintln!("refused: {message}");
        }
        Ok(leadership) => {
            let elected = Instant::now();
            let why = timeout(PATIENCE, leadership.lost()).await;
            panic!(
                "elected, and lost again after {:?}: {why:?}",
                elected.elapsed()
            );
        }
        Err(other) => panic!("{other:?}"),
    }
}

/// Records a term's end when its work is dropped: at its end, or the moment
/// the elector cancelled it because leadership may be lost.
struct TermEnd {
    id: usize,
    token: FencingToken,
    ended: tokio::sync::mpsc::UnboundedSender<(usize, FencingToken, Instant)>,
    /// Who leads now, for the nemesis; cleared when this term ends.
    leader: Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for TermEnd {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::SeqCst;
        let _ = self
            .leader
            .compare_exchange(self.id, usize::MAX, SeqCst, SeqCst);
        let _ = self.ended.send((self.id, self.token, Instant::now()));
    }
}

const PARTITIONS: usize = 4;
/// Writes per term, one per 100 ms: a term lasts twice the renew deadline,
/// so a partition that starts in it ends it by loss.
const TERM_WRITES: usize = 40;

/// Three candidates on their own connections lead in turn, writing through
/// a gate every 100 ms for four seconds per term, while a nemesis cuts
/// the current leader off from the cluster for twice the lease, four times.
/// On the history (a term starts when `run` hands over the context and ends
/// when its work is dropped, by the elector's cancellation on loss or at
/// its end): no term starts before the previous one ended, tokens increase,
/// no stale write is accepted, and every partition ended a term.
async fn leadership_never_overlaps_under_partitions(
    candidates: Vec<(
        Arc<dyn FencingSource>,
        fencing_harness::etcd::fixture::Partition,
    )>,
    name: &str,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let history = History::new();
    let gate = Arc::new(MemoryGate::new());
    let (ended, mut ends) = tokio::sync::mpsc::unbounded_channel();
    let leader = Arc::new(AtomicUsize::new(usize::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let losses = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (id, (source, _)) in candidates.iter().enumerate() {
        let config = ElectionConfig::new(format!("c{id}"))
            .lease_duration(LEASE)
            .renew_deadline(RENEW)
            .retry_period(RETRY);
        let elector = LeaderElector::new(source.clone(), election(), config).unwrap();
        let (history, gate, ended) = (history.clone(), gate.clone(), ended.clone());
        let (leader, stop, losses, terms) =
            (leader.clone(), stop.clone(), losses.clone(), terms.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let (history, gate, ended, leader, terms) = (
                    history.clone(),
                    gate.clone(),
                    ended.clone(),
                    leader.clone(),
                    terms.clone(),
                );
                let term = elector.run(|ctx| async move {
                    let token = ctx.token();
                    history.granted(id, token).await;
                    leader.store(id, Ordering::SeqCst);
                    terms.fetch_add(1, Ordering::SeqCst);
                    let _end = TermEnd {
                        id,
                        token,
                        ended,
                        leader,
                    };
                    for _ in 0..TERM_WRITES {
                        let _ = history.write(&*gate, &election(), id, token).await;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                });
                match term.await {
                    Ok(()) => {}
                    Err(Error::Lost { .. }) => {
                        losses.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => panic!("c{id}: {e}"),
                }
            }
        }));
    }
    for round in 0..PARTITIONS {
        // Cut a leader at the start of a fresh term, so the term cannot
        // finish its work before the renew deadline ends it.
        let seen = terms.load(Ordering::SeqCst);
        let victim = loop {
            let id = leader.load(Ordering::SeqCst);
            if id != usize::MAX && terms.load(Ordering::SeqCst) > seen {
                break id;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        eprintln!("{name}: partition {round} cuts c{victim}");
        candidates[victim].1.set(true);
        tokio::time::sleep(LEASE * 2).await;
        candidates[victim].1.set(false);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        timeout(PATIENCE * 2, task)
            .await
            .expect("candidates stop")
            .unwrap();
    }
    drop(ended);
    while let Some((id, token, at)) = ends.recv().await {
        history.released_at(id, token, at).await;
    }
    history
        .check()
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let lost = losses.load(Ordering::SeqCst);
    eprintln!("{name}: {PARTITIONS} partitions, {lost} terms ended by loss");
    assert!(
        lost >= PARTITIONS,
        "only {lost} losses for {PARTITIONS} partitions"
    );
}

mod under_partitions {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_3_6() {
        let f = EtcdFixture::start(EtcdVersion::V3_6).await;
        let mut candidates = Vec::new();
        for _ in 0..CANDIDATES {
            let (s, p) = f.partitionable_source().await;
            candidates.push((Arc::new(s) as Arc<dyn FencingSource>, p));
        }
        leadership_never_overlaps_under_partitions(candidates, "etcd 3.6").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zk_3_9() {
        let f = ZkFixture::start(ZkVersion::V3_9).await;
        let mut candidates = Vec::new();
        for _ in 0..CANDIDATES {
            let (s, p) = f.partitionable_source().await;
            candidates.push((Arc::new(s) as Arc<dyn FencingSource>, p));
        }
        leadership_never_overlaps_under_partitions(candidates, "ZooKeeper 3.9").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kube_1_36() {
        let f = KubeFixture::start().await;
        let mut candidates = Vec::new();
        for _ in 0..CANDIDATES {
            let (s, p) = f.partitionable_source().await;
            candidates.push((Arc::new(s) as Arc<dyn FencingSource>, p));
        }
        leadership_never_overlaps_under_partitions(candidates, "Kubernetes 1.36").await;
    }
}
