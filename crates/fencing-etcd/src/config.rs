//! Connection settings and the `etcd://` / `etcds://` URL form.

use std::time::Duration;

use fencing_core::__private::{is_host_port, positive_seconds, UrlParts};
use fencing_core::{Credentials, Error, Result, TlsFiles};

/// Default session TTL (Go `concurrency.NewSession` uses 60 s; shorter
/// sessions fail over faster, and a fenced store is safe either way).
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// Default limit for one request to the cluster.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest lease etcd grants (its `MaxLeaseTTL`, 3.4 and 3.6); it
/// refuses a longer one.
const MAX_TTL: Duration = Duration::from_secs(9_000_000_000);

/// The longest request timeout: `i32::MAX` seconds (about 68 years), as for
/// election timings; every request's deadline is now + this, which must not
/// overflow the clock.
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(i32::MAX as u64);

/// How to reach an etcd cluster and where the locks live.
///
/// ```
/// use fencing::etcd::EtcdConfig;
///
/// let cfg = EtcdConfig::from_url("etcd://10.0.0.1:2379,10.0.0.2:2379/app/locks?ttl=10")?;
/// assert_eq!(cfg.endpoints.len(), 2);
/// assert_eq!(cfg.prefix, "/app/locks");
/// assert_eq!(cfg.ttl.as_secs(), 10);
/// # Ok::<(), fencing::Error>(())
/// ```
/// Its `Debug` shows the user but never the password.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// `host:port` of each member; the client fails over between them.
    pub endpoints: Vec<String>,
    /// Key prefix under which every lock lives (`PREFIX/RESOURCE/LEASE`).
    pub prefix: String,
    /// Session TTL, whole seconds (etcd leases count in seconds).
    pub ttl: Duration,
    /// Limit for each request; an unreachable cluster gives a timeout
    /// error naming the endpoints after this long.
    pub request_timeout: Duration,
    /// User name and password for clusters with auth enabled.
    pub auth: Option<Credentials>,
    /// TLS settings; `None` means plain HTTP/2.
    pub tls: Option<TlsFiles>,
}

impl EtcdConfig {
    /// Settings with defaults for the given endpoints and lock prefix.
    pub fn new(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        prefix: impl Into<String>,
    ) -> Result<Self> {
        let cfg = EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: prefix.into(),
            ttl: DEFAULT_TTL,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            auth: None,
            tls: None,
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// Sets the session TTL (rounded up to whole seconds, at least 1 s).
    /// One above etcd's longest lease (9,000,000,000 s) is refused with
    /// [`Error::Config`] when the source connects.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = whole_seconds(ttl);
        self
    }

