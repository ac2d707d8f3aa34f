//! A real ZooKeeper ensemble (or a single standalone server) on loopback,
//! for tests that need the real thing: leader elections, killed and
//! restarted servers, paused servers, partitioned clients.
//!
//! The jars come from `scripts/install/zookeeper.sh` (run by
//! `scripts/test.sh`): ZooKeeper 3.8.0 from the Debian package
//! `libzookeeper-java` in `/usr/share/java`, ZooKeeper 3.9.5 from Maven
//! Central in `${FENCING_CACHE:-$HOME/.cache/fencing}/zookeeper-3.9.5/lib`.
//! A missing jar or a missing `java` is an error that says to run
//! `scripts/test.sh`, never a silently skipped test.
//!
//! Every server is a JVM running `QuorumPeerMain` on free loopback ports
//! (client, quorum, election), with its `zoo.cfg`, `myid`, data directory
//! and log file in one temporary directory; it is killed and reaped when the
//! [`ZkEnsemble`] is dropped, also when a test panics. The harness asks
//! the servers with four-letter words over plain TCP
//! ([`four_letter_word`]: no client library speaks them) and proves that a
//! server reaches the quorum by opening a session through it alone with
//! zookeeper-client ([`session_roundtrip`]). Every call has a timeout and every wait is
//! bounded.
//!
//! [`ZkEnsemble::start_with`] adds client security ([`ZkOptions`]): a TLS
//! client port (`secureClientPort`, served by Netty, with PEM key and trust
//! stores and optionally `ssl.clientAuth=need`) and SASL DIGEST-MD5 users
//! from a JAAS file, optionally required of every client. The plaintext
//! client port stays open for the harness's own health checks; the quorum
//! stays plaintext.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cache::{cache_dir, zookeeper_debian_release, zookeeper_release};
use crate::member::{MemberCluster, MemberProcess};
use crate::pki::TlsFiles;

mod error;
mod files;
pub mod jvm;
mod members;
mod options;
mod probe;
mod version;

pub use error::ZkHarnessError;
pub(crate) use files::find_java;
use files::{free_ports, jaas_config, write_file};
pub use options::ZkOptions;
pub use probe::{four_letter_word, session_roundtrip};
pub use version::{ZkMode, ZkVersion};

/// Where Debian installs Java libraries.
const DEBIAN_JAVA_DIR: &str = "/usr/share/java";
/// The jars a ZooKeeper 3.8.0 server loads, all from Debian packages; the
/// same list as `ZK38_JARS` in `scripts/install/zookeeper.sh`.
const ZK38_JARS: [&str; 16] = [
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "metrics-core.jar",
    "snappy-java.jar",
    "commons-cli.jar",
    "commons-io.jar",
    "netty-buffer.jar",
    "netty-codec.jar",
    "netty-common.jar",
    "netty-handler.jar",
    "netty-resolver.jar",
    "netty-transport.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
];
/// The file the installer writes last into the 3.9 `lib` directory: the
/// names of all its jars, one a line.
const STAMP: &str = ".complete";

/// ZooKeeper's tick: the unit of heartbeats, `initLimit` and `syncLimit`.
/// Short, so a dead leader is noticed and replaced within about a second.
const TICK_MS: u64 = 200;
/// How many ticks a new leader waits for a quorum of followers to connect
/// and sync (`initLimit`; 6 s with the 200 ms ticks of every cluster here).
/// Short, because a leader round that fails waits all of it before the next
/// election (10 s rounds made most of a 26.7 s stretch without grants in a
/// campaign soak); above the longest sync any campaign soak saw (4.7 s).
pub(crate) const INIT_LIMIT: u64 = 30;
/// How long one four-letter-word exchange (connect, send, read the whole
/// answer) may take.
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between two rounds of a polling wait.
const POLL: Duration = Duration::from_millis(100);
/// How long a start or restart may take until the ensemble is healthy
/// (JVM start-up on two busy cores is slow).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(45);
/// How long [`ZkEnsemble::leader`] waits for an elected leader.
const LEADER_TIMEOUT: Duration = Duration::from_secs(20);
/// How many times a start is tried again with fresh ports when a server
/// finds its port taken (the ports are free when picked, but another
/// process may bind them before the JVM does).
const START_ATTEMPTS: usize = 3;
/// The most servers an ensemble may have (each is a JVM).
const MAX_SERVERS: usize = 7;

/// The server connection factory that can serve TLS.
const NETTY_FACTORY: &str = "org.apache.zookeeper.server.NettyServerCnxnFactory";
/// The session timeout the health check asks for (within the servers'
/// 20-tick maximum).
const HEALTH_SESSION_TIMEOUT: Duration = Duration::from_secs(4);

