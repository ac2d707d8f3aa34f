//! EtcdSource: the FencingSource over an etcd cluster.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnResponse};
use fencing_core::backend::{
    ensure_same_source, release_until_lost, GrantBackend, IfHeld, RawSource, Releases,
};
use fencing_core::{
    default_holder_identity, AcquireOptions, Error, FencingToken, Grant, GrantInfo, HolderInfo,
    LossReason, ResourceName, Result, SourceId,
};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::config::EtcdConfig;
use crate::conn::Conn;
use crate::gate::EtcdGate;
use crate::lock::{self, Incarnation, LockKeys};
use crate::session::Session;
use crate::watches::{WatchGuard, Watches};

/// A [`FencingSource`](fencing_core::FencingSource) backed by an etcd v3 cluster (3.4 or newer).
///
/// Locks use the key layout of Go's `concurrency.Mutex`, so Go and Rust
/// processes can contend on the same lock; the fencing token is the create
/// revision of the holder's key. Several grants of one source on the same
/// lock are served one after the other.
///
/// # Sessions
///
/// Grants are kept alive by sessions, not one by one: every grant of this
/// source with the same TTL lives on one etcd lease (what Go calls a
/// `concurrency.Session`), renewed by one keep-alive stream. When that
/// session is lost (its lease expired or was revoked, the cluster was out
/// of reach for longer than the TTL) every grant on it is lost together,
/// and the next acquire opens a new session. Work that must not fail
/// together takes another TTL or another source. [`EtcdSource::open_sessions`]
/// counts the sessions; `close()` ends them all.
///
/// ```no_run
/// # async fn demo() -> fencing::Result<()> {
/// use fencing::{AcquireOptions, FencingSource, ResourceName};
/// use fencing::etcd::EtcdSource;
///
/// let source = EtcdSource::from_url("etcd://127.0.0.1:2379/locks?ttl=10").await?;
/// let grant = source.acquire(&ResourceName::new("ledger")?, &AcquireOptions::new()).await?;
/// println!("token {}", grant.token()); // the key's create revision
/// grant.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdSource {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    cfg: EtcdConfig,
    identity: SourceId,
    holder: String,
    sessions: AsyncMutex<Sessions>,
    local: Mutex<LocalLocks>,
    /// Every watch of this source, on one stream.
    watches: Arc<Watches>,
    wakeups: AtomicU64,
    /// Releases of dropped grants, which `close()` waits for.
    releases: Releases,
}

/// The session new grants of each TTL use, and the older ones some grants
/// may still hold (a retired session lives on until its grants end).
#[derive(Default)]
struct Sessions {
    current: HashMap<Duration, Arc<Session>>,
    older: Vec<Weak<Session>>,
}

impl Sessions {
    fn replace(&mut self, ttl: Duration, session: Arc<Session>) {
        self.older.retain(|s| s.strong_count() > 0);
        if let Some(old) = self.current.insert(ttl, session) {
            self.older.push(Arc::downgrade(&old));
        }
    }

    /// Every session still in use, leaving none.
    fn drain(&mut self) -> Vec<Arc<Session>> {
        let older = self.older.drain(..).filter_map(|s| s.upgrade());
        self.current.drain().map(|(_, s)| s).chain(older).collect()
    }
}

/// One in-process lock per etcd lock, so grants of one source on the same
/// lock are served one after the other. Entries nobody holds or waits for
/// are dropped once the map has doubled since the last sweep, so memory
/// follows the locks in use, not every lock ever taken.
#[derive(Default)]
struct LocalLocks {
    locks: HashMap<String, Arc<AsyncMutex<()>>>,
    sweep_at: usize,
}

impl LocalLocks {
    fn get(&mut self, dir: &str) -> Arc<AsyncMutex<()>> {
        if self.locks.len() >= self.sweep_at {
            self.locks.retain(|_, m| Arc::strong_count(m) > 1);
            self.sweep_at = (2 * self.locks.len()).max(64);
        }
        self.locks.entry(dir.to_owned()).or_default().clone()
    }
}

impl std::fmt::Debug for EtcdSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSource")
            .field("endpoints", &self.inner.cfg.endpoints)
            .field("prefix", &self.inner.cfg.prefix)
            .field("identity", &self.inner.identity)
            .finish()
    }
}

