//! A real N-member etcd cluster on loopback, for tests that need the real
//! thing: leader elections, killed and restarted members, paused members,
//! TLS with client certificates.
//!
//! The binaries come from `scripts/install/etcd.sh` (run by
//! `scripts/test.sh`): etcd 3.4 from the Debian package at `/usr/bin/etcd`
//! and etcd 3.6 built into `${FENCING_CACHE:-$HOME/.cache/fencing}/bin`. A
//! missing binary is an error that says so, never a silently skipped test.
//!
//! Every member listens on free loopback ports, keeps its data directory and
//! log file in one temporary directory, and is killed and reaped when the
//! [`EtcdCluster`] is dropped, also when a test panics. Every network call
//! the harness makes has a timeout, and every wait is bounded.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use rustix::process::Signal;
use tempfile::TempDir;

use crate::cache::{cache_dir, etcd_release};
use crate::member::{MemberCluster, MemberProcess};
use crate::pki::TlsFiles;

mod error;
mod members;
mod options;
mod tls;
mod version;

pub use error::HarnessError;
pub use options::ClusterOptions;
pub use version::EtcdVersion;

/// How long one harness request (status, get, put) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long connecting to one member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between two rounds of a polling wait.
const POLL: Duration = Duration::from_millis(100);
/// How long [`EtcdCluster::leader`] waits for an elected leader.
const LEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// How many times a start is tried again with fresh ports when a member
/// finds its port taken (the ports are free when picked, but another
/// process may bind them before etcd does).
const START_ATTEMPTS: usize = 3;

/// One member: its fixed addresses and files, and its process while it runs.
struct Member {
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    process: MemberProcess,
}

/// A running etcd cluster on loopback. Dropping it kills and reaps every
/// member (stopped ones are continued first) and deletes its files.
///
/// Members also get SIGKILL when the thread that started them exits (so a
/// test process killed outright leaves none behind): start and restart
/// members from a thread that lives as long as the cluster, e.g. the test's
/// own thread or a tokio runtime worker, not a short-lived helper thread.
pub struct EtcdCluster {
    members: Vec<Member>,
    opts: ClusterOptions,
    binary: PathBuf,
    token: String,
    initial_cluster: String,
    /// Raft member ids, learned from each member's status answers.
    member_ids: Mutex<Vec<Option<u64>>>,
    /// Declared last: removed after the members are dead.
    dir: TempDir,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("version", &self.opts.version)
            .field("endpoints", &self.endpoints())
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl EtcdCluster {
    /// Starts `members` members of `version` with default options and waits
    /// until every member answers and a leader exists.
    pub async fn start(version: EtcdVersion, members: usize) -> Result<Self, HarnessError> {
        Self::start_with(ClusterOptions::new(version, members)).await
    }

    /// Starts a cluster as `opts` says and waits (at most
    /// `opts.startup_timeout`) until every member answers a linearizable
    /// read and agrees on a leader. Tries fresh ports again when a member
    /// finds its port taken.
    pub async fn start_with(opts: ClusterOptions) -> Result<Self, HarnessError> {
        if opts.members == 0 {
            return Err(HarnessError::Usage(
                "a cluster needs at least one member".into(),
            ));
        }
        let binary = opts.version.binary()?;
        let mut attempt = 1;
        loop {
            match Self::try_start(&opts, &binary).await {
                Err(e) if e.is_port_clash() && attempt < START_ATTEMPTS => attempt += 1,
                result => return result,
            }
        }
    }

    async fn try_start(opts: &ClusterOptions, binary: &Path) -> Result<Self, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("fencing-etcd-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating the cluster directory", e))?;
        let ports = free_ports(2 * opts.members)?;
        let members: Vec<Member> = (0..opts.members)
            .map(|i| {
                let name = format!("m{i}");
                Member {
                    data_dir: dir.path().join(format!("{name}.etcd")),
                    process: MemberProcess::new(&name, dir.path().join(format!("{name}.log"))),
                    client_port: ports[2 * i],
                    peer_port: ports[2 * i + 1],
                }
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.process.name(), m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            member_ids: Mutex::new(vec![None; members.len()]),
            members,
            opts: opts.clone(),
            binary: binary.to_path_buf(),
            token: unique_token(),
            initial_cluster,
            dir,
        };
        for i in 0..cluster.members.len() {
            cluster.start_member(i)?;
        }
        cluster.wait_healthy().await?;
        Ok(cluster)
    }

