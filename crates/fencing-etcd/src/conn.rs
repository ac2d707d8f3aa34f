//! One client connection: every call bounded by the request timeout, every
//! error mapped to a `fencing_core::Error` that names the endpoints.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use fencing_core::__private::jittered;
use fencing_core::{Error, Result};

use crate::config::EtcdConfig;
use crate::leader::LeaderRoute;

/// Cheap to clone (one pointer): a grant keeps one, and the client itself
/// is several kilobytes.
#[derive(Clone)]
pub(crate) struct Conn(Arc<Shared>);

pub(crate) struct Shared {
    /// Every endpoint, balanced: streams (watches, keep-alives) and any
    /// request while the leader is not known.
    pub(crate) client: Client,
    route: Arc<LeaderRoute>,
    endpoints: String,
    pub(crate) timeout: Duration,
}

impl std::ops::Deref for Conn {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl Conn {
    pub(crate) async fn connect(cfg: &EtcdConfig) -> Result<Conn> {
        let mut opts = ConnectOptions::new()
            .with_timeout(cfg.request_timeout)
            .with_connect_timeout(cfg.request_timeout)
            .with_keep_alive(cfg.request_timeout, cfg.request_timeout)
            // Go's WithRequireLeader, on every request and stream: a member
            // that lost its leader refuses requests and cancels its watch
            // and keep-alive streams instead of serving a watch that can
            // no longer see a delete; we then go to another member.
            .with_require_leader(true);
        if let Some(auth) = &cfg.auth {
            opts = opts.with_user(auth.user.clone(), auth.password.clone());
        }
        let scheme = if cfg.tls.is_some() { "https" } else { "http" };
        if let Some(files) = &cfg.tls {
            opts = with_tls(opts, files).await?;
        }
        let urls: Vec<String> = cfg
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let endpoints = cfg.endpoints.join(",");
        // With auth, connect already talks to the cluster (to get a token):
        // bound it like any request so a dead cluster is a timeout.
        let limit = cfg.request_timeout;
        let route = LeaderRoute::new(urls.clone(), opts.clone(), cfg.request_timeout);
        let client = match tokio::time::timeout(limit, Client::connect(urls, Some(opts))).await {
            Ok(r) => r.map_err(|e| map_err(&endpoints, limit, "connect", e))?,
            Err(_) => return Err(timeout(&endpoints, limit, "connect")),
        };
        Ok(Conn(Arc::new(Shared {
            client,
            route,
            endpoints,
            timeout: cfg.request_timeout,
        })))
    }

    /// A handle to the client (cheap to clone; calls need `&mut`).
    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs one attempt of a request on the leader's client when it is
    /// known (dropping it if the attempt fails), else on the balanced one.
    async fn attempt<T, Fut>(
        &self,
        until: tokio::time::Instant,
        op: impl FnOnce(Client) -> Fut,
    ) -> std::result::Result<std::result::Result<T, etcd_client::Error>, tokio::time::error::Elapsed>
    where
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let leader = self.route.client(&self.client);
        let via_leader = leader.is_some();
        let client = leader.unwrap_or_else(|| self.client.clone());
        let result = tokio::time::timeout_at(until, op(client)).await;
        if via_leader && !matches!(result, Ok(Ok(_))) {
            self.route.failed();
        }
        result
    }

