//! ZkSource: the FencingSource over a ZooKeeper ensemble.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::backend::{
    ensure_same_source, release_until_lost, GrantBackend, IfHeld, RawSource, Releases,
};
use fencing_core::{
    default_holder_identity, AcquireOptions, Error, Grant, GrantInfo, HolderInfo, LossReason,
    ResourceName, Result, SourceId,
};
use tokio::sync::Mutex as AsyncMutex;
use tokio::task::JoinHandle;
use zookeeper_client::{Acls, MultiWriteError, MultiWriteResult, MultiWriter};

use crate::config::ZkConfig;
use crate::gate::ZkGate;
use crate::lock::{self, MyNode};
use crate::session::{Session, Zk};

/// A [`FencingSource`](fencing_core::FencingSource) backed by a ZooKeeper ensemble (3.5 or newer; tested
/// on 3.8 and 3.9).
///
/// Locks use the node layout of Curator's `InterProcessMutex`, so Java and
/// Rust processes can contend on the same lock; the fencing token is the
/// czxid of the holder's node.
///
/// # Sessions
///
/// Grants are kept alive by sessions, not one by one: every grant of this
/// source with the same TTL lives on one ZooKeeper session (the acquire
/// option `ttl` is the session timeout to ask for; the ensemble may
/// negotiate another, which then counts). When that session is lost
/// (expired, or out of touch with the ensemble for longer than its
/// timeout) every grant on it is lost together, and the next acquire opens
/// a new session. Work that must not fail together takes another TTL or
/// another source. [`ZkSource::open_sessions`] counts the sessions;
/// `close()` ends them all.
///
/// ```no_run
/// # async fn demo() -> fencing::Result<()> {
/// use fencing::{AcquireOptions, FencingSource, ResourceName};
/// use fencing::zookeeper::ZkSource;
///
/// let source = ZkSource::from_url("zk://127.0.0.1:2181/app/locks?ensemble=prod").await?;
/// let grant = source.acquire(&ResourceName::new("ledger")?, &AcquireOptions::new()).await?;
/// println!("token {}", grant.token()); // the node's czxid
/// grant.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ZkSource {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: ZkConfig,
    identity: SourceId,
    holder: String,
    sessions: AsyncMutex<HashMap<Duration, Arc<Session>>>,
    wakeups: AtomicU64,
    /// Releases of dropped grants, which `close()` waits for.
    releases: Releases,
}

impl std::fmt::Debug for ZkSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkSource")
            .field("hosts", &self.inner.cfg.hosts)
            .field("path", &self.inner.cfg.path)
            .field("identity", &self.inner.identity)
            .finish()
    }
}

impl ZkSource {
    /// Connects (one session with the configured timeout). An unreachable
    /// ensemble gives [`Error::Timeout`] naming the hosts; bad credentials
    /// give [`Error::PermissionDenied`].
    pub async fn connect(cfg: ZkConfig) -> Result<Self> {
        let session = Arc::new(Session::connect(&cfg).await?);
        let ensemble = match &cfg.ensemble {
            Some(name) => name.clone(),
            None => lock::ensemble_id(&session.zk).await?,
        };
        let sessions = HashMap::from([(cfg.ttl, session)]);
        Ok(ZkSource {
            inner: Arc::new(Inner {
                identity: SourceId::new(format!("zk:{ensemble}")),
                holder: default_holder_identity(),
                sessions: AsyncMutex::new(sessions),
                wakeups: AtomicU64::new(0),
                releases: Releases::new(),
                cfg,
            }),
        })
    }

    /// Parses a `zk://` URL (see [`ZkConfig::from_url`]) and connects.
    pub async fn from_url(url: &str) -> Result<Self> {
        Self::connect(ZkConfig::from_url(url)?).await
    }

    /// How many times a waiter of this source was woken by a change of its
    /// predecessor. With N waiters each hand-over wakes one of them. A test
    /// hook (feature `test-util`), for the no-herd tests.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    #[must_use]
    pub fn waiter_wakeups(&self) -> u64 {
        self.inner
            .wakeups
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The client of the default session, for the application's own data.
    ///
    /// It lives as long as that session: once the session expires, or is
    /// closed because its lease was declared lost (its lock nodes then go
    /// with it), every call on it fails with `SessionExpired`; call this
    /// again for the client of the new session.
    pub async fn client(&self) -> Result<zookeeper_client::Client> {
        Ok(self.default_zk().await?.client)
    }

    /// A gate whose high-water marks live in znodes under `path`. It runs
    /// on this source's sessions; a bad `path` is [`Error::Config`].
    pub fn gate(&self, path: impl Into<String>) -> Result<ZkGate> {
        ZkGate::new(self.clone(), path.into(), self.acls())
    }

    /// The default session's handle, opening a new session when the last
    /// one ended.
    pub(crate) async fn default_zk(&self) -> Result<Zk> {
        let session = self.session(self.inner.cfg.ttl).await?;
        Ok(session.zk.clone())
    }

    /// Runs `op` (a read, or an idempotent step such as a gate's admit) on
    /// the default session, and once more on a new session if that one
    /// ended meanwhile: a session whose lease ran out locally is closed at
    /// the server, and a call still on it fails with `SessionExpired`.
    pub(crate) async fn on_default_session<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut(Zk) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let session = self.session(self.inner.cfg.ttl).await?;
        match op(session.zk.clone()).await {
            Err(_) if !session.is_live() => op(self.default_zk().await?).await,
            done => done,
        }
    }

