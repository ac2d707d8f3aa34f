//! A real kube-apiserver on a single-member etcd 3.6, on loopback, for the
//! Kubernetes backend's tests: client certificates for a few users with
//! different RBAC rights, kubeconfig files for them, and fault controls
//! (restart or pause the apiserver, restart its etcd).
//!
//! The binaries come from the install scripts (run by `scripts/test.sh`):
//! `kube-apiserver-v<KUBERNETES_VERSION>` from `scripts/install/kube-apiserver.sh` and
//! `etcd-v<ETCD_VERSION>` from `scripts/install/etcd.sh` (versions in `versions.env`), both in
//! `${FENCING_CACHE:-$HOME/.cache/fencing}/bin`. A missing binary is an
//! error that says which script installs it, never a skipped test.
//!
//! The certificates are made in [`super::pki`], the users' kubeconfigs in
//! [`super::kubeconfig`], and the RBAC rules bound in [`super::rbac`].
//!
//! Dropping a [`KubeCluster`] kills the apiserver first and its etcd second
//! (an apiserver that loses etcd while shutting down hangs), also when a
//! test panics. Every wait is bounded and every request has a timeout.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fencing_harness::kubernetes::cluster::HarnessError> {
//! use fencing_harness::kubernetes::cluster::{KubeCluster, KubeUser};
//!
//! let cluster = KubeCluster::start().await?;
//! let client = cluster.client(KubeUser::LeaseUser).await?;
//! let kubeconfig = cluster.kubeconfig(KubeUser::LeaseUser); // for Go programs
//! # let _ = (client, kubeconfig);
//! # Ok(()) }
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use rustix::process::Signal;
use tempfile::TempDir;

use super::kubeconfig::{client_from, config_from, kubeconfig_path, write_kubeconfigs};
use super::pki::{make_pki, Pki};
use super::rbac::{lease_reader_rbac, lease_user_rbac, RBAC_COORDINATED_MANIFEST, RBAC_MANIFEST};
use crate::cache::{cached_bin, kubernetes_release};
use crate::etcd::cluster::{EtcdCluster, EtcdVersion};
use crate::member::MemberCluster;
use crate::Reaped;

mod error;
mod users;

pub use error::HarnessError;
pub use users::KubeUser;

/// The namespace the harness creates and binds the RBAC rules in.
pub const TEST_NAMESPACE: &str = "fencing-test";
/// A second namespace, where only `admin` has rights.
pub const OTHER_NAMESPACE: &str = "fencing-other";

/// How long the apiserver may take to answer `/readyz` with `ok`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a graceful stop (SIGTERM) may take before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long new RBAC bindings may take to become effective.
const RBAC_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one harness request may take.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between two rounds of a polling wait.
const POLL: Duration = Duration::from_millis(100);
/// How many times a start is tried again with a fresh port when the
/// apiserver finds its port taken.
const START_ATTEMPTS: usize = 3;

/// The installed kube-apiserver binary, or [`HarnessError::MissingBinary`].
pub fn apiserver_binary() -> Result<PathBuf, HarnessError> {
    cached_binary(
        &format!("kube-apiserver-v{}", kubernetes_release()),
        "scripts/install/kube-apiserver.sh",
    )
}

/// The client-go leader-election program
/// (`integration/anchors/go/client-go-elector`) as built by
/// `scripts/install/client-go-interop.sh`, or
/// [`HarnessError::MissingBinary`] naming that script.
pub fn client_go_elector_binary() -> Result<PathBuf, HarnessError> {
    cached_binary("client-go-elector", "scripts/install/client-go-interop.sh")
}

fn cached_binary(name: &str, install: &'static str) -> Result<PathBuf, HarnessError> {
    let path = cached_bin(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::MissingBinary { path, install })
    }
}

/// A kube-apiserver and its etcd on loopback. See the module docs.
///
/// Both processes also get SIGKILL when the thread that started them exits
/// (so a test process killed outright leaves none behind): start and
/// restart them from a thread that lives as long as the cluster, such as
/// the test's own thread or a tokio runtime worker, not a blocking-pool
/// thread.
pub struct KubeCluster {
    /// `None` while stopped by [`KubeCluster::stop_apiserver`].
    apiserver: Option<Reaped>,
    etcd: EtcdCluster,
    binary: PathBuf,
    port: u16,
    pki: Pki,
    log: PathBuf,
    admin: kube::Client,
    /// Declared last: removed after the processes are dead.
    dir: TempDir,
}

