//! The campaign's second storage: a PostgreSQL server with two gates, each
//! keeping one row per lock. [`GATE`] writes through a [`FencedUpdate`]
//! (the fence column on the application's own row); [`TABLE_GATE`] admits
//! the token in a [`FenceTable`] and updates a ledger row in the same
//! transaction. The controller sends each client's storage write to both,
//! each on a connection of that client's own, so the server judges the same
//! tokens as the file storage's gate. The nemesis crashes the server
//! (SIGKILL of every server process, then crash recovery) and pauses it
//! (SIGSTOP), so the fences must survive both and a statement that was
//! stuck in a paused server must still be judged by the fence it finds when
//! it runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fencing::{Error, FencingToken, ResourceName};
use fencing_postgres::{pg_error, FenceTable, FencedUpdate, PreparedUpdate};
use rustix::process::{kill_process, Pid, Signal};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_postgres::NoTls;

use super::history::WriteOutcome;
use fencing_harness::postgres::server::PgServer;

/// The gate name of the fence column's writes in the history.
pub const GATE: &str = "postgres";
/// The gate name of the fence table's writes in the history.
pub const TABLE_GATE: &str = "postgres-table";
const TABLE: &str = "campaign_registers";
/// The fence table's marks and the rows they guard.
const MARKS: &str = "campaign_marks";
const LEDGER: &str = "campaign_ledger";
/// Like the file storage's answer limit: the client hears "unknown" first.
const WRITE_LIMIT: Duration = Duration::from_millis(1500);