    /// Sets the per-request time limit.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Authenticates as `user`.
    #[must_use]
    pub fn auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.auth = Some(Credentials::new(user, password));
        self
    }

    /// Connects over TLS.
    #[must_use]
    pub fn tls(mut self, tls: TlsFiles) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Parses `etcd://host:port[,host:port...]/prefix[?ttl=SECS&request_timeout=SECS&user=U&password=P]`;
    /// `etcds://` adds TLS with `ca=`, `cert=`, `key=` and `domain=` query
    /// parameters (file paths). The grammar is the shared one of
    /// [`UrlParts`]: the scheme in any case, values percent-decoded (write
    /// a `&` in a password as `%26`), a parameter given twice refused.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = UrlParts::parse(url, "etcd")?;
        let bad = |why: &str| url.error(why);
        let tls = match url.scheme() {
            "etcd" => false,
            "etcds" => true,
            _ => return Err(bad("must start with etcd:// or etcds://")),
        };
        let (hosts, path) = url
            .target()
            .split_once('/')
            .ok_or_else(|| bad("missing /prefix after the hosts"))?;
        let endpoints: Vec<String> = hosts.split(',').map(str::to_owned).collect();
        let mut cfg = EtcdConfig::new(endpoints, format!("/{}", path.trim_end_matches('/')))
            .map_err(|e| bad(&e.to_string()))?;
        let mut files = TlsFiles::default();
        for (k, v) in url.params() {
            let secs = || {
                positive_seconds(v)
                    .ok_or_else(|| bad(&format!("{k} must be a positive number of seconds")))
            };
            match k {
                "ttl" => cfg.ttl = whole_seconds(secs()?),
                "request_timeout" => cfg.request_timeout = secs()?,
                "timeout" => return Err(bad("timeout= is request_timeout= (the limit of each request); how long an acquire may wait is AcquireOptions::wait")),
                "user" | "password" => {}
                "ca" | "cert" | "key" | "domain" if !tls => {
                    return Err(bad(&format!("{k}= needs an etcds:// URL")));
                }
                "ca" => files.ca = Some(v.into()),
                "cert" => files.cert = Some(v.into()),
                "key" => files.key = Some(v.into()),
                "domain" => files.domain = Some(v.to_owned()),
                other => return Err(bad(&format!("unknown parameter {other:?}"))),
            }
        }
        cfg.auth = url.credentials("user", "password")?;
        if files.cert.is_some() != files.key.is_some() {
            return Err(bad("cert= and key= go together"));
        }
        if tls {
            cfg.tls = Some(files);
        }
        Ok(cfg)
    }

    /// The session TTL for an acquire that asked for `asked` (this
    /// config's TTL when it did not ask), rounded up to whole seconds; one
    /// longer than etcd grants is an [`Error::Config`] naming the TTL.
    pub(crate) fn ttl_for(&self, asked: Option<Duration>) -> Result<Duration> {
        let ttl = asked.map_or(self.ttl, whole_seconds);
        check_ttl(ttl)?;
        Ok(ttl)
    }

    /// The durations a source counts with are within what etcd grants and
    /// the clock can count (the fields are public, so `new` cannot be the
    /// only check).
    pub(crate) fn check_durations(&self) -> Result<()> {
        check_ttl(self.ttl)?;
        if self.request_timeout > MAX_REQUEST_TIMEOUT {
            return Err(Error::Config(format!(
                "etcd request_timeout ({:?}) must be at most {MAX_REQUEST_TIMEOUT:?} \
                 (i32::MAX seconds)",
                self.request_timeout
            )));
        }
        Ok(())
    }

    fn check(&self) -> Result<()> {
        if self.endpoints.is_empty() || self.endpoints.iter().any(|e| !is_host_port(e)) {
            return Err(Error::Config(format!(
                "etcd endpoints {:?} must each be host:port",
                self.endpoints
            )));
        }
        check_prefix(&self.prefix)
    }
}

/// A lock prefix must be non-empty text without NUL.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix == "/" {
        return Err(Error::Config("etcd key prefix is empty".into()));
    }
    if prefix.contains('\0') {
        return Err(Error::Config(format!(
            "etcd key prefix {prefix:?} contains NUL"
        )));
    }
    Ok(())
}

fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl > MAX_TTL {
        return Err(Error::Config(format!(
            "etcd ttl ({ttl:?}) must be at most {MAX_TTL:?}, the longest lease etcd grants"
        )));
    }
    Ok(())
}

