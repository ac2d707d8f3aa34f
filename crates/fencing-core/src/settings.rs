//! Small parsers the backends' URL forms share, and client-go's
//! leader-election timings, which the elector and the Kubernetes backend
//! both follow.

use std::time::Duration;

use crate::error::{Error, Result};

/// client-go's default lease duration (LeaseDuration).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// client-go's default renew deadline (RenewDeadline).
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// client-go's default retry period (RetryPeriod).
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// client-go's rule for leader-election timings: the retry period is
/// positive and `lease_duration > renew_deadline > 1.2 x retry_period`
/// (1.2 is client-go's jitter factor: a renewal retried with jitter must
/// still land before the deadline). The [`Error::Config`] names the rule.
///
/// ```
/// use std::time::Duration;
/// let s = Duration::from_secs;
/// assert!(fencing_core::backend::check_leader_timings(s(15), s(10), s(2)).is_ok());
/// assert!(fencing_core::backend::check_leader_timings(s(10), s(10), s(2)).is_err());
/// ```
pub fn check_leader_timings(lease: Duration, renew: Duration, retry: Duration) -> Result<()> {
    if retry.is_zero() {
        return Err(Error::Config(
            "retry_period must be greater than zero".to_owned(),
        ));
    }
    if lease <= renew {
        return Err(Error::Config(format!(
            "lease_duration ({lease:?}) must be greater than renew_deadline ({renew:?})"
        )));
    }
    // renew > 1.2 x retry, in integers: 5 x renew > 6 x retry.
    if renew.as_nanos() * 5 <= retry.as_nanos() * 6 {
        return Err(Error::Config(format!(
            "renew_deadline ({renew:?}) must be greater than 1.2 x retry_period ({retry:?})"
        )));
    }
    Ok(())
}

/// A positive, finite number of seconds below 10^9 (`"2.5"`, `"15"`).
#[must_use]
pub fn positive_seconds(text: &str) -> Option<Duration> {
    let secs: f64 = text.parse().ok()?;
    (secs.is_finite() && secs > 0.0 && secs < 1e9).then(|| Duration::from_secs_f64(secs))
}

/// True for `host:port` with a non-empty host (no `/`) and a port 1..=65535.
#[must_use]
pub fn is_host_port(text: &str) -> bool {
    match text.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_endpoints() {
        assert_eq!(positive_seconds("2.5"), Some(Duration::from_millis(2500)));
        for bad in ["", "0", "-1", "nan", "inf", "1e10", "x"] {
            assert_eq!(positive_seconds(bad), None, "{bad:?}");
        }
        assert!(is_host_port("127.0.0.1:2379") && is_host_port("[::1]:2181"));
        for bad in ["", "a", ":1", "a:0", "a:99999", "a/b:1"] {
            assert!(!is_host_port(bad), "{bad:?}");
        }
    }
}
