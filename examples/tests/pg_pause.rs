//! The pg-pause example against a real PostgreSQL server: with a fencing
//! source (a LocalSource, and PgSource on the same server) it must report
//! the stale UPDATE as refused; with `pg_try_advisory_lock` it must show
//! the late write landing over the next leader's.

use std::process::Command;

use fencing_harness::postgres::server::PgServer;

fn pg_pause(args: Vec<String>) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_pg-pause"))
        .args(&args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "pg-pause {args:?} failed");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_pause_refuses_the_late_update() {
    let pg = PgServer::start().await.unwrap();
    let conn = pg.connection_string();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?table=pause_locks&ttl=1",
        pg.port()
    );
    let config = fencing::postgres::PgConfig::from_url(&url).unwrap();
    fencing::postgres::PgSource::create_schema(&config)
        .await
        .unwrap();
    for source in [None, Some(url)] {
        let args = [Some(conn.clone()), source].into_iter().flatten().collect();
        let stdout = tokio::task::spawn_blocking(move || pg_pause(args))
            .await
            .unwrap();
        assert!(stdout.contains("-> REJECTED"), "{stdout}");
        assert!(
            stdout.contains("final row: balance=100 written by C2"),
            "{stdout}"
        );
    }
    let advisory = vec![conn, "advisory".to_owned()];
    let stdout = tokio::task::spawn_blocking(move || pg_pause(advisory))
        .await
        .unwrap();
    assert!(
        stdout.contains("final row: balance=11 written by C1"),
        "{stdout}"
    );
}
