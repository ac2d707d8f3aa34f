//! The reference's pause, end to end against PostgreSQL, with real processes:
//! writer C1 takes a short lease and writes; C1 is frozen (SIGSTOP) past its
//! lease; C2 takes the lease and writes; C1 wakes up and sends its UPDATE
//! with its old token. The fence column makes PostgreSQL refuse it, and the
//! row keeps C2's value.
//!
//! Run: cargo run -p fencing-examples --bin pg-pause -- "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
//! (optionally a source URL second, `postgres://...` for PgSource; default
//! a LocalSource in a temp dir).
//!
//! With `advisory` second, the same timeline runs on what many services use
//! instead: `pg_try_advisory_lock` on the writer's session, and a plain
//! UPDATE. The frozen writer's session is ended by the server
//! (`idle_session_timeout`, as an idle timeout, a TCP keepalive or a
//! partition would), which frees the lock for C2; C1 wakes up, its pool
//! hands it a new connection, and its write lands over C2's: the lost
//! update fencing prevents.

use std::io::{BufRead, BufReader, Write};

use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingToken, ResourceName};
use fencing_postgres::{pg_error, FencedUpdate};
use rustix::process::{kill_process, Pid, Signal};
use tokio_postgres::NoTls;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const ACCOUNT: i64 = 1;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("writer") => writer(&args[1..]).await,
        Some("advisory-writer") => advisory_writer(&args[1..]).await,
        Some(pg) if args.get(1).map(String::as_str) == Some("advisory") => {
            orchestrate(pg, Mode::Advisory).await
        }
        Some(pg) => orchestrate(pg, Mode::Source(args.get(1).cloned())).await,
        None => Err("usage: pg-pause POSTGRES_CONNECTION_STRING [SOURCE_URL | advisory]".into()),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pg-pause: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// One writer process: acquire, report, then on each line from stdin write
/// that value with the grant's token (never re-checking the lease: the
/// pause falls between the check and the write).
async fn writer(args: &[String]) -> Res<()> {
    let [pg, url, name] = args else {
        return Err("writer PG URL NAME".into());
    };
    let source = fencing::connect(url).await?;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(1))
        .wait(Duration::from_secs(20));
    let grant = source
        .acquire(&ResourceName::new("account-1")?, &opts)
        .await?;
    let (client, conn) = tokio_postgres::connect(pg, NoTls).await?;
    let conn = tokio::spawn(conn);
    let update = FencedUpdate::new("accounts", "id", "fence", &["balance", "written_by"])?
        .prepare(&client)
        .await?;
    println!("GRANTED {}", grant.token());
    for line in std::io::stdin().lock().lines() {
        let balance: i64 = line?.trim().parse()?;
        match update
            .execute(&client, &ACCOUNT, &[&balance, name], grant.token())
            .await
        {
            Ok(_) => println!("OK"),
            Err(Error::Stale { presented, highest }) => println!("REJECTED {presented} {highest}"),
            Err(e) => return Err(e.into()),
        }
    }
    conn.abort();
    Ok(())
}

