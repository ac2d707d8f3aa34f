//! Keeping secrets out of messages and logs: a source URL may carry a
//! password, and error messages quote the URL they could not use.

/// What a secret is replaced with.
pub const REDACTED: &str = "***";

/// `text` (a source URL, or a message quoting one) with its secrets
/// replaced by `***`: the value of every parameter whose name ends in
/// `password` (`password=`, `sasl_password=`), wherever it stands (also in
/// a URL too malformed to parse), up to the next `&`, `#`, `"` or
/// whitespace; and the password of a `user:password@` authority. The rest
/// stays, so a message still shows which URL was meant.
///
/// ```
/// use fencing_core::backend::redact_secrets;
///
/// assert_eq!(
///     redact_secrets("etcd://10.0.0.1:2379/locks?user=app&password=hunter2&ttl=5"),
///     "etcd://10.0.0.1:2379/locks?user=app&password=***&ttl=5"
/// );
/// assert_eq!(redact_secrets("etcd://app:hunter2@h:1/x"), "etcd://app:***@h:1/x");
/// ```
#[must_use]
pub fn redact_secrets(text: &str) -> String {
    redact_parameters(&redact_userinfo(text))
}

/// Replaces the value after each `...password=` (see [`redact_secrets`]).
fn redact_parameters(url: &str) -> String {
    // ASCII lowercasing keeps every byte where it was.
    let lower = url.to_ascii_lowercase();
    let mut out = String::with_capacity(url.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find("password=") {
        let value_start = search + found + "password=".len();
        let value_end = url[value_start..]
            .find(|c: char| matches!(c, '&' | '#' | '"') || c.is_whitespace())
            .map_or(url.len(), |i| value_start + i);
        out.push_str(&url[copied..value_start]);
        if value_end > value_start {
            out.push_str(REDACTED);
        }
        copied = value_end;
        search = value_end;
    }
    out.push_str(&url[copied..]);
    out
}

/// Replaces `secret` in each `scheme://user:secret@host...`.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#' | '"') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority
            .rfind('@')
            .and_then(|at| Some((authority[..at].find(':')?, at)))
        {
            Some((colon, at)) => {
                out.push_str(&authority[..=colon]);
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
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
                "etcd://h:1/x?PASSWORD=***#frag",
            ),
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
                "a zk://u:p1@h:1/x and etcd://v:p2@g/y",
                "a zk://u:***@h:1/x and etcd://v:***@g/y",
            ),
            (
                "local:///var/lib/fencing?ttl=3",
                "local:///var/lib/fencing?ttl=3",
            ),
            ("", ""),
            ("password=", "password="),
            (
                "etcd URL \"etcd://h/x?password=p\": user= and password= go together",
                "etcd URL \"etcd://h/x?password=***\": user= and password= go together",
            ),
        ] {
            assert_eq!(redact_secrets(url), shown, "{url}");
        }
    }

    proptest! {
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
}
