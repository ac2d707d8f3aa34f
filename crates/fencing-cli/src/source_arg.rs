//! Turning `--source URL` and lock/election names into open sources, with a
//! user's mistake (exit 2) told apart from a failure at run time (exit 1).

use std::sync::Arc;
use std::time::Duration;

use fencing::{Error, FencingSource, ResourceName};

use crate::failure::{Failure, Result};

/// Opens the source a `--source` URL names.
pub async fn open(url: &str) -> Result<Arc<dyn FencingSource>> {
    fencing::connect(url)
        .await
        .map_err(|e| classify(e, &format!("--source {url}")))
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
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0 * 365.0) {
        return Err(format!("{text:?} must be more than 0 and at most a year"));
    }
    Ok(Duration::from_secs_f64(secs))
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
