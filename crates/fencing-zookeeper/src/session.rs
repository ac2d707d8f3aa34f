//! A ZooKeeper session: its client, its lease, and how it is closed.
//!
//! Ephemeral lock nodes live as long as the session. Expiry is terminal:
//! every grant of the session is lost. While disconnected the session may
//! still live on the server, so a grant counts as lost only once the
//! negotiated timeout could have passed there: our heartbeat
//! ([`crate::heartbeat`]) renews the shared lease from the send time of
//! an answered request that the leader is known to have heard of, and the
//! local deadline fires when the answers stop. A session whose lease
//! fired that way is then closed (see [`close`]), so that its nodes do not
//! outlive the loss we reported.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::backend::{LeaseGroup, LeaseTracker, SentAt};
use fencing_core::{Credentials, Error, LossReason, Result};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;
use zookeeper_client::{Client, SaslOptions, SessionInfo, SessionState, StateWatcher, TlsOptions};

use crate::config::ZkConfig;
use crate::heartbeat::{heartbeat, Vouching};

/// A client handle with the settings every call needs.
#[derive(Clone)]
pub(crate) struct Zk {
    pub(crate) client: Client,
    hosts: String,
    timeout: Duration,
}

impl Zk {
    /// Runs a read, retrying a lost connection until the request timeout.
    pub(crate) async fn read<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zookeeper_client::Error>>,
    {
        let deadline = Instant::now() + self.timeout;
        loop {
            match tokio::time::timeout_at(deadline, op(self.client.clone())).await {
                Ok(Err(e))
                    if is_connection_error(&e) && Instant::now() + RETRY_PAUSE < deadline =>
                {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Ok(r) => return r.map_err(|e| self.error(what, e)),
                Err(_) => return Err(self.timed_out(what)),
            }
        }
    }

    /// Runs a write once under the request timeout (a blind retry of a
    /// write could apply it twice).
    pub(crate) async fn write<T>(
        &self,
        what: &str,
        fut: impl Future<Output = std::result::Result<T, zookeeper_client::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r.map_err(|e| self.error(what, e)),
            Err(_) => Err(self.timed_out(what)),
        }
    }

    /// The limit of one request.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn error(&self, what: &str, e: zookeeper_client::Error) -> Error {
        use zookeeper_client::Error as Z;
        let context = format!("ZooKeeper {what} on [{}]", self.hosts);
        match e {
            Z::NoAuth | Z::AuthFailed => Error::PermissionDenied(format!("{context}: {e}")),
            Z::Timeout => self.timed_out(what),
            other => Error::backend(context, other),
        }
    }

    fn timed_out(&self, what: &str) -> Error {
        Error::Timeout {
            operation: format!("ZooKeeper {what} on [{}]", self.hosts),
            after: self.timeout,
        }
    }
}

const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The shortest session timeout measured to survive any single server
/// kill, pause or restart with quorum intact (integration/tests/tests/timing.rs).
const RIDES_THROUGH_FAILOVER: Duration = Duration::from_secs(6);

/// Runs `read` after a `sync`, pipelined on one connection: the server
/// answers the read only after it caught up with what the leader had
/// committed when it answered the sync, and a follower cut off from its
/// leader answers neither. A leader cut off from its followers answers
/// both on its own until it steps down, so only reads whose staleness errs
/// on the safe side may rely on this (a lock node seen that is gone makes a
/// waiter wait longer); anything that vouches for time goes through a
/// quorum (the heartbeat's quorum transaction).
pub(crate) async fn after_sync<T>(
    client: &Client,
    read: impl Future<Output = std::result::Result<T, zookeeper_client::Error>>,
) -> std::result::Result<T, zookeeper_client::Error> {
    let ((), value) = tokio::try_join!(client.sync("/"), read)?;
    Ok(value)
}

