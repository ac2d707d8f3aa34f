//! Keeping secrets out of messages and logs: a source URL may carry a
//! password, and error messages quote the URL they could not use.
//!
//! A secret is found the way the URL parser reads the URL, never by
//! looking for the literal text `password=`: the parser decodes parameter
//! names, so `pass%77ord=` is a password too, and so is anything hiding
//! behind an encoded `=`.

use percent_encoding::percent_decode_str;

/// What a secret is replaced with.
pub const REDACTED: &str = "***";

/// Words that make a parameter name (decoded, case and punctuation
/// ignored) name a secret. Wider than the names the backends read
/// (`password`, `sasl_password`): a misspelt name is refused with an error
/// that quotes the URL, and the value meant as a password must not show
/// there either.
const SECRET_WORDS: [&str; 4] = ["pass", "pwd", "secret", "token"];

/// `url`, a source URL as written (well-formed or not), with its secrets
/// replaced by `***`. It is cut as the parser cuts it: the scheme up to
/// `://`, a `user:password@` authority, then query items split on `&` (also
/// in a query that lost its `?`). The value of every item whose decoded
/// name names a secret (`password`, `PASS%57ORD`, `sasl_password`, ...)
/// is hidden, the name too when it is not plain letters, digits, `_`, `-`
/// and `.` once decoded (`password%3Dhunter2=`); so is an item without
/// `=` that names one, and the password of a `user:password@` authority.
/// The rest stays, so a message still shows which URL was meant.
///
/// ```
/// use fencing_core::__private::redact_secrets;
///
/// assert_eq!(
///     redact_secrets("etcd://10.0.0.1:2379/locks?user=app&password=hunter2&ttl=5"),
///     "etcd://10.0.0.1:2379/locks?user=app&password=***&ttl=5"
/// );
/// assert_eq!(redact_secrets("zk://h:1/x?pass%77ord=hunter2"), "zk://h:1/x?password=***");
/// assert_eq!(redact_secrets("etcd://app:hunter2@h:1/x"), "etcd://app:***@h:1/x");
/// ```
#[must_use]
pub fn redact_secrets(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    let rest = match split_userinfo(rest) {
        Some((userinfo, rest)) => {
            out.push_str(&redact_userinfo(userinfo));
            out.push('@');
            rest
        }
        None => rest,
    };
    let (target, query) = match rest.split_once('?') {
        Some((target, query)) => (target, Some(query)),
        None => (rest, None),
    };
    // A target never names a secret by itself (a path may well contain
    // "pass"), but `host/x&password=...` is a query that lost its `?`.
    let mut pieces = target.split('&');
    out.push_str(&redact_pair(pieces.next().unwrap_or_default()));
    for piece in pieces {
        out.push('&');
        out.push_str(&redact_item(piece));
    }
    if let Some(query) = query {
        out.push('?');
        let items: Vec<String> = query.split('&').map(redact_item).collect();
        out.push_str(&items.join("&"));
    }
    out
}

/// One raw query item (`key=value`, or a bare word) as errors show it.
pub(crate) fn redact_item(item: &str) -> String {
    match item.split_once('=') {
        Some(_) => redact_pair(item),
        None if names_secret(item) => REDACTED.to_owned(),
        None => item.to_owned(),
    }
}

/// A raw parameter name as errors show it: `***` when it names a secret
/// and is not plain once decoded (it may hide a value behind a `%3D`).
pub(crate) fn redact_name(key: &str) -> String {
    if !names_secret(key) {
        return key.to_owned();
    }
    let decoded = percent_decode_str(key).decode_utf8_lossy();
    if is_plain_name(&decoded) {
        decoded.into_owned()
    } else {
        REDACTED.to_owned()
    }
}

/// True for a parameter name every backend could know: ASCII letters,
/// digits, `_`, `-` and `.`, not empty.
pub(crate) fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// `key=value` with the value hidden when the key names a secret.
fn redact_pair(item: &str) -> String {
    match item.split_once('=') {
        Some((key, value)) if names_secret(key) => {
            let shown = if value.is_empty() { "" } else { REDACTED };
            format!("{}={shown}", redact_name(key))
        }
        _ => item.to_owned(),
    }
}

/// Whether a raw name, decoded (lossily: a name that is not UTF-8 is
/// judged by what is), names a secret.
fn names_secret(raw: &str) -> bool {
    let decoded = percent_decode_str(raw).decode_utf8_lossy();
    let letters: String = decoded
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    SECRET_WORDS.iter().any(|word| letters.contains(word))
}

/// Splits `user:password@` off what follows `://`. The authority ends at
/// the first `/` or `?`, but a password may hold either unencoded, so the
/// last `@` before the query wins, else the last before the first `/`.
fn split_userinfo(rest: &str) -> Option<(&str, &str)> {
    let query = rest.find('?').unwrap_or(rest.len());
    let path = rest.find('/').unwrap_or(rest.len());
    let at = rest[..query]
        .rfind('@')
        .or_else(|| rest[..path].rfind('@'))?;
    Some((&rest[..at], &rest[at + 1..]))
}

