//! KubeLeaseSource: the FencingSource over coordination.k8s.io/v1 Leases.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fencing_core::__private::{jittered, JITTER_FACTOR};
use fencing_core::backend::{
    ensure_same_source, IfHeld, LeaseTracker, RawSource, Releases, SentAt,
};
use fencing_core::{
    default_holder_identity, AcquireOptions, Error, Grant, GrantInfo, HolderInfo, LeaderTimings,
    ResourceName, Result, SourceId,
};
use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::candidate::{check_identity, Candidacy, Candidate, Candidates};
use crate::client::{client_config, Leases, Scope};
use crate::config::{lease_seconds, KubeLeaseConfig, LeaseOptions};
use crate::error::{classify, Call, Failure};
use crate::names::{check_namespace, lease_name};
use crate::record::{
    decide, decide_coordinated, new_lease, parse_rv, released_lease, taken_lease, write_fate,
    Coordinated, Decision, GrantKey, LeaseView, Seen, WriteFate,
};
use crate::session::{Backoff, Held, KubeGrant};

/// A [`FencingSource`](fencing_core::FencingSource) whose locks are Kubernetes Leases, compatible with
/// client-go's `leaderelection` with a `LeaseLock`.
///
/// One Lease per resource, named after it (a DNS-1123 subdomain). The
/// fencing token is the resourceVersion of the write that made the grant:
/// etcd's revision, so it grows with every grant of the Lease. Tokens are
/// only comparable within one Lease of one etcd-backed cluster; the source
/// identity is `kube:CLUSTER/NAMESPACE`, where CLUSTER is
/// [`LeaseOptions::cluster`] or else the apiserver URL.
///
/// ```no_run
/// # async fn demo() -> fencing::Result<()> {
/// use fencing::{AcquireOptions, FencingSource, ResourceName};
/// use fencing::kube::{KubeLeaseConfig, KubeLeaseSource};
///
/// let source = KubeLeaseSource::connect(
///     KubeLeaseConfig::new("team-a")?.kubeconfig("/etc/kube/lease-user.conf"),
/// )
/// .await?;
/// let grant = source.acquire(&ResourceName::new("ledger-writer")?, &AcquireOptions::new()).await?;
/// println!("token {}", grant.token()); // the Lease's resourceVersion at the grant
/// grant.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KubeLeaseSource {
    inner: Arc<Inner>,
}

struct Inner {
    leases: Leases,
    candidates: Candidates,
    options: LeaseOptions,
    identity: SourceId,
    holder: String,
    /// When each Lease's resourceVersion was last seen to change, on our
    /// monotonic clock: the base of expiry.
    seen: Mutex<Seen>,
    /// Grant writes in flight and their clean-up (see `write_owned`).
    background: TaskTracker,
    /// Releases of dropped grants, which `close()` waits for.
    releases: Releases,
}

impl std::fmt::Debug for KubeLeaseSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLeaseSource")
            .field("server", &self.inner.leases.server())
            .field("namespace", &self.inner.leases.namespace())
            .field("identity", &self.inner.identity)
            .finish()
    }
}

