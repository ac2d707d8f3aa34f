//! The README's quick start (examples/quickstart/etcd_lock.rs, compiled as
//! the `quickstart-etcd` binary) against a real etcd, with the reference's
//! pause done to the example's own process: A holds the lock and is frozen
//! (SIGSTOP) before its write; B takes the lock once A's lease lapses and
//! writes; A wakes and sends its write with the old token. etcd must refuse
//! it in the same txn, and the key must keep B's value.

use std::process::Command;
use std::time::Duration;

use fencing::etcd::etcd_client;
use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::etcd::fixture::EtcdFixture;
use fencing_harness::fixture::Fixture;
use fencing_harness::Reaped;
use rustix::process::Signal;

const WAIT: Duration = Duration::from_secs(60);

fn lines_until_exit(child: &mut Reaped) -> (Option<i32>, Vec<String>) {
    let mut seen = Vec::new();
    while let Some(line) = child.next_line(WAIT) {
        seen.push(line);
    }
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait() {
            return (status.code(), seen);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_quick_start_cannot_overwrite_its_successor() {
    let f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let url = format!(
        "etcd://{}{}?ttl=2",
        f.cluster.endpoints().join(","),
        f.prefix
    );
    let (a, b) = tokio::task::spawn_blocking(move || {
        let bin = env!("CARGO_BIN_EXE_quickstart-etcd");
        let mut a = Reaped::spawn(Command::new(bin).args([&url, "from-A"])).unwrap();
        let holding = a.next_line(WAIT).expect("A holds the lock");
        assert!(
            holding.starts_with("holding ledger with token"),
            "{holding}"
        );
        // Frozen inside its two seconds of work, before the write.
        a.stop();

        let b = Command::new(bin).args([&url, "from-B"]).output().unwrap();
        a.signal(Signal::CONT);
        (lines_until_exit(&mut a), b)
    })
    .await
    .unwrap();

    let b_out = String::from_utf8_lossy(&b.stdout);
    assert!(
        b.status.success(),
        "{b_out}{}",
        String::from_utf8_lossy(&b.stderr)
    );
    assert!(b_out.contains("wrote from-B with token"), "{b_out}");
    let (a_code, a_seen) = a;
    assert_eq!(a_code, Some(0), "{a_seen:?}");
    assert!(
        a_seen.iter().any(|l| l.starts_with("refused:")),
        "the resumed holder's write was not refused: {a_seen:?}"
    );

    let mut etcd = etcd_client::Client::connect(f.cluster.endpoints(), None)
        .await
        .unwrap();
    let value = etcd.get("ledger/value", None).await.unwrap();
    let kv = value.kvs().first().expect("B's write landed");
    assert_eq!(kv.value_str().unwrap(), "from-B");
}