impl EtcdSource {
    /// Connects and reads the cluster id (the source identity). An
    /// unreachable cluster gives [`Error::Timeout`] naming the endpoints; a
    /// TTL above etcd's longest lease (9,000,000,000 s) or a request
    /// timeout above `i32::MAX` seconds gives [`Error::Config`] naming it.
    pub async fn connect(cfg: EtcdConfig) -> Result<Self> {
        cfg.check_durations()?;
        let conn = Conn::connect(&cfg).await?;
        let probe = GetOptions::new().with_count_only();
        let resp = conn
            .call("get cluster id", |mut c| {
                let (k, o) = (cfg.prefix.clone(), probe.clone());
                async move { c.get(k, Some(o)).await }
            })
            .await?;
        let cluster = resp.header().map(|h| h.cluster_id()).unwrap_or(0);
        Ok(EtcdSource {
            inner: Arc::new(Inner {
                watches: Watches::start(conn.clone()),
                conn,
                identity: SourceId::new(format!("etcd:{cluster:016x}")),
                cfg,
                holder: default_holder_identity(),
                sessions: AsyncMutex::new(Sessions::default()),
                local: Mutex::new(LocalLocks::default()),
                wakeups: AtomicU64::new(0),
                releases: Releases::new(),
            }),
        })
    }

    /// Parses an `etcd://` or `etcds://` URL (see [`EtcdConfig::from_url`]) and connects.
    pub async fn from_url(url: &str) -> Result<Self> {
        Self::connect(EtcdConfig::from_url(url)?).await
    }

    /// The underlying client, for the application's own reads and writes.
    #[must_use]
    pub fn client(&self) -> etcd_client::Client {
        self.inner.conn.client()
    }

