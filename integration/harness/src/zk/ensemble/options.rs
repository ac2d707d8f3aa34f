//! How to start an ensemble: size, limits, TLS and SASL.

use super::*;

/// How to start an ensemble; [`ZkOptions::new`] gives a plain one (what
/// [`ZkEnsemble::start`] runs).
#[derive(Debug, Clone)]
pub struct ZkOptions {
    /// Which release runs.
    pub version: ZkVersion,
    /// How many servers (1: standalone).
    pub servers: usize,
    /// Also serve clients over TLS on a second port (see
    /// [`ZkEnsemble::secure_endpoints`]) with the server certificate and
    /// key of these files, trusting their CA. The files must outlive the
    /// ensemble's restarts (only the server's key and certificate are
    /// copied into the ensemble's directory).
    pub tls: Option<TlsFiles>,
    /// With `tls`: refuse TLS clients without a certificate signed by the
    /// CA (`ssl.clientAuth=need`); otherwise `ssl.clientAuth=none`.
    pub client_auth: bool,
    /// SASL DIGEST-MD5 users (`name`, `password`) the servers accept.
    pub sasl_users: Vec<(String, String)>,
    /// With `sasl_users`: refuse every request of a session that has not
    /// authenticated with SASL (`enforce.auth.enabled=true`,
    /// `enforce.auth.schemes=sasl`). The harness's health check
    /// authenticates as the first user.
    pub require_sasl: bool,
    /// The servers' `minSessionTimeout` (the harness's default is 400 ms):
    /// sessions asking for less get this.
    pub min_session_timeout: Duration,
    /// The servers' `maxSessionTimeout` (the harness's default is 60 s):
    /// sessions asking for more get this.
    pub max_session_timeout: Duration,
    /// The servers' `maxClientCnxns` (connections from one IP address to
    /// one server; 0: no limit). `None` leaves ZooKeeper's default (60).
    pub max_client_cnxns: Option<u32>,
    /// The servers' `syncLimit` in ticks of 200 ms (the harness's default
    /// is 10: a stalled leader is given up after 2 s).
    pub sync_limit: u32,
}

impl ZkOptions {
    /// `servers` servers of `version`, no TLS, no SASL.
    pub fn new(version: ZkVersion, servers: usize) -> Self {
        ZkOptions {
            version,
            servers,
            tls: None,
            client_auth: false,
            sasl_users: Vec::new(),
            require_sasl: false,
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            max_client_cnxns: None,
            sync_limit: 10,
        }
    }

    /// Sets the servers' `syncLimit` (in ticks of 200 ms).
    #[must_use]
    pub fn sync_limit(mut self, ticks: u32) -> Self {
        self.sync_limit = ticks;
        self
    }

    /// Sets the servers' `maxClientCnxns` (0: no limit), e.g. for more than
    /// 60 sessions from loopback to one server.
    #[must_use]
    pub fn max_client_cnxns(mut self, per_ip: u32) -> Self {
        self.max_client_cnxns = Some(per_ip);
        self
    }

    /// Sets the servers' `minSessionTimeout`.
    #[must_use]
    pub fn min_session_timeout(mut self, at_least: Duration) -> Self {
        self.min_session_timeout = at_least;
        self
    }

    /// Sets the servers' `maxSessionTimeout`.
    #[must_use]
    pub fn max_session_timeout(mut self, at_most: Duration) -> Self {
        self.max_session_timeout = at_most;
        self
    }

    /// Serves TLS on a second client port with `files`; `client_auth`
    /// requires client certificates.
    #[must_use]
    pub fn tls(mut self, files: TlsFiles, client_auth: bool) -> Self {
        self.tls = Some(files);
        self.client_auth = client_auth;
        self
    }

    /// Accepts SASL DIGEST-MD5 user `name` with `password`.
    #[must_use]
    pub fn sasl_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.sasl_users.push((name.into(), password.into()));
        self
    }

    /// Refuses sessions that have not authenticated with SASL.
    #[must_use]
    pub fn require_sasl(mut self, require: bool) -> Self {
        self.require_sasl = require;
        self
    }

    pub(super) fn check(&self) -> Result<(), ZkHarnessError> {
        if self.servers == 0 || self.servers > MAX_SERVERS {
            return Err(ZkHarnessError::Usage(format!(
                "an ensemble has 1 to {MAX_SERVERS} servers, not {}",
                self.servers
            )));
        }
        if self.client_auth && self.tls.is_none() {
            return Err(ZkHarnessError::Usage(
                "client_auth needs tls files".to_string(),
            ));
        }
        if self.require_sasl && self.sasl_users.is_empty() {
            return Err(ZkHarnessError::Usage(
                "require_sasl needs at least one SASL user".to_string(),
            ));
        }
        for (name, password) in &self.sasl_users {
            let plain = |s: &str| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            };
            if !plain(name) || password.contains(['"', '\\', '\n']) {
                return Err(ZkHarnessError::Usage(format!(
                    "SASL user {name:?}: names are [A-Za-z0-9._-]+ and passwords have no quotes, backslashes or newlines"
                )));
            }
        }
        Ok(())
    }
}
