//! `PgSource` on a real server: the conformance suite (each client through
//! a proxy, so a stall is a real cut), fencing inside the database, a
//! standby promoted while a client holds, and the errors a user meets.

use std::time::Duration;

use fencing::postgres::{pg_error, PgConfig, PgSource};
use fencing::{AcquireOptions, Error, FencingSource, LossReason, ResourceName};
use fencing_harness::postgres::fixture::PgFixture;
use fencing_harness::postgres::server::PgServer;

async fn harness() -> PgFixture {
    PgFixture::start().await
}

fencing_testkit::conformance_suite!(harness);

fn resource(name: &str) -> ResourceName {
    ResourceName::new(name).unwrap()
}

/// The seed's pause scenario, with the check inside the database: a holder
/// cut off past its lease writes after the next holder took the lock, and
/// `guard` in its transaction refuses, so the write never lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_cannot_write_through_guard() {
    let pg = PgFixture::start().await;
    let setup = report_table(&pg).await;
    let (paused, cut) = pg.partitionable_source().await;
    let other = pg.source().await;
    let r = resource("report");
    let stale = paused.acquire(&r, &AcquireOptions::new()).await.unwrap();
    cut.set(true);
    let fresh = other
        .acquire(&r, &AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(fresh.token() > stale.token());

    // The newer holder writes, then the stale one tries, each in its own
    // transaction on the database of the lock table.
    let url = pg.url(pg.server.port());
    guarded_write(&url, &other, &fresh, "fresh").await.unwrap();
    match guarded_write(&url, &paused, &stale, "stale").await {
        Err(Error::Stale { presented, highest }) => {
            assert_eq!((presented, highest), (stale.token(), fresh.token()));
        }
        other => panic!("the stale holder's guarded write: {other:?}"),
    }
    assert!(!stale.is_live(), "guard's refusal marks the grant lost");
    let body: String = setup
        .query_one("SELECT body FROM report", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(body, "fresh");
    fresh.release().await.unwrap();
}

/// A table `report` with one row, for guarded writes; the admin's client.
async fn report_table(pg: &PgFixture) -> tokio_postgres::Client {
    let setup = pg.server.client().await.unwrap();
    setup
        .batch_execute("CREATE TABLE report (id INT PRIMARY KEY, body TEXT NOT NULL); INSERT INTO report VALUES (1, 'none')")
        .await
        .unwrap();
    setup
}

async fn guarded_write(
    url: &str,
    source: &PgSource,
    grant: &fencing::Grant,
    body: &str,
) -> fencing::Result<()> {
    let config = PgConfig::from_url(url).unwrap();
    let (mut client, conn) = config.pg.connect(tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(conn);
    let tx = client.transaction().await.map_err(pg_error)?;
    source.guard(&tx, grant).await?;
    tx.execute("UPDATE report SET body = $1 WHERE id = 1", &[&body])
        .await
        .map_err(pg_error)?;
    let done = tx.commit().await.map_err(pg_error);
    drop(client);
    let _ = driver.await;
    done
}

/// A standby (pg_basebackup, streaming) promoted after the primary minted
/// tokens the standby never received: the new primary's tokens are still
/// higher, because the timeline is in their high bits. The holder's grant,
/// replicated before the cut, is still its own on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_rising_across_a_standby_promotion() {
    let mut primary = PgFixture::start().await;
    let standby = PgServer::standby_of(&primary.server).await.unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write&table=fencing_locks&ttl=20&request_timeout=2",
        primary.server.port(),
        standby.port()
    );
    let holder = PgSource::connect_url(&url).await.unwrap();
    let held = holder.lock("orders").await.unwrap();
    wait_replayed(&primary.server, &standby).await;

    // Cut the standby off, then mint more than the 32 values a sequence
    // logs ahead: the standby's sequence is now behind the primary's.
    let s = standby.client().await.unwrap();
    // Two statements: ALTER SYSTEM refuses to run in a transaction block.
    s.batch_execute("ALTER SYSTEM SET primary_conninfo = ''")
        .await
        .unwrap();
    s.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    wait_until_not_streaming(&primary.server).await;
    let mut highest = held.token();
    for i in 0..40 {
        let g = holder.lock(&format!("burn-{i}")).await.unwrap();
        highest = highest.max(g.token());
        g.release().await.unwrap();
    }
    primary.server.kill();
    standby.promote().await.unwrap();

    let newcomer = PgSource::connect_url(&url).await.unwrap();
    assert_eq!(
        newcomer.identity(),
        holder.identity(),
        "one source across the failover"
    );
    let g = newcomer.lock("after-failover").await.unwrap();
    assert!(
        g.token() > highest,
        "token {} after promotion, {highest} minted before",
        g.token()
    );
    assert!(
        newcomer
            .try_acquire(&resource("orders"), &AcquireOptions::new())
            .await
            .unwrap()
            .is_none(),
        "the replicated lock row still names its holder"
    );
    assert!(
        holder.validate(&held).await.unwrap(),
        "the holder reconnects and still holds"
    );
    held.release().await.unwrap();
    g.release().await.unwrap();
}

