//! Validated resource names.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Longest accepted resource name, in bytes. It matches the longest
/// Kubernetes object name, so one name works on every backend.
pub const MAX_RESOURCE_LEN: usize = 253;

/// The name of a lock, lease or gated resource.
///
/// Accepted: 1 to [`MAX_RESOURCE_LEN`] bytes of UTF-8 without control
/// characters (NUL, newline, ...). Backends may narrow this further (a
/// Kubernetes Lease name must be DNS-1123) and say so in their own error.
///
/// ```
/// use fencing_core::ResourceName;
///
/// let name = ResourceName::new("orders/ledger")?;
/// assert_eq!(name.as_str(), "orders/ledger");
/// assert!(ResourceName::new("").is_err());
/// assert!(ResourceName::new("a\0b").is_err());
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ResourceName(String);

impl ResourceName {
    /// Validates and wraps a name.
    pub fn new(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        let reason = if name.is_empty() {
            "empty"
        } else if name.len() > MAX_RESOURCE_LEN {
            "longer than 253 bytes"
        } else if name.contains('\0') {
            "contains NUL"
        } else if name.chars().any(char::is_control) {
            "contains a control character"
        } else {
            return Ok(ResourceName(name));
        };
        Err(Error::invalid_resource(&name, reason))
    }

    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
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
        let s = String::deserialize(d)?;
        ResourceName::new(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_empty_oversized_nul_and_control() {
        for bad in [
            String::new(),
            "x".repeat(254),
            "a\0b".into(),
            "line\nbreak".into(),
        ] {
            assert!(
                matches!(
                    ResourceName::new(bad.clone()),
                    Err(Error::InvalidResource { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(ResourceName::new("x".repeat(253)).is_ok());
        assert!(ResourceName::new("ünïcode/ok").is_ok());
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
            let _ = ResourceName::new(s);
        }
    }
}
