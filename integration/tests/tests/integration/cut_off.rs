//! The harness of the partition tests of etcd (`etcd::partitions`) and
//! ZooKeeper (`zk::partitions`): a 3-member cluster, each member and the
//! clients' host in a network namespace of its own, real cuts with
//! iptables while the clients still reach every member.
//!
//! Client A holds a lock and client B waits for it through other members; a
//! fault then makes the cluster end A's lease and grant the lock to B while
//! the server A talks to still answers A. A must learn of its loss before B
//! is granted, and the cluster's gate must refuse A's write once B's token
//! was admitted.

use std::sync::mpsc;
use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, Gate, ResourceName};
use fencing_etcd::EtcdSource;
use fencing_harness::namespaced::{Cluster, Kind, Tuning};
use fencing_harness::net::netns::{self, Host, Network};
use fencing_zookeeper::ZkSource;
use tokio::time::Instant;

/// What client A and B saw, in ms after the fault.
#[derive(Debug)]
struct Seen {
    a_lost_ms: Option<u128>,
    b_granted_ms: u128,
    /// A's write through its cut-off server after B's was admitted.
    a_write_after_b: Result<(), String>,
}

/// Lease lengths of the two clients: B's is longer, so that it rides
/// through member restarts.
#[derive(Clone, Copy)]
pub struct Sessions {
    pub a: Duration,
    pub b: Duration,
}

async fn open(url: &str) -> (Box<dyn FencingSource>, Box<dyn Gate>) {
    if url.starts_with("zk://") {
        let source = ZkSource::from_url(url).await.expect("client connects");
        let gate = source.gate("/gates").unwrap();
        (Box::new(source), Box::new(gate))
    } else {
        let source = EtcdSource::from_url(url).await.expect("client connects");
        let gate = source.gate("/gates").unwrap();
        (Box::new(source), Box::new(gate))
    }
}

async fn clients(
    urls: [String; 2],
    sessions: Sessions,
    ready: mpsc::Sender<()>,
    cut: tokio::sync::oneshot::Receiver<()>,
) -> Seen {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let lock = ResourceName::new("partitioned").unwrap();
    let opts = |ttl| AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30));
    let (a, gate_a) = open(&urls[0]).await;
    let (b, gate_b) = open(&urls[1]).await;
    let held = a
        .acquire(&lock, &opts(sessions.a))
        .await
        .expect("A acquires");
    gate_a
        .admit_any_source(&lock, held.token())
        .await
        .expect("A's first write");
    let waiting = tokio::spawn(async move {
        let grant = b
            .acquire(&lock, &opts(sessions.b))
            .await
            .expect("B is granted after A's lease ends");
        (grant, b)
    });
    // B is queued behind A before the cut.
    tokio::time::sleep(Duration::from_millis(500)).await;
    ready.send(()).unwrap();
    cut.await.unwrap();
    let started = Instant::now();
    let mut a_lost_ms = None;
    let mut waiting = std::pin::pin!(waiting);
    let (grant_b, _b) = loop {
        tokio::select! {
            biased;
            _ = held.lost(), if a_lost_ms.is_none() => {
                a_lost_ms = Some(started.elapsed().as_millis());
            }
            done = &mut waiting => break done.unwrap(),
        }
    };
    let b_granted_ms = started.elapsed().as_millis();
    // If B won the race, when A hears of its loss tells by how much.
    let a_loss = async {
        if a_lost_ms.is_some() {
            return a_lost_ms;
        }
        let lost = tokio::time::timeout(Duration::from_secs(15), held.lost()).await;
        lost.ok().map(|_| started.elapsed().as_millis())
    };
    let lock = grant_b.resource().clone();
    let writes = async {
        gate_b
            .admit_any_source(&lock, grant_b.token())
            .await
            .expect("B's write through the majority");
        let a_write = gate_a.admit_any_source(&lock, held.token());
        match tokio::time::timeout(Duration::from_secs(3), a_write).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("timed out".into()),
        }
    };
    let (a_lost_ms, a_write_after_b) = tokio::join!(a_loss, writes);
    Seen {
        a_lost_ms,
        b_granted_ms,
        a_write_after_b,
    }
}

