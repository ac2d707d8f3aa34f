//! The leader-controller example on every backend, switched only by URL:
//! a leader freezes itself right before a write, a second replica takes
//! over and writes, and when the first resumes its old term's write must
//! not land (the store refuses the token, or the elector cancels the work
//! first). Judged on the store's audit log of accepted writes.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fencing_examples::FileStore;
use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::etcd::fixture::EtcdFixture;
use fencing_harness::fixture::Fixture;
use fencing_harness::zk::ensemble::ZkVersion;
use fencing_harness::zk::fixture::ZkFixture;
use fencing_harness::Reaped;
use rustix::process::Signal;

const WAIT: Duration = Duration::from_secs(60);

/// A replica process; killed on drop so a failing test leaves nothing behind.
struct Replica {
    child: Reaped,
    seen: Vec<String>,
}

impl Replica {
    fn start(
        url: &str,
        identity: &str,
        store: &Path,
        writes: usize,
        pause_before: Option<usize>,
    ) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_leader-controller"));
        cmd.args([url, identity, store.to_str().unwrap(), &writes.to_string()]);
        if let Some(n) = pause_before {
            cmd.args(["--pause-before-write", &n.to_string()]);
        }
        Replica {
            child: Reaped::spawn(&mut cmd).expect("start leader-controller"),
            seen: Vec::new(),
        }
    }

    fn wait_for(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .child
                .next_line(left)
                .unwrap_or_else(|| panic!("no {prefix:?} line; saw {:?}", self.seen));
            self.seen.push(line.clone());
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    fn is_stopped(&self) -> bool {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // The state follows the parenthesised command name.
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
    }

    fn cont(&self) {
        self.child.signal(Signal::CONT);
    }

    fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait() {
                // Up to the end of its output (the pipe closes with it).
                while let Some(line) = self.child.next_line(Duration::from_secs(5)) {
                    self.seen.push(line);
                }
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "replica did not finish; saw {:?}",
                self.seen
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn token_of(line: &str) -> u64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn paused_leader_cannot_overwrite_its_successor(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let mut a = Replica::start(url, "replica-a", &store_dir, 6, Some(3));
    let first_term = token_of(&a.wait_for("LEADER"));
    a.wait_for("FREEZING");
    let start = Instant::now();
    while !a.is_stopped() {
        assert!(start.elapsed() < WAIT, "replica-a did not freeze");
        std::thread::sleep(Duration::from_millis(10));
    }

    // While A is frozen its lease runs out and B leads, writes and resigns.
    let mut b = Replica::start(url, "replica-b", &store_dir, 3, None);
    let second_term = token_of(&b.wait_for("LEADER"));
    assert!(second_term > first_term);
    assert_eq!(b.exit_code(), Some(0), "{:?}", b.seen);

    a.cont();
    assert_eq!(a.exit_code(), Some(0), "{:?}", a.seen);
    let stopped_by = a
        .seen
        .iter()
        .find(|l| l.starts_with("FENCED") || l.starts_with("LOST"))
        .unwrap_or_else(|| panic!("replica-a carried on as if still leading: {:?}", a.seen));
    println!("the resumed leader was stopped by: {stopped_by}");

    let audit = FileStore::open(&store_dir).unwrap().audit().unwrap();
    let writers: Vec<(u64, &str)> = audit
        .iter()
        .map(|w| (w.token.get(), w.writer.as_str()))
        .collect();
    // 2 writes of A's first term, B's 3, then A's remaining 4 in a new term.
    assert_eq!(audit.len(), 9, "{writers:?}");
    assert!(
        audit.windows(2).all(|w| w[0].token <= w[1].token),
        "accepted tokens went backwards: {writers:?}"
    );
    let after_b = audit.iter().skip_while(|w| w.writer != "replica-b");
    assert!(
        after_b.clone().all(|w| w.token.get() >= second_term),
        "a write of the frozen term landed after its successor's: {writers:?}"
    );
    // One writer per term.
    for w in &audit {
        let same_term = audit.iter().filter(|o| o.token == w.token);
        assert!(
            same_term.clone().all(|o| o.writer == w.writer),
            "{writers:?}"
        );
    }
}

#[test]
fn local_source() {
    let dir = tempfile::tempdir().unwrap();
    paused_leader_cannot_overwrite_its_successor(&format!("local://{}", dir.path().display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd() {
    let f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let url = format!("etcd://{}{}", f.cluster.endpoints().join(","), f.prefix);
    tokio::task::spawn_blocking(move || paused_leader_cannot_overwrite_its_successor(&url))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper() {
    let f = ZkFixture::start(ZkVersion::V3_9).await;
    let url = format!(
        "zk://{}{}?ttl=2&ensemble={}",
        f.ensemble.connect_string(),
        f.path,
        f.name
    );
    tokio::task::spawn_blocking(move || paused_leader_cannot_overwrite_its_successor(&url))
        .await
        .unwrap();
}