/// `user:***`; a user name that is itself encoded (it may hide the `:`)
/// is hidden too. Without `:` there is no password.
fn redact_userinfo(userinfo: &str) -> String {
    match userinfo.split_once(':') {
        Some((user, _)) if !user.contains('%') => format!("{user}:{REDACTED}"),
        Some(_) => REDACTED.to_owned(),
        None if userinfo.contains('%') => REDACTED.to_owned(),
        None => userinfo.to_owned(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn secrets_are_replaced_and_the_rest_kept() {
        for (url, shown) in [
            (
                "zk://a:1/x?user=u&password=p&sasl_user=s&sasl_password=q",
                "zk://a:1/x?user=u&password=***&sasl_user=s&sasl_password=***",
            ),
            (
                "etcd://h:1/x?PASSWORD=Secret#frag",
                "etcd://h:1/x?PASSWORD=***",
            ),
            ("zk://h:1/x?pass%77ord=p&ttl", "zk://h:1/x?password=***&ttl"),
            ("zk://h:1/x?password%3Dp", "zk://h:1/x?***"),
            ("zk://h:1/x?pass%77ord%3Dp=q", "zk://h:1/x?***=***"),
            (
                "zk://h:1/locks/passwords?ttl=1",
                "zk://h:1/locks/passwords?ttl=1",
            ),
            ("zk://h:1/x?user=me@corp", "zk://h:1/x?user=me@corp"),
            ("local:///home/u@x/state", "local:///home/u@x/state"),
            ("etcd://u%3Ap@h:1/x", "etcd://***@h:1/x"),
            (
                "etcd://h:1/x&password=oops-no-question-mark",
                "etcd://h:1/x&password=***",
            ),
            (
                "etcd://h:1/x?password=&user=u",
                "etcd://h:1/x?password=&user=u",
            ),
            (
                "etcd://u:pw@h:1/x?password=p",
                "etcd://u:***@h:1/x?password=***",
            ),
            ("etcd://u@h:1/x", "etcd://u@h:1/x"),
            (
                "local:///var/lib/fencing?ttl=3",
                "local:///var/lib/fencing?ttl=3",
            ),
            ("", ""),
            ("password=", "password="),
            ("nonsense?password=p", "nonsense?password=***"),
        ] {
            assert_eq!(redact_secrets(url), shown, "{url}");
        }
    }

    /// Every spelling the URL parser reads as a password parameter, or that
    /// a person plainly meant as one, hides its value.
    #[test]
    fn every_spelling_of_a_password_is_redacted() {
        for url in [
            "zk://h:1/x?user=u&pass%77ord=SECRET",
            "zk://h:1/x?user=u&PASS%57ORD=SECRET",
            "zk://h:1/x?%70%61%73%73%77%6f%72%64=SECRET",
            "zk://h:1/x?sasl_pass%77ord=SECRET&sasl_user=s",
            "zk://h:1/x?password%3DSECRET",
            "zk://h:1/x?password%3dSECRET&user=u",
            "zk://h:1/x?pass%77ord%3DSECRET=1",
            "zk://h:1/x?password=a&password=SECRET",
            "zk://h:1/x?pass+word=SECRET",
            "zk://h:1/x?password%20=SECRET",
            "zk://h:1/x?pass%ffword=SECRET",
            "etcd://u%3ASECRET@h:1/x",
            "etcd://u:SEC/RET@h:1/x",
            "etcd://u:SEC?RET@h:1/x",
            "etcd://u:SECRET@h:1/x?password=SECRET",
        ] {
            let shown = redact_secrets(url);
            assert!(!shown.contains("SEC"), "{url} -> {shown}");
        }
    }

    proptest! {
        /// However the name `password` is spelt (any case, any letter
        /// percent-encoded in either hex case, `=` encoded), its value
        /// never survives.
        #[test]
        fn no_spelling_of_the_name_leaks(
            key in spelt("password"),
            secret in "Zq[A-Za-z0-9!$%'()*+,;:@/?=-]{1,12}",
            eq in "(=|%3D|%3d)",
        ) {
            let url = format!("zk://h:1/x?user=u&{key}{eq}{secret}&ttl=1");
            let shown = redact_secrets(&url);
            prop_assert!(!shown.contains("Zq"), "{url} -> {shown}");
        }

        /// Whatever surrounds it, a password given as a parameter or in the
        /// authority never survives, and redacting never panics.
        #[test]
        fn no_password_survives(
            before in "[a-z:/?&=.@0-9]{0,20}",
            key in "(password|sasl_password|Password)",
            secret in "Z[A-Za-z0-9!$%'()*+,;:@/?-]{3,15}",
            in_authority in "Z[A-Za-z0-9!$%'()*+,;:-]{3,15}",
            after in "(&[a-z]{1,5}=[a-z0-9]{0,5}){0,3}",
        ) {
            let url = format!("etcd://h:1/x?{before}&{key}={secret}{after}");
            let shown = redact_secrets(&url);
            prop_assert!(!shown.contains(&secret), "{url} -> {shown}");
            let url = format!("etcd://user:{in_authority}@h:1/x?{before}");
            let shown = redact_secrets(&url);
            prop_assert!(!shown.contains(&in_authority), "{url} -> {shown}");
        }

        #[test]
        fn any_text_is_handled(text in "\\PC{0,64}") {
            let _ = redact_secrets(&text);
        }
    }

    /// `word` with each letter in either case and perhaps percent-encoded.
    pub(crate) fn spelt(word: &'static str) -> impl Strategy<Value = String> {
        let letters: Vec<_> = word
            .chars()
            .map(|c| {
                prop_oneof![
                    Just(c.to_ascii_lowercase().to_string()),
                    Just(c.to_ascii_uppercase().to_string()),
                    Just(format!("%{:02x}", c as u32)),
                    Just(format!("%{:02X}", c as u32)),
                    Just(format!("%{:02X}", c.to_ascii_uppercase() as u32)),
                ]
            })
            .collect();
        letters.prop_map(|parts| parts.concat())
    }
}