    /// Runs one request, retrying transient failures (no leader, a member
    /// down, a broken connection) until the request timeout. `op` gets a
    /// fresh client handle per attempt, so it must be safe to repeat: every
    /// request of this crate is a read, a txn guarded by a compare, or a
    /// lease operation whose duplicate only expires.
    ///
    /// Each attempt gets an eighth of the request timeout (at least 250 ms): a
    /// request forwarded to a leader that just died is never answered, and
    /// would otherwise hold the caller (a release, with the next holder
    /// waiting) for the whole timeout instead of being re-sent once a new
    /// leader is elected.
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut pause = Duration::from_millis(20);
        // Why the last attempt failed: a timeout after refused connections
        // is reported as unreachable, not as a slow cluster.
        let mut unreachable = None;
        let per_attempt = self.per_attempt();
        loop {
            let now = tokio::time::Instant::now();
            let attempt_deadline = deadline.min(now + per_attempt);
            let attempt = self.attempt(attempt_deadline, &mut op).await;
            match attempt {
                Ok(Ok(v)) => return Ok(v),
                Err(_) if attempt_deadline < deadline => {
                    tracing::debug!(what, ?per_attempt, "etcd request unanswered; re-sending");
                }
                Ok(Err(e))
                    if is_transient(&e) && tokio::time::Instant::now() + pause < deadline =>
                {
                    tracing::debug!(what, error = ?e, "transient etcd error; retrying");
                    unreachable = connect_problem(&e);
                    tokio::time::sleep(jittered(pause, 0.5)).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
                Ok(Err(e)) => return Err(map_err(&self.endpoints, self.timeout, what, e)),
                Err(_) => {
                    return Err(match unreachable {
                        Some(reason) => Error::unreachable(
                            "etcd",
                            &self.endpoints,
                            format!("{reason} (retried for {:?})", self.timeout),
                        ),
                        None => timeout(&self.endpoints, self.timeout, what),
                    })
                }
            }
        }
    }
}

impl Conn {
    fn per_attempt(&self) -> Duration {
        (self.timeout / 8).max(Duration::from_millis(250))
    }

    /// Sends a request once, bounded like one attempt of [`call`](Self::call),
    /// for a fast path that has a slower, safe fallback: `None` on any
    /// failure, after which the request may still be applied.
    pub(crate) async fn try_once<T, Fut>(&self, op: impl FnOnce(Client) -> Fut) -> Option<T>
    where
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let until = tokio::time::Instant::now() + self.per_attempt();
        match self.attempt(until, op).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                tracing::debug!(error = ?e, "etcd fast-path request failed");
                None
            }
            Err(_) => None,
        }
    }

    /// Sends a request that must not apply twice (a txn of the caller's own
    /// operations). It is re-sent only while the failure proves it never
    /// left this process (no connection could be made); any failure after
    /// it may have reached a member is [`Error::OutcomeUnknown`], because
    /// the member may have applied it before the answer was lost.
    pub(crate) async fn call_once<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let unknown = |reason: String| Error::OutcomeUnknown {
            operation: format!("etcd {what} on [{}]", self.endpoints),
            reason,
        };
        loop {
            match self.attempt(deadline, &mut op).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if never_sent(&e) && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(what, error = ?e, "no connection for a write; retrying");
                    tokio::time::sleep(jittered(Duration::from_millis(50), 0.5)).await;
                }
                Ok(Err(e)) if is_transient(&e) => {
                    return Err(unknown(format!("the connection failed after sending: {e}")))
                }
                Ok(Err(e)) => return Err(map_err(&self.endpoints, self.timeout, what, e)),
                Err(_) => return Err(unknown(format!("no answer within {:?}", self.timeout))),
            }
        }
    }
}

/// The request failed before any connection carried it.
fn never_sent(e: &etcd_client::Error) -> bool {
    let text = format!("{e:?}").to_ascii_lowercase();
    [
        "connection refused",
        "tcp connect error",
        "dns error",
        "error trying to connect",
    ]
    .iter()
    .any(|w| text.contains(w))
}

fn timeout(endpoints: &str, after: Duration, what: &str) -> Error {
    Error::Timeout {
        operation: format!("etcd {what} on [{endpoints}]"),
        after,
    }
}

/// Failures where another attempt (maybe on another member) can succeed.
fn is_transient(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::GRpcStatus(s) => match s.code() {
            Code::Unavailable | Code::Aborted => true,
            // The client cancels a request whose connection closed under it
            // (a member killed or restarted); another member can serve it.
            Code::Cancelled => {
                s.message().contains("operation was canceled") || s.message().contains("connection")
            }
            Code::Unknown => s.message().contains("transport") || s.message().contains("leader"),
            _ => s.message().contains("leader changed") || s.message().contains("no leader"),
        },
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

#[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
async fn with_tls(opts: ConnectOptions, files: &fencing_core::TlsFiles) -> Result<ConnectOptions> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    let read = |p: std::path::PathBuf| async move {
        tokio::fs::read(&p)
            .await
            .map_err(|e| Error::Config(format!("reading TLS file {}: {e}", p.display())))
    };
    let mut tls = TlsOptions::new();
    if let Some(ca) = &files.ca {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca.clone()).await?));
    }
    if let (Some(cert), Some(key)) = (&files.cert, &files.key) {
        tls = tls.identity(Identity::from_pem(
            read(cert.clone()).await?,
            read(key.clone()).await?,
        ));
    }
    if let Some(domain) = &files.domain {
        tls = tls.domain_name(domain.clone());
    }
    Ok(opts.with_tls(tls))
}