/// The connection broke under the request (the client reconnects on its
/// own); the session, and so the request's meaning, may well be intact.
fn is_connection_error(e: &zookeeper_client::Error) -> bool {
    match e {
        zookeeper_client::Error::ConnectionLoss => true,
        // How the client reports a connection it gave up on for silence.
        zookeeper_client::Error::Custom(_) => e.to_string().contains("connection"),
        _ => false,
    }
}

/// One session: the client, the lease its grants share, the heartbeat.
pub(crate) struct Session {
    pub(crate) zk: Zk,
    /// The session timeout the ensemble granted.
    pub(crate) timeout: Duration,
    group: Arc<LeaseGroup>,
    heartbeat: JoinHandle<()>,
    dialer: Dialer,
}

impl Session {
    pub(crate) async fn connect(cfg: &ZkConfig) -> Result<Session> {
        let sent = SentAt::now();
        let dialer = Dialer::new(cfg).await?;
        let client = match tokio::time::timeout(cfg.request_timeout, dialer.dial(None)).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(connect_error(cfg, e).await),
            Err(_) => return Err(connect_error(cfg, zookeeper_client::Error::Timeout).await),
        };
        let timeout = client.session_timeout();
        // The leader started the session's timeout when it created it.
        let group = Arc::new(LeaseGroup::new(sent, timeout));
        let vouching = Vouching::new(timeout, sent, Instant::now());
        // A span of its own, not the acquire's that opened the session.
        let span = tracing::debug_span!(parent: None, "fencing.renew", backend = "zookeeper", session = ?client.session_id());
        let heartbeat = tokio::spawn(
            heartbeat(client.clone(), dialer.clone(), group.clone(), vouching).instrument(span),
        );
        if timeout < RIDES_THROUGH_FAILOVER {
            tracing::warn!(
                ?timeout,
                "ZooKeeper session shorter than {RIDES_THROUGH_FAILOVER:?}: one failed server can cost it"
            );
        }
        tracing::debug!(session = ?client.session_id(), ?timeout, "ZooKeeper session started");
        let zk = Zk {
            client,
            hosts: cfg.hosts.join(","),
            timeout: cfg.request_timeout,
        };
        Ok(Session {
            zk,
            timeout,
            group,
            heartbeat,
            dialer,
        })
    }

    pub(crate) fn is_live(&self) -> bool {
        self.group.lease().is_live()
    }

    pub(crate) async fn lost(&self) -> LossReason {
        self.group.lease().lost().await
    }

    pub(crate) fn track_grant(&self) -> LeaseTracker {
        self.group.track()
    }

    /// The session's own lease, which its grants follow.
    pub(crate) fn lease(&self) -> &LeaseTracker {
        self.group.lease()
    }

    /// Ends the session: its grants are lost (released) at once, and the
    /// session is closed at the server, so its nodes go with it.
    pub(crate) async fn close(&self) {
        self.group.lose(LossReason::Released, "source closed");
        let client = &self.zk.client;
        close(
            &self.dialer,
            client.session().clone(),
            client.state_watcher(),
        )
        .await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A heartbeat that declared the lease lost is closing the session
        // (bounded by CLOSE_ATTEMPTS): aborted, it would leave the nodes to
        // a session that other handles of the client may keep alive.
        if self.is_live() {
            self.heartbeat.abort();
        }
    }
}

/// How to open a connection to the ensemble with the configured auth and
/// TLS: for the session itself, and again to close it.
#[derive(Clone)]
pub(crate) struct Dialer {
    connector: zookeeper_client::Connector,
    hosts: String,
    secure: bool,
    request_timeout: Duration,
}