/// One client's connection to one gate. The lock lets the fence table's
/// writes open a transaction; a client writes once at a time, so nobody
/// waits on it.
struct Conn {
    client: Mutex<tokio_postgres::Client>,
    /// The fence column's prepared update; `None` on a fence table
    /// connection, which does not use it.
    update: Option<PreparedUpdate>,
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
    marks: FenceTable,
    /// Keyed by (client, gate name).
    conns: Mutex<HashMap<(String, &'static str), Arc<Conn>>>,
}

impl PgStore {
    /// Starts a fresh server and creates one row per lock.
    pub async fn start(locks: &[String]) -> Result<PgStore, String> {
        let server = PgServer::start().await.map_err(|e| e.to_string())?;
        let admin = server.client().await.map_err(|e| e.to_string())?;
        let create = format!(
            "CREATE TABLE {TABLE} (resource TEXT PRIMARY KEY, value BIGINT NOT NULL, \
             fence BIGINT NOT NULL DEFAULT 0); \
             CREATE TABLE {LEDGER} (resource TEXT PRIMARY KEY, value BIGINT NOT NULL, \
             token BIGINT NOT NULL)"
        );
        admin
            .batch_execute(&create)
            .await
            .map_err(|e| e.to_string())?;
        let marks = FenceTable::new(MARKS).map_err(|e| e.to_string())?;
        marks.create(&admin).await.map_err(|e| e.to_string())?;
        for lock in locks {
            for insert in [
                format!("INSERT INTO {TABLE} (resource, value) VALUES ($1, 0)"),
                format!("INSERT INTO {LEDGER} (resource, value, token) VALUES ($1, 0, 0)"),
            ] {
                admin
                    .execute(&insert, &[lock])
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(PgStore {
            config: server.connection_string(),
            marks,
            server: Mutex::new(server),
            conns: Mutex::new(HashMap::new()),
        })
    }

    /// `client`'s write of `value` with `token` to the row of `resource`
    /// through `gate`: [`GATE`] (the fence column) or [`TABLE_GATE`] (the
    /// fence table's admit and the ledger row's update in one transaction).
    pub async fn write(
        &self,
        gate: &'static str,
        client: &str,
        resource: &str,
        token: u64,
        value: u64,
    ) -> WriteOutcome {
        let attempt = async {
            let conn = self.conn(client, gate).await?;
            let value = i64::try_from(value).map_err(|e| Error::Config(e.to_string()))?;
            let mut pg = conn.client.lock().await;
            let token = FencingToken::new(token);
            let Some(update) = &conn.update else {
                return self.table_write(&mut pg, resource, token, value).await;
            };
            match update.execute(&*pg, &resource, &[&value], token).await? {
                1 => Ok(()),
                rows => Err(Error::backend("postgres", format!("{rows} rows updated"))),
            }
        };
        self.judge(client, gate, token, attempt).await
    }

    async fn table_write(
        &self,
        pg: &mut tokio_postgres::Client,
        resource: &str,
        token: FencingToken,
        value: i64,
    ) -> fencing::Result<()> {
        let tx = pg.transaction().await.map_err(pg_error)?;
        self.marks
            .admit_any_source(&tx, &ResourceName::new(resource)?, token)
            .await?;
        let update = format!("UPDATE {LEDGER} SET value = $2, token = $3 WHERE resource = $1");
        let rows = tx
            .execute(&update, &[&resource, &value, &i64::try_from(token)?])
            .await
            .map_err(pg_error)?;
        if rows != 1 {
            return Err(Error::backend(
                "postgres",
                format!("{rows} ledger rows updated"),
            ));
        }
        tx.commit().await.map_err(pg_error)
    }

    /// The outcome of one bounded write attempt to `gate`.
    async fn judge(
        &self,
        client: &str,
        gate: &'static str,
        token: u64,
        attempt: impl std::future::Future<Output = fencing::Result<()>>,
    ) -> WriteOutcome {
        match tokio::time::timeout(WRITE_LIMIT, attempt).await {
            Ok(Ok(())) => return WriteOutcome::Accepted,
            Ok(Err(Error::Stale { .. })) => return WriteOutcome::Refused,
            Ok(Err(e)) => eprintln!("{gate}: write of token {token}: {e}"),
            Err(_) => {}
        }
        // The statement may still run later; a new connection keeps the
        // client's next write from queueing behind it.
        self.conns.lock().await.remove(&(client.to_owned(), gate));
        WriteOutcome::Unknown
    }

    async fn conn(&self, client: &str, gate: &'static str) -> fencing::Result<Arc<Conn>> {
        let key = (client.to_owned(), gate);
        let mut conns = self.conns.lock().await;
        if let Some(conn) = conns.get(&key) {
            return Ok(conn.clone());
        }
        let (pg, connection) = tokio_postgres::connect(&self.config, NoTls)
            .await
            .map_err(pg_error)?;
        let task = tokio::spawn(async move {
            let _ = connection.await;
        });
        let update = match gate {
            GATE => {
                let update = FencedUpdate::new(TABLE, "resource", "fence", &["value"])?;
                Some(update.prepare(&pg).await?)
            }
            _ => None,
        };
        let conn = Arc::new(Conn {
            update,
            client: Mutex::new(pg),
            task,
        });
        conns.insert(key, conn.clone());
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

    /// Per (gate, resource) after the run: the fence column's fence, and
    /// for the fence table the lower of the ledger row's token and its
    /// mark: a write the table acknowledged must have reached both (the
    /// admit and the update are one transaction), and each is the highest
    /// token the server accepted there if it kept its commits.
    pub async fn fences(&self) -> Result<BTreeMap<(String, String), u64>, String> {
        self.conns.lock().await.clear();
        let server = self.server.lock().await;
        let admin = server.client().await.map_err(|e| e.to_string())?;
        let query = format!(
            "SELECT r.resource, r.fence, l.token, COALESCE(m.mark, 0) FROM {TABLE} r \
             JOIN {LEDGER} l USING (resource) LEFT JOIN {MARKS} m USING (resource)"
        );
        let rows = admin.query(&query, &[]).await.map_err(|e| e.to_string())?;
        let mut fences = BTreeMap::new();
        for row in rows {
            let resource: String = row.get(0);
            let [fence, token, mark] = [1, 2, 3].map(|i| row.get::<_, i64>(i).max(0) as u64);
            fences.insert((GATE.to_owned(), resource.clone()), fence);
            fences.insert((TABLE_GATE.to_owned(), resource), token.min(mark));
        }
        Ok(fences)
    }
}