impl KubeLeaseSource {
    /// Loads the client configuration (see [`KubeLeaseConfig`]) and checks that
    /// the apiserver answers and accepts the credentials. An apiserver that
    /// refuses the connection, or whose TLS handshake fails, is
    /// [`Error::Unreachable`] naming its URL; one that does not answer
    /// within the request timeout is [`Error::Timeout`]; rejected credentials are [`Error::PermissionDenied`]; a missing
    /// kubeconfig file is [`Error::Config`] naming the path.
    ///
    /// The source identity is `kube:CLUSTER/NAMESPACE`, CLUSTER being
    /// [`LeaseOptions::cluster`] if set, else the UID of the cluster's
    /// `kube-system` namespace (the usual cluster id: the same through
    /// every apiserver address), else, when the client may not read that
    /// namespace, the apiserver's URL.
    pub async fn connect(cfg: KubeLeaseConfig) -> Result<Self> {
        check_namespace(&cfg.namespace)?;
        cfg.options.check()?;
        let config = client_config(&cfg).await?;
        let server = config.cluster_url.to_string();
        let server = server.trim_end_matches('/').to_owned();
        let client = kube::Client::try_from(config)
            .map_err(|e| Error::Config(format!("Kubernetes client for {server}: {e}")))?;
        let cluster = match cfg.options.cluster.clone() {
            Some(named) => named,
            None => cluster_id(&client, &server, cfg.options.request_timeout)
                .await?
                .unwrap_or_else(|| {
                    tracing::info!(%server, "no read of namespace kube-system: the source identity names the apiserver's URL; set cluster= to name the cluster");
                    server.clone()
                }),
        };
        let source = Self::build(client, &cfg.namespace, cfg.options, &server, &cluster)?;
        source.inner.leases.probe().await?;
        Ok(source)
    }

    /// Parses a `kube://` URL (see [`KubeLeaseConfig::from_url`]) and connects.
    pub async fn from_url(url: &str) -> Result<Self> {
        Self::connect(KubeLeaseConfig::from_url(url)?).await
    }

    /// A source over an existing client. The source identity is
    /// `kube:CLUSTER/NAMESPACE`, CLUSTER being [`LeaseOptions::cluster`] if
    /// set, else the UID of the cluster's `kube-system` namespace (one
    /// request, now). A client that may not read that namespace needs the
    /// option: without it this is [`Error::Config`], since two clusters
    /// would otherwise share one identity.
    pub async fn from_client(
        client: kube::Client,
        namespace: &str,
        options: LeaseOptions,
    ) -> Result<Self> {
        check_namespace(namespace)?;
        options.check()?;
        let cluster = match options.cluster.clone() {
            Some(named) => named,
            None => cluster_id(&client, "client", options.request_timeout)
                .await?
                .ok_or_else(|| {
                    Error::Config(
                        "cannot tell which cluster this client talks to (namespace kube-system is not \
                         readable): set LeaseOptions::cluster, or allow get on namespaces/kube-system"
                            .into(),
                    )
                })?,
        };
        Self::build(client, namespace, options, "client", &cluster)
    }

    fn build(
        client: kube::Client,
        namespace: &str,
        options: LeaseOptions,
        server: &str,
        cluster: &str,
    ) -> Result<Self> {
        let scope = Scope::new(namespace, server, options.request_timeout);
        Ok(KubeLeaseSource {
            inner: Arc::new(Inner {
                candidates: Candidates::new(client.clone(), scope.clone()),
                leases: Leases::new(client, scope),
                identity: SourceId::new(format!("kube:{cluster}/{namespace}")),
                options,
                holder: default_holder_identity(),
                seen: Mutex::default(),
                background: TaskTracker::new(),
                releases: Releases::new(),
            }),
        })
    }

    /// The namespace of the Leases.
    #[must_use]
    pub fn namespace(&self) -> &str {
        self.inner.leases.namespace()
    }

    /// The underlying client, for the application's own calls.
    #[must_use]
    pub fn client(&self) -> kube::Client {
        self.inner.leases.client().clone()
    }

    /// The holder identity used when the acquire options name none.
    #[must_use]
    pub fn default_holder(&self) -> &str {
        &self.inner.holder
    }

    /// When we last saw `name` change, updated with what we just read.
    fn observed_at(&self, name: &str, rv: Option<&str>, now: Instant) -> Instant {
        let mut seen = self.inner.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.observed_at(name, rv, now)
    }