impl Dialer {
    async fn new(cfg: &ZkConfig) -> Result<Dialer> {
        let mut connector = Client::connector()
            .with_session_timeout(cfg.ttl)
            .with_connection_timeout(per_host_timeout(cfg));
        if let Some(Credentials { user, password }) = &cfg.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        if let Some(Credentials { user, password }) = &cfg.sasl {
            connector =
                connector.with_sasl(SaslOptions::digest_md5(user.clone(), password.clone()));
        }
        if let Some(tls) = &cfg.tls {
            connector = connector.with_tls(tls_options(tls).await?);
        }
        Ok(Dialer {
            connector,
            hosts: cfg.hosts.join(","),
            // Bare host:port endpoints are plaintext to the client crate
            // unless the whole connection string is opened as secure.
            secure: cfg.tls.is_some(),
            request_timeout: cfg.request_timeout,
        })
    }

    /// A new session, or with `session` a connection that takes that one over.
    async fn dial(
        &self,
        session: Option<SessionInfo>,
    ) -> std::result::Result<Client, zookeeper_client::Error> {
        let mut connector = self.connector.clone();
        if let Some(session) = session {
            connector = connector.with_session(session);
        }
        if self.secure {
            connector.secure_connect(&self.hosts).await
        } else {
            connector.connect(&self.hosts).await
        }
    }
}

async fn tls_options(tls: &fencing_core::TlsFiles) -> Result<TlsOptions> {
    let ca = tls.ca.clone().ok_or_else(|| {
        Error::Config("ZooKeeper TLS needs the CA file that signed the servers (ca=)".into())
    })?;
    if let Some(domain) = &tls.domain {
        return Err(Error::Config(format!(
            "ZooKeeper TLS verifies no server name: remove the domain {domain:?}"
        )));
    }
    let read = |p: std::path::PathBuf| async move {
        tokio::fs::read_to_string(&p)
            .await
            .map_err(|e| Error::Config(format!("reading TLS file {}: {e}", p.display())))
    };
    let bad = |e: zookeeper_client::Error| Error::Config(format!("ZooKeeper TLS files: {e}"));
    let mut options = TlsOptions::new()
        .with_pem_ca(&read(ca).await?)
        .map_err(bad)?;
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        options = options
            .with_pem_identity(&read(cert.clone()).await?, &read(key.clone()).await?)
            .map_err(bad)?;
    }
    Ok(options)
}

/// How long one server may take to answer before the client tries the
/// next. With the whole request timeout per server, one server whose port
/// accepts connections but never answers (a dead server behind a proxy, a
/// Docker port of a disconnected container) used up the whole connect
/// budget, and the healthy servers after it were never tried. A share of
/// the timeout per server (at least 1 s) leaves time for the others. The
/// client also uses it as the idle limit of an open connection.
fn per_host_timeout(cfg: &ZkConfig) -> Duration {
    let hosts = u32::try_from(cfg.hosts.len().max(1)).unwrap_or(u32::MAX);
    (cfg.request_timeout / hosts)
        .max(Duration::from_secs(1))
        .min(cfg.request_timeout)
}

async fn connect_error(cfg: &ZkConfig, e: zookeeper_client::Error) -> Error {
    use zookeeper_client::Error as Z;
    let hosts = cfg.hosts.join(",");
    tracing::debug!(hosts, error = ?e, "ZooKeeper connect failed");
    match e {
        Z::AuthFailed | Z::NoAuth => {
            Error::PermissionDenied(format!("ZooKeeper connect to [{hosts}]: {e}"))
        }
        Z::Timeout | Z::NoHosts => match unreachable_hosts(&cfg.hosts).await {
            Some(reason) => Error::unreachable("ZooKeeper", hosts, reason),
            // Something accepted TCP but set up no session: a silent or
            // quorum-less server, or a TLS mismatch.
            None => Error::Timeout {
                operation: format!("ZooKeeper connect to [{hosts}]"),
                after: cfg.request_timeout,
            },
        },
        other => Error::backend(format!("ZooKeeper connect to [{hosts}]"), other),
    }
}