    /// Commits the operations `build` adds, in one multi that first checks
    /// that `grant`'s node still exists: the strongest gate for data kept in
    /// ZooKeeper. A superseded grant gets [`Error::Lost`] and is marked lost.
    pub async fn guarded_multi(
        &self,
        grant: &Grant,
        build: impl FnOnce(&mut MultiWriter<'_>) -> std::result::Result<(), zookeeper_client::Error>,
    ) -> Result<Vec<MultiWriteResult>> {
        ensure_same_source(&self.inner.identity, grant)?;
        // Any session can check the node's version; the default one exists
        // already. (Looking the grant's session up by its TTL found none
        // when the ensemble had negotiated another timeout than the one
        // asked for, and opened an extra session per call.)
        let session = self.session(self.inner.cfg.ttl).await?;
        let zk = &session.zk;
        let mut writer = zk.client.new_multi_writer();
        // The node's data never changes, so its version stays 0.
        let built = writer
            .add_check_version(grant.key(), 0)
            .and_then(|()| build(&mut writer));
        built.map_err(|e| zk.error("guarded multi", e))?;
        // Wrapped in Ok so that only the timeout is mapped here: a failed
        // check (operation 0) is loss, not a backend error.
        match zk
            .write("guarded multi", async { Ok(writer.commit().await) })
            .await?
        {
            Ok(results) => Ok(results),
            Err(MultiWriteError::OperationFailed { index: 0, .. }) => {
                fencing_core::backend::tracker(grant).mark_lost(
                    LossReason::DeletedAtServer,
                    "lock node gone at guarded write",
                );
                Err(Error::lost(grant.resource(), "lock node no longer exists"))
            }
            Err(e) => Err(zk.error("guarded multi", e.into())),
        }
    }

    /// Closes this source's sessions at the server and waits for it: every
    /// grant it holds is lost ([`LossReason::Released`]) and its nodes go.
    /// The source opens new sessions if used again.
    async fn close_sessions(&self) -> Result<()> {
        let sessions: Vec<_> = self.inner.sessions.lock().await.drain().collect();
        for (_, session) in sessions {
            session.close().await;
        }
        Ok(())
    }

    /// How many ZooKeeper sessions this source has open: one per TTL its
    /// grants asked for.
    pub async fn open_sessions(&self) -> usize {
        self.inner.sessions.lock().await.len()
    }

    fn acls(&self) -> Acls<'static> {
        if self.inner.cfg.digest.is_some() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        }
    }

    async fn session(&self, ttl: Duration) -> Result<Arc<Session>> {
        let mut sessions = self.inner.sessions.lock().await;
        if let Some(s) = sessions.get(&ttl).filter(|s| s.is_live()) {
            return Ok(s.clone());
        }
        let session = Arc::new(Session::connect(&self.inner.cfg.clone().ttl(ttl)).await?);
        sessions.insert(ttl, session.clone());
        Ok(session)
    }

    /// One acquire; `wait == false` gives up (Ok(None)) when someone holds it.
    async fn take_lock(
        &self,
        resource: &ResourceName,
        opts: &AcquireOptions,
        wait: bool,
    ) -> Result<Option<Grant>> {
        lock::check_resource(resource)?;
        fencing_core::backend::refuse_lock_delay(opts, "ZooKeeper")?;
        let session = self.session(opts.ttl.unwrap_or(self.inner.cfg.ttl)).await?;
        let holder = opts
            .holder
            .clone()
            .unwrap_or_else(|| self.inner.holder.clone());
        let dir = lock::lock_dir(&self.inner.cfg.path, resource);
        let zk = &session.zk;
        // Armed before the create is sent: if this future is dropped while
        // the create is in flight, the node it may have made is found by
        // its protected name and deleted.
        let pending = PendingNode {
            zk: zk.clone(),
            dir: dir.clone(),
            protect: Some(lock::protection()),
            settle: session.timeout,
        };
        let protect = pending.protect.as_deref().unwrap_or_default();
        let node = lock::create_node(zk, &dir, protect, &holder, self.acls()).await?;
        if wait {
            tokio::select! {
                r = lock::wait_until_first(zk, resource, &dir, &node, &self.inner.wakeups) => r?,
                why = session.lost() => return Err(Error::lost(resource, format!("ZooKeeper session lost while waiting: {why}"))),
            }
        } else if !lock::is_first(zk, &dir, &node).await? {
            pending.delete_now().await?;
            return Ok(None);
        }
        pending.disarm();
        Ok(Some(self.grant(resource, holder, node, session)))
    }

    fn grant(
        &self,
        resource: &ResourceName,
        holder: String,
        node: MyNode,
        session: Arc<Session>,
    ) -> Grant {
        let tracker = session.track_grant();
        let watcher = tokio::spawn(lock::watch_own_node(
            session.zk.clone(),
            node.path.clone(),
            node.token,
            tracker.clone(),
        ));
        let info = GrantInfo::new(node.token, resource.clone(), self.inner.identity.clone())
            .with_holder(holder)
            .with_key(node.path.clone())
            .with_lease(session.timeout, session.timeout / 6);
        tracing::debug!(%resource, token = %node.token, "ZooKeeper grant");
        fencing_core::backend::grant(
            info,
            tracker,
            Box::new(ZkGrant {
                path: node.path,
                watcher,
                session,
            }),
            &self.inner.releases,
        )
    }
}

