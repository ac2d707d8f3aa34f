//! The PostgreSQL harness itself: a throwaway server keeps committed rows
//! across a fast restart and across a crash, leaves no process behind when
//! dropped, and two servers run side by side.

use std::time::Instant;

use fencing_harness::postgres::server::PgServer;

/// Whether `pid` is a live (not zombie) process running the postgres binary.
fn is_postgres_process(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    if state == Some("Z") {
        return false;
    }
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|exe| exe.file_name().is_some_and(|n| n == "postgres"))
        .unwrap_or(false)
}

async fn count_rows(server: &PgServer) -> i64 {
    let client = server.client().await.expect("client");
    client
        .query_one("SELECT count(*) FROM gate", &[])
        .await
        .expect("count rows")
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_rows_survive_restart_and_crash() {
    let t = Instant::now();
    let mut server = PgServer::start().await.expect("start postgres");
    eprintln!(
        "postgres {} started on port {} in {:?}",
        server.major_version(),
        server.port(),
        t.elapsed()
    );
    assert!(server
        .connection_string()
        .contains(&format!("port={}", server.port())));

    let client = server.client().await.expect("client");
    client
        .batch_execute("CREATE TABLE gate (id bigint PRIMARY KEY, holder text NOT NULL)")
        .await
        .expect("create table");
    client
        .execute("INSERT INTO gate VALUES ($1, $2)", &[&1i64, &"a"])
        .await
        .expect("insert");
    let holder: String = client
        .query_one("SELECT holder FROM gate WHERE id = $1", &[&1i64])
        .await
        .expect("select")
        .get(0);
    assert_eq!(holder, "a");

    let port = server.port();
    let pid = server.pid().expect("running");
    let t = Instant::now();
    server.restart().await.expect("restart");
    eprintln!("fast restart took {:?}", t.elapsed());
    assert_eq!(server.port(), port, "a restart keeps the port");
    assert_ne!(server.pid(), Some(pid), "a restart runs a new postmaster");
    assert!(!is_postgres_process(pid), "the old postmaster is gone");
    // The old session was ended by the shutdown.
    assert!(client.query_one("SELECT 1", &[]).await.is_err());
    assert_eq!(count_rows(&server).await, 1, "row lost by a fast restart");

    // Commit a second row, then crash: no shutdown checkpoint, so the row
    // only comes back through WAL replay.
    let client = server.client().await.expect("client");
    client
        .execute("INSERT INTO gate VALUES ($1, $2)", &[&2i64, &"b"])
        .await
        .expect("insert before crash");
    let pids = server.pids();
    assert!(
        pids.len() > 1,
        "postmaster and its server processes: {pids:?}"
    );
    server.kill();
    assert!(!server.is_running());
    for p in &pids {
        assert!(!is_postgres_process(*p), "process {p} outlived the crash");
    }
    assert!(client.query_one("SELECT 1", &[]).await.is_err());
    let t = Instant::now();
    server.restart().await.expect("restart after crash");
    eprintln!("restart after crash (recovery) took {:?}", t.elapsed());
    assert_eq!(
        count_rows(&server).await,
        2,
        "committed row lost by a crash; log:\n{}",
        server.log_tail()
    );
    assert!(
        server
            .log_tail()
            .contains("database system was interrupted")
            || server.log_tail().contains("not properly shut down"),
        "the second start did not run crash recovery; log:\n{}",
        server.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_leaves_no_process_and_no_directory() {
    let server = PgServer::start().await.expect("start postgres");
    // An open session, so there is a backend too.
    let client = server.client().await.expect("client");
    client.query_one("SELECT 1", &[]).await.expect("query");
    let listed = server.pids();
    let dir = server.dir().to_path_buf();
    // A short-lived worker (autovacuum, a finished startup process) may exit
    // between the listing and the look: check the ones still there.
    let pids: Vec<u32> = listed
        .iter()
        .copied()
        .filter(|p| is_postgres_process(*p))
        .collect();
    assert!(
        pids.len() > 1 && pids.contains(&listed[0]),
        "postmaster and its server processes: listed {listed:?}, running {pids:?}"
    );
    drop(server);
    for p in &pids {
        assert!(!is_postgres_process(*p), "process {p} outlived the drop");
    }
    assert!(!dir.exists(), "{} was not removed", dir.display());
    assert!(client.query_one("SELECT 1", &[]).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_run_side_by_side() {
    let (a, b) = tokio::join!(PgServer::start(), PgServer::start());
    let (a, b) = (a.expect("start a"), b.expect("start b"));
    assert_ne!(a.port(), b.port());
    let (ca, cb) = (a.client().await.unwrap(), b.client().await.unwrap());
    ca.batch_execute("CREATE TABLE only_in_a (x int)")
        .await
        .unwrap();
    let in_b: i64 = cb
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_b, 0, "the servers share nothing");
    let pa = a.pids();
    drop(a);
    assert!(pa.iter().all(|p| !is_postgres_process(*p)));
    cb.query_one("SELECT 1", &[])
        .await
        .expect("b still serves after a is dropped");
}

#[test]
fn a_missing_server_says_to_run_the_installer() {
    let empty = tempfile::tempdir().unwrap();
    let err = fencing_harness::postgres::server::find_bin_dir_in(empty.path()).unwrap_err();
    assert!(
        err.to_string().contains("scripts/test.sh"),
        "unhelpful error: {err}"
    );
}

/// Set in the environment of the child test process of
/// `a_killed_test_process_leaves_no_server`.
const CHILD_ENV: &str = "FENCING_PG_HARNESS_CHILD";

/// Not a test of its own: run as a child process by
/// `a_killed_test_process_leaves_no_server`, it starts a server, prints its
/// process ids and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process of a_killed_test_process_leaves_no_server"]
async fn child_holds_a_server() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let server = PgServer::start().await.expect("start postgres");
    let client = server.client().await.expect("client");
    client.query_one("SELECT 1", &[]).await.expect("query");
    let pids: Vec<String> = server.pids().iter().map(u32::to_string).collect();
    println!("DIR {}", server.dir().display());
    println!("PIDS {}", pids.join(" "));
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
}

#[test]
fn a_killed_test_process_leaves_no_server() {
    use std::time::Duration;
    let exe = std::env::current_exe().unwrap();
    let child = fencing_harness::Reaped::spawn(
        std::process::Command::new(exe)
            .args([
                "--exact",
                "postgres::harness_self_test::child_holds_a_server",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_ENV, "1"),
    )
    .expect("spawn the child test process");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut dir = None;
    let pids: Vec<u32> = loop {
        let line = child
            .next_line(deadline.saturating_duration_since(Instant::now()))
            .expect("the child printed no PIDS line within 60 s");
        if let Some(rest) = line.strip_prefix("DIR ") {
            dir = Some(std::path::PathBuf::from(rest));
        }
        if let Some(rest) = line.strip_prefix("PIDS ") {
            break rest.split(' ').map(|p| p.parse().unwrap()).collect();
        }
    };
    assert!(
        pids.len() > 1,
        "postmaster and its server processes: {pids:?}"
    );
    // SIGKILL: the child's Drop never runs, only the parent-death signal.
    child.kill_and_collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    while pids.iter().any(|p| is_postgres_process(*p)) {
        assert!(
            Instant::now() < deadline,
            "postgres processes outlived the killed test process: {:?}",
            pids.iter()
                .filter(|p| is_postgres_process(**p))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The child's Drop did not run: its temporary directory is left over.
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}
