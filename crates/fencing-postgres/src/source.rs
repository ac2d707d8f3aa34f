//! [`PgSource`]: locks with fencing tokens in one PostgreSQL table.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::backend::{
    ensure_same_source, release_until_lost, tracker, with_timeout, GrantBackend, IfHeld,
    LeaseTracker, RawSource, Releases, SentAt,
};
use fencing_core::{
    default_holder_identity, AcquireOptions, Error, FencingToken, Grant, GrantInfo, HolderInfo,
    LossReason, ResourceName, Result, SourceId,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, GenericClient, NoTls, Row, Statement};

use crate::config::PgConfig;
use crate::lock_table::LockTable;

/// Shortest lease granted: renewals run every TTL/3 and must fit a round
/// trip with room to spare.
pub const MIN_TTL: Duration = Duration::from_millis(500);

/// Longest a waiter sleeps between two looks at a held lock, in case a
/// release's NOTIFY was lost with a connection.
const MAX_POLL: Duration = Duration::from_secs(1);

/// A [`FencingSource`](fencing_core::FencingSource) kept in a PostgreSQL
/// database: for applications that run PostgreSQL and no etcd, ZooKeeper
/// or Kubernetes.
///
/// - One row per lock (name, holder, token, expiry) in one table; the
///   token comes from a sequence drawn in the acquiring statement, with the
///   server's timeline in its high bits, so it strictly increases per
///   database, also across a standby's promotion.
/// - Expiry is judged on the server's clock, in the statement that takes
///   the lock; renewals and releases are conditional on the token.
/// - The holder counts its lease from when it sent the request, and
///   renews every TTL/3.
/// - Waiters are woken by a NOTIFY from each release, and by the lease's
///   expiry, which they read from the row.
/// - [`guard`](Self::guard) checks the lock inside the transaction of a
///   write to the same database: the lease check and the write are one
///   step.
///
/// Unlike `pg_try_advisory_lock`, a lock here outlives the connection that
/// took it only for its TTL, and its token lets storage refuse the writes
/// of a holder that paused past it.
///
/// ```no_run
/// # async fn demo() -> fencing::Result<()> {
/// use fencing::postgres::{PgConfig, PgSource};
/// use fencing::FencingSource;
///
/// let config = PgConfig::from_url("postgres://app@db:5432/orders?table=fencing_locks")?;
/// PgSource::create_schema(&config).await?; // or run PgSource::schema(..)'s SQL by hand
/// let source = PgSource::connect(config).await?;
/// let grant = source.lock("nightly-report").await?;
/// println!("write with token {}", grant.token());
/// grant.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgSource {
    inner: Arc<Inner>,
}

struct Inner {
    config: PgConfig,
    sql: LockTable,
    identity: SourceId,
    holder: String,
    endpoints: String,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// Woken by every release's NOTIFY, and when a connection ends.
    released: Arc<Notify>,
    /// The grants of each TTL, renewed together.
    batches: Mutex<HashMap<Duration, Batch>>,
    releases: Releases,
}

/// The live grants of one TTL, renewed by one UPDATE every TTL/3 (as etcd
/// and ZooKeeper grants of one TTL share a session). Each grant keeps its
/// own deadline: a renewal counts for a grant only when its row is among
/// the rows the UPDATE returned, so a grant taken while a renewal was in
/// flight is never credited with it.
struct Batch {
    members: Arc<Mutex<Vec<Member>>>,
    renewer: JoinHandle<()>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

#[derive(Clone)]
struct Member {
    resource: ResourceName,
    token: FencingToken,
    ttl: Duration,
    lease: LeaseTracker,
}

impl std::fmt::Debug for PgSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSource")
            .field("identity", &self.inner.identity)
            .field("endpoints", &self.inner.endpoints)
            .field("table", &self.inner.config.table)
            .finish_non_exhaustive()
    }
}

