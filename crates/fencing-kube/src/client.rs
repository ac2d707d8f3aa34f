//! The kube client from a kubeconfig, and the four Lease calls we make,
//! each under a time limit and with its errors mapped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::{Error, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::config::KubeLeaseConfig;
use crate::error::{classify, timed_out, Call, Failure};

/// Builds the client configuration: the explicit kubeconfig file, else
/// `KUBECONFIG` / `~/.kube/config`, else the in-cluster service account.
pub(crate) async fn client_config(cfg: &KubeLeaseConfig) -> Result<kube::Config> {
    let options = KubeConfigOptions {
        context: cfg.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match &cfg.kubeconfig {
        Some(path) => {
            if !path.is_file() {
                return Err(Error::Config(format!(
                    "kubeconfig file {} does not exist or is not a file",
                    path.display()
                )));
            }
            let file = Kubeconfig::read_from(path).map_err(|e| {
                Error::Config(format!("kubeconfig file {}: {e}", path.display()))
            })?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| Error::Config(format!("kubeconfig file {}: {e}", path.display())))?
        }
        None if cfg.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| Error::Config(format!("kubeconfig (KUBECONFIG or ~/.kube/config): {e}")))?,
        None => kube::Config::infer().await.map_err(|e| {
            Error::Config(format!(
                "no Kubernetes client configuration (kubeconfig= not given, KUBECONFIG / ~/.kube/config unusable, not in a cluster): {e}"
            ))
        })?,
    };
    let limit = cfg.options.request_timeout;
    // Whole calls are bounded in `Leases::run`; this only makes a dead
    // address fail fast instead of at the OS's connect timeout.
    config.connect_timeout = Some(limit);
    // Every request here is a precondition-guarded write or a read that the
    // loops above repeat on their own schedule; a hidden retry of a write
    // whose first attempt landed would come back as a false 409.
    config.default_retry = false;
    Ok(config)
}

/// Lease calls in one namespace, each bounded by the request timeout.
#[derive(Clone)]
pub(crate) struct Leases {
    client: kube::Client,
    api: Api<Lease>,
    namespace: Arc<str>,
    server: Arc<str>,
    limit: Duration,
}

impl Leases {
    pub(crate) fn new(
        client: kube::Client,
        namespace: &str,
        server: &str,
        limit: Duration,
    ) -> Self {
        Leases {
            api: Api::namespaced(client.clone(), namespace),
            client,
            namespace: namespace.into(),
            server: server.into(),
            limit,
        }
    }

    pub(crate) fn call<'a>(&'a self, verb: &'static str, name: &'a str) -> Call<'a> {
        Call {
            verb,
            kind: "Lease",
            namespace: &self.namespace,
            name,
            server: &self.server,
        }
    }

    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// The limit of each call.
    pub(crate) fn limit(&self) -> Duration {
        self.limit
    }

    /// A copy whose calls are bounded by `limit` instead.
    pub(crate) fn with_limit(&self, limit: Duration) -> Self {
        Leases {
            limit,
            ..self.clone()
        }
    }

    async fn run<T>(
        &self,
        call: Call<'_>,
        fut: impl Future<Output = kube::Result<T>>,
    ) -> std::result::Result<T, Failure> {
        bounded(self.limit, call, fut).await
    }

    /// The underlying client.
    pub(crate) fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Checks that the apiserver answers and accepts our credentials
    /// (`GET /version`, which every authenticated user may read).
    pub(crate) async fn probe(&self) -> Result<()> {
        let call = Call {
            verb: "reach the apiserver (GET /version)",
            kind: "",
            namespace: &self.namespace,
            name: "",
            server: &self.server,
        };
        self.run(call, self.client.apiserver_version())
            .await
            .map(drop)
            .map_err(|f| f.into_error(call))
    }

    /// The Lease, or `None` when it does not exist.
    pub(crate) async fn get(&self, name: &str) -> Result<Option<Lease>> {
        let call = self.call("get", name);
        match self.run(call, self.api.get(name)).await {
            Ok(l) => Ok(Some(l)),
            Err(Failure::NotFound) => Ok(None),
            Err(f) => Err(f.into_error(call)),
        }
    }

    /// Creates the Lease; 409 if it exists, 404 if the namespace does not.
    pub(crate) async fn create(&self, lease: &Lease) -> std::result::Result<Lease, Failure> {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let call = self.call("create", name);
        match self
            .run(call, self.api.create(&PostParams::default(), lease))
            .await
        {
            Err(Failure::NotFound) => Err(Failure::Other(Error::Config(format!(
                "namespace {:?} does not exist on {} (create Lease {name:?} answered 404)",
                self.namespace, self.server
            )))),
            other => other,
        }
    }

    /// Replaces the Lease if its resourceVersion is still the one in
    /// `lease.metadata`; 409 otherwise, 404 if it was deleted.
    pub(crate) async fn replace(&self, lease: &Lease) -> std::result::Result<Lease, Failure> {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let call = self.call("update", name);
        self.run(call, self.api.replace(name, &PostParams::default(), lease))
            .await
    }
}

/// One apiserver call under `limit`, its error sorted by [`classify`].
pub(crate) async fn bounded<T>(
    limit: Duration,
    call: Call<'_>,
    fut: impl Future<Output = kube::Result<T>>,
) -> std::result::Result<T, Failure> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(classify(call, e, limit)),
        Err(_) => Err(Failure::Other(timed_out(call, limit))),
    }
}