/// My node from before its create is sent until the grant: deleted if the
/// acquire is dropped or fails, so it does not block the lock until the
/// session ends. It is found by its protected name, so a node whose create
/// was still unanswered when the acquire was dropped is found too.
struct PendingNode {
    zk: Zk,
    dir: String,
    protect: Option<String>,
    /// How long after the drop a late create could still apply: a request
    /// sent on a connection that then broke may reach the leader after our
    /// first look. A second look after the session timeout catches it.
    settle: Duration,
}

impl PendingNode {
    async fn delete_now(mut self) -> Result<()> {
        match self.protect.take() {
            Some(p) => lock::delete_protected(&self.zk, &self.dir, &p)
                .await
                .map(drop),
            None => Ok(()),
        }
    }

    fn disarm(mut self) {
        self.protect = None;
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        let Some(protect) = self.protect.take() else {
            return;
        };
        let (zk, dir, settle) = (self.zk.clone(), std::mem::take(&mut self.dir), self.settle);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for pause in [Duration::ZERO, settle] {
                    tokio::time::sleep(pause).await;
                    match lock::delete_protected(&zk, &dir, &protect).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(%dir, %protect, n, "deleted the node of an abandoned acquire"),
                        Err(e) => tracing::warn!(%dir, %protect, error = %e, "could not delete the node of an abandoned acquire"),
                    }
                }
            });
        }
    }
}

struct ZkGrant {
    path: String,
    watcher: JoinHandle<()>,
    session: Arc<Session>,
}

impl Drop for ZkGrant {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

#[async_trait]
impl GrantBackend for ZkGrant {
    async fn release(self: Box<Self>) -> Result<()> {
        // The watcher task goes when `self` does, after the delete: by then
        // the delete has fired its watch, so no removeWatches is sent.
        let (zk, path) = (&self.session.zk, &self.path);
        release_until_lost(self.session.lease(), "ZooKeeper unlock", || {
            lock::delete(zk, path)
        })
        .await
    }
}

impl RawSource for ZkSource {
    fn identity(&self) -> &SourceId {
        &self.inner.identity
    }

    fn describe_acquire(&self, resource: &ResourceName) -> String {
        let hosts = self.inner.cfg.hosts.join(",");
        format!("acquire {resource:?} on ZooKeeper [{hosts}]")
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
        // sync, then stat, pipelined on one connection: the server answers
        // the stat only after it caught up with the leader. Sent as two
        // separate calls, a reconnect in between could land the stat on a
        // server that is still behind (our best explanation of a fresh grant
        // once seen as invalid from another client under load). If either
        // fails, both are retried.
        let dir = lock::lock_dir(&self.inner.cfg.path, grant.resource());
        let node = grant.key().to_owned();
        let stat = self
            .on_default_session(|zk| {
                let (dir, node) = (dir.clone(), node.clone());
                async move {
                    zk.read("sync and stat", |c| {
                        let (dir, node) = (dir.clone(), node.clone());
                        async move {
                            let sync = async {
                                match c.sync(&dir).await {
                                    Err(zookeeper_client::Error::NoNode) => Ok(()),
                                    other => other,
                                }
                            };
                            let ((), stat) = tokio::try_join!(sync, c.check_stat(&node))?;
                            Ok(stat)
                        }
                    })
                    .await
                }
            })
            .await?;
        Ok(stat
            .map(|s| s.czxid)
            .is_some_and(|czxid| czxid as u64 == grant.token().get()))
    }

    /// Closes the sessions (their nodes go with them), then waits for the
    /// releases of grants dropped before the call, which end once their
    /// session is gone.
    async fn close(&self) -> Result<()> {
        let closed = self.close_sessions().await;
        self.inner.releases.wait().await;
        closed
    }

    async fn holder(&self, resource: &ResourceName) -> Result<Option<HolderInfo>> {
        lock::check_resource(resource)?;
        let dir = lock::lock_dir(&self.inner.cfg.path, resource);
        let owner = self
            .on_default_session(|zk| {
                let dir = dir.clone();
                async move { lock::owner(&zk, &dir).await }
            })
            .await?;
        Ok(owner.map(|(holder, token)| HolderInfo::new(holder, token)))
    }
}