impl fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeCluster")
            .field("server", &self.server_url())
            .field("etcd", &self.etcd.client_urls())
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl KubeCluster {
    /// Starts etcd 3.6 and kube-apiserver on free loopback ports, waits
    /// until `/readyz` says `ok`, creates [`TEST_NAMESPACE`] and
    /// [`OTHER_NAMESPACE`], applies the RBAC rules and waits until they are
    /// in effect. Tries a fresh port when the apiserver finds its port taken.
    pub async fn start() -> Result<Self, HarnessError> {
        let binary = apiserver_binary()?;
        let etcd = EtcdCluster::start(EtcdVersion::V3_6, 1).await?;
        let dir = tempfile::Builder::new()
            .prefix("fencing-kube-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating the cluster directory", e))?;
        let pki = make_pki(&dir.path().join("pki"))?;
        let port = free_port()?;
        write_kubeconfigs(dir.path(), port, &pki)?;
        let admin = client_from(&kubeconfig_path(dir.path(), KubeUser::Admin)).await?;
        let mut cluster = KubeCluster {
            apiserver: None,
            etcd,
            binary,
            port,
            pki,
            log: dir.path().join("apiserver.log"),
            admin,
            dir,
        };
        let mut attempt = 1;
        loop {
            match cluster.start_apiserver().await {
                Ok(()) => break,
                Err(e) if e.is_port_clash() && attempt < START_ATTEMPTS => {
                    attempt += 1;
                    cluster.move_to(free_port()?).await?;
                }
                Err(e) => return Err(e),
            }
        }
        cluster.apply_rbac().await?;
        Ok(cluster)
    }

    /// Serves on `port` from now on: rewrites the kubeconfigs and the admin
    /// client (only before anyone else has seen them, during start).
    async fn move_to(&mut self, port: u16) -> Result<(), HarnessError> {
        self.port = port;
        write_kubeconfigs(self.dir.path(), port, &self.pki)?;
        self.admin = client_from(&self.kubeconfig(KubeUser::Admin)).await?;
        Ok(())
    }

    /// `https://127.0.0.1:PORT`; the port stays the same across restarts.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The namespace with the RBAC rules: [`TEST_NAMESPACE`].
    pub fn namespace(&self) -> &'static str {
        TEST_NAMESPACE
    }

    /// The kubeconfig file of `user` (file paths to its certificate, key
    /// and the CA; default namespace [`TEST_NAMESPACE`]), for kube clients
    /// and Go programs alike.
    pub fn kubeconfig(&self, user: KubeUser) -> PathBuf {
        kubeconfig_path(self.dir.path(), user)
    }

    /// The CA certificate (PEM) that signed the serving certificate.
    pub fn ca_cert(&self) -> &Path {
        &self.pki.ca
    }

    /// A client [`kube::Config`] for `user`, read from its kubeconfig, with
    /// a 5 s connect timeout; adjust it before building a client.
    pub async fn client_config(&self, user: KubeUser) -> Result<kube::Config, HarnessError> {
        config_from(&self.kubeconfig(user)).await
    }

    /// A client acting as `user` (see [`KubeCluster::client_config`]).
    pub async fn client(&self, user: KubeUser) -> Result<kube::Client, HarnessError> {
        client_from(&self.kubeconfig(user)).await
    }

    /// A client acting as `admin` (`system:masters`).
    pub fn admin_client(&self) -> kube::Client {
        self.admin.clone()
    }

    /// The etcd under the apiserver (one member).
    pub fn etcd(&self) -> &EtcdCluster {
        &self.etcd
    }

    /// The apiserver's process id while it runs.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver.as_ref().map(Reaped::id)
    }

    /// The etcd member's process id while it runs.
    pub fn etcd_pid(&self) -> Option<u32> {
        self.etcd.pid(0)
    }

    /// The cluster's temporary directory (certificates, kubeconfigs, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts the apiserver (same port, certificates and etcd as before)
    /// and waits until `/readyz` says `ok`. Fails if it already runs.
    pub async fn start_apiserver(&mut self) -> Result<(), HarnessError> {
        if self.apiserver.is_some() {
            return Err(HarnessError::Usage(
                "kube-apiserver is already running".into(),
            ));
        }
        let mut cmd = self.apiserver_command();
        let process = Reaped::spawn_logged(&mut cmd, &self.log)
            .map_err(|e| HarnessError::io(format!("starting {}", self.binary.display()), e))?;
        self.apiserver = Some(process);
        self.wait_ready().await
    }

    /// Stops the apiserver gracefully (SIGTERM; SIGKILL if it has not
    /// exited within 30 s) and reaps it. Does nothing if it is not running.
    pub async fn stop_apiserver(&mut self) {
        let Some(mut process) = self.apiserver.take() else {
            return;
        };
        process.signal(Signal::CONT);
        process.signal(Signal::TERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while process.try_wait().is_none() && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
        if process.try_wait().is_none() {
            eprintln!("kube-apiserver ignored SIGTERM for {STOP_TIMEOUT:?}; killing it");
        }
        drop(process); // SIGKILL if still alive, and reap
    }

    /// Stops the apiserver gracefully and starts it again on the same port
    /// with the same certificates; returns once `/readyz` says `ok` and
    /// lease-user's rights are in effect again.
    pub async fn restart_apiserver(&mut self) -> Result<(), HarnessError> {
        self.stop_apiserver().await;
        self.start_apiserver().await?;
        // /readyz can say ok before the authorizer's caches hold the Roles
        // again; until then every request of lease-user gets 403.
        self.wait_can_get_leases(KubeUser::LeaseUser).await
    }

    /// Stops the apiserver with SIGSTOP: its sockets stay open but it
    /// answers nothing (a stalled, not a crashed, server).
    pub fn pause_apiserver(&self) {
        if let Some(p) = &self.apiserver {
            p.signal(Signal::STOP);
        }
    }

    /// Continues the apiserver after [`KubeCluster::pause_apiserver`].
    pub fn resume_apiserver(&self) {
        if let Some(p) = &self.apiserver {
            p.signal(Signal::CONT);
        }
    }

    /// Kills etcd (SIGKILL) under the running apiserver; its data stays.
    /// Requests that need storage fail until [`KubeCluster::start_etcd`].
    pub fn kill_etcd(&mut self) {
        self.etcd.kill(0);
    }

    /// Starts etcd again on its ports and data directory (killing it first
    /// if it runs) and waits until etcd is healthy and, if the apiserver
    /// runs, until `/readyz` says `ok` again.
    pub async fn start_etcd(&mut self) -> Result<(), HarnessError> {
        self.etcd.restart(0).await?;
        if self.apiserver.is_some() {
            self.wait_ready().await?;
        }
        Ok(())
    }

    /// Kills etcd under the running apiserver and starts it again (see
    /// [`KubeCluster::start_etcd`]).
    pub async fn restart_etcd(&mut self) -> Result<(), HarnessError> {
        self.kill_etcd();
        self.start_etcd().await
    }

    /// Waits (at most 60 s) until the apiserver answers `/readyz` with
    /// `ok` to the admin. Fails early, with the log tail, when it exits.
    pub async fn wait_ready(&mut self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.check_alive()?;
            let last = match self.readyz().await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout(format!(
                    "kube-apiserver not ready within {READY_TIMEOUT:?}; last answer: {last}\n\
                     --- apiserver log tail ---\n{}",
                    self.log_tail()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn readyz(&self) -> Result<(), String> {
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(REQUEST_TIMEOUT, self.admin.request_text(request)).await {
            Ok(Ok(body)) if body.trim() == "ok" => Ok(()),
            Ok(Ok(body)) => Err(format!("/readyz said {body:?}")),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("/readyz took over {REQUEST_TIMEOUT:?}")),
        }
    }

    /// Fails with [`HarnessError::ApiserverExited`] when the apiserver
    /// process that should run has exited.
    fn check_alive(&mut self) -> Result<(), HarnessError> {
        let Some(status) = self.apiserver.as_mut().and_then(Reaped::try_wait) else {
            return Ok(());
        };
        self.apiserver = None;
        Err(HarnessError::ApiserverExited {
            status: status.to_string(),
            log: self.log_tail(),
        })
    }

    /// The last 40 lines of the apiserver's log (all its runs).
    pub fn log_tail(&self) -> String {
        crate::member::log_tail(&self.log)
    }

    /// The apiserver's command line: loopback only, RBAC, and the
    /// background work a test server does not need switched off.
    fn apiserver_command(&self) -> Command {
        let pki = &self.pki;
        let etcd = self.etcd.client_urls().join(",");
        let mut cmd = Command::new(&self.binary);
        cmd.arg(format!("--etcd-servers={etcd}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", self.port))
            // With the endpoint reconciler off, 127.0.0.1 may be advertised
            // and the server never touches the host's other addresses.
            .arg("--advertise-address=127.0.0.1")
            .arg("--endpoint-reconciler-type=none")
            .arg(format!(
                "--cert-dir={}",
                self.dir.path().join("cert").display()
            ))
            .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.server_key.display()
            ))
            .arg(format!("--client-ca-file={}", pki.ca.display()))
            .arg("--authorization-mode=RBAC")
            // Coordinated leader election (KEP-4355, beta and off by
            // default in 1.36): without the gate the apiserver drops a
            // Lease's strategy and preferredHolder from every write.
            .arg("--feature-gates=CoordinatedLeaderElection=true")
            .arg("--runtime-config=coordination.k8s.io/v1beta1=true")
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!(
                "--service-account-key-file={}",
                pki.sa_pub.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                pki.sa_key.display()
            ))
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            // Less work on 2 shared cores: no request queueing machinery,
            // no profiling endpoints.
            .arg("--enable-priority-and-fairness=false")
            .arg("--profiling=false");
        // An apiserver must not outlive a test process killed outright
        // (Drop never runs then). The signal follows the spawning thread:
        // the test's thread or a runtime worker, which live as long as the
        // cluster.
        crate::process::die_with_parent(&mut cmd, Signal::KILL);
        cmd
    }

    /// Creates the namespaces, applies `deploy/kubernetes/rbac.yaml` for
    /// `lease-user`, `deploy/kubernetes/rbac-coordinated.yaml` for
    /// `lease-candidate` and a get-only Role for `lease-reader` in
    /// [`TEST_NAMESPACE`], and waits until the bindings are in effect.
    async fn apply_rbac(&self) -> Result<(), HarnessError> {
        let namespaces: Api<Namespace> = Api::all(self.admin.clone());
        for name in [TEST_NAMESPACE, OTHER_NAMESPACE] {
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            bounded(
                &format!("creating namespace {name}"),
                namespaces.create(&PostParams::default(), &ns),
            )
            .await?;
        }
        let (role, binding) =
            lease_user_rbac(RBAC_MANIFEST, TEST_NAMESPACE, KubeUser::LeaseUser.name())?;
        let (candidate_role, candidate_binding) = lease_user_rbac(
            RBAC_COORDINATED_MANIFEST,
            TEST_NAMESPACE,
            KubeUser::LeaseCandidate.name(),
        )?;
        let (reader_role, reader_binding) = lease_reader_rbac();
        let roles: Api<Role> = Api::namespaced(self.admin.clone(), TEST_NAMESPACE);
        let bindings: Api<RoleBinding> = Api::namespaced(self.admin.clone(), TEST_NAMESPACE);
        for role in [role, candidate_role, reader_role] {
            bounded(
                "creating a Role",
                roles.create(&PostParams::default(), &role),
            )
            .await?;
        }
        for binding in [binding, candidate_binding, reader_binding] {
            bounded(
                "creating a RoleBinding",
                bindings.create(&PostParams::default(), &binding),
            )
            .await?;
        }
        for user in [
            KubeUser::LeaseUser,
            KubeUser::LeaseCandidate,
            KubeUser::LeaseReader,
        ] {
            self.wait_can_get_leases(user).await?;
        }
        Ok(())
    }

    /// Waits until `user` may get leases in the test namespace: the RBAC
    /// authorizer learns new bindings from a watch, a moment after they are
    /// written. A missing Lease answers 404 once the user is allowed.
    async fn wait_can_get_leases(&self, user: KubeUser) -> Result<(), HarnessError> {
        use k8s_openapi::api::coordination::v1::Lease;
        let leases: Api<Lease> = Api::namespaced(self.client(user).await?, TEST_NAMESPACE);
        let deadline = Instant::now() + RBAC_TIMEOUT;
        loop {
            let last = match tokio::time::timeout(
                REQUEST_TIMEOUT,
                leases.get_opt("fencing-harness-probe"),
            )
            .await
            {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("took over {REQUEST_TIMEOUT:?}"),
            };
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout(format!(
                    "{user} still may not get leases in {TEST_NAMESPACE} after {RBAC_TIMEOUT:?}: {last}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        // The apiserver first: SIGKILL cannot hang, and etcd must outlive it.
        drop(self.apiserver.take());
        self.etcd.kill(0);
    }
}

/// Runs one harness request with [`REQUEST_TIMEOUT`].
async fn bounded<T>(
    what: &str,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, HarnessError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(result) => result.map_err(|e| HarnessError::kube(what, e)),
        Err(_) => Err(HarnessError::Timeout(format!(
            "{what} took over {REQUEST_TIMEOUT:?}"
        ))),
    }
}

fn free_port() -> Result<u16, HarnessError> {
    crate::ports::free_port().map_err(|e| HarnessError::io("finding a free loopback port", e))
}
