//! The pg-pause example against a real PostgreSQL server: it must report
//! the stale UPDATE as refused and exit 0.

use std::process::Command;

use fencing_harness::postgres::server::PgServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_pause_refuses_the_late_update() {
    let pg = PgServer::start().await.unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pg-pause"))
        .arg(pg.connection_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "pg-pause failed");
    assert!(stdout.contains("-> REJECTED"), "{stdout}");
    assert!(
        stdout.contains("final row: balance=100 written by C2"),
        "{stdout}"
    );
}