async fn wait_replayed(primary: &PgServer, standby: &PgServer) {
    let p = primary.client().await.unwrap();
    let s = standby.client().await.unwrap();
    let target: String = p
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    for _ in 0..200 {
        let caught_up: bool = s
            .query_one(
                "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                &[&target],
            )
            .await
            .unwrap()
            .get(0);
        if caught_up {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the standby did not replay {target} within 10 s");
}

async fn wait_until_not_streaming(primary: &PgServer) {
    let p = primary.client().await.unwrap();
    for _ in 0..200 {
        let senders: i64 = p
            .query_one("SELECT count(*) FROM pg_stat_replication", &[])
            .await
            .unwrap()
            .get(0);
        if senders == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the standby still streams after 10 s");
}

/// What a user meets first: a missing schema, a refused login, nobody
/// listening, and a grant of another source. Each is a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconfigurations_are_typed_errors() {
    let pg = PgFixture::start().await;
    let port = pg.server.port();
    let no_table = PgConfig::from_url(&format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?table=nowhere"
    ))
    .unwrap();
    match PgSource::connect(no_table).await {
        Err(Error::Config(msg)) => assert!(msg.contains("create_schema"), "{msg}"),
        other => panic!("missing table: {other:?}"),
    }
    let setup = pg.server.client().await.unwrap();
    setup
        .batch_execute("CREATE ROLE stranger LOGIN")
        .await
        .unwrap();
    let stranger = PgConfig::from_url(&format!(
        "postgres://stranger@127.0.0.1:{port}/postgres?table=fencing_locks"
    ))
    .unwrap();
    match PgSource::connect(stranger).await {
        Err(Error::PermissionDenied(msg)) => assert!(msg.contains("42501"), "{msg}"),
        other => panic!("a role without privileges: {other:?}"),
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap().port();
    drop(closed);
    match PgSource::connect_url(&format!("postgres://postgres@127.0.0.1:{dead}/postgres")).await {
        Err(Error::Unreachable { endpoints, .. }) => assert!(endpoints.contains(&dead.to_string())),
        other => panic!("nobody listening: {other:?}"),
    }

    // Two lock tables are two sources: tokens of one are foreign to the other.
    let other_table = PgConfig::from_url(&format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?table=other_locks"
    ))
    .unwrap();
    PgSource::create_schema(&other_table).await.unwrap();
    PgSource::create_schema(&other_table).await.unwrap();
    let (a, b) = (
        pg.source().await,
        PgSource::connect(other_table).await.unwrap(),
    );
    assert_ne!(a.identity(), b.identity());
    let g = a.lock("x").await.unwrap();
    assert!(matches!(
        b.validate(&g).await,
        Err(Error::ForeignSource { .. })
    ));
    g.release().await.unwrap();
}

/// The least privilege the docs name is enough: a role with only those
/// grants takes, renews and releases locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_least_privilege_is_enough() {
    let pg = PgFixture::start().await;
    let setup = pg.server.client().await.unwrap();
    setup
        .batch_execute(
            "CREATE ROLE app LOGIN; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON fencing_locks TO app; \
             GRANT SELECT ON fencing_locks_source TO app; \
             GRANT USAGE ON SEQUENCE fencing_locks_tokens TO app;",
        )
        .await
        .unwrap();
    let url = format!(
        "postgres://app@127.0.0.1:{}/postgres?table=fencing_locks&ttl=1",
        pg.server.port()
    );
    let source = PgSource::connect_url(&url).await.unwrap();
    let g = source.lock("least").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        g.is_live() && source.validate(&g).await.unwrap(),
        "renewed past its TTL"
    );
    g.release().await.unwrap();
    assert!(source.holder(&resource("least")).await.unwrap().is_none());
    source.close().await.unwrap();
    let lost = source.lock("closing").await.unwrap();
    source.close().await.unwrap();
    assert_eq!(lost.lost().await, LossReason::Released);
}

