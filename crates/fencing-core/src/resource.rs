//! Validated resource names.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Longest accepted resource name, in bytes. It matches the longest
/// Kubernetes object name, so one name works on every backend.
pub const MAX_RESOURCE_LEN: usize = 253;

/// The portable naming rule, as [`ResourceName::new`] states it in errors.
pub const PORTABLE_RULE: &str = "a portable name is 1 to 253 characters of lowercase letters, \
     digits, '-' and '.', each '.'-separated part starting and ending with a letter or digit \
     (a DNS-1123 subdomain, usable on every backend); use ResourceName::nonportable for other names";

/// The name of a lock, lease or gated resource.
///
/// [`ResourceName::new`] accepts only the **portable** form, which every
/// backend can use unchanged: 1 to [`MAX_RESOURCE_LEN`] characters of
/// lowercase ASCII letters, digits, `-` and `.`, where each `.`-separated
/// part starts and ends with a letter or digit (a Kubernetes DNS-1123
/// subdomain, which is also a valid etcd key segment and ZooKeeper node
/// name). A name that works on the local source therefore also works after
/// moving to etcd, ZooKeeper or Kubernetes.
///
/// [`ResourceName::nonportable`] accepts any 1 to 253 bytes of UTF-8 without
/// control characters: for gate keys that never reach a coordinator (an HTTP
/// path) and for locks already named by Go or Java programs. Backends refuse
/// such a name with [`Error::InvalidResource`] where they cannot store it
/// (etcd and ZooKeeper refuse `/`, Kubernetes anything not DNS-1123).
///
/// ```
/// use fencing_core::ResourceName;
///
/// let name = ResourceName::new("orders.ledger-7")?;
/// assert_eq!(name.as_str(), "orders.ledger-7");
/// assert!(ResourceName::new("Orders").is_err());   // uppercase
/// assert!(ResourceName::new("a/b").is_err());      // not one key segment
/// assert!(ResourceName::nonportable("/kv/Orders").is_ok());
/// assert!(ResourceName::nonportable("a\0b").is_err());
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ResourceName(String);

impl ResourceName {
    /// Validates a name against the portable rule ([`PORTABLE_RULE`]).
    pub fn new(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        match portable_problem(&name) {
            None => Ok(ResourceName(name)),
            Some(problem) => Err(Error::invalid_resource(
                &name,
                format!("{problem}: {PORTABLE_RULE}"),
            )),
        }
    }

    /// Accepts any name of 1 to 253 bytes without control characters; see
    /// the type's documentation for when a backend still refuses it.
    pub fn nonportable(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        let reason = if name.is_empty() {
            "empty"
        } else if name.len() > MAX_RESOURCE_LEN {
            "longer than 253 bytes"
        } else if name.chars().any(char::is_control) {
            "contains a control character"
        } else {
            return Ok(ResourceName(name));
        };
        Err(Error::invalid_resource(&name, reason))
    }

    /// True when the name follows the portable rule.
    #[must_use]
    pub fn is_portable(&self) -> bool {
        portable_problem(&self.0).is_none()
    }

    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What breaks the portable rule in `name`, if anything.
fn portable_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("empty");
    }
    if name.len() > MAX_RESOURCE_LEN {
        return Some("longer than 253 characters");
    }
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-';
    for part in name.split('.') {
        let bytes = part.as_bytes();
        if bytes.is_empty() {
            return Some("has an empty part between dots");
        }
        if !bytes.iter().all(|&b| allowed(b)) {
            return Some("has a character other than a-z, 0-9, '-' and '.'");
        }
        if bytes[0] == b'-' || bytes[bytes.len() - 1] == b'-' {
            return Some("has a part that starts or ends with '-'");
        }
    }
    None
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for ResourceName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for ResourceName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        ResourceName::new(s)
    }
}

impl TryFrom<&str> for ResourceName {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self, Error> {
        ResourceName::new(s)
    }
}

impl TryFrom<String> for ResourceName {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        ResourceName::new(s)
    }
}

impl<'de> Deserialize<'de> for ResourceName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Lenient, so that every name that serialises also reads back.
        let s = String::deserialize(d)?;
        ResourceName::nonportable(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn portable_names_are_dns_1123_subdomains() {
        for good in [
            "a",
            "0",
            "orders",
            "orders.ledger-7",
            "a.b.c",
            &"x".repeat(253),
        ] {
            assert!(ResourceName::new(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "Orders",
            "a/b",
            "a_b",
            "a b",
            "-a",
            "a-",
            ".a",
            "a.",
            "a..b",
            "a.-b",
            "ünï",
            "a\0b",
            &"x".repeat(254),
        ] {
            match ResourceName::new(bad) {
                Err(Error::InvalidResource { reason, .. }) => {
                    assert!(reason.contains("portable"), "{bad:?}: {reason}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn nonportable_rejects_empty_oversized_nul_and_control() {
        for bad in [
            String::new(),
            "x".repeat(254),
            "a\0b".into(),
            "line\nbreak".into(),
        ] {
            assert!(
                matches!(
                    ResourceName::nonportable(bad.clone()),
                    Err(Error::InvalidResource { .. })
                ),
                "{bad:?}"
            );
        }
        let name = ResourceName::nonportable("ünïcode/Ok").unwrap();
        assert!(!name.is_portable());
        assert!(ResourceName::nonportable("x".repeat(253))
            .unwrap()
            .is_portable());
    }

    #[test]
    fn deserialize_validates() {
        assert!(serde_json::from_str::<ResourceName>("\"\"").is_err());
        assert_eq!(
            serde_json::from_str::<ResourceName>("\"a\"")
                .unwrap()
                .as_str(),
            "a"
        );
    }

    proptest! {
        #[test]
        fn never_panics(s in any::<String>()) {
            let _ = ResourceName::new(s.clone());
            let _ = ResourceName::nonportable(s);
        }

        #[test]
        fn portable_names_pass_every_backend_rule(s in "[a-z0-9.-]{1,60}") {
            if let Ok(name) = ResourceName::new(s) {
                let n = name.as_str();
                prop_assert!(!n.contains('/') && n != "." && n != "..");
                prop_assert!(!n.starts_with(['-', '.']) && !n.ends_with(['-', '.']));
                prop_assert!(!n.contains(".."));
            }
        }
    }
}
