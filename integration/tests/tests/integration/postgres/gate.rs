//! The PostgreSQL gates on a real server: concurrent writers with
//! interleaved tokens, retries, and marks that survive a restart and a crash.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::{Error, FencingToken, Gate, ResourceName, SourceId};
use fencing_harness::postgres::server::PgServer;
use fencing_postgres::{FenceTable, FencedUpdate, PgGate};
use fencing_testkit::{gate_keeps_the_rules, Binding};

const WRITERS: u64 = 4;
const WRITES: u64 = 25;

fn t(v: u64) -> FencingToken {
    FencingToken::new(v)
}

/// Writer `w`'s i-th token: the writers' tokens interleave.
fn token_of(w: u64, i: u64) -> FencingToken {
    t(i * WRITERS + w + 1)
}

/// A fresh server, and a client on it that has run `ddl`.
async fn server_with(ddl: &str) -> (PgServer, tokio_postgres::Client) {
    let pg = PgServer::start().await.unwrap();
    let client = pg.client().await.unwrap();
    client.batch_execute(ddl).await.unwrap();
    (pg, client)
}

/// Many writers on one row through a fence column: the row ends with the
/// highest token's value, and every refusal names a higher mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_column_keeps_the_highest_writer() {
    let (pg, setup) = server_with(
        "CREATE TABLE accounts (id BIGINT PRIMARY KEY, value TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0);
             INSERT INTO accounts (id, value) VALUES (1, 'initial');",
    )
    .await;
    let update = FencedUpdate::new("accounts", "id", "fence", &["value"]).unwrap();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let client = pg.client().await.unwrap();
        let update = update.clone();
        tasks.push(tokio::spawn(async move {
            let prepared = update.prepare(&client).await.unwrap();
            let mut verdicts = Vec::new();
            for i in 0..WRITES {
                let token = token_of(w, i);
                let value = format!("written with {token}");
                match prepared.execute(&client, &1i64, &[&value], token).await {
                    Ok(1) => verdicts.push((token, true)),
                    Err(Error::Stale { presented, highest }) => {
                        assert_eq!(presented, token);
                        assert!(
                            highest > presented,
                            "refused {presented} though the fence was {highest}"
                        );
                        verdicts.push((token, false));
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            verdicts
        }));
    }
    let mut verdicts = Vec::new();
    for task in tasks {
        verdicts.extend(task.await.unwrap());
    }
    let highest = token_of(WRITERS - 1, WRITES - 1);
    assert!(
        verdicts.contains(&(highest, true)),
        "the highest token must be accepted"
    );
    let row = setup
        .query_one("SELECT value, fence FROM accounts WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), format!("written with {highest}"));
    assert_eq!(
        FencingToken::try_from(row.get::<_, i64>(1)).unwrap(),
        highest
    );
    let refused = verdicts.iter().filter(|(_, ok)| !ok).count();
    eprintln!("{} writes, {refused} refused as stale", verdicts.len());

    // A retry with the current token passes; a missing row is no error.
    let prepared = update.prepare(&setup).await.unwrap();
    assert_eq!(
        prepared
            .execute(&setup, &1i64, &[&"retry".to_owned()], highest)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        prepared
            .execute(&setup, &2i64, &[&"none".to_owned()], highest)
            .await
            .unwrap(),
        0
    );
}

/// The general case: the fence table advanced in the write's transaction.
/// An audit row written in the same transaction records the order the
/// database applied the writes in: their tokens never decrease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_table_in_the_writes_transaction() {
    let (pg, setup) = server_with(
        "CREATE TABLE doc (id INT PRIMARY KEY, body TEXT NOT NULL);
             INSERT INTO doc VALUES (1, 'initial');
             CREATE TABLE applied (seq BIGSERIAL PRIMARY KEY, token BIGINT NOT NULL);",
    )
    .await;
    let fences = FenceTable::new("fencing_marks").unwrap();
    fences.create(&setup).await.unwrap();
    let doc = ResourceName::new("doc-1").unwrap();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut client = pg.client().await.unwrap();
        let (fences, doc) = (fences.clone(), doc.clone());
        tasks.push(tokio::spawn(async move {
            let mut refused = 0;
            for i in 0..WRITES {
                let token = token_of(w, i);
                let tx = client.transaction().await.unwrap();
                match fences.admit_any_source(&tx, &doc, token).await {
                    Ok(()) => {
                        let mark = i64::try_from(token).unwrap();
                        tx.execute(
                            "UPDATE doc SET body = $1 WHERE id = 1",
                            &[&format!("v{token}")],
                        )
                        .await
                        .unwrap();
                        tx.execute("INSERT INTO applied (token) VALUES ($1)", &[&mark])
                            .await
                            .unwrap();
                        tx.commit().await.unwrap();
                    }
                    Err(Error::Stale { presented, highest }) => {
                        assert!(highest > presented);
                        refused += 1;
                        tx.rollback().await.unwrap();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            refused
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let applied: Vec<i64> = setup
        .query("SELECT token FROM applied ORDER BY seq", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        applied.windows(2).all(|w| w[0] <= w[1]),
        "the database applied a lower token after a higher one: {applied:?}"
    );
    let highest = token_of(WRITERS - 1, WRITES - 1);
    let body: String = setup
        .query_one("SELECT body FROM doc WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(body, format!("v{highest}"));
    assert_eq!(
        fences.high_water(&setup, &doc).await.unwrap(),
        Some(highest)
    );
}

/// PgGate: retries pass, and the marks survive a clean restart and a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_survive_restart_and_crash() {
    let mut pg = PgServer::start().await.unwrap();
    let r = ResourceName::new("orders").unwrap();
    {
        let gate = PgGate::new(Arc::new(pg.client().await.unwrap()), "fencing_marks")
            .await
            .unwrap();
        gate.admit_any_source(&r, t(10)).await.unwrap();
        gate.admit_any_source(&r, t(10))
            .await
            .expect("retry with the same token");
    }
    pg.restart().await.unwrap();
    let gate = PgGate::new(Arc::new(pg.client().await.unwrap()), "fencing_marks")
        .await
        .unwrap();
    match gate.admit_any_source(&r, t(9)).await {
        Err(Error::Stale { presented, highest }) => assert_eq!((presented, highest), (t(9), t(10))),
        other => panic!("after restart: {other:?}"),
    }
    gate.admit_any_source(&r, t(11)).await.unwrap();
    drop(gate);
    pg.kill();
    pg.restart().await.unwrap();
    let gate = PgGate::new(Arc::new(pg.client().await.unwrap()), "fencing_marks")
        .await
        .unwrap();
    assert_eq!(
        gate.high_water(&r).await.unwrap(),
        Some(t(11)),
        "a committed mark was lost in the crash"
    );
    assert!(matches!(
        gate.admit_any_source(&r, t(10)).await,
        Err(Error::Stale { .. })
    ));
}

/// A fence column added to a table that already had rows holds NULL in
/// them: such a row was never written under a token, so any token may
/// write it (and fences it from then on). It must never panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_fence_admits_and_never_panics() {
    let (_pg, client) = server_with(
        "CREATE TABLE items (id BIGINT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO items VALUES (1, 'before fencing');
             ALTER TABLE items ADD COLUMN fence BIGINT;",
    )
    .await;
    let update = FencedUpdate::new("items", "id", "fence", &["value"])
        .unwrap()
        .prepare(&client)
        .await
        .unwrap();
    let written = update
        .execute(&client, &1i64, &[&"first fenced".to_owned()], t(7))
        .await;
    assert_eq!(written.unwrap(), 1, "a NULL fence admits");
    let row = client
        .query_one("SELECT value, fence FROM items WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "first fenced");
    assert_eq!(row.get::<_, Option<i64>>(1), Some(7));
    match update
        .execute(&client, &1i64, &[&"late".to_owned()], t(6))
        .await
    {
        Err(Error::Stale { presented, highest }) => assert_eq!((presented, highest), (t(6), t(7))),
        other => panic!("a lower token after the first fenced write: {other:?}"),
    }
}

/// A server error names what the server said, not only "db error".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_names_the_servers_message() {
    let pg = PgServer::start().await.unwrap();
    let client = pg.client().await.unwrap();
    let missing = FencedUpdate::new("no_such_table", "id", "fence", &["value"])
        .unwrap()
        .prepare(&client)
        .await;
    let message = match missing {
        Err(e @ Error::Backend { .. }) => e.to_string(),
        other => panic!("preparing against a missing table: {other:?}"),
    };
    assert!(
        message.starts_with("PostgreSQL ERROR 42P01: relation \"no_such_table\" does not exist"),
        "{message}"
    );
}

/// A refused UPDATE changes nothing, so the write is tried again in the
/// statement that reports; the answer is that statement's. Both races are
/// made deterministic by a statement trigger that runs at the end of
/// every UPDATE of the table, so between the two statements.
async fn between_the_two_statements(
    action: &str,
    before: &str,
    token: u64,
) -> (Result<u64, Error>, Vec<(String, i64)>) {
    let (_pg, client) = server_with(&format!(
        "CREATE TABLE docs (id BIGINT PRIMARY KEY, body TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0);
         {before}
         CREATE FUNCTION between_statements() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN {action}; RETURN NULL; END $$;
         CREATE TRIGGER between_statements AFTER UPDATE ON docs
           FOR EACH STATEMENT EXECUTE FUNCTION between_statements();"
    ))
    .await;
    let update = FencedUpdate::new("docs", "id", "fence", &["body"])
        .unwrap()
        .prepare(&client)
        .await
        .unwrap();
    let outcome = update
        .execute(&client, &1i64, &[&"fenced".to_owned()], t(token))
        .await;
    let rows = client
        .query("SELECT body, fence FROM docs ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    (outcome, rows)
}

/// A refused row deleted before the reporting statement is reported as
/// missing, which it is by then, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_deleted_after_a_refusal_is_reported_missing_and_not_written() {
    let (outcome, rows) = between_the_two_statements(
        "DELETE FROM docs WHERE id = 1",
        "INSERT INTO docs VALUES (1, 'newer', 10);",
        5,
    )
    .await;
    assert!(rows.is_empty(), "{rows:?}");
    assert_eq!(outcome.unwrap(), 0);
}

/// A row inserted after the UPDATE found none, with a fence that admits
/// the token, is written by the reporting statement; one whose fence is
/// higher refuses it, naming that fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_inserted_after_the_update_found_none_is_decided_by_the_report() {
    let insert = "INSERT INTO docs VALUES (1, 'inserted', 7) ON CONFLICT DO NOTHING";
    let (outcome, rows) = between_the_two_statements(insert, "", 9).await;
    assert_eq!(outcome.unwrap(), 1);
    assert_eq!(rows, [("fenced".to_owned(), 9)]);
    let (outcome, rows) = between_the_two_statements(insert, "", 5).await;
    match outcome {
        Err(Error::Stale { presented, highest }) => assert_eq!((presented, highest), (t(5), t(7))),
        other => panic!("a refused write reported as {other:?}"),
    }
    assert_eq!(rows, [("inserted".to_owned(), 7)]);
}

/// A write whose statement began before a newer writer raised the fence
/// waits for that writer, is refused, and names the new fence, though the
/// statement's own snapshot still shows the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_a_concurrent_raise_names_the_new_fence() {
    let (pg, mut newer_client) = server_with(
        "CREATE TABLE slots (id BIGINT PRIMARY KEY, value TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 3);
             INSERT INTO slots (id, value) VALUES (1, 'initial');",
    )
    .await;
    let update = FencedUpdate::new("slots", "id", "fence", &["value"]).unwrap();
    // The newer writer raises the fence to 10 and keeps its transaction open.
    let tx = newer_client.transaction().await.unwrap();
    let newer = update.prepare(&tx).await.unwrap();
    let value = "newer".to_owned();
    let written = newer.execute(&tx, &1i64, &[&value], t(10)).await;
    assert_eq!(written.unwrap(), 1);
    // The older writer's statement starts (its snapshot: fence 3) and waits.
    let older_client = pg.client().await.unwrap();
    let older = tokio::spawn(async move {
        let prepared = update.prepare(&older_client).await.unwrap();
        let value = "older".to_owned();
        prepared
            .execute(&older_client, &1i64, &[&value], t(5))
            .await
    });
    let watcher = pg.client().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = watcher
            .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the older write never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tx.commit().await.unwrap();
    match older.await.unwrap() {
        Err(Error::Stale { presented, highest }) => assert_eq!((presented, highest), (t(5), t(10))),
        other => panic!("a write refused by a concurrent raise reported as {other:?}"),
    }
    let value: String = watcher
        .query_one("SELECT value FROM slots WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(value, "newer");
}

/// The gate rules (fencing-testkit): marks are bound to the source of the
/// token that set them, a higher token of another source is refused and
/// the mark kept. A table made before marks had sources gains the column,
/// and its marks are unbound until a bound admit binds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_gate_keeps_the_rules_and_binds_old_marks() {
    let (_pg, client) = server_with(
        "CREATE TABLE fencing_marks (resource TEXT PRIMARY KEY, mark BIGINT NOT NULL CHECK (mark >= 0));
             INSERT INTO fencing_marks VALUES ('old', 4);",
    )
    .await;
    let client = Arc::new(client);
    let gate = PgGate::new(client.clone(), "fencing_marks").await.unwrap();
    let (a, b) = (SourceId::new("etcd:a"), SourceId::new("zk:b"));
    let r = ResourceName::new("orders").unwrap();
    gate_keeps_the_rules(&gate, &r, &a, t(5), Binding::FirstAdmit).await;

    let old = ResourceName::new("old").unwrap();
    gate.admit_any_source(&old, t(4))
        .await
        .expect("an unbound mark takes the unbound form");
    gate.admit_from(&old, &b, t(5)).await.unwrap();
    assert!(matches!(
        gate.admit_from(&old, &a, t(6)).await,
        Err(Error::ForeignSource { .. })
    ));
    assert_eq!(gate.high_water(&old).await.unwrap(), Some(t(5)));
}

/// Identifiers are checked, not escaped.
#[test]
fn bad_identifiers_are_refused() {
    assert!(FencedUpdate::new("accounts; DROP TABLE x", "id", "fence", &["v"]).is_err());
    assert!(FencedUpdate::new("accounts", "id", "fence", &["v\""]).is_err());
    assert!(FenceTable::new("").is_err());
}
