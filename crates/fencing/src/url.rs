//! Parsing of fencing source URLs, kept apart from opening them so callers
//! can reject a bad URL before doing any work.

#[cfg(feature = "local")]
use std::{path::PathBuf, time::Duration};

use fencing_core::__private::UrlParts;
use fencing_core::{Error, Result};

/// Every scheme this crate recognises, built in or not.
pub const KNOWN_SCHEMES: [&str; 7] = [
    "local",
    "etcd",
    "etcds",
    "zk",
    "kube",
    "postgres",
    "postgresql",
];

/// A parsed fencing source URL.
///
/// ```
/// use std::path::Path;
/// use std::time::Duration;
/// use fencing::SourceUrl;
///
/// let SourceUrl::Local { dir, default_ttl } = SourceUrl::parse("local://./state?ttl=3")? else {
///     unreachable!()
/// };
/// assert_eq!(dir, Path::new("./state"));
/// assert_eq!(default_ttl, Some(Duration::from_secs(3)));
/// # Ok::<(), fencing::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceUrl {
    /// `local://DIR[?ttl=SECS]` (feature `local`): everything between `local://` and `?` is
    /// the directory, taken literally (no percent-decoding), so
    /// `local:///abs` is absolute and `local://rel` is relative.
    #[cfg(feature = "local")]
    Local {
        /// The state directory.
        dir: PathBuf,
        /// The default lease length from `?ttl=`, if given.
        default_ttl: Option<Duration>,
    },
    /// `etcd://HOSTS/PREFIX[?...]` or `etcds://...`, already checked by
    /// [`fencing_etcd::EtcdConfig::from_url`].
    #[cfg(feature = "etcd")]
    Etcd(fencing_etcd::EtcdConfig),
    /// `zk://HOSTS/PATH[?...]`, already checked by
    /// [`fencing_zookeeper::ZkConfig::from_url`].
    #[cfg(feature = "zookeeper")]
    Zk(fencing_zookeeper::ZkConfig),
    /// `kube://NAMESPACE[?kubeconfig=PATH&...]`, already checked by
    /// [`fencing_kube::KubeLeaseConfig::from_url`].
    #[cfg(feature = "kube")]
    Kube(fencing_kube::KubeLeaseConfig),
    /// `postgres://[USER@]HOSTS/DB[?table=&ttl=&request_timeout=&...]`
    /// (or `postgresql://`), already checked by
    /// [`fencing_postgres::PgConfig::from_url`] (boxed: it is the largest).
    #[cfg(feature = "postgres")]
    Postgres(Box<fencing_postgres::PgConfig>),
}

impl SourceUrl {
    /// Parses a URL without touching the filesystem or the network.
    /// Every problem is an [`Error::Config`] that names it; passwords in
    /// the URL are shown as `***`. `Debug` never shows them either.
    pub fn parse(url: &str) -> Result<SourceUrl> {
        if url.trim().is_empty() {
            return Err(Error::Config(
                "fencing source URL is empty; expected e.g. local:///var/lib/fencing".into(),
            ));
        }
        // libpq's URL form carries user info (`user:password@`), which the
        // shared grammar refuses: it is read by its own parser.
        if let Some((scheme, _)) = url.split_once("://") {
            if matches!(
                scheme.to_ascii_lowercase().as_str(),
                "postgres" | "postgresql"
            ) {
                #[cfg(feature = "postgres")]
                return fencing_postgres::PgConfig::from_url(url)
                    .map(|c| SourceUrl::Postgres(Box::new(c)));
                #[cfg(not(feature = "postgres"))]
                return Err(Error::Config(format!(
                    "this build has no backend for {scheme}:// URLs (it needs the feature `postgres` of the fencing crate)"
                )));
            }
        }
        let parts = UrlParts::parse(url, "fencing source")?;
        match parts.scheme() {
            #[cfg(feature = "local")]
            "local" => parse_local(&parts),
            #[cfg(feature = "etcd")]
            "etcd" | "etcds" => fencing_etcd::EtcdConfig::from_url(url).map(SourceUrl::Etcd),
            #[cfg(feature = "zookeeper")]
            "zk" => fencing_zookeeper::ZkConfig::from_url(url).map(SourceUrl::Zk),
            #[cfg(feature = "kube")]
            "kube" => fencing_kube::KubeLeaseConfig::from_url(url).map(SourceUrl::Kube),
            known if KNOWN_SCHEMES.contains(&known) => Err(parts.error(format!(
                "this build has no backend for {known}:// URLs (it needs the feature `{}` of the fencing crate)",
                feature_of(known)
            ))),
            other => Err(parts.error(format!(
                "unknown scheme {other:?}; known schemes: {}",
                KNOWN_SCHEMES.join(", ")
            ))),
        }
    }
}