    /// Waits (or, with `wait == false`, tries once) for the resource.
    async fn take_lease(
        &self,
        resource: &ResourceName,
        opts: &AcquireOptions,
        wait: bool,
    ) -> Result<Option<Grant>> {
        let name = lease_name(resource)?;
        let timings = self.inner.options.grant_timings(opts.ttl);
        let holder = opts.holder.as_deref().unwrap_or(&self.inner.holder);
        if holder.is_empty() {
            return Err(Error::Config(
                "holder identity must not be empty (an empty holderIdentity marks a free Lease)"
                    .into(),
            ));
        }
        // Coordinated leader election: our candidacy is published for the
        // whole wait; see [`LeaseOptions::coordinated`](crate::LeaseOptions::coordinated).
        let candidate = match &self.inner.options.coordinated {
            Some(candidacy) => Some(
                self.join_as_candidate(name, holder, candidacy, timings)
                    .await?,
            ),
            None => None,
        };
        // Whether this wait has already been allowed to read the Lease.
        let mut read_before = false;
        loop {
            let outcome = match &candidate {
                Some(candidate) => {
                    self.attempt_coordinated(candidate, resource, name, holder, timings)
                        .await
                }
                None => {
                    let lock_delay = opts.lock_delay.unwrap_or_default();
                    self.attempt(resource, name, holder, timings, read_before, lock_delay)
                        .await
                }
            };
            read_before |= matches!(outcome, Ok(None));
            if let Some(done) = settle(outcome, wait, name) {
                return done;
            }
            // client-go's acquire loop: JitterUntil(RetryPeriod, JitterFactor).
            tokio::time::sleep(jittered(timings.retry_period, JITTER_FACTOR)).await;
        }
    }

    /// One read and, if the Lease is free, expired or absent, one write.
    /// `read_before`: an earlier attempt of the same wait read the Lease.
    async fn attempt(
        &self,
        resource: &ResourceName,
        name: &str,
        holder: &str,
        timings: LeaderTimings,
        read_before: bool,
        lock_delay: Duration,
    ) -> Result<Option<Grant>> {
        let leases = &self.inner.leases;
        let read = match leases.get(name).await {
            // A restarted apiserver answers 403 until its RBAC caches are
            // filled again. A read refused after reads were allowed is
            // reported as a backend error, which a waiting candidate rides
            // out; a first refusal stays PermissionDenied and ends the wait.
            Err(e @ Error::PermissionDenied(_)) if read_before => {
                return Err(Error::backend(
                    "kube acquire",
                    format!(
                        "{e} (the same read was allowed a moment ago: a restarting apiserver?)"
                    ),
                ))
            }
            other => other?,
        };
        let now = Instant::now();
        let view = read.as_ref().map(LeaseView::of);
        let observed_at = self.observed_at(name, view.as_ref().map(|v| v.rv.as_str()), now);
        let seconds = lease_seconds(&timings);
        let (lease, create) = match (decide(view.as_ref(), observed_at, now, lock_delay)?, read) {
            (Decision::Held { .. }, _) => return Ok(None),
            (Decision::Managed { strategy }, _) => {
                return Err(Error::ManagedElsewhere {
                    resource: resource.clone(),
                    manager: format!(
                        "kube-apiserver's coordinated leader election (Lease {}/{name} has strategy {strategy:?}); \
                         join it as a candidate with LeaseOptions::coordinated \
                         (kube://NAMESPACE?coordinated=true&binary_version=X.Y.Z)",
                        self.namespace()
                    ),
                })
            }
            (Decision::Create, _) => {
                let lease = new_lease(name, holder, seconds, SystemTime::now());
                (lease, true)
            }
            (Decision::Take { transitions }, Some(read)) => {
                let lease = taken_lease(read, holder, seconds, transitions, SystemTime::now());
                (lease, false)
            }
            (Decision::Take { .. }, None) => {
                return Err(Error::backend(
                    "kube acquire",
                    "decided to take a Lease it did not read",
                ))
            }
        };
        self.write_owned(resource, lease, create, timings, None)
            .await
    }

