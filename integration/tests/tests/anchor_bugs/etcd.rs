//! etcd's `concurrency` package (the `etcd-mutex repro` subcommand) against
//! `EtcdSource` and `LeaderElector` on it, each under the same fault.

use std::time::{Duration, Instant};

use etcd_client::{Client, CompactionOptions, GetOptions};
use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_election::{ElectionConfig, LeaderElector};
use fencing_harness::cache::cached_bin;
use fencing_harness::etcd::cluster::EtcdVersion;
use fencing_harness::etcd::fixture::{EtcdFixture, Partition};
use fencing_harness::fixture::Fixture;
use tokio::process::Command;

use super::driver::{flag, int, text, verdict, Stepped};

const STEP: Duration = Duration::from_secs(30);

fn repro(f: &EtcdFixture, case: &str, through: &[String], prefix: &str) -> Stepped {
    let bin = cached_bin("etcd-mutex");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install/go-interop.sh",
        bin.display()
    );
    Stepped::spawn(Command::new(bin).args([
        "repro",
        "--case",
        case,
        "--endpoints",
        &through.join(","),
        "--direct",
        &f.cluster.endpoints().join(","),
        "--prefix",
        prefix,
    ]))
}

/// The create revision of `key` (0: absent), read straight from a member.
async fn created(observer: &mut Client, key: &str) -> i64 {
    let r = observer.get(key, None).await.expect("get");
    r.kvs().first().map_or(0, |kv| kv.create_revision())
}

