//! How to start a cluster.

use super::*;

/// How to start a cluster; [`ClusterOptions::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Which etcd release runs.
    pub version: EtcdVersion,
    /// How many members (at least 1).
    pub members: usize,
    /// Serve clients over TLS with these files (peers stay plain HTTP).
    pub tls: Option<TlsFiles>,
    /// With `tls`: require clients to present a certificate signed by the CA.
    pub client_cert_auth: bool,
    /// Raft heartbeat interval (etcd's `--heartbeat-interval`).
    pub heartbeat: Duration,
    /// Raft election timeout (etcd's `--election-timeout`).
    pub election_timeout: Duration,
    /// How long a start or restart may take until the cluster is healthy.
    pub startup_timeout: Duration,
    /// More command-line flags for every member (say
    /// `--max-concurrent-streams=100`).
    pub extra_args: Vec<String>,
}

impl ClusterOptions {
    /// `members` members of `version`, plain HTTP, a 50 ms heartbeat and a
    /// 500 ms election timeout (quick failover), 30 s to become healthy.
    pub fn new(version: EtcdVersion, members: usize) -> Self {
        ClusterOptions {
            version,
            members,
            tls: None,
            client_cert_auth: false,
            heartbeat: Duration::from_millis(50),
            election_timeout: Duration::from_millis(500),
            startup_timeout: Duration::from_secs(30),
            extra_args: Vec::new(),
        }
    }

    /// Adds a command-line flag for every member.
    pub fn with_arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Serves clients over TLS with `files`, requiring client certificates
    /// when `client_cert_auth`.
    pub fn with_tls(mut self, files: TlsFiles, client_cert_auth: bool) -> Self {
        self.tls = Some(files);
        self.client_cert_auth = client_cert_auth;
        self
    }

    /// Sets the raft heartbeat interval and election timeout.
    pub fn with_timing(mut self, heartbeat: Duration, election_timeout: Duration) -> Self {
        self.heartbeat = heartbeat;
        self.election_timeout = election_timeout;
        self
    }
}