/// The cargo feature that brings the backend of a known scheme.
fn feature_of(scheme: &str) -> &'static str {
    match scheme {
        "local" => "local",
        "etcd" | "etcds" => "etcd",
        "zk" => "zookeeper",
        "postgres" | "postgresql" => "postgres",
        _ => "kube",
    }
}

#[cfg(feature = "local")]
fn parse_local(url: &UrlParts) -> Result<SourceUrl> {
    if url.target().is_empty() {
        return Err(url.error(
            "names no directory; expected e.g. local:///var/lib/fencing or local://./state",
        ));
    }
    let mut default_ttl = None;
    for (key, value) in url.params() {
        match key {
            "ttl" => default_ttl = Some(parse_ttl(url, value)?),
            other => {
                return Err(url.error(format!(
                    "unknown query parameter {other:?}; the only one is ttl=SECS"
                )))
            }
        }
    }
    Ok(SourceUrl::Local {
        dir: PathBuf::from(url.target()),
        default_ttl,
    })
}

#[cfg(feature = "local")]
fn parse_ttl(url: &UrlParts, value: &str) -> Result<Duration> {
    use fencing_core::MIN_LOCAL_TTL;
    let bad = |why: &str| url.error(format!("ttl={value} {why}"));
    // f64 parsing accepts "inf", "nan" and exponents; allow plain decimals only.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad("is not a number of seconds (e.g. ttl=15 or ttl=2.5)"));
    }
    let secs: f64 = value
        .parse()
        .map_err(|_| bad("is not a number of seconds (e.g. ttl=15 or ttl=2.5)"))?;
    let ttl = Duration::try_from_secs_f64(secs).map_err(|_| bad("is out of range"))?;
    if ttl < MIN_LOCAL_TTL {
        return Err(bad(&format!(
            "is below the {MIN_LOCAL_TTL:?} minimum of a local lease"
        )));
    }
    Ok(ttl)
}

#[cfg(all(test, not(feature = "local")))]
mod without_local {
    #[test]
    fn local_urls_name_the_missing_feature() {
        let Err(fencing_core::Error::Config(msg)) = super::SourceUrl::parse("local:///d?ttl=3")
        else {
            panic!("local:// parsed without the local feature")
        };
        assert!(msg.contains("feature `local`"), "{msg}");
    }
}

#[cfg(all(test, feature = "local"))]
mod tests {
    use super::*;

    fn local(url: &str) -> (PathBuf, Option<Duration>) {
        match SourceUrl::parse(url) {
            Ok(SourceUrl::Local { dir, default_ttl }) => (dir, default_ttl),
            other => panic!("{url:?}: {other:?}"),
        }
    }

    fn err(url: &str) -> String {
        match SourceUrl::parse(url) {
            Err(Error::Config(msg)) => msg,
            other => panic!("{url:?} should be a config error: {other:?}"),
        }
    }

    #[test]
    fn local_paths_are_taken_literally() {
        assert_eq!(local("local:///tmp/x"), (PathBuf::from("/tmp/x"), None));
        assert_eq!(local("local://./state"), (PathBuf::from("./state"), None));
        assert_eq!(local("local://state"), (PathBuf::from("state"), None));
        assert_eq!(local("LOCAL:///a b"), (PathBuf::from("/a b"), None));
    }

    #[test]
    fn ttl_query() {
        assert_eq!(local("local:///d?ttl=15").1, Some(Duration::from_secs(15)));
        assert_eq!(
            local("local:///d?ttl=0.3").1,
            Some(Duration::from_millis(300))
        );
        assert_eq!(local("local:///d?").1, None);
        for bad in [
            "ttl=", "ttl=abc", "ttl=-1", "ttl=1e3", "ttl=inf", "ttl=NaN", "ttl=1..2", "ttl=0",
            "ttl=0.1",
        ] {
            let msg = err(&format!("local:///d?{bad}"));
            assert!(msg.contains("ttl="), "{bad}: {msg}");
        }
        assert!(err("local:///d?ttl=999999999999999999999999").contains("out of range"));
        assert!(err("local:///d?ttl=1&ttl=2").contains("twice"));
        assert!(err("local:///d?mode=fast").contains("unknown query parameter \"mode\""));
    }

