//! The clusters held-bench runs on and what differs between them: how each
//! starts, its anchor's command line, and what its servers count.

use std::path::Path;
use std::process::Command;

use fencing_bench::BoxError;
use fencing_harness::cache::cached_bin;
use fencing_harness::etcd::cluster::{EtcdCluster, EtcdVersion};
use fencing_harness::zk::ensemble::{ZkEnsemble, ZkVersion};

use super::{RELEASE_IN_FLIGHT, TTL_SECS};

/// Unreported acquires and releases the Curator side makes first: a fresh
/// JVM otherwise runs Curator's paths in the interpreter.
const JAVA_WARMUP: usize = 500;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Etcd,
    Zk,
}

/// A running 3-member cluster of either backend.
pub enum Cluster {
    Etcd(EtcdCluster),
    Zk(ZkEnsemble),
}

impl Cluster {
    /// Checks that the anchor is installed, then starts the cluster.
    pub async fn start(backend: Backend) -> Result<Self, BoxError> {
        let anchor = anchor_program(backend);
        if !anchor.exists() {
            let script = match backend {
                Backend::Etcd => "go-interop.sh",
                Backend::Zk => "curator-interop.sh",
            };
            return Err(
                format!("{} missing: run scripts/install/{script}", anchor.display()).into(),
            );
        }
        Ok(match backend {
            Backend::Etcd => Cluster::Etcd(EtcdCluster::start(EtcdVersion::V3_6, 3).await?),
            Backend::Zk => Cluster::Zk(ZkEnsemble::start(ZkVersion::V3_9, 3).await?),
        })
    }

    pub fn backend(&self) -> Backend {
        match self {
            Cluster::Etcd(_) => Backend::Etcd,
            Cluster::Zk(_) => Backend::Zk,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Cluster::Etcd(_) => format!(
                "etcd 3.6, 3 members, EtcdSource vs Go concurrency.Mutex (one session each), \
                 lease TTL {TTL_SECS} s (renewed every TTL/3)"
            ),
            Cluster::Zk(z) => format!(
                "ZooKeeper {}, 3 servers, ZkSource vs Curator InterProcessMutex (one \
                 CuratorFramework, so one session, each; Curator after {JAVA_WARMUP} unreported \
                 acquires), session timeout {TTL_SECS} s",
                z.version().release()
            ),
        }
    }

    /// The anchor's name in the table and the CSV.
    pub fn anchor_name(&self) -> &'static str {
        match self {
            Cluster::Etcd(_) => "go",
            Cluster::Zk(_) => "java",
        }
    }

    /// The anchor's program and subcommand, as named in its errors.
    pub fn anchor_label(&self) -> &'static str {
        match self {
            Cluster::Etcd(_) => "etcd-mutex held",
            Cluster::Zk(_) => "curator-mutex held",
        }
    }

    /// The anchor's `held` command for `n` locks under `prefix`, `f` in
    /// flight.
    pub fn anchor_command(&self, prefix: &str, n: usize, f: usize) -> Command {
        let (n, f, release) = (n.to_string(), f.to_string(), RELEASE_IN_FLIGHT.to_string());
        let program = anchor_program(self.backend());
        let mut c = match self {
            Cluster::Etcd(_) => {
                let mut c = Command::new(program);
                c.arg("held").args(["--ttl", &TTL_SECS.to_string()]);
                c
            }
            Cluster::Zk(_) => {
                let mut c = Command::new("java");
                c.arg("-jar").arg(program).arg("held");
                c.args(["--session-timeout-ms", &(TTL_SECS * 1000).to_string()])
                    .args(["--warmup", &JAVA_WARMUP.to_string()]);
                c
            }
        };
        let endpoints = match self {
            Cluster::Etcd(_) => "--endpoints",
            Cluster::Zk(_) => "--connect",
        };
        c.args([endpoints, &self.endpoints()])
            .args(["--prefix", prefix, "--count", &n, "--in-flight", &f])
            .args(["--release-in-flight", &release]);
        c
    }

    /// The client endpoints, comma-separated.
    pub fn endpoints(&self) -> String {
        match self {
            Cluster::Etcd(c) => c.endpoints().join(","),
            Cluster::Zk(z) => z.endpoints().join(","),
        }
    }

    /// The directory every member's command line names.
    pub fn dir(&self) -> &Path {
        match self {
            Cluster::Etcd(c) => c.dir(),
            Cluster::Zk(z) => z.dir(),
        }
    }

    pub fn member_count(&self) -> usize {
        match self {
            Cluster::Etcd(c) => c.member_count(),
            Cluster::Zk(z) => z.server_count(),
        }
    }

    /// What the servers keep for held locks: etcd's watch streams and
    /// watchers; ZooKeeper's client connections (other than the probes')
    /// and watches.
    pub async fn watch_counts(&self) -> Result<(f64, f64), BoxError> {
        Ok(match self {
            Cluster::Etcd(c) => (
                c.metric("etcd_debugging_mvcc_watch_stream_total").await?,
                c.metric("etcd_debugging_mvcc_watcher_total").await?,
            ),
            // Each server counts the connection `mntr` came in on.
            Cluster::Zk(z) => (
                z.mntr_sum("zk_num_alive_connections").await? - z.server_count() as f64,
                z.mntr_sum("zk_watch_count").await?,
            ),
        })
    }

    /// The requests that keep a session alive, counted so far: etcd's
    /// LeaseKeepAlive messages and Range requests (while the locks are
    /// idle, only our sources read: the linearizable read that vouches for
    /// each renewal); every packet ZooKeeper received from clients (while
    /// the locks are idle: pings and our session's heartbeats).
    pub async fn keepalives(&self) -> Result<f64, BoxError> {
        Ok(match self {
            Cluster::Etcd(c) => {
                let by = c
                    .metric_by("grpc_server_msg_received_total", Some("grpc_method"))
                    .await?;
                ["LeaseKeepAlive", "Range"]
                    .iter()
                    .map(|m| by.get(*m).copied().unwrap_or(0.0))
                    .sum()
            }
            Cluster::Zk(z) => z.client_packets().await?,
        })
    }
}

fn anchor_program(backend: Backend) -> std::path::PathBuf {
    match backend {
        Backend::Etcd => cached_bin("etcd-mutex"),
        Backend::Zk => cached_bin("curator-mutex.jar"),
    }
}
