//! The grammar every source URL shares, parsed once for all backends:
//! `SCHEME://TARGET[?KEY=VALUE&...]`, where each backend reads TARGET its
//! own way (hosts and a prefix, a namespace, a directory).

use std::fmt;

use percent_encoding::percent_decode_str;

use crate::connection::Credentials;
use crate::error::{Error, Result};
use crate::redact::{is_plain_name, redact_item, redact_name, redact_secrets};

/// A source URL split into scheme, target and query parameters.
///
/// - The scheme is matched without regard to case (RFC 3986) and kept in
///   lower case.
/// - Keys and values are percent-decoded (`%26` is `&`, `%25` is `%`; `+`
///   stays `+`), so any password can be written.
/// - User info before the hosts (`user:password@`), a parameter given
///   twice, an item without `=`, a fragment (`#`), a
///   key or value that is not UTF-8 once decoded, and a key that is not
///   ASCII letters, digits, `_`, `-` and `.` once decoded are refused.
/// - Every error is an [`Error::Config`] quoting the URL with its
///   passwords shown as `***`, found as this parser reads names (see
///   [`redact_secrets`](crate::redact::redact_secrets)).
///
/// ```
/// use fencing_core::__private::UrlParts;
///
/// let url = UrlParts::parse("ETCD://h:2379/locks?user=app&password=a%26b", "etcd")?;
/// assert_eq!((url.scheme(), url.target()), ("etcd", "h:2379/locks"));
/// assert_eq!(url.params(), [("user", "app"), ("password", "a&b")]);
/// assert!(UrlParts::parse("etcd://h/x?ttl=1&ttl=2", "etcd").is_err());
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct UrlParts {
    scheme: String,
    target: String,
    params: Vec<(String, String)>,
    what: &'static str,
    shown: String,
}

impl UrlParts {
    /// Splits `url`; `what` names the kind of URL in error messages
    /// (`"etcd"` gives "etcd URL ...").
    pub fn parse(url: &str, what: &'static str) -> Result<UrlParts> {
        let mut parts = UrlParts {
            scheme: String::new(),
            target: String::new(),
            params: Vec::new(),
            what,
            shown: redact_secrets(url),
        };
        let Some((scheme, rest)) = url.split_once("://").filter(|(s, _)| is_scheme(s)) else {
            return Err(parts.error("has no scheme; expected SCHEME://..."));
        };
        if rest.contains('#') {
            return Err(parts.error("a fragment ('#') means nothing here"));
        }
        let (target, query) = rest.split_once('?').unwrap_or((rest, ""));
        if target
            .split('/')
            .next()
            .is_some_and(|authority| authority.contains('@'))
        {
            // No backend reads `user:password@`; left in, it would travel
            // on as part of a host name and be quoted in connection errors.
            return Err(parts.error(
                "has user info ('...@') before its hosts; give user= and password= instead",
            ));
        }
        parts.scheme = scheme.to_ascii_lowercase();
        parts.target = target.to_owned();
        for item in query.split('&').filter(|item| !item.is_empty()) {
            let (key, value) = parts.param_of(item)?;
            if parts.param(&key).is_some() {
                return Err(parts.error(format!("{key}= is given twice")));
            }
            parts.params.push((key, value));
        }
        Ok(parts)
    }

    /// One decoded `key=value` item. Messages quote the item as written,
    /// with its secrets hidden, never decoded: decoding can turn
    /// `password%3Dhunter2` into a password in plain sight.
    fn param_of(&self, item: &str) -> Result<(String, String)> {
        let Some((raw_key, raw_value)) = item.split_once('=') else {
            let shown = redact_item(item);
            return Err(self.error(format!("query item {shown:?} is not key=value")));
        };
        let key = self.decode(raw_key)?;
        if !is_plain_name(&key) {
            return Err(self.error(format!(
                "parameter name {:?} is not letters, digits, '_', '-' and '.' once decoded",
                redact_name(raw_key)
            )));
        }
        Ok((key, self.decode(raw_value)?))
    }

    /// The scheme, in lower case.
    #[must_use]
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// What stands between `://` and `?`, as written.
    #[must_use]
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The decoded query parameters, in order.
    #[must_use]
    pub fn params(&self) -> Vec<(&str, &str)> {
        self.params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    /// The value of parameter `key`, if given.
    #[must_use]
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The [`Credentials`] in parameters `user_key` and `password_key`:
    /// `None` when neither is given, an error when only one is.
    pub fn credentials(&self, user_key: &str, password_key: &str) -> Result<Option<Credentials>> {
        match (self.param(user_key), self.param(password_key)) {
            (Some(user), Some(password)) => Ok(Some(Credentials::new(user, password))),
            (None, None) => Ok(None),
            _ => Err(self.error(format!("{user_key}= and {password_key}= go together"))),
        }
    }

    /// An [`Error::Config`] about this URL: `"{what} URL \"...\": {why}"`,
    /// passwords shown as `***`.
    #[must_use]
    pub fn error(&self, why: impl fmt::Display) -> Error {
        Error::Config(format!("{} URL {:?}: {why}", self.what, self.shown))
    }

    fn decode(&self, text: &str) -> Result<String> {
        percent_decode_str(text)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| self.error("a percent-encoded parameter is not UTF-8"))
    }
}