/// What users run today, beside PgSource, on one server and one table.
/// With `pg_try_advisory_lock`, a leader whose session died (a partition,
/// an idle timeout) still believes it leads: the next leader takes the
/// lock and writes, and the old leader's late write, through a new
/// connection, lands over it. With PgSource and a fence column the same
/// late write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_locks_let_a_late_write_land_pg_source_refuses_it() {
    let pg = PgFixture::start().await;
    let admin = pg.server.client().await.unwrap();
    admin
        .batch_execute(
            "CREATE TABLE ledger (id INT PRIMARY KEY, value TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0); \
             INSERT INTO ledger (id, value) VALUES (1, 'none'), (2, 'none')",
        )
        .await
        .unwrap();
    let value = |id: i32| {
        let admin = &admin;
        async move {
            let row = admin
                .query_one("SELECT value FROM ledger WHERE id = $1", &[&id])
                .await
                .unwrap();
            row.get::<_, String>(0)
        }
    };

    // Advisory locks, row 1.
    let a = pg.server.client().await.unwrap();
    assert!(took(&a).await);
    let a_pid: i32 = a
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&a_pid])
        .await
        .unwrap();
    let b = pg.server.client().await.unwrap();
    let mut waited = 0;
    while !took(&b).await {
        waited += 1;
        assert!(
            waited < 100,
            "the advisory lock was not freed by its session's end"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.execute("UPDATE ledger SET value = 'B' WHERE id = 1", &[])
        .await
        .unwrap();
    let late = pg.server.client().await.unwrap(); // the old leader's pool hands it a new connection
    late.execute("UPDATE ledger SET value = 'A (late)' WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(
        value(1).await,
        "A (late)",
        "advisory locks: the late write landed"
    );

    // PgSource, row 2: the same pause, the same late write, through the gate.
    let update = fencing::postgres::FencedUpdate::new("ledger", "id", "fence", &["value"]).unwrap();
    let (leader_a, cut) = pg.partitionable_source().await;
    let leader_b = pg.source().await;
    let r = resource("ledger");
    let ga = leader_a.acquire(&r, &AcquireOptions::new()).await.unwrap();
    cut.set(true);
    let gb = leader_b
        .acquire(&r, &AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    let writer = pg.server.client().await.unwrap();
    let b_wrote = update
        .prepare(&writer)
        .await
        .unwrap()
        .execute(&writer, &2i32, &[&"B"], gb.token())
        .await;
    assert_eq!(b_wrote.unwrap(), 1);
    let a_wrote = update
        .prepare(&writer)
        .await
        .unwrap()
        .execute(&writer, &2i32, &[&"A (late)"], ga.token())
        .await;
    assert!(
        matches!(a_wrote, Err(Error::Stale { .. })),
        "PgSource: {a_wrote:?}"
    );
    assert_eq!(value(2).await, "B", "PgSource: the late write was refused");
    gb.release().await.unwrap();
}

async fn took(c: &tokio_postgres::Client) -> bool {
    let row = c
        .query_one("SELECT pg_try_advisory_lock(42)", &[])
        .await
        .unwrap();
    row.get(0)
}

/// The SQL the docs show for hand-run migrations is the SQL the source runs.
#[test]
fn the_documented_schema_is_the_one_created() {
    let page = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/backends.md");
    let text = std::fs::read_to_string(page).unwrap();
    let sql = PgSource::schema("fencing_locks").unwrap();
    assert!(
        text.contains(&sql),
        "docs/backends.md does not show:\n{sql}"
    );
}

/// A source on the fixture's table whose leases last 1 s: three renewals a
/// second, and no request timeout of its own.
async fn one_second_source(pg: &PgFixture) -> PgSource {
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?table=fencing_locks&ttl=1",
        pg.server.port()
    );
    PgSource::connect_url(&url).await.unwrap()
}

/// The grants of one TTL share one renewal statement, as they share one
/// session on etcd and ZooKeeper: 20 grants held for 3 s at TTL 1 s cost
/// about 9 transactions, not 180 (one per grant per TTL/3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_of_one_ttl_renew_together() {
    let pg = PgFixture::start().await;
    let admin = pg.server.client().await.unwrap();
    let source = one_second_source(&pg).await;
    let mut grants = Vec::new();
    for i in 0..20 {
        grants.push(source.lock(&format!("batch-{i}")).await.unwrap());
    }
    let commits = || async {
        // Backends report their counts within a second of going idle.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        admin
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .unwrap();
        let row = admin
            .query_one(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let before = commits().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let spent = commits().await - before;
    assert!(
        spent < 40,
        "{spent} transactions in 3 s renewing 20 grants of one TTL"
    );
    for g in &grants {
        assert!(g.is_live() && source.validate(g).await.unwrap(), "{g:?}");
    }
    source.close().await.unwrap();
}

/// A renewal of several grants credits each only with its own row: a lock
/// row deleted behind its holder's back (an operator breaking a stuck lock)
/// makes that grant lost at the next renewal, while the grant renewed in
/// the same statement stays live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_credits_only_the_rows_it_found() {
    let pg = PgFixture::start().await;
    let admin = pg.server.client().await.unwrap();
    let source = one_second_source(&pg).await;
    let kept = source.lock("credit-kept").await.unwrap();
    let broken = source.lock("credit-broken").await.unwrap();
    admin
        .execute(
            "DELETE FROM fencing_locks WHERE name = 'credit-broken'",
            &[],
        )
        .await
        .unwrap();
    // The next renewal comes within a third of the TTL.
    let lost = tokio::time::timeout(Duration::from_secs(3), broken.lost()).await;
    assert!(
        lost.is_ok(),
        "a grant whose row was deleted was still live after 3 renewals"
    );
    assert!(kept.is_live() && source.validate(&kept).await.unwrap());
    source.close().await.unwrap();
}

/// `guard` locks the lock row `FOR SHARE` until the caller's transaction
/// ends: the holder's row runs out while its guarded transaction is open
/// (its own renewal waits on that lock too), and the next holder's acquire
/// still waits for the commit, so the guarded write can never land after
/// the next grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_transaction_holds_off_the_next_grant() {
    let pg = PgFixture::start().await;
    report_table(&pg).await;
    let url = pg.url(pg.server.port());
    let (holder, next) = (pg.source().await, pg.source().await);
    let r = resource("guarded-report");
    let ttl = Duration::from_secs(1);
    let grant = holder
        .acquire(&r, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let config = PgConfig::from_url(&url).unwrap();
    let (mut client, conn) = config.pg.connect(tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(conn);
    let tx = client.transaction().await.unwrap();
    holder.guard(&tx, &grant).await.unwrap();
    // Past the row's expiry: nothing but the open transaction holds it.
    tokio::time::sleep(ttl * 3 / 2).await;
    let taker = tokio::spawn(async move {
        let opts = AcquireOptions::new().wait(Duration::from_secs(20));
        let granted = next.acquire(&r, &opts).await;
        (granted, std::time::Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !taker.is_finished(),
        "the next holder was granted while the holder's guarded transaction was open"
    );
    tx.execute("UPDATE report SET body = 'holder' WHERE id = 1", &[])
        .await
        .unwrap();
    let committed = std::time::Instant::now();
    tx.commit().await.unwrap();
    let (granted, at) = taker.await.unwrap();
    let granted = granted.unwrap();
    assert!(at >= committed, "granted before the guarded commit");
    assert!(granted.token() > grant.token());
    drop(client);
    let _ = driver.await;
    granted.release().await.unwrap();
}