/// One connection, its statements, and the task that drives it.
struct Conn {
    client: Client,
    stmts: Stmts,
    driver: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

struct Stmts {
    acquire: Statement,
    renew: Statement,
    release: Statement,
    release_all: Statement,
    row: Statement,
    current: Statement,
}

impl PgSource {
    /// Connects, reads the source's identity from the lock table's schema
    /// and starts listening for releases. The schema must exist: without it
    /// this is an [`Error::Config`] saying how to create it.
    pub async fn connect(config: PgConfig) -> Result<PgSource> {
        check_ttl(config.ttl)?;
        let sql = LockTable::new(&config.table)?;
        let released = Arc::new(Notify::new());
        let endpoints = config.endpoints();
        let conn = open(&config, &sql, &endpoints, &released).await?;
        let id: String = with_timeout(
            Some(config.request_timeout),
            || format!("read the identity of {}", sql.table.sql()),
            async {
                let row = conn
                    .client
                    .query_one(&sql.source_id, &[])
                    .await
                    .map_err(|e| schema_error(e, &config.table))?;
                Ok(row.get(0))
            },
        )
        .await?;
        tracing::debug!(%endpoints, table = %config.table, %id, "connected to PostgreSQL");
        Ok(PgSource {
            inner: Arc::new(Inner {
                identity: SourceId::new(format!("pg:{id}")),
                holder: default_holder_identity(),
                conn: tokio::sync::Mutex::new(Some(conn)),
                endpoints,
                released,
                batches: Mutex::new(HashMap::new()),
                releases: Releases::new(),
                sql,
                config,
            }),
        })
    }

    /// [`connect`](Self::connect) to a `postgres://` URL
    /// ([`PgConfig::from_url`]).
    pub async fn connect_url(url: &str) -> Result<PgSource> {
        Self::connect(PgConfig::from_url(url)?).await
    }

    /// The SQL that creates the lock table `table`, its sequence and its
    /// identity row, for those who migrate by hand. It needs PostgreSQL 13
    /// or later (`gen_random_uuid()`). The role a source connects with
    /// then needs only `SELECT, INSERT, UPDATE, DELETE` on the table,
    /// `SELECT` on `<table>_source` and `USAGE` on `<table>_tokens`.
    pub fn schema(table: &str) -> Result<String> {
        Ok(LockTable::new(table)?.schema)
    }

    /// Creates the schema if it is missing, in one transaction that holds
    /// off other creators; an existing schema (and its identity) is kept.
    pub async fn create_schema(config: &PgConfig) -> Result<()> {
        let sql = LockTable::new(&config.table)?;
        let endpoints = config.endpoints();
        with_timeout(
            Some(config.request_timeout),
            || format!("create the schema of {} on [{endpoints}]", sql.table.sql()),
            async {
                let (mut client, connection) = config
                    .pg
                    .connect(NoTls)
                    .await
                    .map_err(|e| connect_error(e, &endpoints))?;
                let driver = tokio::spawn(connection);
                let tx = client.transaction().await.map_err(crate::pg_error)?;
                // CREATE ... IF NOT EXISTS races with itself; one at a time.
                tx.execute(
                    "SELECT pg_advisory_xact_lock(hashtext($1))",
                    &[&sql.channel],
                )
                .await
                .map_err(crate::pg_error)?;
                tx.batch_execute(&sql.schema)
                    .await
                    .map_err(crate::pg_error)?;
                tx.commit().await.map_err(crate::pg_error)?;
                drop(client);
                let _ = driver.await;
                Ok(())
            },
        )
        .await
    }