/// The client crate reports every failed connect as a timeout. A plain TCP
/// connect to each host tells the user why: `Some` with each host's failure
/// when none accepts a connection, `None` when one does.
async fn unreachable_hosts(hosts: &[String]) -> Option<String> {
    const PROBE: Duration = Duration::from_secs(1);
    let mut failures = Vec::new();
    for host in hosts {
        let failure = match tokio::time::timeout(PROBE, tokio::net::TcpStream::connect(host)).await
        {
            Ok(Ok(_)) => return None,
            Ok(Err(e)) => {
                fencing_core::__private::connect_failure(&e).unwrap_or_else(|| e.to_string())
            }
            Err(_) => {
                let timed_out = std::io::Error::from(std::io::ErrorKind::TimedOut);
                fencing_core::__private::connect_failure(&timed_out)
                    .unwrap_or_else(|| timed_out.to_string())
            }
        };
        failures.push((host, failure));
    }
    // The hosts are already named by the error; repeat one shared reason once.
    if failures.windows(2).all(|w| w[0].1 == w[1].1) {
        return failures.pop().map(|(_, failure)| failure);
    }
    let each: Vec<String> = failures.iter().map(|(h, f)| format!("{h}: {f}")).collect();
    Some(each.join("; "))
}

/// How many times [`close`] tries before it leaves the session to expire.
const CLOSE_ATTEMPTS: u32 = 60;

/// Ends a session whose lease we declared lost, so its ephemeral nodes go
/// with it. The client would keep pinging it for as long as any handle of
/// it lives (a grant the user still holds, a `client()` the user took),
/// and a stall the ensemble rode out (a leader paused within syncLimit)
/// leaves it alive at the server: its lock nodes would head their queues
/// for good. A second connection takes the session over (the server
/// hands a session to any connection that presents its id and password)
/// and closes it; until the ensemble answers, it tries again. Done when the
/// close was answered, when the server says the session is gone, or when
/// the first client's own state says so.
pub(crate) async fn close(dialer: &Dialer, session: SessionInfo, states: StateWatcher) {
    let pause = (dialer.request_timeout / 3).clamp(Duration::from_secs(1), Duration::from_secs(5));
    for attempt in 1..=CLOSE_ATTEMPTS {
        if states.peek_state().is_terminated() {
            return;
        }
        let closed = tokio::time::timeout(dialer.request_timeout, async {
            match dialer.dial(Some(session.clone())).await {
                Ok(taken_over) => {
                    let mut closing = taken_over.state_watcher();
                    // The last handle: dropping it sends the closeSession.
                    drop(taken_over);
                    while !closing.peek_state().is_terminated() {
                        closing.changed().await;
                    }
                    closing.peek_state() == SessionState::Closed
                }
                Err(e) => matches!(e, zookeeper_client::Error::SessionExpired),
            }
        });
        if let Ok(true) = closed.await {
            tracing::info!(session = ?session.id(), attempt, "closed a ZooKeeper session whose lease was lost");
            return;
        }
        tokio::time::sleep(pause).await;
    }
    tracing::warn!(session = ?session.id(), "could not close a ZooKeeper session whose lease was lost; it ends when the server expires it");
}

#[cfg(test)]
mod tests {
    use super::tls_options;
    use fencing_core::{Error, TlsFiles};

    #[tokio::test]
    async fn tls_needs_a_ca_and_refuses_a_domain() {
        let no_ca = TlsFiles::default();
        let with_domain = TlsFiles {
            ca: Some("/nonexistent/ca.pem".into()),
            domain: Some("zk.example".into()),
            ..TlsFiles::default()
        };
        for (files, needle) in [(no_ca, "ca="), (with_domain, "zk.example")] {
            match tls_options(&files).await {
                Err(Error::Config(msg)) => assert!(msg.contains(needle), "{msg}"),
                Err(other) => panic!("{files:?}: {other:?}"),
                Ok(_) => panic!("{files:?} was accepted"),
            }
        }
    }
}
