//! Go's concurrency.Mutex (official etcd client) and EtcdSource contend on
//! one lock: mutual exclusion holds across languages, and the tokens of
//! both sides (create revisions) follow the order in which they held it.

use std::process::Command;
use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_harness::cache::cached_bin;
use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::etcd::fixture::EtcdFixture;
use fencing_harness::fixture::Fixture;
use fencing_harness::scenarios::{self, Held};
use fencing_harness::Reaped;

const ROUNDS: usize = 25;
const COUNTER: &str = "/interop-counter";

fn go_binary() -> std::path::PathBuf {
    let bin = cached_bin("etcd-mutex");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/test.sh (scripts/install/go-interop.sh builds it)",
        bin.display()
    );
    bin
}

async fn go_and_rust_share_one_lock(version: EtcdVersion) {
    let f = EtcdFixture::start(version).await;
    let mut go = Command::new(go_binary());
    go.args([
        "contend",
        "--endpoints",
        &f.cluster.endpoints().join(","),
        "--counter",
        COUNTER,
    ])
    .args([
        "--prefix",
        &format!("{}/interop", f.prefix),
        "--rounds",
        &ROUNDS.to_string(),
        "--id",
        "go",
    ]);
    let mut go = Reaped::spawn(&mut go).unwrap();

    let source = f.source().await;
    let lock = ResourceName::new("interop").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(30));
    let mut held = Vec::new();
    for _ in 0..ROUNDS {
        let g = source.acquire(&lock, &opts).await.unwrap();
        held.push(Held {
            token: g.token().get(),
            read: read_modify_write(&source).await,
            anchor: false,
        });
        g.release().await.unwrap();
    }

    for _ in 0..600 {
        if go.try_wait().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lines = go.kill_and_collect();
    assert!(
        lines.iter().any(|l| l.contains("\"done\"")),
        "Go side did not finish: {lines:?}"
    );
    let go_held: Vec<Held> = lines
        .iter()
        .filter(|l| l.contains("\"held\""))
        .map(|l| Held::from_anchor_line(l))
        .collect();
    assert_eq!(go_held.len(), ROUNDS, "{lines:?}");
    held.extend(go_held);
    scenarios::check_interop(held, &version.to_string());
}

/// The unprotected read-modify-write that only mutual exclusion keeps right.
async fn read_modify_write(source: &fencing_etcd::EtcdSource) -> u64 {
    let mut c = source.client();
    let resp = c.get(COUNTER, None).await.unwrap();
    let value = resp.kvs().first().map_or(0, |kv| {
        std::str::from_utf8(kv.value()).unwrap().parse().unwrap()
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    c.put(COUNTER, (value + 1).to_string(), None).await.unwrap();
    value
}

fencing_harness::on_both_etcd_versions!(go_and_rust_share_one_lock);