/// A 3-member cluster, each member and the clients' host in its own
/// namespace, and the member that leads.
pub struct Partitioned {
    pub net: Network,
    pub cluster: Cluster,
    pub client: Host,
    pub leader: usize,
    _dir: tempfile::TempDir,
}

impl Partitioned {
    /// Starts the cluster in namespaces named `prefix*` on subnet `subnet`.
    pub fn start(kind: Kind, prefix: &str, subnet: u8, tuning: &Tuning) -> Partitioned {
        let dir = tempfile::tempdir().unwrap();
        let mut net =
            Network::create(prefix, subnet).expect("network namespaces (root, iproute2, iptables)");
        let members: Vec<_> = (1..=3)
            .map(|i| net.add_host(&format!("m{i}")).unwrap())
            .collect();
        let client = net.add_host("c").unwrap();
        let cluster =
            Cluster::start_tuned(kind, &members, dir.path(), tuning).expect("cluster starts");
        let leader = wait_for(Duration::from_secs(60), || cluster.leader()).expect("no leader");
        Partitioned {
            net,
            cluster,
            client,
            leader,
            _dir: dir,
        }
    }

    /// Cuts member `isolated` off from the other two (clients still reach it).
    pub fn isolate(&self, isolated: usize) {
        let hosts: Vec<Host> = self
            .cluster
            .members
            .iter()
            .map(|m| m.host.clone())
            .collect();
        self.net.isolate(&hosts, isolated).unwrap();
    }
}

/// Waits (at most 30 s) for one of the members other than `old` to lead,
/// and says when, and whether `old` still says it leads.
pub fn report_new_leader(p: &Partitioned, old: usize) {
    let cut = std::time::Instant::now();
    let elected = wait_for(Duration::from_secs(30), || {
        (0..3).find(|&m| m != old && p.cluster.is_leader(m))
    });
    println!(
        "new leader {elected:?} {} ms after the cut; the old one still says it leads: {}",
        cut.elapsed().as_millis(),
        p.cluster.is_leader(old)
    );
}

/// Polls `probe` every 100 ms until it finds something or `limit` passes.
pub fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if let Some(found) = probe() {
            return Some(found);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Runs the clients (A through `a`'s members, B through `b`'s), applies
/// `fault` once B waits behind A, then `watch` while they run, and checks
/// what they saw.
pub fn a_is_told_before_b_is_granted(
    mut p: Partitioned,
    sessions: Sessions,
    a: &[usize],
    b: &[usize],
    fault: impl FnOnce(&mut Partitioned),
    watch: impl FnOnce(&Partitioned),
) {
    let urls = [p.cluster.url(a, sessions.a), p.cluster.url(b, sessions.b)];
    let (ready_tx, ready_rx) = mpsc::channel();
    let (cut_tx, cut_rx) = tokio::sync::oneshot::channel();
    let run = netns::spawn_in(&p.client, move || clients(urls, sessions, ready_tx, cut_rx));
    ready_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("clients ready");
    fault(&mut p);
    cut_tx.send(()).unwrap();
    watch(&p);
    let seen = run
        .join()
        .expect("client thread")
        .expect("entering the namespace");
    p.net.heal().unwrap();
    println!("{seen:?}");

    let lost = seen
        .a_lost_ms
        .unwrap_or_else(|| panic!("A never learned of its loss: {seen:?}"));
    assert!(
        lost <= seen.b_granted_ms,
        "A still believed it held the lock when B was granted: {seen:?}"
    );
    assert!(
        seen.a_write_after_b.is_err(),
        "the gate admitted A's stale write through its cut-off server: {seen:?}"
    );
}