    /// The command line of member `i`.
    fn command(&self, i: usize) -> Command {
        let m = &self.members[i];
        let client_url = format!("{}://127.0.0.1:{}", self.scheme(), m.client_port);
        let peer_url = format!("http://127.0.0.1:{}", m.peer_port);
        let mut cmd = Command::new(&self.binary);
        // The environment must not configure these members behind our back.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD") {
                cmd.env_remove(key);
            }
        }
        cmd.arg("--name")
            .arg(m.process.name())
            .arg("--data-dir")
            .arg(&m.data_dir)
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--heartbeat-interval")
            .arg(self.opts.heartbeat.as_millis().to_string())
            .arg("--election-timeout")
            .arg(self.opts.election_timeout.as_millis().to_string());
        if self.opts.version == EtcdVersion::V3_4 {
            // 3.4 defaults to the deprecated capnslog logger.
            cmd.args(["--logger", "zap", "--log-outputs", "stderr"]);
        }
        if let Some(tls) = &self.opts.tls {
            cmd.arg("--cert-file")
                .arg(&tls.server_cert)
                .arg("--key-file")
                .arg(&tls.server_key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca_cert);
            if self.opts.client_cert_auth {
                cmd.arg("--client-cert-auth");
            }
        }
        cmd.args(&self.opts.extra_args);
        // A member must not outlive a test process that is killed outright
        // (Drop never runs then). The signal follows the spawning thread,
        // which in a tokio test is the test's thread or a runtime worker:
        // both live as long as the cluster.
        crate::process::die_with_parent(&mut cmd, Signal::KILL);
        cmd
    }

    fn scheme(&self) -> &'static str {
        if self.opts.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The release the cluster runs.
    pub fn version(&self) -> EtcdVersion {
        self.opts.version
    }

    /// Client addresses `127.0.0.1:PORT` of all members, in member order,
    /// without a scheme (etcd-client picks `https` when given TLS options).
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Client address `127.0.0.1:PORT` of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.members[i].client_port)
    }

    /// The sum of a Prometheus gauge or counter (all its label sets) over
    /// every member's `/metrics` page (plain-HTTP clusters only).
    pub async fn metric(&self, name: &str) -> Result<f64, HarnessError> {
        Ok(self.metric_by(name, None).await?.values().sum())
    }

    /// A Prometheus counter summed over every member, per value of `label`
    /// (for example `grpc_method`), or in one entry keyed "" when `label` is
    /// `None`. Series without the label count under "".
    pub async fn metric_by(
        &self,
        name: &str,
        label: Option<&str>,
    ) -> Result<BTreeMap<String, f64>, HarnessError> {
        let mut sums = BTreeMap::new();
        for i in 0..self.members.len() {
            for (key, value) in self.member_metric_by(i, name, label).await? {
                *sums.entry(key).or_insert(0.0) += value;
            }
        }
        Ok(sums)
    }

    /// [`metric_by`](Self::metric_by) of member `i` alone.
    pub async fn member_metric_by(
        &self,
        i: usize,
        name: &str,
        label: Option<&str>,
    ) -> Result<BTreeMap<String, f64>, HarnessError> {
        let page = self.member_metrics_page(i).await?;
        let mut sums = BTreeMap::new();
        for (key, value) in samples(&page, name, label) {
            *sums.entry(key).or_insert(0.0) += value;
        }
        Ok(sums)
    }

    async fn member_metrics_page(&self, i: usize) -> Result<String, HarnessError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let page = async {
            let mut conn = tokio::net::TcpStream::connect(self.endpoint(i)).await?;
            conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await?;
            let mut text = String::new();
            conn.read_to_string(&mut text).await?;
            Ok::<_, std::io::Error>(text)
        };
        tokio::time::timeout(REQUEST_TIMEOUT, page)
            .await
            .map_err(|_| HarnessError::Timeout(format!("member {i} /metrics")))?
            .map_err(|e| HarnessError::io("reading /metrics", e))
    }

    /// Client URLs with their scheme (`http://` or `https://`).
    pub fn client_urls(&self) -> Vec<String> {
        self.endpoints()
            .into_iter()
            .map(|e| format!("{}://{e}", self.scheme()))
            .collect()
    }

    /// How many members the cluster has (running or not).
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The TLS files the cluster serves with, if any.
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.opts.tls.as_ref()
    }

    /// The cluster's temporary directory (data directories and logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Connect options for this cluster: the harness's request and connect
    /// timeouts, and with TLS the CA and the client certificate.
    pub fn connect_options(&self) -> Result<ConnectOptions, HarnessError> {
        let mut options = ConnectOptions::new()
            .with_timeout(REQUEST_TIMEOUT)
            .with_connect_timeout(CONNECT_TIMEOUT);
        if let Some(tls) = &self.opts.tls {
            let tls = tls
                .client_options()
                .map_err(|e| HarnessError::io("reading the client certificate", e))?;
            options = options.with_tls(tls);
        }
        Ok(options)
    }

    /// A client for all members (see [`EtcdCluster::connect_options`]).
    pub async fn client(&self) -> Result<Client, HarnessError> {
        self.client_for(&self.endpoints()).await
    }

    /// A client that talks to member `i` only.
    pub async fn member_client(&self, i: usize) -> Result<Client, HarnessError> {
        self.check_index(i)?;
        self.client_for(&[self.endpoint(i)]).await
    }

    async fn client_for(&self, endpoints: &[String]) -> Result<Client, HarnessError> {
        let options = self.connect_options()?;
        match tokio::time::timeout(REQUEST_TIMEOUT, Client::connect(endpoints, Some(options))).await
        {
            Ok(result) => Ok(result?),
            Err(_) => Err(HarnessError::Timeout(format!(
                "connecting to {endpoints:?} timed out"
            ))),
        }
    }

    /// Member `i`'s own raft id and the leader id it reports (0: none).
    async fn status_of(&self, i: usize) -> Result<(u64, u64), HarnessError> {
        let mut client = self.member_client(i).await?;
        let status = match tokio::time::timeout(REQUEST_TIMEOUT, client.status()).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(HarnessError::Timeout(format!(
                    "status of member {i} timed out"
                )))
            }
        };
        let id = status
            .header()
            .map(|h| h.member_id())
            .ok_or_else(|| HarnessError::Usage(format!("member {i} sent no response header")))?;
        self.member_ids.lock().unwrap()[i] = Some(id);
        Ok((id, status.leader()))
    }

    /// One health round: every live member answers its status with a
    /// leader, and a linearizable (quorum) read through it succeeds.
    async fn health_round(&self) -> Result<(), HarnessError> {
        let live = self.live();
        if live.is_empty() {
            return Err(HarnessError::Usage("no member is running".into()));
        }
        for i in live {
            let (_, leader) = self.status_of(i).await?;
            if leader == 0 {
                return Err(HarnessError::Timeout(format!("member {i} knows no leader")));
            }
            let mut client = self.member_client(i).await?;
            match tokio::time::timeout(REQUEST_TIMEOUT, client.get("fencing-harness/health", None))
                .await
            {
                Ok(result) => {
                    result?;
                }
                Err(_) => {
                    return Err(HarnessError::Timeout(format!(
                        "read through member {i} timed out"
                    )))
                }
            }
        }
        Ok(())
    }

    fn timeout_error(&self, what: &str, timeout: Duration, last: &HarnessError) -> HarnessError {
        let mut msg = format!(
            "{} cluster not done {what} within {timeout:?}; last error: {last}",
            self.opts.version
        );
        for i in 0..self.members.len() {
            msg.push_str(&format!(
                "\n--- member {i} log tail ---\n{}",
                self.log_tail(i)
            ));
        }
        HarnessError::Timeout(msg)
    }

    async fn leader_round(&self) -> Result<usize, HarnessError> {
        let mut own: HashMap<u64, usize> = HashMap::new();
        let mut votes: HashMap<u64, usize> = HashMap::new();
        let mut claims: Vec<(usize, u64)> = Vec::new();
        for i in self.live() {
            if let Ok((id, leader)) = self.status_of(i).await {
                own.insert(id, i);
                claims.push((i, leader));
                if leader != 0 {
                    *votes.entry(leader).or_default() += 1;
                }
            }
        }
        let majority = self.members.len() / 2 + 1;
        for (i, leader) in claims {
            let id = self.member_ids.lock().unwrap()[i];
            if Some(leader) == id && votes.get(&leader).copied().unwrap_or(0) >= majority {
                return Ok(i);
            }
        }
        Err(HarnessError::Timeout(format!(
            "no leader confirmed by a majority yet (reports: {votes:?}, members: {own:?})"
        )))
    }
}