    /// Publishes our candidacy for the Lease `name`.
    async fn join_as_candidate(
        &self,
        name: &str,
        holder: &str,
        candidacy: &Candidacy,
        timings: LeaderTimings,
    ) -> Result<Candidate> {
        check_identity(holder)?;
        Candidate::join(
            &self.inner.candidates,
            name,
            holder,
            candidacy,
            timings.retry_period,
            &self.inner.background,
        )
        .await
    }

    /// One read and, if the controller named us, our first renewal.
    async fn attempt_coordinated(
        &self,
        candidate: &Candidate,
        resource: &ResourceName,
        name: &str,
        holder: &str,
        timings: LeaderTimings,
    ) -> Result<Option<Grant>> {
        let read = self.inner.leases.get(name).await?;
        let now = Instant::now();
        let view = read.as_ref().map(LeaseView::of);
        let observed_at = self.observed_at(name, view.as_ref().map(|v| v.rv.as_str()), now);
        let seconds = lease_seconds(&timings);
        match (
            decide_coordinated(view.as_ref(), holder, observed_at, now)?,
            read,
        ) {
            (Coordinated::Take { transitions }, Some(read)) => {
                let lease = taken_lease(read, holder, seconds, transitions, SystemTime::now());
                self.write_owned(resource, lease, false, timings, Some(candidate.clone()))
                    .await
            }
            _ => Ok(None),
        }
    }

    /// Writes the grant in a task the source owns, so that dropping the
    /// acquire (a timeout, a cancelled `select!`) does not drop the write
    /// halfway: a write that lands for nobody would leave the Lease naming
    /// us, with no expiry at the server, until others judge it expired.
    /// A grant nobody is waiting for any more is released; a write whose
    /// answer was lost is looked for and undone if it landed.
    /// [`RawSource::close`] waits for these tasks.
    async fn write_owned(
        &self,
        resource: &ResourceName,
        lease: Lease,
        create: bool,
        timings: LeaderTimings,
        candidate: Option<Candidate>,
    ) -> Result<Option<Grant>> {
        let (answer_tx, answer) = tokio::sync::oneshot::channel();
        let (this, resource) = (self.clone(), resource.clone());
        self.inner.background.spawn(async move {
            let sent = SentAt::now();
            let (result, unknown) = this
                .write_grant(&resource, &lease, create, sent, timings, candidate)
                .await;
            if let Err(Ok(Some(grant))) = answer_tx.send(result) {
                tracing::debug!(%resource, token = %grant.token(), "kube acquire abandoned after its write; releasing");
                if let Err(e) = grant.release().await {
                    tracing::warn!(%resource, error = %e, "could not release the grant of an abandoned acquire");
                }
            }
            if unknown {
                this.undo_if_landed(&lease, timings.lease_duration).await;
            }
        });
        answer.await.unwrap_or_else(|_| {
            Err(Error::backend(
                "kube acquire",
                "the write task ended without an answer (runtime shutting down?)",
            ))
        })
    }

    /// The write and, if it succeeded, the grant; with whether the write's
    /// outcome is unknown (no answer, or one that does not say).
    async fn write_grant(
        &self,
        resource: &ResourceName,
        lease: &Lease,
        create: bool,
        sent: SentAt,
        timings: LeaderTimings,
        candidate: Option<Candidate>,
    ) -> (Result<Option<Grant>>, bool) {
        let leases = &self.inner.leases;
        let written = if create {
            leases.create(lease).await
        } else {
            leases.replace(lease).await
        };
        let holder = LeaseView::of(lease).holder;
        match written {
            Ok(written) => (
                self.grant(resource, written, &holder, sent, timings, candidate)
                    .await
                    .map(Some),
                false,
            ),
            // Someone else wrote first, or deleted the Lease under us.
            Err(Failure::Conflict | Failure::NotFound) => (Ok(None), false),
            Err(f) => {
                let name = lease.metadata.name.as_deref().unwrap_or_default();
                let e = f.into_error(leases.call("acquire", name));
                // Only a refusal says the write was not applied; a timeout,
                // a 5xx or a connection closed under the request may have
                // carried it (an "unreachable" error included: a cut
                // connection reads as one).
                let unknown = !matches!(e, Error::PermissionDenied(_) | Error::Config(_));
                (Err(e), unknown)
            }
        }
    }

