//! Connection settings and the `zk://` URL form.

use std::path::PathBuf;
use std::time::Duration;

use fencing_core::__private::{is_host_port, positive_seconds, UrlParts};
use fencing_core::{Credentials, Error, Result, TlsFiles};

/// Default session timeout asked of the ensemble (it may negotiate another
/// within its min/max bounds; the negotiated one is what counts).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Default limit for one request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The node in which an ensemble keeps its id for the source identity:
/// created once, readable by anyone, writable by no one (`world:anyone:r`),
/// holding a random id.
pub const ENSEMBLE_ID_NODE: &str = "/fencing-ensemble-id";

/// How to reach a ZooKeeper ensemble and where the locks live.
///
/// The source identity is `zk:` + the ensemble's id: by default the one the
/// ensemble keeps in [`ENSEMBLE_ID_NODE`], the same for every client of it
/// whichever servers it lists; or the name set with
/// [`ensemble`](Self::ensemble). Tokens (czxids) are only comparable
/// within one ensemble.
///
/// ```
/// use fencing::zookeeper::ZkConfig;
///
/// let cfg = ZkConfig::from_url("zk://zk1:2181,zk2:2181/app/locks?ttl=6&ensemble=prod")?;
/// assert_eq!(cfg.hosts, ["zk1:2181", "zk2:2181"]);
/// assert_eq!(cfg.path, "/app/locks");
/// assert_eq!(cfg.ensemble.as_deref(), Some("prod"));
/// # Ok::<(), fencing::Error>(())
/// ```
/// Its `Debug` shows the users but never the passwords.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZkConfig {
    /// `host:port` of each server.
    pub hosts: Vec<String>,
    /// Absolute path under which every lock lives (`PATH/RESOURCE/_c_...`).
    pub path: String,
    /// Name of the ensemble, the source identity (`zk:NAME`). `None` (the
    /// default) takes the id the ensemble itself keeps in the node
    /// [`ENSEMBLE_ID_NODE`]: created with a random id by the first source
    /// that connects, read by every later one, so the identity is the same
    /// whichever servers a source lists, and differs for another ensemble
    /// (also one rebuilt from nothing, whose czxids start over).
    pub ensemble: Option<String>,
    /// The lease of the grants: the session timeout to ask for (the
    /// ensemble may negotiate another, which then counts). An acquire's
    /// own [`AcquireOptions::ttl`](fencing_core::AcquireOptions::ttl)
    /// overrides it.
    pub ttl: Duration,
    /// Limit for each request and for connecting.
    pub request_timeout: Duration,
    /// Digest credentials (`user`, `password`). With them, lock nodes and
    /// their parents get creator-only ACLs, so clients with other
    /// credentials cannot delete a holder's node.
    pub digest: Option<Credentials>,
    /// SASL DIGEST-MD5 credentials (`user`, `password`), for ensembles that
    /// require SASL authentication.
    pub sasl: Option<Credentials>,
    /// TLS to the servers' secure client ports; `None` means plaintext.
    /// ZooKeeper needs its `ca`, and takes no `domain` (the client
    /// verifies no server name).
    pub tls: Option<TlsFiles>,
}

