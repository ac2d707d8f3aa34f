//! KubeLeaseSource clients on the real kube-apiserver of
//! [`KubeCluster`]: direct, or through a
//! proxy a test can blackhole (the kubeconfig's server rewritten to the
//! proxy); the conformance-suite harness and the cluster faults built on
//! them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fencing_kube::{KubeLeaseConfig, KubeLeaseSource, LeaseOptions};
use fencing_testkit::{Client, Harness};

use crate::etcd::fixture::Partition;
use crate::kubernetes::cluster::{KubeCluster, KubeUser};
use crate::net::proxy::Proxy;

/// Lease duration the kube tests use (whole seconds, as Leases count).
pub const TEST_LEASE: Duration = Duration::from_secs(3);
/// Renew deadline: the holder counts itself lost 90 % of this after the
/// last confirmed renewal was sent.
pub const TEST_RENEW: Duration = Duration::from_secs(2);
/// Retry period: renewals and waiting candidates' polls.
pub const TEST_RETRY: Duration = Duration::from_millis(500);
/// The same timings as flags of the client-go program
/// (integration/anchors/go/client-go-elector), so Go candidates play by our
/// rules.
pub fn client_go_timing_flags() -> Vec<String> {
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    vec![
        "--lease-duration".into(),
        ms(TEST_LEASE),
        "--renew-deadline".into(),
        ms(TEST_RENEW),
        "--retry-period".into(),
        ms(TEST_RETRY),
    ]
}

/// Per-request limit of the test clients.
pub const TEST_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// A running apiserver and the settings of its test clients.
pub struct KubeFixture {
    /// The apiserver and its etcd (killed on drop). In a mutex only to make
    /// the fixture `Sync` (the conformance harness needs it; a
    /// `KubeCluster` holds a child's output receiver, which is not `Sync`);
    /// tests reach it through [`KubeFixture::cluster`] and
    /// [`KubeFixture::cluster_mut`], never across an await while shared.
    cluster: std::sync::Mutex<KubeCluster>,
    server_url: String,
    namespace: &'static str,
    /// The cluster name every client of this fixture shares in its source
    /// identity, whether it goes through a proxy or not.
    pub cluster_name: String,
    /// Rewritten kubeconfigs (server = a proxy).
    dir: tempfile::TempDir,
    written: AtomicUsize,
}

impl KubeFixture {
    /// Starts etcd 3.6 and the kube-apiserver with its users and RBAC.
    pub async fn start() -> KubeFixture {
        if std::env::var_os("FENCING_TEST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter("fencing_kube=debug")
                .with_test_writer()
                .try_init();
        }
        let cluster = KubeCluster::start()
            .await
            .unwrap_or_else(|e| panic!("kube-apiserver did not start: {e}"));
        KubeFixture {
            cluster_name: format!("test-{}", cluster.dir().display()),
            server_url: cluster.server_url(),
            namespace: cluster.namespace(),
            cluster: std::sync::Mutex::new(cluster),
            dir: tempfile::tempdir().expect("temp dir"),
            written: AtomicUsize::new(0),
        }
    }