    /// Clears the grant `written` made if it landed although its answer was
    /// lost, or makes sure it never lands: the apiserver may apply a write
    /// after its client gave up on it (the storage call outlives the
    /// request), so a Lease still at the write's precondition is released
    /// over it, which leaves the write nothing to apply to. Retried for up
    /// to the lease duration, after which any candidate may take the Lease
    /// anyway.
    async fn undo_if_landed(&self, written: &Lease, within: Duration) {
        let name = written.metadata.name.as_deref().unwrap_or_default();
        let mut backoff = Backoff::within(within);
        loop {
            match self.undo_once(name, written).await {
                Ok(true) => return,
                Ok(false) if backoff.wait().await => {}
                Ok(false) => {
                    tracing::warn!(
                        lease = name,
                        "gave up on a write whose answer was lost; it may still apply"
                    );
                    return;
                }
                Err(e) => {
                    let what = "kube check for an unanswered grant";
                    if !backoff.pause(what, name, &e).await {
                        tracing::warn!(lease = name, error = %e, "could not check for a grant whose answer was lost");
                        return;
                    }
                }
            }
        }
    }

    /// One look for the grant `written` made; true once it is undone or can
    /// no longer apply, false to look again (a create still pending, or the
    /// Lease changed under our release).
    async fn undo_once(&self, name: &str, written: &Lease) -> Result<bool> {
        let leases = &self.inner.leases;
        let current = leases.get(name).await?;
        let current = match (write_fate(current.as_ref(), written), current) {
            (WriteFate::CannotLand, _) => return Ok(true),
            // Only a Lease can be released over a create's head.
            (_, None) => return Ok(false),
            // Carrying the write, or still at its precondition (and so
            // still as free or expired as when the write was decided).
            (_, Some(current)) => current,
        };
        match leases
            .replace(&released_lease(current, SystemTime::now()))
            .await
        {
            Ok(_) => {
                tracing::info!(
                    lease = name,
                    "released the Lease over a grant whose answer was lost"
                );
                Ok(true)
            }
            Err(Failure::NotFound) => Ok(true),
            Err(Failure::Conflict) => Ok(false),
            Err(f) => Err(f.into_error(leases.call("release", name))),
        }
    }

    /// Wraps the Lease our write returned into a grant and starts renewing.
    async fn grant(
        &self,
        resource: &ResourceName,
        lease: Lease,
        holder: &str,
        sent: SentAt,
        timings: LeaderTimings,
        candidate: Option<Candidate>,
    ) -> Result<Grant> {
        let view = LeaseView::of(&lease);
        let token = match parse_rv(&view.rv) {
            Ok(t) => t,
            Err(e) => {
                // We hold a Lease we cannot fence with; give it back.
                let _ = self
                    .inner
                    .leases
                    .replace(&released_lease(lease, SystemTime::now()))
                    .await;
                return Err(e);
            }
        };
        let key = GrantKey {
            namespace: self.namespace().to_owned(),
            name: resource.as_str().to_owned(),
            uid: view.uid,
            holder: holder.to_owned(),
            transitions: view.transitions,
        };
        let info = GrantInfo::new(token, resource.clone(), self.inner.identity.clone())
            .with_holder(holder)
            .with_key(key.encode())
            .with_lease(timings.lease_duration, timings.retry_period);
        tracing::debug!(lease = %resource, %token, transitions = key.transitions, "kube grant");
        let tracker = LeaseTracker::new(sent, timings.renew_deadline);
        let held = Held { lease, key, token };
        let backend = KubeGrant::start(
            self.inner.leases.clone(),
            held,
            tracker.clone(),
            timings,
            candidate,
            self.inner.background.clone(),
        );
        Ok(fencing_core::backend::grant(
            info,
            tracker,
            Box::new(backend),
            &self.inner.releases,
        ))
    }
}