    /// How many times a waiter of this source was woken by the deletion of
    /// its predecessor. With N waiters each hand-over wakes one of them. A
    /// test hook (feature `test-util`), for the no-herd tests.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    #[must_use]
    pub fn waiter_wakeups(&self) -> u64 {
        self.inner
            .wakeups
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many sessions (etcd leases) this source keeps open: one per TTL
    /// its grants asked for, plus replaced ones that still carry grants.
    pub async fn open_sessions(&self) -> usize {
        let sessions = self.inner.sessions.lock().await;
        let older = sessions.older.iter().filter(|s| s.strong_count() > 0);
        sessions.current.len() + older.count()
    }

    /// A gate whose high-water marks live in etcd under `prefix`.
    pub fn gate(&self, prefix: impl Into<String>) -> Result<EtcdGate> {
        EtcdGate::new(
            self.inner.conn.clone(),
            self.inner.identity.clone(),
            prefix.into(),
        )
    }

    /// Runs `ops` in one txn only if `grant` still holds its lock (its key
    /// still has the create revision that is its token): the strongest gate
    /// for data kept in etcd itself. A superseded grant gets [`Error::Lost`]
    /// and is marked lost.
    ///
    /// The txn is sent once. When the connection fails after sending (a
    /// member dies, the leader changes, no answer before the request
    /// timeout), the result is [`Error::OutcomeUnknown`]: the txn may have
    /// applied, so read the data back before writing again. Re-sending it
    /// blindly could apply the operations twice, since the lock compare
    /// still holds after the first apply.
    pub async fn guarded_txn(&self, grant: &Grant, ops: Vec<TxnOp>) -> Result<TxnResponse> {
        ensure_same_source(&self.inner.identity, grant)?;
        let rev = i64::try_from(grant.token())?;
        let txn = Txn::new()
            .when([Compare::create_revision(grant.key(), CompareOp::Equal, rev)])
            .and_then(ops);
        let resp = self
            .inner
            .conn
            .call_once("guarded txn", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        if !resp.succeeded() {
            fencing_core::backend::tracker(grant).mark_lost(
                LossReason::DeletedAtServer,
                "lock key gone at guarded write",
            );
            return Err(Error::lost(
                grant.resource(),
                "lock key no longer carries this token",
            ));
        }
        Ok(resp)
    }

    /// Revokes this source's sessions: every grant it holds ends at once.
    async fn revoke_sessions(&self) -> Result<()> {
        let sessions = self.inner.sessions.lock().await.drain();
        for s in sessions {
            s.revoke(&self.inner.conn).await?;
        }
        Ok(())
    }

    async fn session(&self, ttl: Duration) -> Result<Arc<Session>> {
        let mut sessions = self.inner.sessions.lock().await;
        if let Some(s) = sessions.current.get(&ttl).filter(|s| s.serves_new_grants()) {
            return Ok(s.clone());
        }
        let (session, _) = Session::start(&self.inner.conn, ttl, &self.inner.cfg.prefix).await?;
        let session = Arc::new(session);
        sessions.replace(ttl, session.clone());
        Ok(session)
    }

    fn local_lock(&self, dir: &str) -> Arc<AsyncMutex<()>> {
        let mut local = self.inner.local.lock().unwrap_or_else(|p| p.into_inner());
        local.get(dir)
    }

    /// One acquire; `wait == false` gives up (Ok(None)) when someone holds it.
    async fn take_lock(
        &self,
        resource: &ResourceName,
        opts: &AcquireOptions,
        wait: bool,
    ) -> Result<Option<Grant>> {
        lock::check_resource(resource)?;
        fencing_core::backend::refuse_lock_delay(opts, "etcd")?;
        let ttl = self.inner.cfg.ttl_for(opts.ttl)?;
        let holder = opts
            .holder
            .clone()
            .unwrap_or_else(|| self.inner.holder.clone());
        let local = self.local_lock(&lock::lock_dir(&self.inner.cfg.prefix, resource));
        let guard = if wait {
            local.lock_owned().await
        } else {
            // The local lock may be held for a moment by the clean-up of an
            // abandoned acquire; a grant or a waiter of this source holds it
            // longer, and then the lock is not free.
            match tokio::time::timeout(self.inner.cfg.request_timeout, local.lock_owned()).await {
                Ok(g) => g,
                Err(_) => return Ok(None),
            }
        };
        let session = self.session(ttl).await?;
        let keys = LockKeys::new(&self.inner.cfg.prefix, resource, session.lease_id);
        let conn = &self.inner.conn;
        let mut pending = PendingKey::new(conn.clone(), keys.mine.clone(), session.clone(), guard);

        let mut attempt = lock::attempt(conn, &keys, session.lease_id, &holder).await?;
        if attempt.existed {
            // A leftover of this session: its revision was a token already
            // handed out, so start over with a fresh key.
            lock::unlock(conn, &keys.mine, Incarnation::Created(attempt.rev)).await?;
            attempt = lock::attempt(conn, &keys, session.lease_id, &holder).await?;
        }
        pending.rev = Some(attempt.rev);
        if !attempt.owner {
            if !wait {
                pending.cleanup().await?;
                return Ok(None);
            }
            let survived = tokio::select! {
                r = lock::wait_for_predecessors(conn, &self.inner.watches, &keys, attempt.rev, &self.inner.wakeups) => r?,
                why = session.lost() => return Err(Error::lost(resource, format!("etcd session lost while waiting: {why}"))),
            };
            if !survived {
                return Err(Error::lost(
                    resource,
                    "etcd session expired while waiting for the lock",
                ));
            }
        }
        let token = FencingToken::try_from(attempt.rev)?;
        let tracker = session.track_grant();
        let watch = self
            .inner
            .watches
            .own_key(&keys.mine, attempt.rev, tracker.clone());
        let info = GrantInfo::new(token, resource.clone(), self.inner.identity.clone())
            .with_holder(holder)
            .with_key(keys.mine.clone())
            .with_lease(session.ttl, session.ttl / 3);
        let backend = EtcdGrant {
            conn: conn.clone(),
            key: keys.mine,
            rev: attempt.rev,
            watch: Some(watch),
            session,
            _local: pending.disarm(),
        };
        tracing::debug!(%resource, %token, "etcd grant");
        Ok(Some(fencing_core::backend::grant(
            info,
            tracker,
            Box::new(backend),
            &self.inner.releases,
        )))
    }
}

/// My key between the acquire txn and the grant: if the acquire is dropped
/// or fails, the key is deleted so it does not block the lock until the
/// session ends. The local lock stays held until that delete is done.
struct PendingKey {
    conn: Conn,
    key: String,
    session: Arc<Session>,
    rev: Option<i64>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl PendingKey {
    fn new(conn: Conn, key: String, session: Arc<Session>, guard: OwnedMutexGuard<()>) -> Self {
        PendingKey {
            conn,
            key,
            session,
            rev: None,
            guard: Some(guard),
        }
    }

    fn incarnation(&self) -> Incarnation {
        self.rev.map_or(
            Incarnation::OfLease(self.session.lease_id),
            Incarnation::Created,
        )
    }

    async fn cleanup(mut self) -> Result<()> {
        let _guard = self.guard.take();
        remove_abandoned(&self.conn, &self.key, self.incarnation(), &self.session).await
    }

    fn disarm(mut self) -> OwnedMutexGuard<()> {
        self.guard
            .take()
            .expect("guard present until disarmed or cleaned up")
    }
}

impl Drop for PendingKey {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let (conn, key, which) = (self.conn.clone(), self.key.clone(), self.incarnation());
        let session = self.session.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = remove_abandoned(&conn, &key, which, &session).await {
                    tracing::warn!(%key, error = %e, "could not delete the key of an abandoned acquire");
                }
                drop(guard);
            });
        }
    }
}

