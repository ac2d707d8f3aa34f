//! Curator's InterProcessMutex (Java) and ZkSource contend on one lock:
//! mutual exclusion holds across languages, and the tokens of both sides
//! (czxids of their lock nodes) follow the order in which they held it.

use std::process::Command;
use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_harness::cache::cached_bin;
use fencing_harness::fixture::Fixture;
use fencing_harness::scenarios::{self, Held};
use fencing_harness::zk::ensemble::ZkVersion;
use fencing_harness::zk::fixture::ZkFixture;
use fencing_harness::Reaped;
use fencing_zookeeper::zookeeper_client::{Acls, Client, CreateMode};

const ROUNDS: usize = 20;
const COUNTER: &str = "/interop-counter";

fn curator_jar() -> std::path::PathBuf {
    let jar = cached_bin("curator-mutex.jar");
    assert!(
        jar.exists(),
        "{} is missing: run scripts/test.sh (scripts/install/curator-interop.sh builds it)",
        jar.display()
    );
    jar
}

async fn curator_and_rust_share_one_lock(version: ZkVersion) {
    let f = ZkFixture::start(version).await;
    let mut java = Command::new("java");
    java.arg("-jar").arg(curator_jar()).args([
        "contend",
        "--connect",
        &f.ensemble.connect_string(),
    ]);
    java.args([
        "--path",
        &format!("{}/interop", f.path),
        "--counter",
        COUNTER,
        "--rounds",
        &ROUNDS.to_string(),
    ]);
    java.args(["--hold-ms", "20"]);
    let mut java = Reaped::spawn(java.args(["--id", "java"])).unwrap();
    // The JVM takes a while to start: contend only once it holds the lock.
    let first = java
        .next_line(Duration::from_secs(60))
        .expect("Java side started");

    let source = f.source().await;
    let client = source.client().await.unwrap();
    let lock = ResourceName::new("interop").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(4))
        .wait(Duration::from_secs(60));
    let mut held = Vec::new();
    for _ in 0..ROUNDS {
        let g = source.acquire(&lock, &opts).await.unwrap();
        held.push(Held {
            token: g.token().get(),
            read: read_modify_write(&client).await,
            anchor: false,
        });
        g.release().await.unwrap();
    }

    for _ in 0..900 {
        if java.try_wait().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lines: Vec<String> = std::iter::once(first)
        .chain(java.kill_and_collect())
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("\"done\"")),
        "Java side did not finish: {lines:?}"
    );
    let java_held: Vec<Held> = lines
        .iter()
        .filter(|l| l.contains("\"held\""))
        .map(|l| Held::from_anchor_line(l))
        .collect();
    assert_eq!(java_held.len(), ROUNDS, "{lines:?}");
    held.extend(java_held);
    scenarios::check_interop(held, &version.to_string());
}

/// The unprotected read-modify-write that only mutual exclusion keeps right.
async fn read_modify_write(c: &Client) -> u64 {
    let value = match c.get_data(COUNTER).await {
        Ok((bytes, _)) => std::str::from_utf8(&bytes).unwrap().parse().unwrap(),
        Err(fencing_zookeeper::zookeeper_client::Error::NoNode) => 0,
        Err(e) => panic!("read counter: {e}"),
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let next = (value + 1).to_string();
    if value == 0 && c.check_stat(COUNTER).await.unwrap().is_none() {
        c.create(
            COUNTER,
            next.as_bytes(),
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    } else {
        c.set_data(COUNTER, next.as_bytes(), None).await.unwrap();
    }
    value
}

fencing_harness::on_both_zk_versions!(curator_and_rust_share_one_lock);