/// Waits (at most 10 s) until `key` is gone: the delete the client sent has
/// been applied, whatever its client learns of it.
async fn until_deleted(observer: &mut Client, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while created(observer, key).await != 0 {
        assert!(Instant::now() < deadline, "{key} was never deleted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Advances the store and compacts it, physically, to its newest revision.
async fn compact_now(observer: &mut Client) {
    let mut rev = 0;
    for i in 0..3 {
        let r = observer
            .put("/anchor-bugs-filler", i.to_string(), None)
            .await
            .expect("put");
        rev = r.header().expect("header").revision();
    }
    observer
        .compact(rev, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
}

fn election(source: impl FencingSource + 'static, name: &str, who: &str) -> LeaderElector {
    let config = ElectionConfig::new(who)
        .lease_duration(Duration::from_secs(15))
        .renew_deadline(Duration::from_secs(10))
        .retry_period(Duration::from_secs(2));
    LeaderElector::new(source, ResourceName::new(name).unwrap(), config).unwrap()
}

/// etcd-io/etcd#22082: `Unlock` deletes by key name. Its delete is applied,
/// its answer lost; the session locks again (same key name, newer
/// revision); the failed `Unlock`, retried, deletes the newer lock, and
/// another session is granted while the newer holder still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_unlock_retry_deletes_a_newer_lock() {
    let f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let mut observer = f.source().await.client();

    // The anchor.
    let (partition, through) = Partition::around(f.cluster.endpoints()).await;
    let mut go = repro(
        &f,
        "unlock-retry",
        &through,
        &format!("{}/go-unlock", f.prefix),
    );
    let step = go.expect("step", STEP).await;
    let key = text(&step, "key").to_owned();
    partition.set_replies_dropped(true);
    go.next().await;
    until_deleted(&mut observer, &key).await;
    partition.cut_connections();
    partition.set_replies_dropped(false);
    let unlocked = go.expect("unlocked", STEP).await;
    let relocked = go.expect("relocked", STEP).await;
    let v = go.expect("verdict", STEP).await;
    go.finish(Duration::from_secs(5)).await;
    let anchor = !text(&unlocked, "error").is_empty()
        && text(&relocked, "key") == key
        && int(&relocked, "rev") > int(&step, "rev")
        && int(&v, "second_key_rev") == 0
        && flag(&v, "other_locked");

    // Ours: the same fault on a release, then the same source locks again.
    let (source, partition) = f.partitionable_source().await;
    let lock = ResourceName::new("ours-unlock").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(10));
    let first = source.acquire(&lock, &opts).await.unwrap();
    let first_key = first.key().to_owned();
    partition.set_replies_dropped(true);
    let release = tokio::spawn(first.release());
    until_deleted(&mut observer, &first_key).await;
    partition.cut_connections();
    partition.set_replies_dropped(false);
    let released = tokio::time::timeout(Duration::from_secs(15), release).await;
    let second = source.acquire(&lock, &opts).await.unwrap();
    // Every background release of the source has ended by now or is fenced
    // by the first grant's create revision; look after a moment anyway.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second_rev = created(&mut observer, second.key()).await;
    let other = f.source().await;
    let refused = other
        .acquire(&lock, &opts.clone().wait(Duration::from_secs(1)))
        .await
        .is_err();
    let token = second.token();
    let ours = second_rev == i64::try_from(token.get()).unwrap() && second.is_live() && refused;
    second.release().await.unwrap();

    verdict(
        "etcd#22082 unlock retry deletes a newer lock",
        anchor,
        ours,
        &format!(
            "anchor: {unlocked} {relocked} {v}; ours: release {released:?}, \
             second key rev {second_rev} token {token}, other refused {refused}"
        ),
    );
}

/// etcd-io/etcd#22123: `Resign` forgets the leader key even when its
/// request failed; the next `Resign` returns nil and the key stays for as
/// long as the session lives, so no one else is elected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_resign_forgets_its_key() {
    let f = EtcdFixture::start(EtcdVersion::V3_6).await;

    // The anchor: its first Resign runs into a blackhole.
    let (partition, through) = Partition::around(f.cluster.endpoints()).await;
    let mut go = repro(&f, "resign", &through, &format!("{}/go-resign", f.prefix));
    go.expect("step", STEP).await;
    partition.set(true);
    go.next().await;
    let resigned = go.expect("resigned", STEP).await;
    go.expect("step", STEP).await;
    partition.cut_connections();
    partition.set(false);
    go.next().await;
    let v = go.expect("verdict", STEP).await;
    go.finish(Duration::from_secs(5)).await;
    let anchor = !text(&resigned, "error").is_empty()
        && text(&resigned, "key_after").is_empty()
        && text(&v, "error").is_empty()
        && int(&v, "key_rev_after") > 0
        && !flag(&v, "other_elected");

    // Ours: a resign whose caller gives up during the same blackhole; the
    // release goes on by itself after the heal, well before the 15 s lease
    // could expire.
    let (source, partition) = f.partitionable_source().await;
    let leading = election(source, "ours-resign", "subject")
        .campaign()
        .await
        .unwrap();
    partition.set(true);
    let gave_up = tokio::time::timeout(Duration::from_secs(1), leading.resign())
        .await
        .is_err();
    partition.cut_connections();
    partition.set(false);
    let healed = Instant::now();
    let other = election(f.source().await, "ours-resign", "other");
    let elected = tokio::time::timeout(Duration::from_secs(8), other.campaign()).await;
    let took = healed.elapsed();
    let ours = matches!(elected, Ok(Ok(_)));
    if let Ok(Ok(l)) = elected {
        l.resign().await.unwrap();
    }

    verdict(
        "etcd#22123 resign forgets its key",
        anchor,
        ours,
        &format!(
            "anchor: {resigned} {v}; ours: caller gave up {gave_up}, other elected after {took:?}"
        ),
    );
}

/// etcd-io/etcd#21128: `Campaign` returns an error from its wait (here
/// ErrCompacted: its watch resumed at a compacted revision) without
/// deleting its key; `Resign` then does nothing, and once the leader steps
/// down the failed candidate's key leads an election it is not in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_campaign_error_leaves_its_key() {
    let f = EtcdFixture::start(EtcdVersion::V3_6).await;
    let mut observer = f.source().await.client();

    // The anchor: compact while it waits in its watch, then cut its
    // connections so the watch resumes at its old revision.
    let (partition, through) = Partition::around(f.cluster.endpoints()).await;
    let mut go = repro(
        &f,
        "campaign-error",
        &through,
        &format!("{}/go-campaign", f.prefix),
    );
    go.expect("step", STEP).await;
    compact_now(&mut observer).await;
    partition.cut_connections();
    go.next().await;
    let returned = go.expect("campaign_returned", STEP).await;
    let v = go.expect("verdict", STEP).await;
    go.finish(Duration::from_secs(5)).await;
    let anchor = text(&returned, "error").contains("compacted")
        && int(&returned, "key_rev") > 0
        && text(&v, "resign_error").is_empty()
        && int(&v, "key_rev_after_resign") > 0
        && !flag(&v, "third_elected")
        && text(&v, "leader_value") == "subject";

    // Ours: the same fault while our candidate waits behind our leader.
    let leader = election(f.source().await, "ours-campaign", "leader")
        .campaign()
        .await
        .unwrap();
    let watchers = f
        .cluster
        .metric("etcd_debugging_mvcc_watcher_total")
        .await
        .unwrap_or(0.0);
    let (source, partition) = f.partitionable_source().await;
    let candidate = election(source, "ours-campaign", "subject");
    let waiting = tokio::spawn(async move { candidate.campaign().await });
    // Our candidate's watch is registered once the members count one more
    // watcher (bounded; the verdict does not depend on it).
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline
        && f.cluster
            .metric("etcd_debugging_mvcc_watcher_total")
            .await
            .unwrap_or(0.0)
            <= watchers
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    compact_now(&mut observer).await;
    partition.cut_connections();
    // The fault has had its effect on the watch once the candidate looks
    // again; then the leader steps down.
    tokio::time::sleep(Duration::from_secs(1)).await;
    leader.resign().await.unwrap();
    let elected = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    let mut ours = matches!(elected, Ok(Ok(Ok(_))));
    if let Ok(Ok(Ok(l))) = elected {
        l.resign().await.unwrap();
    }
    let dir = format!("{}/ours-campaign/", f.prefix);
    let left = observer
        .get(dir, Some(GetOptions::new().with_prefix().with_count_only()))
        .await
        .unwrap()
        .count();
    ours &= left == 0;

    verdict(
        "etcd#21128 campaign error leaves its key",
        anchor,
        ours,
        &format!("anchor: {returned} {v}; ours: elected {ours}, keys left {left}"),
    );
}
