//! Faults through Docker against the etcd, ZooKeeper and PostgreSQL
//! services of docker-compose.yml, running for real: a member killed while
//! a lock is held and a waiter waits, the whole etcd set restarted, a
//! member cut off the network, the PostgreSQL standby promoted. Tokens must keep increasing and a gate must refuse every
//! superseded one, whatever the cluster decides about the holder.
//!
//! Ignored unless asked for: scripts/compose-test.sh starts the services
//! (project from FENCING_COMPOSE_PROJECT) and runs these with `--ignored`,
//! one at a time, then takes everything down.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fencing::{
    AcquireOptions, Error, FencingSource, FencingToken, Gate, Grant, MemoryGate, ResourceName,
};
use tokio::process::Command;

const ETCD_URL: &str = "etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379/fencing-compose";
const ZK_URL: &str = "zk://127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183/fencing-compose";
const PG_URL: &str = "postgres://postgres@127.0.0.1:5432,127.0.0.1:5433/postgres\
                      ?target_session_attrs=read-write&table=compose_locks";
/// Bound of one docker command (a restart waits for health checks).
const DOCKER_LIMIT: Duration = Duration::from_secs(180);
/// Bound of one acquire while the cluster recovers.
const ACQUIRE_LIMIT: Duration = Duration::from_secs(60);

fn project() -> String {
    std::env::var("FENCING_COMPOSE_PROJECT")
        .expect("FENCING_COMPOSE_PROJECT (scripts/compose-test.sh sets it)")
}