    /// Runs `f` on the cluster (for its paths and synchronous controls).
    pub fn cluster<T>(&self, f: impl FnOnce(&KubeCluster) -> T) -> T {
        f(&self.cluster.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The cluster, for restarts and other faults.
    pub fn cluster_mut(&mut self) -> &mut KubeCluster {
        self.cluster.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    /// `https://127.0.0.1:PORT` of the apiserver.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The namespace with the RBAC rules.
    pub fn namespace(&self) -> &'static str {
        self.namespace
    }

    /// The kubeconfig file of `user`.
    pub fn kubeconfig(&self, user: KubeUser) -> PathBuf {
        self.cluster(|c| c.kubeconfig(user))
    }

    /// The test timings, with this fixture's cluster name.
    pub fn options(&self) -> LeaseOptions {
        LeaseOptions::default()
            .lease_duration(TEST_LEASE)
            .renew_deadline(TEST_RENEW)
            .retry_period(TEST_RETRY)
            .request_timeout(TEST_REQUEST_TIMEOUT)
            .cluster(self.cluster_name.clone())
    }

    /// Settings for `user` in the test namespace, reading `kubeconfig`.
    pub fn config_with(&self, kubeconfig: PathBuf) -> KubeLeaseConfig {
        KubeLeaseConfig::new(self.namespace)
            .expect("test namespace")
            .kubeconfig(kubeconfig)
            .options(self.options())
    }

    /// Settings for `user` straight to the apiserver.
    pub fn config(&self, user: KubeUser) -> KubeLeaseConfig {
        self.config_with(self.kubeconfig(user))
    }

    /// The `kube://` URL of `user`'s client with the test timings (for
    /// other processes: the holder binary).
    pub fn url(&self, user: KubeUser) -> String {
        format!(
            "kube://{}?kubeconfig={}&ttl={}&renew_deadline={}&retry_period={}&request_timeout={}&cluster={}",
            self.namespace,
            self.kubeconfig(user).display(),
            TEST_LEASE.as_secs_f64(),
            TEST_RENEW.as_secs_f64(),
            TEST_RETRY.as_secs_f64(),
            TEST_REQUEST_TIMEOUT.as_secs_f64(),
            self.cluster_name,
        )
    }

    /// A `client-go-elector` (`binary`) command as `user` on the Lease
    /// `lease` with holder identity `id`; the caller adds the timings
    /// ([`client_go_timing_flags`] or its own) and the rounds.
    pub fn client_go_elector(
        &self,
        binary: &Path,
        user: KubeUser,
        lease: &str,
        id: &str,
    ) -> std::process::Command {
        let mut cmd = std::process::Command::new(binary);
        cmd.arg("--kubeconfig").arg(self.kubeconfig(user)).args([
            "--namespace",
            self.namespace,
            "--name",
            lease,
            "--identity",
            id,
        ]);
        cmd
    }

    /// The `kube://` URL of `user`'s client with a lease of `ttl` (whole
    /// seconds); the renew deadline and retry period follow from it with
    /// client-go's proportions ([`fencing::LeaderTimings::scaled_to`]).
    pub fn url_with_ttl(&self, user: KubeUser, ttl: Duration) -> String {
        format!(
            "kube://{}?kubeconfig={}&ttl={}&request_timeout={}&cluster={}",
            self.namespace,
            self.kubeconfig(user).display(),
            ttl.as_secs(),
            TEST_REQUEST_TIMEOUT.as_secs_f64(),
            self.cluster_name,
        )
    }

    /// A client of `user` connected straight to the apiserver.
    pub async fn source_as(&self, user: KubeUser) -> KubeLeaseSource {
        KubeLeaseSource::connect(self.config(user))
            .await
            .unwrap_or_else(|e| panic!("connect as {user}: {e}"))
    }

    /// A `lease-user` client (the RBAC of `deploy/kubernetes/rbac.yaml`).
    pub async fn source(&self) -> KubeLeaseSource {
        self.source_as(KubeUser::LeaseUser).await
    }

    /// A copy of `user`'s kubeconfig whose server is `endpoint` (a proxy on
    /// loopback; the serving certificate names 127.0.0.1, so TLS checks pass).
    pub fn kubeconfig_via(&self, user: KubeUser, endpoint: &str) -> PathBuf {
        let original = self.kubeconfig(user);
        let text = std::fs::read_to_string(&original)
            .unwrap_or_else(|e| panic!("read {}: {e}", original.display()));
        let server = &self.server_url;
        assert!(
            text.contains(server.as_str()),
            "kubeconfig {} does not name {server}",
            original.display()
        );
        let text = text.replace(server.as_str(), &format!("https://{endpoint}"));
        let n = self.written.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.path().join(format!("{user}-{n}.kubeconfig"));
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// The apiserver's `host:port`.
    fn server_address(&self) -> String {
        self.server_url.trim_start_matches("https://").to_owned()
    }

    /// A proxy in front of the apiserver, for a test to cut, blackhole or
    /// drop replies; [`KubeFixture::kubeconfig_via`] points a client at it.
    pub async fn proxy(&self) -> Proxy {
        let target = self.server_address().parse().expect("apiserver address");
        Proxy::start(target)
            .await
            .expect("proxy in front of the apiserver")
    }

    /// A `lease-user` client whose connections go through a proxy the test
    /// can blackhole.
    pub async fn partitionable_source(&self) -> (KubeLeaseSource, Partition) {
        let target = self.server_address();
        let (partition, endpoints) = Partition::around(vec![target]).await;
        let kubeconfig = self.kubeconfig_via(KubeUser::LeaseUser, &endpoints[0]);
        let source = KubeLeaseSource::connect(self.config_with(kubeconfig))
            .await
            .expect("connect via proxy");
        (source, partition)
    }
}

#[async_trait]
impl Harness for KubeFixture {
    async fn client(&self) -> Client {
        Client::of(self.partitionable_source().await)
    }

    fn ttl(&self) -> Duration {
        TEST_LEASE
    }
}