    /// Checks, inside `tx` (a transaction on the database of the lock
    /// table), that `grant` still holds its lock, and keeps it held until
    /// `tx` ends: the row is locked `FOR SHARE`, so a contender's acquire
    /// waits for the commit. Write in the same transaction after it, and
    /// the lease check and the write are one step, with no window for a
    /// pause in between. [`Error::Stale`] when a newer grant holds the
    /// lock, [`Error::Lost`] when it ran out or was released; either way
    /// the grant is marked lost.
    ///
    /// ```no_run
    /// # async fn demo(source: &fencing::postgres::PgSource, grant: &fencing::Grant, client: &mut tokio_postgres::Client) -> fencing::Result<()> {
    /// use fencing::postgres::pg_error;
    ///
    /// let tx = client.transaction().await.map_err(pg_error)?;
    /// source.guard(&tx, grant).await?;
    /// tx.execute("UPDATE report SET body = $1", &[&"..."]).await.map_err(pg_error)?;
    /// tx.commit().await.map_err(pg_error)?;
    /// # Ok(()) }
    /// ```
    pub async fn guard(&self, tx: &impl GenericClient, grant: &Grant) -> Result<()> {
        ensure_same_source(&self.inner.identity, grant)?;
        let name = grant.resource().as_str();
        let rows = with_timeout(
            Some(self.inner.config.request_timeout),
            || format!("check the lock {name:?} in the caller's transaction"),
            async {
                tx.query(&self.inner.sql.guard, &[&name])
                    .await
                    .map_err(crate::pg_error)
            },
        )
        .await?;
        let ours = grant.token();
        let (reason, error) = match rows.first().map(|row| token_at(row, 0)) {
            Some(t) if t == ours => return Ok(()),
            Some(t) if t > ours => (
                LossReason::Superseded,
                Error::Stale {
                    presented: ours,
                    highest: t,
                },
            ),
            _ => (
                LossReason::SessionExpired,
                Error::Lost {
                    resource: grant.resource().clone(),
                    reason: "its lock row ran out or was released".into(),
                },
            ),
        };
        tracker(grant).mark_lost(reason, "the lock row no longer carries this token");
        Err(error)
    }

    /// The current connection, reconnecting when it ended (a server
    /// restart, a failover).
    async fn conn(&self) -> Result<Arc<Conn>> {
        let mut current = self.inner.conn.lock().await;
        if let Some(conn) = current.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(conn.clone());
        }
        *current = None;
        let inner = &self.inner;
        let conn = open(&inner.config, &inner.sql, &inner.endpoints, &inner.released).await?;
        *current = Some(conn.clone());
        Ok(conn)
    }

    /// Runs one of the source's statements within the request timeout.
    async fn query(
        &self,
        what: &str,
        pick: fn(&Stmts) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        with_timeout(
            Some(self.inner.config.request_timeout),
            || format!("{what} on PostgreSQL [{}]", self.inner.endpoints),
            async {
                let conn = self.conn().await?;
                conn.client
                    .query(pick(&conn.stmts), params)
                    .await
                    .map_err(crate::pg_error)
            },
        )
        .await
    }

    fn resolve(&self, options: &AcquireOptions) -> Result<(Duration, String)> {
        let ttl = options.ttl.unwrap_or(self.inner.config.ttl);
        check_ttl(ttl)?;
        let holder = options
            .holder
            .clone()
            .unwrap_or_else(|| self.inner.holder.clone());
        fencing_core::__private::check_holder(&holder)?;
        Ok((ttl, holder))
    }

    /// One acquire statement: a grant, or how long until the lock may be
    /// free (its holder's lease plus the lock-delay).
    async fn attempt(
        &self,
        resource: &ResourceName,
        ttl: Duration,
        holder: &str,
        delay: Duration,
    ) -> Result<std::result::Result<Grant, Duration>> {
        let name = resource.as_str();
        let sent = SentAt::now();
        let rows = self
            .query(
                "acquire",
                |s| &s.acquire,
                &[&name, &holder, &millis(ttl), &millis(delay)],
            )
            .await?;
        if let Some(row) = rows.first() {
            return Ok(Ok(self.grant(
                resource,
                holder,
                ttl,
                token_at(row, 0),
                sent,
            )));
        }
        let rows = self
            .query("read the lock", |s| &s.row, &[&name, &millis(delay)])
            .await?;
        let left = rows.first().map_or(0, |r| r.get::<_, i64>(2));
        Ok(Err(Duration::from_millis(left.max(0).unsigned_abs())))
    }