/// Rounded up, at least 1 s; saturating, so `Duration::MAX` stays huge
/// (and is refused by [`check_ttl`]) instead of wrapping round to 1 s.
fn whole_seconds(ttl: Duration) -> Duration {
    let secs = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0));
    Duration::from_secs(secs.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_url_grammar_holds() {
        let c =
            EtcdConfig::from_url("ETCDS://h:1/x?user=u&password=a%26b%3Dc+d&ca=/c.pem").unwrap();
        assert_eq!(c.auth, Some(Credentials::new("u", "a&b=c+d")));
        assert!(c.tls.is_some());
        for (url, needle) in [
            ("etcd://h:1/x?ttl=1&ttl=2", "ttl= is given twice"),
            ("etcd://h:1/x#f", "fragment"),
            ("http://h:1/x", "must start with etcd:// or etcds://"),
        ] {
            match EtcdConfig::from_url(url) {
                Err(Error::Config(msg)) => assert!(msg.contains(needle), "{url}: {msg}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn passwords_are_never_shown() {
        let cfg = EtcdConfig::from_url("etcd://h:1/x?user=app&password=hunter2").unwrap();
        let shown = format!("{cfg:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("app"),
            "{shown}"
        );
        let Err(Error::Config(msg)) = EtcdConfig::from_url("etcd://h:1/x?password=hunter2&user")
        else {
            panic!("a malformed URL was accepted")
        };
        assert!(
            !msg.contains("hunter2") && msg.contains("password=***"),
            "{msg}"
        );
    }

    #[test]
    fn parses_hosts_prefix_and_options() {
        let c = EtcdConfig::from_url("etcds://a:1,b:2/x/y/?ttl=2.5&request_timeout=1&ca=/c.pem&cert=/u.pem&key=/k.pem&user=u&password=p")
            .unwrap();
        assert_eq!(c.endpoints, ["a:1", "b:2"]);
        assert_eq!(c.prefix, "/x/y");
        assert_eq!(c.ttl, Duration::from_secs(3));
        assert_eq!(c.request_timeout, Duration::from_secs(1));
        assert_eq!(c.auth, Some(Credentials::new("u", "p")));
        assert_eq!(
            c.tls.unwrap().cert,
            Some(std::path::PathBuf::from("/u.pem"))
        );
    }

    fn config_message(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(Error::Config(m)) => m,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    /// An acquire asking for `Duration::MAX` gets a config error naming
    /// the TTL, not an overflow (nor, without overflow checks, a TTL
    /// wrapped round to 1 s).
    #[test]
    fn an_unbounded_acquire_ttl_is_refused_by_name() {
        let cfg = EtcdConfig::new(["h:1"], "/x").unwrap();
        assert_eq!(cfg.ttl_for(None).unwrap(), DEFAULT_TTL);
        assert_eq!(
            cfg.ttl_for(Some(Duration::from_millis(2500))).unwrap(),
            Duration::from_secs(3)
        );
        let m = config_message(cfg.ttl_for(Some(Duration::MAX)));
        assert!(m.contains("ttl") && m.contains("at most"), "{m}");
    }

    /// `Duration::MAX` as the TTL or the request timeout: a config error
    /// naming the field when the source connects, before any request
    /// (whose deadline, now + timeout, would overflow).
    #[tokio::test]
    async fn unbounded_durations_are_refused_by_name_at_connect() {
        let cfg = EtcdConfig::new(["127.0.0.1:1"], "/x").unwrap();
        let mut huge_ttl = cfg.clone();
        huge_ttl.ttl = Duration::MAX;
        for (huge, field) in [
            (huge_ttl, "ttl"),
            (
                cfg.clone().request_timeout(Duration::MAX),
                "request_timeout",
            ),
        ] {
            let m = config_message(crate::EtcdSource::connect(huge).await);
            assert!(m.contains(field) && m.contains("at most"), "{m}");
        }
    }

    #[test]
    fn refuses_malformed_urls_with_a_reason() {
        for bad in [
            "",
            "etcd://",
            "etcd://a:1",
            "etcd://a:1/",
            "etcd://a/x",
            "etcd://a:0/x",
            "etcd://a:1,/x",
            "etcd://a:1/x?ttl=-1",
            "etcd://a:1/x?ttl=nan",
            "etcd://a:1/x?ca=/c",
            "etcd://a:1/x?user=u",
            "etcd://a:1/x?bogus=1",
            "etcd://a:1/x\0y",
            "http://a:1/x",
        ] {
            match EtcdConfig::from_url(bad) {
                Err(Error::Config(msg)) => assert!(!msg.is_empty()),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