/// The advisory-lock writer: leads while `pg_try_advisory_lock` holds on
/// its session, and writes each value with a plain UPDATE. When its
/// connection is gone it takes a new one and writes, as code behind a
/// connection pool does, without asking again whether it leads.
async fn advisory_writer(args: &[String]) -> Res<()> {
    let [pg, name] = args else {
        return Err("advisory-writer PG NAME".into());
    };
    let (client, conn) = tokio_postgres::connect(pg, NoTls).await?;
    let conn = tokio::spawn(conn);
    // The server ends this session after 1 s without a statement: a
    // frozen leader's lock is freed then (PostgreSQL 14 and later).
    client
        .batch_execute("SET idle_session_timeout = '1s'")
        .await?;
    while !took_advisory_lock(&client).await? {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("GRANTED advisory");
    let mut client = client;
    let mut conns = vec![conn];
    let update = "UPDATE accounts SET balance = $1, written_by = $2 WHERE id = 1";
    for line in std::io::stdin().lock().lines() {
        let balance: i64 = line?.trim().parse()?;
        match client.execute(update, &[&balance, name]).await {
            Ok(_) => println!("OK"),
            Err(_) => {
                let (fresh, conn) = tokio_postgres::connect(pg, NoTls).await?;
                conns.push(tokio::spawn(conn));
                fresh.execute(update, &[&balance, name]).await?;
                client = fresh;
                println!("OK (on a new connection)");
            }
        }
    }
    conns.iter().for_each(|c| c.abort());
    Ok(())
}

async fn took_advisory_lock(client: &tokio_postgres::Client) -> Res<bool> {
    let row = client
        .query_one("SELECT pg_try_advisory_lock(1)", &[])
        .await?;
    Ok(row.get(0))
}

struct Writer {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Writer {
    fn start(pg: &str, mode: &Mode, name: &str) -> Res<Writer> {
        let mut cmd = Command::new(std::env::current_exe()?);
        match mode {
            Mode::Source(url) => cmd.args(["writer", pg, url.as_deref().unwrap_or(""), name]),
            Mode::Advisory => cmd.args(["advisory-writer", pg, name]),
        };
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        let out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Writer { child, out })
    }

    fn line(&mut self) -> Res<String> {
        let mut l = String::new();
        if self.out.read_line(&mut l)? == 0 {
            return Err("writer exited early".into());
        }
        Ok(l.trim().to_owned())
    }

    fn write(&mut self, balance: i64) -> Res<String> {
        writeln!(self.child.stdin.as_mut().ok_or("no stdin")?, "{balance}")?;
        self.line()
    }

    fn signal(&self, s: Signal) {
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process(pid, s);
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.signal(Signal::CONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the writers lead by: a fencing source's lease, or an advisory lock.
enum Mode {
    /// The source URL (`None`: a LocalSource in a temporary directory).
    Source(Option<String>),
    Advisory,
}

/// The grant a writer reported: its token, `None` for an advisory lock.
fn granted(line: &str) -> Res<Option<FencingToken>> {
    match line.strip_prefix("GRANTED ") {
        Some("advisory") => Ok(None),
        Some(token) => Ok(Some(token.parse()?)),
        None => Err(format!("unexpected {line:?}").into()),
    }
}

fn lease(token: Option<FencingToken>) -> String {
    match token {
        Some(t) => format!("the lease (1 s): token {t}"),
        None => "pg_try_advisory_lock(1) on its session (idle timeout 1 s)".into(),
    }
}

/// Blocking process I/O happens on this thread; the runtime only serves the
/// database client.
async fn orchestrate(pg: &str, mode: Mode) -> Res<()> {
    let dir = tempfile::tempdir()?;
    let mode = match mode {
        Mode::Source(url) => {
            Mode::Source(Some(url.unwrap_or_else(|| {
                format!("local://{}?ttl=1", dir.path().display())
            })))
        }
        Mode::Advisory => Mode::Advisory,
    };
    let (client, conn) = tokio_postgres::connect(pg, NoTls).await?;
    let conn = tokio::spawn(conn);
    client
        .batch_execute(
            "DROP TABLE IF EXISTS accounts;
             CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL,
                                    written_by TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0);
             INSERT INTO accounts (id, balance, written_by) VALUES (1, 0, 'nobody');",
        )
        .await
        .map_err(pg_error)?;
    let start = std::time::Instant::now();
    let say = |what: &str| println!("t={:.2}s  {what}", start.elapsed().as_secs_f64());

    let mut c1 = Writer::start(pg, &mode, "C1")?;
    let t1 = granted(&c1.line()?)?;
    say(&format!("C1 acquires {}", lease(t1)));
    say(&format!("C1 writes balance=10 -> {}", c1.write(10)?));
    c1.signal(Signal::STOP);
    say("C1 is frozen (SIGSTOP) just before its next write");

    let mut c2 = Writer::start(pg, &mode, "C2")?;
    let t2 = granted(&c2.line()?)?;
    let freed = match mode {
        Mode::Advisory => "the server ended C1's idle session, which freed its lock",
        Mode::Source(_) => "C1's lease ran out",
    };
    say(&format!("{freed}; C2 acquires {}", lease(t2)));
    say(&format!("C2 writes balance=100 -> {}", c2.write(100)?));
    drop(c2);

    c1.signal(Signal::CONT);
    let late = c1.write(11)?;
    let with = t1.map_or(String::new(), |t| format!(" with token {t}"));
    say(&format!("C1 resumes and writes balance=11{with} -> {late}"));
    let row = client
        .query_one("SELECT balance, written_by FROM accounts WHERE id = 1", &[])
        .await
        .map_err(pg_error)?;
    let (balance, by): (i64, String) = (row.get(0), row.get(1));
    say(&format!("final row: balance={balance} written by {by}"));
    conn.abort();
    if let Mode::Advisory = mode {
        return match (balance, by.as_str()) {
            (11, "C1") => {
                println!(
                    "LOST UPDATE: the advisory lock let the old leader's write land over C2's"
                );
                Ok(())
            }
            _ => Err(format!("the late write did not land (row {balance} by {by})").into()),
        };
    }
    if late.starts_with("REJECTED") && balance == 100 && by == "C2" {
        println!("PASS: PostgreSQL refused the stale UPDATE; C2's value stands");
        Ok(())
    } else {
        Err(
            format!("the stale write was not refused (C1 got {late:?}, row {balance} by {by})")
                .into(),
        )
    }
}
