//! The campaign's second storage: a PostgreSQL server that keeps one row
//! per lock, written through a [`FencedUpdate`] (the fence column on the
//! application's own row). The controller sends each client's storage
//! write here too, on a connection of that client's own, so the server's
//! fence column judges the same tokens as the file storage's gate. The
//! nemesis crashes the server (SIGKILL of every server process, then crash
//! recovery) and pauses it (SIGSTOP), so the fence must survive both and a
//! statement that was stuck in a paused server must still be judged by the
//! fence it finds when it runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fencing::{Error, FencingToken};
use fencing_postgres::{FencedUpdate, PreparedUpdate};
use rustix::process::{kill_process, Pid, Signal};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_postgres::NoTls;

use super::history::WriteOutcome;
use crate::postgres::server::PgServer;

/// The gate name of its writes in the history.
pub const GATE: &str = "postgres";
const TABLE: &str = "campaign_registers";
/// Like the file storage's answer limit: the client hears "unknown" first.
const WRITE_LIMIT: Duration = Duration::from_millis(1500);

/// One client's connection and its prepared update.
struct Conn {
    client: tokio_postgres::Client,
    update: PreparedUpdate,
    task: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The server and the clients' connections to it.
pub struct PgStore {
    server: Mutex<PgServer>,
    config: String,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
}

impl PgStore {
    /// Starts a fresh server and creates one row per lock.
    pub async fn start(locks: &[&str]) -> Result<PgStore, String> {
        let server = PgServer::start().await.map_err(|e| e.to_string())?;
        let admin = server.client().await.map_err(|e| e.to_string())?;
        let create = format!(
            "CREATE TABLE {TABLE} (resource TEXT PRIMARY KEY, value BIGINT NOT NULL, \
             fence BIGINT NOT NULL DEFAULT 0)"
        );
        admin
            .batch_execute(&create)
            .await
            .map_err(|e| e.to_string())?;
        for lock in locks {
            let insert = format!("INSERT INTO {TABLE} (resource, value) VALUES ($1, 0)");
            admin
                .execute(&insert, &[lock])
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(PgStore {
            config: server.connection_string(),
            server: Mutex::new(server),
            conns: Mutex::new(HashMap::new()),
        })
    }

    /// `client`'s write of `value` with `token` to the row of `resource`.
    pub async fn write(
        &self,
        client: &str,
        resource: &str,
        token: u64,
        value: u64,
    ) -> WriteOutcome {
        let attempt = async {
            let conn = self.conn(client).await?;
            let value = i64::try_from(value).map_err(|e| Error::Config(e.to_string()))?;
            let token = FencingToken::new(token);
            conn.update
                .execute(&conn.client, &resource, &[&value], token)
                .await
        };
        match tokio::time::timeout(WRITE_LIMIT, attempt).await {
            Ok(Ok(1)) => return WriteOutcome::Accepted,
            Ok(Err(Error::Stale { .. })) => return WriteOutcome::Refused,
            Ok(Ok(rows)) => eprintln!("postgres: write of token {token}: {rows} rows"),
            Ok(Err(e)) => eprintln!("postgres: write of token {token}: {e}"),
            Err(_) => {}
        }
        // The statement may still run later; a new connection keeps the
        // client's next write from queueing behind it.
        self.conns.lock().await.remove(client);
        WriteOutcome::Unknown
    }

    async fn conn(&self, client: &str) -> fencing::Result<Arc<Conn>> {
        let mut conns = self.conns.lock().await;
        if let Some(conn) = conns.get(client) {
            return Ok(conn.clone());
        }
        let (pg, connection) = tokio_postgres::connect(&self.config, NoTls)
            .await
            .map_err(fencing_postgres::pg_error)?;
        let task = tokio::spawn(async move {
            let _ = connection.await;
        });
        let update = FencedUpdate::new(TABLE, "resource", "fence", &["value"])?;
        let conn = Arc::new(Conn {
            update: update.prepare(&pg).await?,
            client: pg,
            task,
        });
        conns.insert(client.to_owned(), conn.clone());
        Ok(conn)
    }

    /// Crashes the server; [`restart`](Self::restart) runs crash recovery.
    pub async fn kill(&self) {
        let mut server = self.server.lock().await;
        // kill() waits (bounded) for the processes to vanish.
        tokio::task::block_in_place(|| server.kill());
        self.conns.lock().await.clear();
    }

    /// Starts a killed server again; nothing if it runs.
    pub async fn restart(&self) -> Result<(), String> {
        let mut server = self.server.lock().await;
        if server.is_running() {
            return Ok(());
        }
        server.restart().await.map_err(|e| e.to_string())
    }

    /// Sends `signal` to every server process (a stopped postmaster forks
    /// none, so the set is the same on the way back).
    pub async fn signal(&self, signal: Signal) {
        for pid in self.server.lock().await.pids() {
            if let Some(pid) = Pid::from_raw(pid as i32) {
                let _ = kill_process(pid, signal);
            }
        }
    }

    /// The fence of every row after the run: the highest token the server
    /// ever accepted there, if it kept its commits.
    pub async fn fences(&self) -> Result<BTreeMap<String, u64>, String> {
        self.conns.lock().await.clear();
        let server = self.server.lock().await;
        let admin = server.client().await.map_err(|e| e.to_string())?;
        let rows = admin
            .query(&format!("SELECT resource, fence FROM {TABLE}"), &[])
            .await
            .map_err(|e| e.to_string())?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).max(0) as u64))
            .collect())
    }
}