/// One server of an ensemble.
struct Server {
    client_port: u16,
    /// The TLS client port (`secureClientPort`); unused without TLS.
    secure_port: u16,
    quorum_port: u16,
    election_port: u16,
    /// Holds `zoo.cfg`, `data/myid` and the snapshots and logs.
    config: PathBuf,
    process: MemberProcess,
}

/// A running ZooKeeper ensemble on loopback. Dropping it kills and reaps
/// every server (stopped ones are continued first) and deletes its files.
///
/// Servers also get SIGKILL when the thread that started them exits (so a
/// test process killed outright leaves none behind): start and restart
/// servers from a thread that lives as long as the ensemble, e.g. the
/// test's own thread or a tokio runtime worker, not a short-lived helper
/// thread.
pub struct ZkEnsemble {
    version: ZkVersion,
    java: PathBuf,
    classpath: String,
    options: ZkOptions,
    /// The JAAS file with the SASL users, if there are any.
    jaas: Option<PathBuf>,
    /// The PEM file with the servers' private key and certificate.
    key_store: Option<PathBuf>,
    servers: Vec<Server>,
    /// `mntr` exchanges answered so far, over all servers: each is one
    /// packet received on its server (see [`ZkEnsemble::client_packets`]).
    mntr_exchanges: AtomicUsize,
    /// Declared last: removed after the servers are dead.
    dir: TempDir,
}

