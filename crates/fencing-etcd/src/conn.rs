//! One client connection: every call bounded by the request timeout, every
//! error mapped to a `fencing_core::Error` that names the endpoints.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use fencing_core::{Error, Result};

use crate::config::EtcdConfig;

#[derive(Clone)]
pub(crate) struct Conn {
    pub(crate) client: Client,
    endpoints: String,
    pub(crate) timeout: Duration,
}

impl Conn {
    pub(crate) async fn connect(cfg: &EtcdConfig) -> Result<Conn> {
        let mut opts = ConnectOptions::new()
            .with_timeout(cfg.request_timeout)
            .with_connect_timeout(cfg.request_timeout)
            .with_keep_alive(cfg.request_timeout, cfg.request_timeout);
        if let Some((user, password)) = &cfg.auth {
            opts = opts.with_user(user.clone(), password.clone());
        }
        let scheme = if cfg.tls.is_some() { "https" } else { "http" };
        if let Some(files) = &cfg.tls {
            opts = opts.with_tls(tls_options(files).await?);
        }
        let urls: Vec<String> = cfg.endpoints.iter().map(|e| format!("{scheme}://{e}")).collect();
        let endpoints = cfg.endpoints.join(",");
        // With auth, connect already talks to the cluster (to get a token):
        // bound it like any request so a dead cluster is a timeout.
        let connecting = Client::connect(urls, Some(opts));
        let client = bounded(&endpoints, cfg.request_timeout, "connect", connecting).await?;
        Ok(Conn { client, endpoints, timeout: cfg.request_timeout })
    }

    /// A handle to the client (cheap to clone; calls need `&mut`).
    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs one request under the timeout.
    pub(crate) async fn call<T>(
        &self,
        what: &str,
        fut: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        bounded(&self.endpoints, self.timeout, what, fut).await
    }
}

async fn bounded<T>(
    endpoints: &str,
    limit: Duration,
    what: &str,
    fut: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
) -> Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(|e| map_err(endpoints, what, e)),
        Err(_) => Err(Error::Timeout { operation: format!("etcd {what} on [{endpoints}]"), after: limit }),
    }
}

async fn tls_options(files: &crate::config::TlsFiles) -> Result<TlsOptions> {
    let read = |p: std::path::PathBuf| async move {
        tokio::fs::read(&p).await.map_err(|e| Error::Config(format!("reading TLS file {}: {e}", p.display())))
    };
    let mut tls = TlsOptions::new();
    if let Some(ca) = &files.ca {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca.clone()).await?));
    }
    if let (Some(cert), Some(key)) = (&files.cert, &files.key) {
        tls = tls.identity(Identity::from_pem(read(cert.clone()).await?, read(key.clone()).await?));
    }
    if let Some(domain) = &files.domain {
        tls = tls.domain_name(domain.clone());
    }
    Ok(tls)
}

fn map_err(endpoints: &str, what: &str, e: etcd_client::Error) -> Error {
    use tonic::Code;
    if let etcd_client::Error::GRpcStatus(status) = &e {
        let context = format!("etcd {what} on [{endpoints}]: {}", status.message());
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => return Error::PermissionDenied(context),
            Code::InvalidArgument if status.message().contains("authentication failed") => {
                return Error::PermissionDenied(context)
            }
            _ => {}
        }
    }
    Error::backend(format!("etcd {what} on [{endpoints}]"), e)
}
