//! Kubernetes name rules: a Lease name is a DNS-1123 subdomain, a namespace
//! a DNS-1123 label. Checked locally so a bad name is a typed error naming
//! the rule instead of a 422 from the apiserver.

use fencing_core::{Error, ResourceName, Result};

/// Longest DNS-1123 label (namespace names).
pub(crate) const MAX_LABEL: usize = 63;

const SUBDOMAIN_RULE: &str = "a Kubernetes Lease name must be a DNS-1123 subdomain: \
     at most 253 characters of lowercase letters, digits, '-' and '.', \
     starting and ending with a letter or digit";

/// The reason `name` is not a DNS-1123 label, if it is not.
fn label_problem(name: &str, max: usize) -> Option<&'static str> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        Some("is empty")
    } else if bytes.len() > max {
        Some("is too long")
    } else if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    {
        Some("may only contain lowercase letters, digits and '-'")
    } else if !bytes[0].is_ascii_alphanumeric() || !bytes[bytes.len() - 1].is_ascii_alphanumeric() {
        Some("must start and end with a letter or digit")
    } else {
        None
    }
}

/// The Lease name for a resource, or [`Error::InvalidResource`] naming the
/// DNS-1123 subdomain rule.
pub(crate) fn lease_name(resource: &ResourceName) -> Result<&str> {
    // The portable rule of `ResourceName::new` is exactly this one; only
    // names made with `ResourceName::nonportable` can fail it.
    if resource.is_portable() {
        Ok(resource.as_str())
    } else {
        Err(Error::invalid_resource(resource.as_str(), SUBDOMAIN_RULE))
    }
}

/// Checks a namespace name; a missing or malformed one is [`Error::Config`].
pub(crate) fn check_namespace(namespace: &str) -> Result<()> {
    match label_problem(namespace, MAX_LABEL) {
        None => Ok(()),
        Some("is empty") => Err(Error::Config(
            "Kubernetes namespace is missing (kube://NAMESPACE?kubeconfig=PATH)".into(),
        )),
        Some(problem) => Err(Error::Config(format!(
            "Kubernetes namespace {namespace:?} {problem}: a namespace must be a DNS-1123 label \
             (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lease(name: &str) -> Result<String> {
        lease_name(&ResourceName::nonportable(name)?).map(str::to_owned)
    }

    #[test]
    fn lease_names_follow_dns_1123_subdomain() {
        for good in [
            "a",
            "leader",
            "my-app.leader",
            "0abc",
            "a.b.c",
            &"x".repeat(253),
        ] {
            assert_eq!(lease(good).unwrap(), good);
        }
        for bad in [
            "Leader", "-a", "a-", "a..b", ".a", "a.", "a_b", "a/b", "ünï", "a b", "a.-b",
        ] {
            match lease(bad) {
                Err(Error::InvalidResource { name, reason }) => {
                    assert_eq!(name, bad);
                    assert!(reason.contains("DNS-1123 subdomain"), "{reason}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn namespaces_follow_dns_1123_label() {
        assert!(check_namespace("default").is_ok());
        assert!(check_namespace("team-7").is_ok());
        match check_namespace("") {
            Err(Error::Config(msg)) => assert!(msg.contains("missing"), "{msg}"),
            other => panic!("{other:?}"),
        }
        for bad in ["Team", "a.b", "-a", "a-", &"x".repeat(64), "a_b"] {
            match check_namespace(bad) {
                Err(Error::Config(msg)) => assert!(msg.contains("DNS-1123 label"), "{msg}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    proptest! {
        #[test]
        fn accepted_lease_names_satisfy_the_rule(s in "[a-z0-9.-]{1,40}") {
            if let Ok(name) = lease(&s) {
                prop_assert!(!name.starts_with(['-', '.']) && !name.ends_with(['-', '.']));
                prop_assert!(!name.contains(".."));
            }
        }

        #[test]
        fn never_panics(s in any::<String>()) {
            let _ = lease(&s);
            let _ = check_namespace(&s);
        }
    }
}