    fn grant(
        &self,
        resource: &ResourceName,
        holder: &str,
        ttl: Duration,
        token: FencingToken,
        sent: SentAt,
    ) -> Grant {
        let info = GrantInfo::new(token, resource.clone(), self.inner.identity.clone())
            .with_holder(holder)
            .with_key(format!("{}/{resource}", self.inner.config.table))
            .with_lease(ttl, ttl / 3);
        let lease = LeaseTracker::new(sent, ttl);
        self.join_batch(Member {
            resource: resource.clone(),
            token,
            ttl,
            lease: lease.clone(),
        });
        tracing::debug!(%resource, %token, "postgres grant");
        let backend = PgGrant {
            source: self.clone(),
            info: info.clone(),
        };
        fencing_core::backend::grant(info, lease, Box::new(backend), &self.inner.releases)
    }

    /// Adds a grant to the batch of its TTL, starting the batch's renewer
    /// with the first grant of that TTL. A renewer holds its source weakly:
    /// it ends when the last handle of the source is dropped.
    fn join_batch(&self, member: Member) {
        let ttl = member.ttl;
        let mut batches = lock(&self.inner.batches);
        let batch = batches.entry(ttl).or_insert_with(|| {
            let members = Arc::new(Mutex::new(Vec::new()));
            let span = tracing::debug_span!(parent: None, "fencing.renew", backend = "postgres", ttl = ?ttl);
            let renewing = renew_batch(Arc::downgrade(&self.inner), members.clone(), ttl);
            Batch {
                members,
                renewer: tokio::spawn(tracing::Instrument::instrument(renewing, span)),
            }
        });
        let mut members = lock(&batch.members);
        members.retain(|m| m.lease.is_live());
        members.push(member);
    }

    /// Why the lock row no longer carries `token`.
    async fn loss_reason(&self, resource: &ResourceName, token: FencingToken) -> LossReason {
        let name = resource.as_str();
        match self
            .query("read the lock", |s| &s.row, &[&name, &0i64])
            .await
        {
            Ok(rows) => match rows.first() {
                None => LossReason::DeletedAtServer,
                Some(row) if token_at(row, 1) != token => LossReason::Superseded,
                Some(_) => LossReason::SessionExpired,
            },
            Err(_) => LossReason::SessionExpired,
        }
    }

    async fn release_row(&self, name: &str, token: FencingToken) -> Result<()> {
        let channel = self.inner.sql.channel.as_str();
        self.query(
            "release",
            |s| &s.release,
            &[&name, &to_sql(token), &channel],
        )
        .await
        .map(drop)
    }
}

/// Connects, prepares the statements and LISTENs for releases.
async fn open(
    config: &PgConfig,
    sql: &LockTable,
    endpoints: &str,
    released: &Arc<Notify>,
) -> Result<Arc<Conn>> {
    with_timeout(
        Some(config.request_timeout),
        || format!("connect to PostgreSQL [{endpoints}]"),
        async {
            let (client, mut connection) = config
                .pg
                .connect(NoTls)
                .await
                .map_err(|e| connect_error(e, endpoints))?;
            let wake = released.clone();
            let driver = tokio::spawn(async move {
                while let Some(message) =
                    std::future::poll_fn(|cx| connection.poll_message(cx)).await
                {
                    match message {
                        Ok(AsyncMessage::Notification(_)) => wake.notify_waiters(),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!(error = %e, "PostgreSQL connection ended");
                            break;
                        }
                    }
                }
                // Waiters look again, on a new connection.
                wake.notify_waiters();
            });
            let prepare = |text: &str| {
                let client = &client;
                let text = text.to_owned();
                async move { client.prepare(&text).await }
            };
            let table = &config.table;
            let stmts = async {
                Ok::<_, tokio_postgres::Error>(Stmts {
                    acquire: prepare(&sql.acquire).await?,
                    renew: prepare(&sql.renew).await?,
                    release: prepare(&sql.release).await?,
                    release_all: prepare(&sql.release_all).await?,
                    row: prepare(&sql.row).await?,
                    current: prepare(&sql.current).await?,
                })
            }
            .await
            .map_err(|e| schema_error(e, table))?;
            let listen = format!("LISTEN \"{}\"", sql.channel);
            client
                .batch_execute(&listen)
                .await
                .map_err(crate::pg_error)?;
            Ok(Arc::new(Conn {
                client,
                stmts,
                driver,
            }))
        },
    )
    .await
}