/// Runs `docker ARGS`, bounded; panics with its output when it fails.
async fn docker(args: &[&str]) -> String {
    let mut cmd = Command::new("docker");
    cmd.args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(DOCKER_LIMIT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("docker {args:?} took more than {DOCKER_LIMIT:?}"))
        .expect("run docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn compose(args: &[&str]) -> String {
    let project = project();
    let mut all = vec!["compose", "-p", project.as_str()];
    all.extend_from_slice(args);
    docker(&all).await
}

/// Brings `services` back and waits for their health checks.
async fn heal(services: &[&str]) {
    let mut args = vec!["up", "-d", "--wait"];
    args.extend_from_slice(services);
    compose(&args).await;
}

fn resource(test: &str) -> ResourceName {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    ResourceName::new(format!("{test}-{nanos:x}")).unwrap()
}

/// Connects, retrying while the cluster recovers (a ZooKeeper ensemble that
/// lost its leader opens no session until it elected another).
async fn connect(url: &str) -> Arc<dyn FencingSource> {
    let deadline = tokio::time::Instant::now() + ACQUIRE_LIMIT;
    loop {
        match fencing::connect(url).await {
            Ok(source) => return source,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("connect to {url}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("connect to {url} for {ACQUIRE_LIMIT:?}: {e}"),
        }
    }
}

async fn acquire(source: &Arc<dyn FencingSource>, r: &ResourceName) -> Grant {
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(4))
        .wait(ACQUIRE_LIMIT);
    source.acquire(r, &opts).await.expect("acquire")
}

/// The gate's view of a hand-over from `old` to `new`: the new token is
/// higher, admitted, and the old one is refused from then on.
async fn assert_superseded(r: &ResourceName, old: FencingToken, new: FencingToken) {
    assert!(new > old, "token {new} after {old}");
    let gate = MemoryGate::new();
    gate.admit_any_source(r, old)
        .await
        .expect("the old token before the new one");
    gate.admit_any_source(r, new).await.expect("the new token");
    match gate.admit_any_source(r, old).await {
        Err(Error::Stale { .. }) => {}
        other => panic!("a superseded token was not refused: {other:?}"),
    }
}

/// One client holds the lock and another waits while `fault` runs; then
/// the holder lets go: the waiter gets a higher token (once the holder let
/// go or its lease ended), and the gate refuses the old one. Returns the
/// holder's and the waiter's tokens.
async fn handed_over_across(
    url: &str,
    test: &str,
    fault: impl std::future::Future<Output = ()>,
) -> (FencingToken, FencingToken) {
    let (a, b) = (connect(url).await, connect(url).await);
    let r = resource(test);
    let held = acquire(&a, &r).await;
    let waiter = {
        let (b, r) = (b.clone(), r.clone());
        tokio::spawn(async move { acquire(&b, &r).await })
    };
    fault.await;
    let old = held.token();
    let _ = held.release().await;
    let next = tokio::time::timeout(ACQUIRE_LIMIT, waiter)
        .await
        .expect("the waiter was granted")
        .expect("waiter task");
    let new = next.token();
    assert_superseded(&r, old, new).await;
    next.release().await.expect("release");
    (old, new)
}

/// A member is SIGKILLed while one client holds the lock and another
/// waits (see [`handed_over_across`]); then it is started again.
async fn member_killed_while_held_and_waited(url: &str, member: &str, test: &str) {
    handed_over_across(url, test, async {
        docker(&["kill", &container(member).await]).await;
        // The holder keeps its lock or loses it, as the cluster decides.
        tokio::time::sleep(Duration::from_secs(2)).await;
    })
    .await;
    heal(&[member]).await;
}

/// The container of a service of this project.
async fn container(service: &str) -> String {
    let id = compose(&["ps", "-q", service]).await;
    let id = id.trim();
    assert!(!id.is_empty(), "no container for {service}");
    id.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the compose services (scripts/compose-test.sh)"]
async fn etcd_member_killed_while_held_and_waited() {
    member_killed_while_held_and_waited(ETCD_URL, "etcd2", "etcd-kill").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the compose services (scripts/compose-test.sh)"]
async fn zookeeper_server_killed_while_held_and_waited() {
    member_killed_while_held_and_waited(ZK_URL, "zk1", "zk-kill").await;
}

/// `docker compose restart` of every etcd member: the data volumes keep the
/// revision, so a grant after the restart carries a higher token than one
/// before it, whether or not the old grant survived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the compose services (scripts/compose-test.sh)"]
async fn etcd_set_restarted() {
    let r = resource("etcd-restart");
    let before = {
        let source = connect(ETCD_URL).await;
        let grant = acquire(&source, &r).await;
        let token = grant.token();
        grant.release().await.expect("release");
        token
    };
    compose(&["restart", "etcd1", "etcd2", "etcd3"]).await;
    heal(&["etcd1", "etcd2", "etcd3"]).await;
    let source = connect(ETCD_URL).await;
    let after = acquire(&source, &r).await;
    assert_superseded(&r, before, after.token()).await;
    after.release().await.expect("release");
}

/// One member cut off the network (`docker network disconnect`), as a
/// partition: the others keep granting with increasing tokens, and after
/// the member is back it serves grants that are higher still.
/// `alone` is a URL naming only the cut-off member: nothing gets through it
/// while it is disconnected, which shows the partition is real.
async fn member_partitioned(url: &str, alone: &str, member: &str, test: &str) {
    let network = format!("{}_default", project());
    let id = container(member).await;
    let source = connect(url).await;
    let r = resource(test);
    let first = acquire(&source, &r).await;
    let t1 = first.token();
    first.release().await.expect("release");

    docker(&["network", "disconnect", &network, &id]).await;
    let cut_off = async {
        let source = fencing::connect(alone).await?;
        let opts = AcquireOptions::new().wait(Duration::from_secs(3));
        source.acquire(&r, &opts).await
    };
    match tokio::time::timeout(Duration::from_secs(20), cut_off).await {
        Ok(Err(_)) | Err(_) => {}
        Ok(Ok(grant)) => panic!(
            "granted {} through the disconnected {member}",
            grant.token()
        ),
    }
    let during = acquire(&connect(url).await, &r).await;
    let t2 = during.token();
    during.release().await.expect("release");
    // The service name is the alias the other members know it by.
    docker(&["network", "connect", "--alias", member, &network, &id]).await;
    heal(&[member]).await;

    let after = acquire(&connect(url).await, &r).await;
    assert_superseded(&r, t1, t2).await;
    assert_superseded(&r, t2, after.token()).await;
    after.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the compose services (scripts/compose-test.sh)"]
async fn etcd_member_partitioned() {
    let alone = "etcd://127.0.0.1:32379/fencing-compose?request_timeout=2";
    member_partitioned(ETCD_URL, alone, "etcd3", "etcd-partition").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the compose services (scripts/compose-test.sh)"]
async fn zookeeper_server_partitioned() {
    let alone = "zk://127.0.0.1:2183/fencing-compose?request_timeout=2";
    member_partitioned(ZK_URL, alone, "zk3", "zk-partition").await;
}

/// The PostgreSQL primary killed while a lock is held and awaited, and its
/// standby promoted (`pg_ctl promote`, as an operator fails over): the
/// clients find the new primary, and its tokens (timeline 2 in their high
/// bits) are above the old primary's. The old primary is left down: started
/// on its own data it would be a second primary (scripts/compose-test.sh
/// takes everything down after the last test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the compose services (scripts/compose-test.sh)"]
async fn postgres_standby_promoted_while_held_and_waited() {
    let config = fencing::postgres::PgConfig::from_url(PG_URL).unwrap();
    fencing::postgres::PgSource::create_schema(&config)
        .await
        .expect("create the lock table");
    let (old, new) = handed_over_across(PG_URL, "pg-promote", async {
        // The standby has the grant's row before its primary goes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        docker(&["kill", &container("postgres").await]).await;
        compose(&["exec", "-T", "postgres-standby", "pg_ctl", "promote", "-w"]).await;
    })
    .await;
    assert!(
        new.get() >> 40 > old.get() >> 40,
        "token {new} is not of a later timeline than {old}"
    );
}
