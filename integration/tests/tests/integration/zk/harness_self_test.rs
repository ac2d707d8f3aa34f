//! Tests of the real-ensemble harness itself, on ZooKeeper 3.8 and 3.9:
//! a 3-server ensemble elects exactly one leader and answers `srvr` on
//! every server, survives a killed leader, a restart of every server, a
//! paused follower and a paused leader; a single server runs standalone; a
//! proxy partitions a client; a panicking test leaves no JVM behind.
//!
//! The jars come from `scripts/install/zookeeper.sh`; without them these
//! tests fail with a message saying to run `scripts/test.sh`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fencing_harness::fixture::started;
use fencing_harness::member::MemberCluster;
use fencing_harness::net::proxy::Proxy;
use fencing_harness::zk::ensemble::{
    four_letter_word, session_roundtrip, ZkEnsemble, ZkHarnessError, ZkMode, ZkVersion,
};

/// A bound for a single four-letter word in these tests.
const CALL: Duration = Duration::from_secs(3);

async fn start(version: ZkVersion, servers: usize) -> ZkEnsemble {
    let what = format!("{version}: {servers}-server ensemble");
    started(what, ZkEnsemble::start(version, servers)).await
}

/// The `Mode:` each server reports, straight from a raw `srvr`.
async fn modes(ensemble: &ZkEnsemble, servers: &[usize]) -> Vec<(usize, String)> {
    let mut modes = Vec::new();
    for &i in servers {
        let answer = four_letter_word(&ensemble.endpoint(i), "srvr", CALL)
            .await
            .unwrap_or_else(|e| panic!("srvr to server {i}: {e}"));
        let mode = answer
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .unwrap_or_else(|| panic!("server {i} answered srvr without a mode: {answer}"));
        modes.push((i, mode.trim().to_string()));
    }
    modes
}

async fn three_servers_elect_exactly_one_leader(version: ZkVersion) {
    let ensemble = start(version, 3).await;
    assert_eq!(ensemble.server_count(), 3);
    let endpoints = ensemble.endpoints();
    assert_eq!(endpoints.len(), 3);
    assert_eq!(ensemble.connect_string(), endpoints.join(","));
    for e in &endpoints {
        assert!(e.starts_with("127.0.0.1:"), "{e}");
    }

    for i in 0..3 {
        let answer = four_letter_word(&ensemble.endpoint(i), "srvr", CALL)
            .await
            .unwrap();
        assert!(
            answer.contains(&format!("Zookeeper version: {}", version.release())),
            "server {i} runs another release: {answer}"
        );
        let ok = four_letter_word(&ensemble.endpoint(i), "ruok", CALL)
            .await
            .unwrap();
        assert_eq!(ok, "imok");
    }
    let modes = modes(&ensemble, &[0, 1, 2]).await;
    let leaders: Vec<usize> = modes
        .iter()
        .filter(|(_, m)| m == "leader")
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(leaders.len(), 1, "modes: {modes:?}");
    assert_eq!(
        modes.iter().filter(|(_, m)| m == "follower").count(),
        2,
        "modes: {modes:?}"
    );
    assert_eq!(ensemble.leader().await.unwrap(), leaders[0]);
    assert_eq!(ensemble.mode(leaders[0]).await.unwrap(), ZkMode::Leader);
}

async fn killed_leader_is_replaced_and_rejoins(version: ZkVersion) {
    let mut ensemble = start(version, 3).await;
    let old = ensemble.leader().await.unwrap();
    let pid = ensemble.pid(old).unwrap();
    let t = Instant::now();
    ensemble.kill(old);
    assert!(!ensemble.is_running(old));
    assert!(!process_exists(pid), "killed server {pid} still exists");
    let new = ensemble.leader().await.unwrap();
    let failover = t.elapsed();
    eprintln!("{version}: leader {old} killed, server {new} leads after {failover:?}");
    assert_ne!(new, old, "a killed server cannot lead");
    assert!(
        failover < Duration::from_secs(15),
        "failover took {failover:?}"
    );
    let survivors: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let modes = modes(&ensemble, &survivors).await;
    assert_eq!(
        modes.iter().filter(|(_, m)| m == "leader").count(),
        1,
        "{modes:?}"
    );
    // The dead server's port refuses.
    assert!(four_letter_word(&ensemble.endpoint(old), "ruok", CALL)
        .await
        .is_err());

    let t = Instant::now();
    ensemble.restart(old).await.unwrap();
    eprintln!(
        "{version}: server {old} restarted, ensemble healthy after {:?}",
        t.elapsed()
    );
    assert!(ensemble.is_running(old));
    assert_eq!(ensemble.mode(old).await.unwrap(), ZkMode::Follower);
    assert_eq!(ensemble.leader().await.unwrap(), new);
}