/// A failure to connect: the server's refusal (bad password, no such
/// database) as the server put it, anything else as unreachable.
fn connect_error(e: tokio_postgres::Error, endpoints: &str) -> Error {
    if e.as_db_error().is_some() {
        return crate::pg_error(e);
    }
    let reason = fencing_core::__private::connect_failure(&e).unwrap_or_else(|| e.to_string());
    Error::Unreachable {
        backend: "PostgreSQL".into(),
        endpoints: endpoints.to_owned(),
        reason,
    }
}

/// A missing lock table is a configuration error that says what to do.
fn schema_error(e: tokio_postgres::Error, table: &str) -> Error {
    use tokio_postgres::error::SqlState;
    if e.code() == Some(&SqlState::UNDEFINED_TABLE) {
        return Error::Config(format!(
            "the lock table {table:?} or its sequence does not exist: create it with \
             PgSource::create_schema, `fence schema URL`, or the SQL of PgSource::schema ({e})"
        ));
    }
    crate::pg_error(e)
}

fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL || ttl > Duration::from_secs(24 * 3600) {
        return Err(Error::Config(format!(
            "lease TTL {ttl:?} must be between 500ms and 24h"
        )));
    }
    Ok(())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn to_sql(token: FencingToken) -> i64 {
    i64::try_from(token.get()).unwrap_or(i64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Renews a batch every TTL/3 (a quarter of that after a failed attempt)
/// with one UPDATE for all its live grants. A grant whose row the UPDATE
/// did not return is lost, with the reason its row shows. Deadlines count
/// from each renewal's send.
async fn renew_batch(inner: Weak<Inner>, members: Arc<Mutex<Vec<Member>>>, ttl: Duration) {
    let period = ttl / 3;
    let mut pause = period;
    loop {
        tokio::time::sleep(pause).await;
        pause = period;
        let due: Vec<Member> = {
            let mut members = lock(&members);
            members.retain(|m| m.lease.is_live());
            members.clone()
        };
        if due.is_empty() {
            continue;
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let source = PgSource { inner };
        let sent = SentAt::now();
        let names: Vec<&str> = due.iter().map(|m| m.resource.as_str()).collect();
        let tokens: Vec<i64> = due.iter().map(|m| to_sql(m.token)).collect();
        let rows = match source
            .query("renew", |s| &s.renew, &[&names, &tokens, &millis(ttl)])
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(grants = due.len(), error = %e, "lease renewal failed");
                pause = period / 4;
                continue;
            }
        };
        let renewed: HashSet<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        for m in due.iter().filter(|m| m.lease.is_live()) {
            if renewed.contains(&(m.resource.as_str().to_owned(), to_sql(m.token))) {
                m.lease.renewed(sent, ttl);
            } else {
                let reason = source.loss_reason(&m.resource, m.token).await;
                m.lease.mark_lost(
                    reason,
                    "renewal refused: the lock row no longer carries this token or ran out",
                );
            }
        }
    }
}

struct PgGrant {
    source: PgSource,
    info: GrantInfo,
}

#[async_trait]
impl GrantBackend for PgGrant {
    /// Deletes the row, retrying for as long as the row could still be
    /// live (a TTL from now, the latest it can run out); after that it has
    /// run out by itself.
    async fn release(self: Box<Self>) -> Result<()> {
        let name = self.info.resource.as_str();
        let row_lives = LeaseTracker::new(SentAt::now(), self.info.ttl);
        release_until_lost(&row_lives, "PostgreSQL lock release", || {
            self.source.release_row(name, self.info.token)
        })
        .await
    }
}

impl RawSource for PgSource {
    fn identity(&self) -> &SourceId {
        &self.inner.identity
    }

    fn describe_acquire(&self, resource: &ResourceName) -> String {
        format!(
            "acquire {resource:?} in table {:?} on PostgreSQL [{}]",
            self.inner.config.table, self.inner.endpoints
        )
    }

    async fn take(
        &self,
        resource: &ResourceName,
        options: &AcquireOptions,
        if_held: IfHeld,
    ) -> Result<Option<Grant>> {
        let (ttl, holder) = self.resolve(options)?;
        let delay = options.lock_delay.unwrap_or_default();
        loop {
            // Registered before the attempt, so a release that lands in
            // between still wakes this waiter.
            let released = self.inner.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            match self.attempt(resource, ttl, &holder, delay).await? {
                Ok(grant) => return Ok(Some(grant)),
                Err(_) if if_held == IfHeld::GiveUp => return Ok(None),
                Err(left) => {
                    let nap = fencing_core::__private::jittered(Duration::from_millis(20), 0.5);
                    tokio::select! {
                        () = released => {}
                        () = tokio::time::sleep(left.min(MAX_POLL) + nap) => {}
                    }
                }
            }
        }
    }

    async fn validate(&self, grant: &Grant) -> Result<bool> {
        ensure_same_source(&self.inner.identity, grant)?;
        let name = grant.resource().as_str();
        let rows = self
            .query("validate", |s| &s.current, &[&name, &to_sql(grant.token())])
            .await?;
        Ok(!rows.is_empty())
    }

    async fn holder(&self, resource: &ResourceName) -> Result<Option<HolderInfo>> {
        let rows = self
            .query("read the lock", |s| &s.row, &[&resource.as_str(), &0i64])
            .await?;
        Ok(rows
            .first()
            .filter(|row| row.get::<_, i64>(2) > 0)
            .map(|row| HolderInfo::new(row.get::<_, String>(0), token_at(row, 1))))
    }

    /// Loses every grant of the source at once, deletes their rows in one
    /// statement, waits for the releases of dropped grants, and closes the
    /// connection (a later call opens a new one).
    async fn close(&self) -> Result<()> {
        let held: Vec<Member> = lock(&self.inner.batches)
            .values()
            .flat_map(|b| lock(&b.members).drain(..).collect::<Vec<_>>())
            .collect();
        let (mut names, mut tokens) = (Vec::new(), Vec::new());
        for m in held.iter().filter(|m| m.lease.is_live()) {
            m.lease
                .mark_lost(LossReason::Released, "its source was closed");
            names.push(m.resource.as_str());
            tokens.push(to_sql(m.token));
        }
        let deleted = if names.is_empty() {
            Ok(())
        } else {
            let channel = self.inner.sql.channel.as_str();
            self.query(
                "release on close",
                |s| &s.release_all,
                &[&names, &tokens, &channel],
            )
            .await
            .map(drop)
        };
        self.inner.releases.wait().await;
        *self.inner.conn.lock().await = None;
        deleted
    }
}

/// A token as the table keeps it (BIGINT, never negative).
fn token_at(row: &Row, column: usize) -> FencingToken {
    FencingToken::new(row.get::<_, i64>(column).unsigned_abs())
}