impl fmt::Debug for ZkEnsemble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkEnsemble")
            .field("version", &self.version)
            .field("endpoints", &self.endpoints())
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl ZkEnsemble {
    /// Starts `servers` servers of `version` (1: a standalone server; 3 or
    /// more: an ensemble) and waits (at most 45 s) until every server
    /// serves, as a follower of exactly one leader or standalone. Tries
    /// fresh ports again when a server finds its port taken.
    pub async fn start(version: ZkVersion, servers: usize) -> Result<Self, ZkHarnessError> {
        Self::start_with(ZkOptions::new(version, servers)).await
    }

    /// Starts an ensemble as `options` say (TLS, SASL; see [`ZkOptions`])
    /// and waits, as [`ZkEnsemble::start`] does, until it is healthy.
    pub async fn start_with(options: ZkOptions) -> Result<Self, ZkHarnessError> {
        options.check()?;
        let version = options.version;
        let classpath = version.classpath()?;
        let java = find_java().ok_or(ZkHarnessError::MissingInstall {
            version,
            path: PathBuf::from("java (on PATH or in $JAVA_HOME/bin)"),
        })?;
        let mut attempt = 1;
        loop {
            match Self::try_start(&options, &java, &classpath).await {
                Err(e) if e.is_port_clash() && attempt < START_ATTEMPTS => attempt += 1,
                result => return result,
            }
        }
    }

    async fn try_start(
        options: &ZkOptions,
        java: &Path,
        classpath: &str,
    ) -> Result<Self, ZkHarnessError> {
        let count = options.servers;
        let dir = tempfile::Builder::new()
            .prefix("fencing-zk-")
            .tempdir()
            .map_err(|e| ZkHarnessError::io("creating the ensemble directory", e))?;
        let per_server = if options.tls.is_some() { 4 } else { 3 };
        let ports = free_ports(per_server * count)?;
        let servers: Vec<Server> = (0..count)
            .map(|i| Server {
                client_port: ports[per_server * i],
                quorum_port: ports[per_server * i + 1],
                election_port: ports[per_server * i + 2],
                secure_port: if per_server == 4 {
                    ports[per_server * i + 3]
                } else {
                    0
                },
                config: dir.path().join(format!("zk{i}")).join("zoo.cfg"),
                process: MemberProcess::new(
                    format!("server {i}"),
                    dir.path().join(format!("zk{i}.log")),
                ),
            })
            .collect();
        let jaas = if options.sasl_users.is_empty() {
            None
        } else {
            let path = dir.path().join("jaas.conf");
            write_file(&path, &jaas_config(&options.sasl_users))?;
            Some(path)
        };
        let key_store = match &options.tls {
            None => None,
            Some(files) => {
                let read = |p: &Path| {
                    fs::read_to_string(p)
                        .map_err(|e| ZkHarnessError::io(format!("reading {}", p.display()), e))
                };
                // ZooKeeper's PEM key store is one file: key, then chain.
                let pem = format!(
                    "{}\n{}",
                    read(&files.server_key)?.trim_end(),
                    read(&files.server_cert)?
                );
                let path = dir.path().join("server-keystore.pem");
                write_file(&path, &pem)?;
                Some(path)
            }
        };
        let mut ensemble = ZkEnsemble {
            version: options.version,
            java: java.to_path_buf(),
            classpath: classpath.to_string(),
            options: options.clone(),
            jaas,
            key_store,
            servers,
            mntr_exchanges: AtomicUsize::new(0),
            dir,
        };
        for i in 0..count {
            ensemble.write_config(i)?;
        }
        for i in 0..count {
            ensemble.start_member(i)?;
        }
        ensemble.wait_healthy().await?;
        Ok(ensemble)
    }

    /// Writes server `i`'s `zoo.cfg` and `data/myid` (its id is `i + 1`).
    fn write_config(&self, i: usize) -> Result<(), ZkHarnessError> {
        let s = &self.servers[i];
        let server_dir = s.config.parent().expect("zoo.cfg lies in a directory");
        let data = server_dir.join("data");
        fs::create_dir_all(&data)
            .map_err(|e| ZkHarnessError::io(format!("creating {}", data.display()), e))?;
        let mut cfg = format!(
            "tickTime={TICK_MS}\n\
             initLimit={INIT_LIMIT}\n\
             syncLimit={}\n\
             dataDir={}\n\
             clientPort={}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             minSessionTimeout={}\n\
             maxSessionTimeout={}\n\
             autopurge.purgeInterval=0\n",
            self.options.sync_limit,
            data.display(),
            s.client_port,
            self.options.min_session_timeout.as_millis(),
            self.options.max_session_timeout.as_millis(),
        );
        if let Some(per_ip) = self.options.max_client_cnxns {
            cfg.push_str(&format!("maxClientCnxns={per_ip}\n"));
        }
        if let (Some(files), Some(key_store)) = (&self.options.tls, &self.key_store) {
            // Keys ZooKeeper does not know become `zookeeper.`-prefixed
            // system properties, which is where the TLS settings live.
            cfg.push_str(&format!(
                "secureClientPort={}\n\
                 secureClientPortAddress=127.0.0.1\n\
                 serverCnxnFactory={NETTY_FACTORY}\n\
                 ssl.keyStore.location={}\n\
                 ssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={}\n\
                 ssl.trustStore.type=PEM\n\
                 ssl.clientAuth={}\n",
                s.secure_port,
                key_store.display(),
                files.ca_cert.display(),
                if self.options.client_auth {
                    "need"
                } else {
                    "none"
                },
            ));
        }
        if !self.options.sasl_users.is_empty() {
            cfg.push_str(
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n",
            );
            if self.options.require_sasl {
                cfg.push_str("enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n");
            }
        }
        if self.servers.len() > 1 {
            for (j, other) in self.servers.iter().enumerate() {
                cfg.push_str(&format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    j + 1,
                    other.quorum_port,
                    other.election_port
                ));
            }
        }
        fs::write(&s.config, cfg)
            .map_err(|e| ZkHarnessError::io(format!("writing {}", s.config.display()), e))?;
        let myid = data.join("myid");
        fs::write(&myid, format!("{}\n", i + 1))
            .map_err(|e| ZkHarnessError::io(format!("writing {}", myid.display()), e))?;
        Ok(())
    }

    /// The command line of server `i`.
    fn command(&self, i: usize) -> Command {
        let s = &self.servers[i];
        let mut cmd = Command::new(&self.java);
        cmd.current_dir(s.config.parent().expect("zoo.cfg lies in a directory"));
        let jaas = self
            .jaas
            .iter()
            .map(|jaas| format!("-Djava.security.auth.login.config={}", jaas.display()));
        jvm::server_command(
            &mut cmd,
            &self.classpath,
            &s.config,
            &jaas.collect::<Vec<_>>(),
        );
        // A server must not outlive a test process that is killed outright
        // (Drop never runs then). The signal follows the spawning thread,
        // which in a tokio test is the test's thread or a runtime worker:
        // both live as long as the ensemble.
        crate::process::die_with_parent(&mut cmd, Signal::KILL);
        cmd
    }

    /// The release the ensemble runs.
    pub fn version(&self) -> ZkVersion {
        self.version
    }

    /// The connect string of all servers, `127.0.0.1:P1,127.0.0.1:P2,...`.
    pub fn connect_string(&self) -> String {
        self.endpoints().join(",")
    }

    /// Client addresses `127.0.0.1:PORT` of all servers, in server order.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.servers.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Client address `127.0.0.1:PORT` of server `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.servers[i].client_port)
    }

    /// TLS client addresses `127.0.0.1:PORT` (the `secureClientPort`s) of
    /// all servers, in server order; empty without TLS.
    pub fn secure_endpoints(&self) -> Vec<String> {
        if self.options.tls.is_none() {
            return Vec::new();
        }
        (0..self.servers.len())
            .map(|i| format!("127.0.0.1:{}", self.servers[i].secure_port))
            .collect()
    }

    /// The options the ensemble was started with.
    pub fn options(&self) -> &ZkOptions {
        &self.options
    }

    /// How many servers the ensemble has (running or not).
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// The ensemble's temporary directory (configurations, data, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The classpath the servers run with.
    pub fn classpath(&self) -> &str {
        &self.classpath
    }

    /// Server `i`'s answer to `srvr` (one exchange, at most 2 s).
    pub async fn srvr(&self, i: usize) -> Result<String, ZkHarnessError> {
        self.check_index(i)?;
        four_letter_word(&self.endpoint(i), "srvr", FOUR_LETTER_TIMEOUT).await
    }

    /// The number `key` (e.g. `zk_packets_received`, `zk_watch_count`)
    /// of the four-letter word `mntr`, summed over the servers (one
    /// exchange each, at most 2 s). Each exchange counts as one packet
    /// received on its server, once answered: for packets from clients,
    /// use [`client_packets`](Self::client_packets).
    pub async fn mntr_sum(&self, key: &str) -> Result<f64, ZkHarnessError> {
        let mut sum = 0.0;
        for addr in self.endpoints() {
            let answer = four_letter_word(&addr, "mntr", FOUR_LETTER_TIMEOUT).await?;
            self.mntr_exchanges.fetch_add(1, Ordering::Relaxed);
            sum += answer
                .lines()
                .find_map(|l| {
                    let (k, value) = l.split_once(char::is_whitespace)?;
                    (k == key).then(|| value.trim().parse::<f64>().ok())?
                })
                .ok_or_else(|| {
                    ZkHarnessError::Unhealthy(format!("no {key} in mntr of {addr}: {answer:?}"))
                })?;
        }
        Ok(sum)
    }

    /// `zk_packets_received` summed over the servers, less the packets
    /// this ensemble's earlier `mntr` exchanges added: the difference of
    /// two readings counts the clients' packets only.
    pub async fn client_packets(&self) -> Result<f64, ZkHarnessError> {
        let earlier = self.mntr_exchanges.load(Ordering::Relaxed);
        Ok(self.mntr_sum("zk_packets_received").await? - earlier as f64)
    }

    /// The mode server `i` reports right now (one `srvr`, no waiting);
    /// [`ZkHarnessError::Unhealthy`] when it answers but does not serve
    /// (e.g. during an election).
    pub async fn mode(&self, i: usize) -> Result<ZkMode, ZkHarnessError> {
        let answer = self.srvr(i).await?;
        answer
            .lines()
            .find_map(|l| l.strip_prefix("Mode:"))
            .and_then(ZkMode::parse)
            .ok_or_else(|| {
                ZkHarnessError::Unhealthy(format!(
                    "server {i} reports no mode: {:?}",
                    answer.trim()
                ))
            })
    }

    /// One health round: every live server serves, in the mode the
    /// ensemble's size calls for, with exactly one leader among them, and
    /// a session can be opened and closed through each. Returns the
    /// leader's index (or the standalone server's).
    async fn health_round(&self) -> Result<usize, ZkHarnessError> {
        let live = self.live();
        if live.is_empty() {
            return Err(ZkHarnessError::Usage("no server is running".into()));
        }
        let mut leaders = Vec::new();
        for i in live {
            let mode = self.mode(i).await?;
            match (self.servers.len(), mode) {
                (1, ZkMode::Standalone) => leaders.push(i),
                (1, other) => {
                    return Err(ZkHarnessError::Unhealthy(format!(
                        "the single server reports {other:?}, not standalone"
                    )))
                }
                (_, ZkMode::Leader) => leaders.push(i),
                (_, ZkMode::Follower | ZkMode::Observer) => {}
                (_, ZkMode::Standalone) => {
                    return Err(ZkHarnessError::Unhealthy(format!(
                        "server {i} of an ensemble runs standalone"
                    )))
                }
            }
        }
        let [leader] = leaders[..] else {
            return Err(ZkHarnessError::Unhealthy(format!(
                "{} servers claim to lead: {leaders:?}",
                leaders.len()
            )));
        };
        // Every server really reaches the leader (see session_roundtrip).
        let sasl = self.options.sasl_users.first();
        let sasl = sasl.map(|(user, password)| (user.as_str(), password.as_str()));
        for i in self.live() {
            session_roundtrip(&self.endpoint(i), sasl, FOUR_LETTER_TIMEOUT).await?;
        }
        Ok(leader)
    }

    async fn poll(&self, what: &str, timeout: Duration) -> Result<usize, ZkHarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            let last = match self.health_round().await {
                Ok(leader) => return Ok(leader),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(self.timeout_error(what, timeout, &last));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn timeout_error(
        &self,
        what: &str,
        timeout: Duration,
        last: &ZkHarnessError,
    ) -> ZkHarnessError {
        let mut msg = format!(
            "{} ensemble not done {what} within {timeout:?}; last error: {last}",
            self.version
        );
        for i in 0..self.servers.len() {
            msg.push_str(&format!(
                "\n--- server {i} log tail ---\n{}",
                self.log_tail(i)
            ));
        }
        ZkHarnessError::Timeout(msg)
    }
}