/// The UID of namespace `kube-system`: the usual id of a cluster, the same
/// through every apiserver address. `None` when this client may not read
/// it, or it does not exist.
async fn cluster_id(
    client: &kube::Client,
    server: &str,
    limit: Duration,
) -> Result<Option<String>> {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
    let what = || format!("Kubernetes get namespace kube-system on {server}");
    match tokio::time::timeout(limit, namespaces.get_opt("kube-system")).await {
        Ok(Ok(found)) => Ok(found.and_then(|ns| ns.metadata.uid)),
        Ok(Err(kube::Error::Api(e))) if e.code == 403 => Ok(None),
        Ok(Err(e)) => {
            // An apiserver that cannot be reached is Unreachable, as for
            // every other call.
            let call = Call {
                verb: "get",
                kind: "Namespace",
                namespace: "",
                name: "kube-system",
                server,
            };
            Err(classify(call, e, limit).into_error(call))
        }
        Err(_) => Err(Error::Timeout {
            operation: what(),
            after: limit,
        }),
    }
}

/// Whether one attempt's outcome ends a wait (`Some`, with what to
/// return) or the next attempt follows after the retry period (`None`).
/// Like client-go, a waiting candidate rides out an apiserver that is
/// restarting; the caller's timeout bounds the wait.
fn settle(
    outcome: Result<Option<Grant>>,
    wait: bool,
    lease: &str,
) -> Option<Result<Option<Grant>>> {
    match outcome {
        Ok(None) if wait => None,
        Err(e @ (Error::Timeout { .. } | Error::Backend { .. } | Error::Unreachable { .. }))
            if wait =>
        {
            tracing::warn!(lease, error = %e, "kube acquire attempt failed; retrying");
            None
        }
        done => Some(done),
    }
}

impl RawSource for KubeLeaseSource {
    fn identity(&self) -> &SourceId {
        &self.inner.identity
    }

    fn describe_acquire(&self, resource: &ResourceName) -> String {
        let server = self.inner.leases.server();
        format!("acquire Lease {}/{resource} on {server}", self.namespace())
    }

    async fn take(
        &self,
        resource: &ResourceName,
        options: &AcquireOptions,
        if_held: IfHeld,
    ) -> Result<Option<Grant>> {
        self.take_lease(resource, options, if_held == IfHeld::Wait)
            .await
    }

    /// True iff the Lease still names the grant's holder identity with its
    /// transitions count, and is the same Lease object (UID).
    async fn validate(&self, grant: &Grant) -> Result<bool> {
        ensure_same_source(&self.inner.identity, grant)?;
        let key = GrantKey::decode(grant.key(), grant.holder())?;
        let current = self.inner.leases.get(&key.name).await?;
        Ok(current.is_some_and(|l| LeaseView::of(&l).names(&key)))
    }

    /// Holds no session: waits until the writes of acquires that were
    /// dropped halfway have been released or undone (see `write_owned`).
    async fn close(&self) -> Result<()> {
        // The releases of dropped grants first: each may still start a
        // write in the background.
        self.inner.releases.wait().await;
        let tasks = &self.inner.background;
        tasks.close();
        tasks.wait().await;
        tasks.reopen();
        Ok(())
    }

    /// The holder the Lease names, whether or not its lease has run out on
    /// anyone's clock (expiry is judged by each candidate). Its token is the
    /// one our holders record; for a client-go holder, which records none,
    /// the Lease's current resourceVersion (see the crate documentation).
    async fn holder(&self, resource: &ResourceName) -> Result<Option<HolderInfo>> {
        let name = lease_name(resource)?;
        let Some(lease) = self.inner.leases.get(name).await? else {
            return Ok(None);
        };
        Ok(LeaseView::of(&lease)
            .holder_token()?
            .map(|(holder, token)| HolderInfo::new(holder, token)))
    }
}
