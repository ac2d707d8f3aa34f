//! What a [`PgSource`](crate::PgSource) connects to, and its `postgres://` URL.

use std::str::FromStr;
use std::time::Duration;

use fencing_core::__private::{positive_seconds, redact_secrets};
use fencing_core::{Error, Result};

/// Lease length when the acquire options give none.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
/// The limit of each statement (and of connecting).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The lock table when the URL names none.
pub const DEFAULT_TABLE: &str = "fencing_locks";

/// A PostgreSQL database holding a lock table.
///
/// ```
/// use std::time::Duration;
/// use fencing::postgres::PgConfig;
///
/// let cfg = PgConfig::from_url(
///     "postgres://app@db1:5432,db2:5432/orders?target_session_attrs=read-write&table=locks&ttl=10",
/// )?;
/// assert_eq!(cfg.table, "locks");
/// assert_eq!(cfg.ttl, Duration::from_secs(10));
/// assert_eq!(cfg.pg.get_dbname(), Some("orders"));
/// # Ok::<(), fencing::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PgConfig {
    /// How to reach the server: hosts, user, database, and what else
    /// libpq's URL carries (`target_session_attrs=read-write` lets a
    /// client of several hosts find the primary after a failover).
    /// Its `Debug` hides the password.
    pub pg: tokio_postgres::Config,
    /// The lock table (letters, digits, `_`); its sequence is
    /// `<table>_tokens` and its identity row `<table>_source`.
    pub table: String,
    /// Lease length when the acquire options give none.
    pub ttl: Duration,
    /// The limit of each statement, and of connecting.
    pub request_timeout: Duration,
}

impl PgConfig {
    /// The defaults, on the server `pg` names.
    #[must_use]
    pub fn new(pg: tokio_postgres::Config) -> Self {
        PgConfig {
            pg,
            table: DEFAULT_TABLE.to_owned(),
            ttl: DEFAULT_TTL,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// Parses `postgres://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]...]/DB[?...]`
    /// (or `postgresql://`), libpq's URL, with three parameters of ours:
    /// `table=` (default `fencing_locks`), `ttl=` and `request_timeout=`
    /// (seconds). The other parameters are libpq's, as tokio-postgres reads
    /// them. Errors are [`Error::Config`] quoting the URL without its
    /// password. TLS is not built in: `sslmode=require` is refused.
    pub fn from_url(url: &str) -> Result<Self> {
        let shown = redact_secrets(url);
        let bad =
            |why: &dyn std::fmt::Display| Error::Config(format!("PostgreSQL URL {shown:?}: {why}"));
        let scheme_len = url.find("://").unwrap_or(0);
        if !matches!(
            url[..scheme_len].to_ascii_lowercase().as_str(),
            "postgres" | "postgresql"
        ) {
            return Err(bad(&"must start with postgres:// or postgresql://"));
        }
        // tokio-postgres reads the scheme in lower case only.
        let rest = &url[scheme_len..];
        let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut cfg_table = None;
        let (mut ttl, mut request_timeout) = (DEFAULT_TTL, DEFAULT_REQUEST_TIMEOUT);
        let mut passed = Vec::new();
        for item in query.split('&').filter(|i| !i.is_empty()) {
            let (key, value) = item.split_once('=').unwrap_or((item, ""));
            let secs = || {
                positive_seconds(value)
                    .ok_or_else(|| bad(&format!("{key} must be a positive number of seconds")))
            };
            match key {
                "table" => cfg_table = Some(value.to_owned()),
                "ttl" => ttl = secs()?,
                "request_timeout" => request_timeout = secs()?,
                "timeout" => return Err(bad(&"timeout= is request_timeout= (the limit of each statement); how long an acquire may wait is AcquireOptions::wait")),
                _ => passed.push(item),
            }
        }
        let rebuilt = if passed.is_empty() {
            format!("postgresql{base}")
        } else {
            format!("postgresql{base}?{}", passed.join("&"))
        };
        // The client's own message never quotes the URL.
        let pg = tokio_postgres::Config::from_str(&rebuilt).map_err(|e| bad(&e))?;
        if pg.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(bad(
                &"sslmode=require: TLS is not built into postgres:// URLs yet; \
                 use sslmode=disable or prefer, or reach the server over a trusted network",
            ));
        }
        let mut cfg = PgConfig::new(pg);
        cfg.ttl = ttl;
        cfg.request_timeout = request_timeout;
        if let Some(table) = cfg_table {
            cfg.table = table;
        }
        crate::lock_table::LockTable::new(&cfg.table).map_err(|e| bad(&e))?;
        Ok(cfg)
    }

    /// The servers, as errors name them: `host:port,...`.
    pub(crate) fn endpoints(&self) -> String {
        use tokio_postgres::config::Host;
        let ports = self.pg.get_ports();
        self.pg
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                match host {
                    Host::Tcp(name) => format!("{name}:{port}"),
                    #[cfg(unix)]
                    Host::Unix(path) => format!("{}:{port}", path.display()),
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(url: &str) -> String {
        match PgConfig::from_url(url) {
            Err(Error::Config(msg)) => msg,
            other => panic!("{url}: expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn libpq_urls_with_our_parameters() {
        let cfg = PgConfig::from_url(
            "postgresql://u:pw@h1:5433,h2/db?table=t1&request_timeout=2&application_name=x",
        )
        .unwrap();
        assert_eq!(cfg.table, "t1");
        assert_eq!(cfg.request_timeout, Duration::from_secs(2));
        assert_eq!(cfg.ttl, DEFAULT_TTL);
        assert_eq!(cfg.pg.get_user(), Some("u"));
        assert_eq!(cfg.pg.get_application_name(), Some("x"));
        assert_eq!(cfg.endpoints(), "h1:5433,h2:5432");
        let plain = PgConfig::from_url("postgres://h/db").unwrap();
        assert_eq!(plain.table, DEFAULT_TABLE);
    }

    #[test]
    fn bad_urls_name_the_problem_and_hide_the_password() {
        for (url, says) in [
            ("mysql://h/db", "postgres://"),
            ("postgres://h/db?table=bad-name", "SQL identifier"),
            ("postgres://h/db?ttl=0", "ttl must be"),
            ("postgres://h/db?timeout=3", "request_timeout="),
            ("postgres://u:hunter2@h/db?sslmode=require", "TLS"),
            ("postgres://u:hunter2@h/db?nonsense=1", "nonsense"),
            ("postgres://h/db?password=hunter2&ttl=x", "ttl must be"),
        ] {
            let msg = err(url);
            assert!(msg.contains(says), "{url}: {msg}");
            assert!(!msg.contains("hunter2"), "{url}: {msg}");
        }
    }

    proptest::proptest! {
        /// Any input parses or is refused without a panic, and a password
        /// in the user info never shows in the refusal, whatever follows it.
        #[test]
        fn fuzzed_urls_never_panic_nor_show_the_password(
            secret in "[a-zA-Z0-9]{6,12}",
            tail in "\\PC{0,24}",
            junk in "\\PC{0,40}",
        ) {
            let _ = PgConfig::from_url(&junk);
            let url = format!("postgres://u:{secret}@h/db{tail}");
            if let Err(e) = PgConfig::from_url(&url) {
                proptest::prop_assert!(!e.to_string().contains(&secret), "{e}");
            }
        }
    }

    #[test]
    fn never_panics_on_odd_input() {
        for url in [
            "",
            "://",
            "postgres://",
            "postgres://@",
            "postgres://h/db?&&=&",
            "postgres://[::1",
            "pöstgres://ä",
        ] {
            let _ = PgConfig::from_url(url);
        }
    }
}