/// Deletes the key of an abandoned acquire, retrying while its session
/// lives: a key left on a live session heads the lock's queue for as long
/// as the process runs (seen: the acquire's txn applied, its answer and the
/// clean-up's first read lost in a network blip). When the txn's answer
/// never came, the txn may also be applied after the delete: the session
/// is retired, so its key name is never used for a grant again and the
/// session ends once its grants have.
async fn remove_abandoned(
    conn: &Conn,
    key: &str,
    which: Incarnation,
    session: &Session,
) -> Result<()> {
    if matches!(which, Incarnation::OfLease(_)) {
        session.retire();
    }
    release_until_lost(session.lease(), "etcd abandoned acquire", || {
        lock::unlock(conn, key, which)
    })
    .await
}

struct EtcdGrant {
    conn: Conn,
    key: String,
    /// The key's create revision (the token).
    rev: i64,
    /// Marks the grant lost if the key is deleted behind our back.
    watch: Option<WatchGuard>,
    session: Arc<Session>,
    _local: OwnedMutexGuard<()>,
}

#[async_trait]
impl GrantBackend for EtcdGrant {
    async fn release(mut self: Box<Self>) -> Result<()> {
        // Our own delete is not a loss.
        self.watch.take();
        if lock::delete_answered(&self.conn, &self.key).await {
            return Ok(());
        }
        self.session.retire();
        let (conn, key, rev) = (&self.conn, &self.key, Incarnation::Created(self.rev));
        release_until_lost(self.session.lease(), "etcd unlock", || {
            lock::unlock(conn, key, rev)
        })
        .await
    }
}

impl RawSource for EtcdSource {
    fn identity(&self) -> &SourceId {
        &self.inner.identity
    }

    fn describe_acquire(&self, resource: &ResourceName) -> String {
        let endpoints = self.inner.cfg.endpoints.join(",");
        format!("acquire {resource:?} on etcd [{endpoints}]")
    }

    async fn take(
        &self,
        resource: &ResourceName,
        options: &AcquireOptions,
        if_held: IfHeld,
    ) -> Result<Option<Grant>> {
        self.take_lock(resource, options, if_held == IfHeld::Wait)
            .await
    }

    async fn validate(&self, grant: &Grant) -> Result<bool> {
        ensure_same_source(&self.inner.identity, grant)?;
        let rev = i64::try_from(grant.token())?;
        lock::still_mine(&self.inner.conn, grant.key(), rev).await
    }

    /// Revokes the sessions (their keys go with them), then waits for the
    /// releases of grants dropped before the call, which end once their
    /// lease is gone.
    async fn close(&self) -> Result<()> {
        let revoked = self.revoke_sessions().await;
        self.inner.releases.wait().await;
        revoked
    }

    async fn holder(&self, resource: &ResourceName) -> Result<Option<HolderInfo>> {
        lock::check_resource(resource)?;
        let dir = lock::lock_dir(&self.inner.cfg.prefix, resource);
        let owner = lock::owner(&self.inner.conn, &dir).await?;
        owner
            .map(|(holder, rev)| Ok(HolderInfo::new(holder, FencingToken::try_from(rev)?)))
            .transpose()
    }
}