async fn restart_all_regains_a_quorum(version: ZkVersion) {
    let mut ensemble = start(version, 3).await;
    let pids: Vec<u32> = (0..3).map(|i| ensemble.pid(i).unwrap()).collect();
    let t = Instant::now();
    ensemble.restart_all().await.unwrap();
    eprintln!(
        "{version}: all 3 servers restarted, healthy after {:?}",
        t.elapsed()
    );
    for (i, pid) in pids.into_iter().enumerate() {
        assert_ne!(ensemble.pid(i), Some(pid), "server {i} was not restarted");
        assert!(!process_exists(pid), "old server process {pid} survived");
    }
    let modes = modes(&ensemble, &[0, 1, 2]).await;
    assert_eq!(
        modes.iter().filter(|(_, m)| m == "leader").count(),
        1,
        "{modes:?}"
    );
}

async fn paused_follower_does_not_stop_the_ensemble(version: ZkVersion) {
    let ensemble = start(version, 3).await;
    let leader = ensemble.leader().await.unwrap();
    let follower = (leader + 1) % 3;
    ensemble.pause(follower);
    assert!(ensemble.is_paused(follower));

    // A stopped server answers nothing; the others go on.
    let t = Instant::now();
    let stalled = four_letter_word(
        &ensemble.endpoint(follower),
        "srvr",
        Duration::from_millis(500),
    )
    .await;
    assert!(
        matches!(stalled, Err(ZkHarnessError::Timeout(_))),
        "a stopped server answered: {stalled:?}"
    );
    assert!(t.elapsed() >= Duration::from_millis(450));
    // Longer than syncLimit (2 s): the leader drops the silent follower
    // and keeps its quorum with the other one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ensemble.leader().await.unwrap(), leader);

    let t = Instant::now();
    ensemble.resume(follower);
    assert!(!ensemble.is_paused(follower));
    ensemble.wait_healthy().await.unwrap();
    eprintln!(
        "{version}: follower {follower} resumed, ensemble healthy after {:?}",
        t.elapsed()
    );
    assert_eq!(ensemble.mode(follower).await.unwrap(), ZkMode::Follower);
}

async fn paused_leader_is_replaced_and_steps_down(version: ZkVersion) {
    let ensemble = start(version, 3).await;
    let old = ensemble.leader().await.unwrap();
    let t = Instant::now();
    ensemble.pause(old);
    // The followers stop hearing from it after syncLimit (2 s) and elect
    // one of themselves.
    let new = ensemble.leader().await.unwrap();
    eprintln!(
        "{version}: leader {old} paused, server {new} leads after {:?}",
        t.elapsed()
    );
    assert_ne!(new, old, "a stopped server cannot lead");

    let t = Instant::now();
    ensemble.resume(old);
    ensemble.wait_healthy().await.unwrap();
    eprintln!(
        "{version}: old leader {old} resumed, ensemble healthy after {:?}",
        t.elapsed()
    );
    assert_eq!(ensemble.mode(old).await.unwrap(), ZkMode::Follower);
    assert_eq!(ensemble.leader().await.unwrap(), new);
}

async fn a_single_server_runs_standalone(version: ZkVersion) {
    let ensemble = start(version, 1).await;
    assert_eq!(ensemble.server_count(), 1);
    assert_eq!(ensemble.connect_string(), ensemble.endpoint(0));
    assert_eq!(ensemble.mode(0).await.unwrap(), ZkMode::Standalone);
    assert_eq!(ensemble.leader().await.unwrap(), 0);
    let modes = modes(&ensemble, &[0]).await;
    assert_eq!(modes, vec![(0, "standalone".to_string())]);
}