#[cfg(not(any(feature = "aws-lc-rs", feature = "ring")))]
async fn with_tls(_: ConnectOptions, _: &fencing_core::TlsFiles) -> Result<ConnectOptions> {
    Err(Error::Config(
        "etcds:// needs TLS, and fencing-etcd was built without a crypto provider: \
         enable its `aws-lc-rs` or `ring` feature"
            .into(),
    ))
}

/// etcd_client's error has no `source()`: start from what it wraps.
fn connect_problem(e: &etcd_client::Error) -> Option<String> {
    match e {
        etcd_client::Error::GRpcStatus(status) => fencing_core::__private::connect_failure(status),
        etcd_client::Error::TransportError(t) => fencing_core::__private::connect_failure(t),
        etcd_client::Error::IoError(io) => fencing_core::__private::connect_failure(io),
        _ => None,
    }
}

fn map_err(endpoints: &str, limit: Duration, what: &str, e: etcd_client::Error) -> Error {
    use tonic::Code;
    tracing::debug!(what, endpoints, error = ?e, "etcd request failed");
    if let Some(reason) = connect_problem(&e) {
        return Error::unreachable("etcd", endpoints, reason);
    }
    if let etcd_client::Error::GRpcStatus(status) = &e {
        let context = format!("etcd {what} on [{endpoints}]: {}", status.message());
        match status.code() {
            // tonic's own per-request timeout, or the server's deadline.
            Code::DeadlineExceeded => return timeout(endpoints, limit, what),
            Code::Cancelled if status.message().contains("Timeout") => {
                return timeout(endpoints, limit, what)
            }
            Code::Unauthenticated | Code::PermissionDenied => {
                return Error::PermissionDenied(context)
            }
            Code::InvalidArgument if status.message().contains("authentication failed") => {
                return Error::PermissionDenied(context)
            }
            _ => {}
        }
    }
    let context = format!("etcd {what} on [{endpoints}]");
    match e {
        // tonic's Display of a status is a debug dump; its message is the
        // server's own words (the full error is in the debug log above).
        etcd_client::Error::GRpcStatus(status) => Error::backend(
            context,
            format!("{}: {}", status.code().description(), status.message()),
        ),
        other => Error::backend(context, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_cut_off_with_its_connection_is_retried_but_refusals_are_not() {
        let status = |s: tonic::Status| etcd_client::Error::GRpcStatus(s);
        assert!(is_transient(&status(tonic::Status::cancelled(
            "operation was canceled"
        ))));
        assert!(is_transient(&status(tonic::Status::unavailable(
            "member down"
        ))));
        assert!(is_transient(&status(tonic::Status::unknown(
            "etcdserver: leader changed"
        ))));
        assert!(!is_transient(&status(tonic::Status::permission_denied(
            "etcdserver: permission denied"
        ))));
        assert!(!is_transient(&status(tonic::Status::invalid_argument(
            "bad key"
        ))));
    }

    #[test]
    fn only_a_failed_connect_proves_a_write_was_never_sent() {
        let status = |s: tonic::Status| etcd_client::Error::GRpcStatus(s);
        assert!(never_sent(&status(tonic::Status::unavailable(
            "error trying to connect: tcp connect error: Connection refused (os error 111)"
        ))));
        assert!(!never_sent(&status(tonic::Status::unavailable(
            "connection reset"
        ))));
        assert!(!never_sent(&status(tonic::Status::unknown(
            "etcdserver: leader changed"
        ))));
    }
}
