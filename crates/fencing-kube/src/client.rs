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
    // Whole calls are bounded in `Scope::run`; this only makes a dead
    // address fail fast instead of at the OS's connect timeout.
    config.connect_timeout = Some(limit);
    // Every request here is a precondition-guarded write or a read that the
    // loops above repeat on their own schedule; a hidden retry of a write
    // whose first attempt landed would come back as a false 409.
    config.default_retry = false;
    Ok(config)
}

/// Where the calls of one source go: the namespace and server their errors
/// name, and the time limit of each call. Lease and LeaseCandidate calls
/// share it.
#[derive(Clone)]
pub(crate) struct Scope {
    pub(crate) namespace: Arc<str>,
    pub(crate) server: Arc<str>,
    pub(crate) limit: Duration,
}

impl Scope {
    pub(crate) fn new(namespace: &str, server: &str, limit: Duration) -> Self {
        Scope {
            namespace: namespace.into(),
            server: server.into(),
            limit,
        }
    }

    /// A call of `verb` on the `kind` object `name`, as its errors name it.
    pub(crate) fn call<'a>(
        &'a self,
        kind: &'static str,
        verb: &'static str,
        name: &'a str,
    ) -> Call<'a> {
        Call {
            verb,
            kind,
            namespace: &self.namespace,
            name,
            server: &self.server,
        }
    }

    /// One apiserver call, `fut`, under the limit; its error sorted by
    /// [`classify`].
    pub(crate) async fn run<T>(
        &self,
        call: Call<'_>,
        fut: impl Future<Output = kube::Result<T>>,
    ) -> std::result::Result<T, Failure> {
        match tokio::time::timeout(self.limit, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(classify(call, e, self.limit)),
            Err(_) => Err(Failure::Other(timed_out(call, self.limit))),
        }
    }
}

/// Lease calls in one namespace, each bounded by the request timeout.
#[derive(Clone)]
pub(crate) struct Leases {
    client: kube::Client,
    api: Api<Lease>,
    scope: Scope,
}

impl Leases {
    pub(crate) fn new(client: kube::Client, scope: Scope) -> Self {
        Leases {
            api: Api::namespaced(client.clone(), &scope.namespace),
            client,
            scope,
        }
    }

    pub(crate) fn call<'a>(&'a self, verb: &'static str, name: &'a str) -> Call<'a> {
        self.scope.call("Lease", verb, name)
    }

    pub(crate) fn namespace(&self) -> &str {
        &self.scope.namespace
    }

    pub(crate) fn server(&self) -> &str {
        &self.scope.server
    }

    /// The limit of each call.
    pub(crate) fn limit(&self) -> Duration {
        self.scope.limit
    }

    /// A copy whose calls are bounded by `limit` instead.
    pub(crate) fn with_limit(&self, limit: Duration) -> Self {
        let mut copy = self.clone();
        copy.scope.limit = limit;
        copy
    }

    /// The underlying client.
    pub(crate) fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Checks that the apiserver answers and accepts our credentials
    /// (`GET /version`, which every authenticated user may read).
    pub(crate) async fn probe(&self) -> Result<()> {
        let call = self
            .scope
            .call("", "reach the apiserver (GET /version)", "");
        self.scope
            .run(call, self.client.apiserver_version())
            .await
            .map(drop)
            .map_err(|f| f.into_error(call))
    }

    /// The Lease, or `None` when it does not exist.
    pub(crate) async fn get(&self, name: &str) -> Result<Option<Lease>> {
        let call = self.call("get", name);
        match self.scope.run(call, self.api.get(name)).await {
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
            .scope
            .run(call, self.api.create(&PostParams::default(), lease))
            .await
        {
            Err(Failure::NotFound) => Err(Failure::Other(Error::Config(format!(
                "namespace {:?} does not exist on {} (create Lease {name:?} answered 404)",
                self.scope.namespace, self.scope.server
            )))),
            other => other,
        }
    }

    /// Replaces the Lease if its resourceVersion is still the one in
    /// `lease.metadata`; 409 otherwise, 404 if it was deleted.
    pub(crate) async fn replace(&self, lease: &Lease) -> std::result::Result<Lease, Failure> {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let call = self.call("update", name);
        self.scope
            .run(call, self.api.replace(name, &PostParams::default(), lease))
            .await
    }
}