/// The health check's proof that a server reaches the leader: a session
/// opens through a follower while the quorum serves, and not while the
/// other two servers are stopped, though the follower still accepts
/// connections (and, for a moment, still says `Mode: follower`).
async fn a_server_without_a_quorum_opens_no_session(version: ZkVersion) {
    let ensemble = start(version, 3).await;
    let leader = ensemble.leader().await.unwrap();
    let (lone, other) = ((leader + 1) % 3, (leader + 2) % 3);
    session_roundtrip(&ensemble.endpoint(lone), None, CALL)
        .await
        .expect("a session through a follower of a serving ensemble");
    ensemble.pause(leader);
    ensemble.pause(other);
    let refused = session_roundtrip(&ensemble.endpoint(lone), None, CALL).await;
    assert!(
        matches!(
            refused,
            Err(ZkHarnessError::Unhealthy(_) | ZkHarnessError::Timeout(_))
        ),
        "a session without a quorum: {refused:?}"
    );
    ensemble.resume(leader);
    ensemble.resume(other);
    ensemble.wait_healthy().await.expect("healthy again");
}

async fn proxy_blackhole_partitions_a_client(version: ZkVersion) {
    let ensemble = start(version, 1).await;
    let target: SocketAddr = ensemble.endpoint(0).parse().unwrap();
    let proxy = Proxy::start(target).await.unwrap();
    let ok = four_letter_word(&proxy.endpoint(), "ruok", CALL)
        .await
        .unwrap();
    assert_eq!(ok, "imok");

    proxy.set_blackhole(true);
    let t = Instant::now();
    let lost = four_letter_word(&proxy.endpoint(), "ruok", Duration::from_secs(1)).await;
    assert!(
        matches!(lost, Err(ZkHarnessError::Timeout(_))),
        "ruok through a blackhole: {lost:?}"
    );
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "failed after {waited:?}, not by timing out"
    );
    // The server itself is fine.
    assert_eq!(
        four_letter_word(&ensemble.endpoint(0), "ruok", CALL)
            .await
            .unwrap(),
        "imok"
    );

    proxy.set_blackhole(false);
    let ok = four_letter_word(&proxy.endpoint(), "ruok", CALL)
        .await
        .unwrap();
    assert_eq!(ok, "imok");
}

/// Whether process `pid` still exists (a zombie counts as gone).
fn process_exists(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn a_panicking_test_leaves_no_server_behind(version: ZkVersion) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let ensemble = ZkEnsemble::start(version, 3).await.unwrap();
        ensemble.pause(1);
        let pids: Vec<u32> = (0..3).map(|i| ensemble.pid(i).unwrap()).collect();
        let dir = ensemble.dir().to_path_buf();
        tx.send((pids, dir)).unwrap();
        panic!("a test failing with a live ensemble (expected)");
    });
    assert!(task.await.unwrap_err().is_panic());
    let (pids, dir) = rx.await.unwrap();
    for pid in pids {
        assert!(
            !process_exists(pid),
            "server process {pid} outlived the panic"
        );
    }
    assert!(!dir.exists(), "{} outlived the panic", dir.display());
}

fencing_harness::on_both_zk_versions!(
    a_server_without_a_quorum_opens_no_session,
    three_servers_elect_exactly_one_leader,
    killed_leader_is_replaced_and_rejoins,
    restart_all_regains_a_quorum,
    paused_follower_does_not_stop_the_ensemble,
    paused_leader_is_replaced_and_steps_down,
    a_single_server_runs_standalone,
    proxy_blackhole_partitions_a_client,
    a_panicking_test_leaves_no_server_behind,
);

#[test]
fn a_missing_install_says_how_to_install_it() {
    let empty = tempfile::tempdir().unwrap();
    let err = ZkVersion::V3_9.classpath_in(empty.path()).unwrap_err();
    assert!(
        matches!(err, ZkHarnessError::MissingInstall { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("scripts/test.sh"), "{err}");
    let release = format!("ZooKeeper {}", fencing_harness::cache::zookeeper_release());
    assert!(err.to_string().contains(&release), "{err}");
}

#[test]
fn both_classpaths_are_installed() {
    for version in ZkVersion::ALL {
        let cp = version
            .classpath()
            .unwrap_or_else(|e| panic!("{version}: {e}"));
        eprintln!("{version} classpath: {cp}");
        assert!(cp.contains("zookeeper"), "{cp}");
    }
}