    #[test]
    fn passwords_in_urls_are_never_shown() {
        let msg = err("local://./state?password=hunter2");
        assert!(
            !msg.contains("hunter2") && msg.contains("password=***"),
            "{msg}"
        );
        let msg = err("nonsense?password=hunter2");
        assert!(!msg.contains("hunter2"), "{msg}");
        #[cfg(feature = "etcd")]
        {
            let url = SourceUrl::parse("etcd://h:1/x?user=u&password=hunter2").unwrap();
            assert!(!format!("{url:?}").contains("hunter2"));
        }
    }

    #[test]
    fn malformed_urls_name_the_problem() {
        assert!(err("").contains("empty"));
        assert!(err(" \t").contains("empty"));
        assert!(err("nonsense").contains("no scheme"));
        assert!(err("/var/lib/fencing").contains("no scheme"));
        assert!(err("://x").contains("no scheme"));
        assert!(err("1ocal://x").contains("no scheme"));
        assert!(err("local://").contains("no directory"));
        assert!(err("local://?ttl=3").contains("no directory"));
        assert!(err("local:///d#frag").contains("fragment"));
    }

    #[test]
    fn recognised_but_absent_backends() {
        #[cfg(not(feature = "etcd"))]
        {
            assert!(err("etcd://127.0.0.1:2379").contains("no backend for etcd://"));
            assert!(err("ETCDS://h:2379")
                .contains("no backend for etcds:// URLs (it needs the feature `etcd`"));
        }
        #[cfg(not(feature = "zookeeper"))]
        assert!(err("zk://h:2181").contains("feature `zookeeper`"));
        #[cfg(not(feature = "kube"))]
        assert!(err("kube://ns?password=hunter2").contains("feature `kube`"));
        #[cfg(not(feature = "postgres"))]
        {
            let msg = err("postgres://app:hunter2@db/app");
            assert!(
                msg.contains("feature `postgres`") && !msg.contains("hunter2"),
                "{msg}"
            );
        }
    }

    /// libpq's URL form, user info included, is PostgreSQL's own parser's.
    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_urls_take_libpq_user_info() {
        let Ok(SourceUrl::Postgres(cfg)) =
            SourceUrl::parse("PostgreSQL://app:hunter2@db:5433/orders?table=locks")
        else {
            panic!("a postgres URL with user info")
        };
        assert_eq!(
            (cfg.pg.get_user(), cfg.table.as_str()),
            (Some("app"), "locks")
        );
        assert!(!format!("{cfg:?}").contains("hunter2"));
        assert!(err("postgres://app:hunter2@db/x?table=a-b").contains("SQL identifier"));
    }

    #[cfg(feature = "kube")]
    #[test]
    fn kube_urls_are_parsed_by_the_backend() {
        let Ok(SourceUrl::Kube(cfg)) =
            SourceUrl::parse("kube://team-a?kubeconfig=/k&ttl=6&renew_deadline=4&retry_period=1")
        else {
            panic!("kube URL not parsed")
        };
        assert_eq!(cfg.namespace, "team-a");
        assert_eq!(cfg.kubeconfig, Some(PathBuf::from("/k")));
        assert!(err("kube://").contains("namespace is missing"));
        assert!(err("kube://Bad_Name").contains("DNS-1123"));
    }

    #[test]
    fn unknown_scheme_is_named() {
        let msg = err("redis://localhost:6379");
        assert!(
            msg.contains("unknown scheme \"redis\"")
                && msg.contains("local, etcd, etcds, zk, kube"),
            "{msg}"
        );
    }

    #[test]
    fn never_panics_on_odd_input() {
        for s in [
            "://",
            ":",
            "a:",
            "a://",
            "a://?",
            "local://\u{0}",
            "local://é?ttl=ü",
            "local://?&&",
            "é://x",
        ] {
            let _ = SourceUrl::parse(s);
        }
    }
}