/// Shows the URL as errors do: passwords as `***`.
impl fmt::Debug for UrlParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UrlParts").field(&self.shown).finish()
    }
}

/// RFC 3986: a letter, then letters, digits, `+`, `-` or `.`.
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message(url: &str) -> String {
        match UrlParts::parse(url, "zk") {
            Err(Error::Config(msg)) => msg,
            other => panic!("{url}: expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn the_shared_grammar() {
        let u = UrlParts::parse(
            "Zk://a:1,b:2/x%20y?sasl_password=p%2Bq%26r+s&ca=/c.pem",
            "zk",
        )
        .unwrap();
        assert_eq!(u.scheme(), "zk");
        assert_eq!(
            u.target(),
            "a:1,b:2/x%20y",
            "the target is the backend's to read"
        );
        assert_eq!(u.param("sasl_password"), Some("p+q&r+s"));
        assert_eq!(u.param("ca"), Some("/c.pem"));
        assert_eq!(u.param("user"), None);
        assert!(!format!("{u:?}").contains("p%2Bq"), "{u:?}");
        let u = UrlParts::parse("local://./state", "local").unwrap();
        assert_eq!((u.target(), u.params().len()), ("./state", 0));
    }

    #[test]
    fn mistakes_are_named_without_secrets() {
        for (url, needle) in [
            ("nonsense", "no scheme"),
            ("1zk://h/x", "no scheme"),
            ("zk://h/x#frag", "fragment"),
            ("zk://h/x?ttl", "\"ttl\" is not key=value"),
            ("zk://h/x?ttl=1&ttl=2", "ttl= is given twice"),
            ("zk://h/x?t%74l=1&ttl=2", "ttl= is given twice"),
            ("zk://h/x?user=%ff", "not UTF-8"),
            ("zk://h/x?a%20b=1", "\"a%20b\" is not letters"),
            ("zk://u:p@h/x", "user info"),
            ("zk://u%3Ap@h/x", "user info"),
            ("zk://h/x?=1", "\"\" is not letters"),
        ] {
            let msg = message(url);
            assert!(
                msg.contains(needle) && msg.starts_with("zk URL"),
                "{url}: {msg}"
            );
        }
        let msg = message("zk://h/x?password=hunter2&password=again");
        assert!(!msg.contains("hunter2") && !msg.contains("again"), "{msg}");
    }

    /// The parser decodes names, so whatever it reads as a password (or a
    /// name that hides one behind an encoded `=`) never shows in an error
    /// or in `Debug`.
    #[test]
    fn encoded_password_names_stay_hidden() {
        for url in [
            "zk://h:1/x?user=u&pass%77ord=SECRET&ttl",
            "zk://h:1/x?pass%77ord=SECRET&ttl=1&ttl=2",
            "zk://h:1/x?PASS%57ORD=SECRET#frag",
            "zk://h:1/x?password%3DSECRET",
            "zk://h:1/x?password%3DSECRET=1&password%3DSECRET=2",
            "zk://h:1/x?password%3DSECRET=1",
            "zk://u:SECRET@h:1/x?user=%ff",
            "zk://u%3aSECRET@h:1/x?user=%ff",
        ] {
            let msg = message(url);
            assert!(!msg.contains("SECRET"), "{url}: {msg}");
        }
        let u = UrlParts::parse("zk://h:1/x?user=u&pass%77ord=SECRET", "zk").unwrap();
        assert_eq!(u.param("password"), Some("SECRET"));
        assert!(!format!("{u:?}").contains("SECRET"), "{u:?}");
    }

    proptest! {
        /// Any spelling of a password name, any secret, any mistake after
        /// it: the secret is in neither `Display` nor `Debug` of the error,
        /// nor in `Debug` of a URL that parsed.
        #[test]
        fn no_secret_in_any_message(
            key in prop_oneof![
                crate::redact::tests::spelt("password"),
                crate::redact::tests::spelt("sasl_password"),
            ],
            secret in "\\PC{0,12}",
            eq in "(=|%3D|%3d)",
            mistake in "(|&ttl|&ttl=1&ttl=2|&user=%ff|#f|&a%3Db=1|&password=x)",
        ) {
            let encoded: String = percent_encoding::utf8_percent_encode(
                &format!("Zq{secret}"),
                percent_encoding::NON_ALPHANUMERIC,
            )
            .collect();
            let url = format!("zk://h:1/x?user=u&{key}{eq}{encoded}{mistake}");
            let shown = match UrlParts::parse(&url, "zk") {
                Ok(u) => format!("{u:?}"),
                Err(e) => format!("{e} {e:?}"),
            };
            prop_assert!(!shown.contains("Zq"), "{url} -> {shown}");
        }

        /// Any text: an answer, never a panic; a value encoded and decoded
        /// comes back as it was.
        #[test]
        fn any_text_and_any_password(text in "\\PC{0,80}", password in "\\PC{0,24}") {
            let _ = UrlParts::parse(&text, "zk");
            let encoded: String =
                percent_encoding::utf8_percent_encode(&password, percent_encoding::NON_ALPHANUMERIC)
                    .collect();
            let url = format!("zk://h:1/x?user=u&password={encoded}");
            let u = UrlParts::parse(&url, "zk").unwrap();
            prop_assert_eq!(u.param("password"), Some(password.as_str()));
        }
    }
}
