//! Turning `--source URL` and lock/election names into open sources, with a
//! user's mistake (exit 2) told apart from a failure at run time (exit 1).

use std::sync::Arc;
use std::time::Duration;

use fencing::core::__private::redact_secrets;
use fencing::{Error, FencingSource, ResourceName};

use crate::failure::{Failure, Result};

/// The environment variable `--source` is read from when the flag is not
/// given, so a URL with a password need not stand in the command line
/// (where `ps` shows it to every user of the machine).
pub const SOURCE_ENV: &str = "FENCING_SOURCE_URL";

/// Opens the source a `--source` URL names.
pub async fn open(url: &str) -> Result<Arc<dyn FencingSource>> {
    fencing::connect(url)
        .await
        .map_err(|e| classify(e, &format!("--source {}", redact_secrets(url))))
}

/// Checks a `--lock` or `--election` name.
pub fn resource(flag: &str, name: &str) -> Result<ResourceName> {
    ResourceName::new(name).map_err(|e| Failure::usage(format!("{flag} {name:?}: {e}")))
}

/// Errors that name something the user wrote are usage errors; the rest
/// happened at run time.
pub fn classify(e: Error, context: &str) -> Failure {
    match e {
        Error::Config(_) | Error::InvalidResource { .. } | Error::InvalidToken { .. } => {
            Failure::usage(format!("{context}: {e}"))
        }
        other => Failure::runtime(format!("{context}: {other}")),
    }
}

/// Parses decimal seconds (`15`, `0.5`) for duration flags.
pub fn seconds(text: &str) -> std::result::Result<Duration, String> {
    fencing::core::__private::positive_seconds(text)
        .ok_or_else(|| format!("{text:?} is not a positive number of seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_accepts_decimals_and_refuses_nonsense() {
        assert_eq!(seconds("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["", "0", "-1", "abc", "NaN", "inf", "1e300"] {
            assert!(seconds(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