impl ZkConfig {
    /// Settings with defaults for the given hosts and lock path.
    pub fn new(
        hosts: impl IntoIterator<Item = impl Into<String>>,
        path: impl Into<String>,
    ) -> Result<Self> {
        let hosts: Vec<String> = hosts.into_iter().map(Into::into).collect();
        let cfg = ZkConfig {
            ensemble: None,
            hosts,
            path: path.into(),
            ttl: DEFAULT_SESSION_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            digest: None,
            sasl: None,
            tls: None,
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// Names the ensemble (the source identity) instead of reading its id
    /// from [`ENSEMBLE_ID_NODE`]: for ensembles where a source may not
    /// create that node, or to keep an identity gates were bound to.
    #[must_use]
    pub fn ensemble(mut self, name: impl Into<String>) -> Self {
        self.ensemble = Some(name.into());
        self
    }

    /// Sets the grants' lease: the session timeout to ask for.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets the per-request limit.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Authenticates with the `digest` scheme.
    #[must_use]
    pub fn digest(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.digest = Some(Credentials::new(user, password));
        self
    }

    /// Authenticates with SASL DIGEST-MD5.
    #[must_use]
    pub fn sasl(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.sasl = Some(Credentials::new(user, password));
        self
    }

    /// Connects over TLS; `tls.ca` is needed and `tls.domain` refused (the
    /// connection fails with [`Error::Config`] saying so).
    #[must_use]
    pub fn tls(mut self, tls: TlsFiles) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Parses `zk://host:port[,host:port...]/path[?ttl=SECS&request_timeout=SECS&ensemble=NAME&user=U&password=P]`;
    /// `sasl_user=` and `sasl_password=` add SASL DIGEST-MD5, and `ca=`
    /// (with `cert=` and `key=` for client authentication) switch to TLS.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = UrlParts::parse(url, "ZooKeeper")?;
        let bad = |why: &str| url.error(why);
        if url.scheme() != "zk" {
            return Err(bad("must start with zk://"));
        }
        let slash = url
            .target()
            .find('/')
            .ok_or_else(|| bad("missing /path after the hosts"))?;
        let (hosts, path) = url.target().split_at(slash);
        let mut cfg = ZkConfig::new(hosts.split(','), path).map_err(|e| bad(&e.to_string()))?;
        let (mut ca, mut cert, mut key) = (None, None, None);
        for (k, v) in url.params() {
            let secs = || {
                positive_seconds(v)
                    .ok_or_else(|| bad(&format!("{k} must be a positive number of seconds")))
            };
            match k {
                "ttl" => cfg.ttl = secs()?,
                "session_timeout" => {
                    return Err(bad("session_timeout= is ttl= (the session timeout to ask for)"))
                }
                "request_timeout" => cfg.request_timeout = secs()?,
                "timeout" => return Err(bad("timeout= is request_timeout= (the limit of each request); how long an acquire may wait is AcquireOptions::wait")),
                "ensemble" if !v.is_empty() => cfg.ensemble = Some(v.to_owned()),
                "user" | "password" | "sasl_user" | "sasl_password" => {}
                "ca" => ca = Some(PathBuf::from(v)),
                "cert" => cert = Some(PathBuf::from(v)),
                "key" => key = Some(PathBuf::from(v)),
                other => return Err(bad(&format!("unknown or empty parameter {other:?}"))),
            }
        }
        cfg.digest = url.credentials("user", "password")?;
        cfg.sasl = url.credentials("sasl_user", "sasl_password")?;
        match (ca, cert.is_some() == key.is_some()) {
            (_, false) => return Err(bad("cert= and key= go together")),
            (Some(ca), true) => {
                cfg.tls = Some(TlsFiles {
                    ca: Some(ca),
                    cert,
                    key,
                    domain: None,
                })
            }
            (None, true) if cert.is_some() => return Err(bad("cert= needs ca=")),
            (None, true) => {}
        }
        Ok(cfg)
    }

    fn check(&self) -> Result<()> {
        if self.hosts.is_empty() || self.hosts.iter().any(|h| !is_host_port(h)) {
            return Err(Error::Config(format!(
                "ZooKeeper hosts {:?} must each be host:port",
                self.hosts
            )));
        }
        check_path(&self.path)
    }
}

/// The pair `user_key=` / `password_key=`: both or neither.
/// A lock path must be absolute, must not end with '/', and every segment
/// must be a usable znode name.
pub(crate) fn check_path(path: &str) -> Result<()> {
    let bad = |why: &str| Error::Config(format!("ZooKeeper path {path:?} {why}"));
    if !path.starts_with('/') {
        return Err(bad("is not absolute"));
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err(bad("ends with '/'"));
    }
    if path == "/" {
        return Err(bad("is the root; give locks a path of their own"));
    }
    for segment in path[1..].split('/') {
        check_segment(segment).map_err(|why| bad(&why))?;
    }
    Ok(())
}

/// Why a znode name is unusable, if it is.
pub(crate) fn check_segment(segment: &str) -> std::result::Result<(), String> {
    if segment.is_empty() {
        return Err("has an empty segment".into());
    }
    if segment == "." || segment == ".." {
        return Err(format!("has a {segment:?} segment"));
    }
    if segment.contains('/') {
        return Err("has a '/' inside a name".into());
    }
    if segment.chars().any(|c| c == '\0' || c.is_control()) {
        return Err("contains a control character".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_url_grammar_holds() {
        let c = ZkConfig::from_url("ZK://h:1/x?sasl_user=s&sasl_password=p%26q%25").unwrap();
        assert_eq!(c.sasl, Some(Credentials::new("s", "p&q%")));
        for (url, needle) in [
            (
                "zk://h:1/x?request_timeout=1&request_timeout=2",
                "timeout= is given twice",
            ),
            ("zk://h:1/x?user=u", "user= and password= go together"),
            (
                "zk://h:1/x?sasl_password=p",
                "sasl_user= and sasl_password= go together",
            ),
        ] {
            match ZkConfig::from_url(url) {
                Err(Error::Config(msg)) => assert!(msg.contains(needle), "{url}: {msg}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn passwords_are_never_shown() {
        let url = "zk://h:1/x?user=app&password=hunter2&sasl_user=s&sasl_password=swordfish";
        let shown = format!("{:?}", ZkConfig::from_url(url).unwrap());
        assert!(
            !shown.contains("hunter2") && !shown.contains("swordfish"),
            "{shown}"
        );
        assert!(shown.contains("app") && shown.contains("\"s\""), "{shown}");
        let Err(Error::Config(msg)) = ZkConfig::from_url(&format!("{url}&bogus")) else {
            panic!("a malformed URL was accepted")
        };
        assert!(
            !msg.contains("hunter2") && !msg.contains("swordfish"),
            "{msg}"
        );
    }

    #[test]
    fn parses_hosts_path_and_options() {
        let c = ZkConfig::from_url("zk://b:2,a:1/x/y?ttl=4&request_timeout=2&user=u&password=p")
            .unwrap();
        assert_eq!(c.hosts, ["b:2", "a:1"]);
        assert_eq!(c.ensemble, None, "read from the ensemble at connect");
        assert_eq!(c.path, "/x/y");
        assert_eq!(c.ttl, Duration::from_secs(4));
        assert_eq!(c.digest, Some(Credentials::new("u", "p")));
        let c = ZkConfig::from_url(
            "zk://a:1/x?ca=/ca.pem&cert=/c.pem&key=/k.pem&sasl_user=s&sasl_password=q",
        )
        .unwrap();
        assert_eq!(c.tls.unwrap().key, Some(PathBuf::from("/k.pem")));
        assert_eq!(c.sasl, Some(Credentials::new("s", "q")));
    }

    #[test]
    fn refuses_bad_paths_and_urls() {
        for bad in [
            "zk://a:1",
            "zk://a:1/",
            "zk://a:1/x/",
            "zk://a:1//x",
            "zk://a:1/x/./y",
            "zk://a:1/x/../y",
            "zk://a/x",
            "zk://a:1/x?ttl=0",
            "zk://a:1/x?user=u",
            "zk://a:1/x?what=1",
            "zk://a:1/x?sasl_user=u",
            "zk://a:1/x?ca=/c&cert=/c",
            "zk://a:1/x?cert=/c&key=/k",
            "etcd://a:1/x",
        ] {
            assert!(
                matches!(ZkConfig::from_url(bad), Err(Error::Config(_))),
                "{bad:?}"
            );
        }
        assert!(ZkConfig::new(["a:1"], "relative").is_err());
    }
}