fn free_ports(n: usize) -> Result<Vec<u16>, HarnessError> {
    crate::ports::free_ports(n).map_err(|e| HarnessError::io("finding free loopback ports", e))
}

/// A cluster token no other cluster on this machine uses, so members of
/// different clusters never join each other.
fn unique_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "fencing-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The samples of metric `name` in a Prometheus text page, each keyed by the
/// value of `label` ("" without one).
fn samples<'a>(
    page: &'a str,
    name: &'a str,
    label: Option<&'a str>,
) -> impl Iterator<Item = (String, f64)> + 'a {
    page.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            return None;
        }
        let value = line.rsplit(' ').next()?.parse::<f64>().ok()?;
        let key = label
            .and_then(|l| {
                let labels = rest.strip_prefix('{')?.split('}').next()?;
                labels.split(',').find_map(|pair| {
                    let (k, v) = pair.split_once('=')?;
                    (k == l).then(|| v.trim_matches('"').to_owned())
                })
            })
            .unwrap_or_default();
        Some((key, value))
    })
}

/// Asks the etcd leader at `endpoint` (`ip:port`) to hand leadership to the
/// member named `to` (etcd's MoveLeader, which only the leader accepts).
pub async fn move_leader(endpoint: &str, to: &str) -> Result<(), String> {
    let mut client = Client::connect([endpoint], None)
        .await
        .map_err(|e| e.to_string())?;
    let members = client.member_list().await.map_err(|e| e.to_string())?;
    let id = members
        .members()
        .iter()
        .find(|m| m.name() == to)
        .map(|m| m.id())
        .ok_or_else(|| format!("no member named {to}"))?;
    client.move_leader(id).await.map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::samples;

    const PAGE: &str = "\
# HELP grpc_server_msg_received_total Total number of RPC stream messages received.
grpc_server_msg_received_total{grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 12
grpc_server_msg_received_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 3
grpc_server_msg_received_total_other 99
etcd_debugging_mvcc_watcher_total 4
";

    #[test]
    fn samples_are_keyed_by_the_label_value() {
        let by_method: Vec<_> =
            samples(PAGE, "grpc_server_msg_received_total", Some("grpc_method")).collect();
        assert_eq!(
            by_method,
            vec![("Txn".to_owned(), 12.0), ("Watch".to_owned(), 3.0)]
        );
        let plain: Vec<_> = samples(PAGE, "etcd_debugging_mvcc_watcher_total", None).collect();
        assert_eq!(plain, vec![(String::new(), 4.0)]);
    }
}
