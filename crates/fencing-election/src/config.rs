//! The three timings of an election, with client-go's names and defaults.

use std::time::Duration;

use fencing_core::{Error, Result};

/// How long a term's lease lasts, how soon a leader without a renewal steps
/// down, and how often followers look and candidates retry.
///
/// The names and defaults are client-go's `LeaderElectionConfig`:
/// `lease_duration` 15 s, `renew_deadline` 10 s, `retry_period` 2 s, and the
/// same rule between them: `lease_duration > renew_deadline > 1.2 x
/// retry_period`.
///
/// ```
/// use std::time::Duration;
/// use fencing_election::ElectionConfig;
///
/// let config = ElectionConfig::new("worker-1")
///     .lease_duration(Duration::from_secs(6))
///     .renew_deadline(Duration::from_secs(4))
///     .retry_period(Duration::from_secs(1));
/// config.validate()?;
/// assert!(ElectionConfig::new("").validate().is_err());
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionConfig {
    /// The candidate's name, shown to followers as the leader's identity.
    pub identity: String,
    /// The TTL each term's grant is acquired with: how long the coordinator
    /// keeps a silent leader's lease before others may take over. A source
    /// may adjust it (etcd rounds up to whole seconds, ZooKeeper negotiates
    /// the session timeout within the server's bounds); the grant's actual
    /// TTL is what the loss rule uses.
    pub lease_duration: Duration,
    /// A leader whose lease was last renewed longer ago than this counts as
    /// having lost leadership (it steps down before the lease can run out at
    /// the coordinator).
    ///
    /// It must comfortably exceed the backend's renewal interval (a third
    /// of the grant's TTL on etcd, ZooKeeper and LocalSource, the retry
    /// period on Kubernetes) plus one round trip, or a healthy leader steps
    /// down between two renewals. `campaign` checks it against the TTL the
    /// source actually granted and refuses with [`Error::Config`] below
    /// 1.2 x the interval.
    pub renew_deadline: Duration,
    /// How often an [`Observer`](crate::Observer) asks for the current
    /// leader, and the pause before a candidate retries after a transient
    /// error.
    pub retry_period: Duration,
}

pub use fencing_core::{DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD};

impl ElectionConfig {
    /// A candidate named `identity` with client-go's default timings.
    #[must_use]
    pub fn new(identity: impl Into<String>) -> Self {
        ElectionConfig {
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// Sets the lease duration.
    #[must_use]
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self
    }

    /// Sets the renew deadline.
    #[must_use]
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.renew_deadline = d;
        self
    }

    /// Sets the retry period.
    #[must_use]
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.retry_period = d;
        self
    }

    /// Checks the rules: a non-empty identity, `retry_period > 0`, and
    /// `lease_duration > renew_deadline > 1.2 x retry_period`. The
    /// [`Error::Config`] names the rule that failed.
    pub fn validate(&self) -> Result<()> {
        if self.identity.is_empty() {
            return Err(Error::Config(
                "election identity must not be empty".to_owned(),
            ));
        }
        fencing_core::backend::check_leader_timings(
            self.lease_duration,
            self.renew_deadline,
            self.retry_period,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(config: &ElectionConfig) -> String {
        match config.validate() {
            Err(Error::Config(m)) => m,
            other => panic!("expected a Config error for {config:?}, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_client_go_s_and_valid() {
        let c = ElectionConfig::new("a");
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        c.validate().unwrap();
    }

    #[test]
    fn empty_identity_is_refused_by_name() {
        assert!(message(&ElectionConfig::new("")).contains("identity"));
    }

    #[test]
    fn zero_retry_period_is_refused_by_name() {
        let c = ElectionConfig::new("a").retry_period(Duration::ZERO);
        assert!(message(&c).contains("retry_period must be greater than zero"));
    }

    #[test]
    fn lease_not_above_renew_is_refused_by_name() {
        let c = ElectionConfig::new("a")
            .lease_duration(Duration::from_secs(10))
            .renew_deadline(Duration::from_secs(10));
        let m = message(&c);
        assert!(
            m.contains("lease_duration") && m.contains("greater than renew_deadline"),
            "{m}"
        );
    }

    #[test]
    fn renew_not_above_one_point_two_retry_is_refused_by_name() {
        // Exactly 1.2 x retry is refused; a nanosecond more passes.
        let retry = Duration::from_secs(5);
        let c = ElectionConfig::new("a").retry_period(retry);
        let at_limit = c.clone().renew_deadline(Duration::from_secs(6));
        let m = message(&at_limit);
        assert!(m.contains("1.2 x retry_period"), "{m}");
        c.renew_deadline(Duration::from_secs(6) + Duration::from_nanos(1))
            .validate()
            .unwrap();
    }
}
