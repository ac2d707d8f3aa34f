//! The three timings of an election, with client-go's names and defaults.

use std::time::Duration;

use fencing_core::{Error, Result};

/// A candidate's identity and its [`LeaderTimings`]: how long a term's lease
/// lasts, how soon a leader without a renewal steps down, and how often
/// followers look and candidates retry (client-go's names, defaults and
/// rule).
///
/// ```
/// use std::time::Duration;
/// use fencing::election::ElectionConfig;
///
/// let config = ElectionConfig::new("worker-1")
///     .lease_duration(Duration::from_secs(6))
///     .renew_deadline(Duration::from_secs(4))
///     .retry_period(Duration::from_secs(1));
/// config.check()?;
/// assert!(ElectionConfig::new("").check().is_err());
/// # Ok::<(), fencing::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionConfig {
    /// The candidate's name, and the value it publishes while it leads:
    /// followers read it as [`Leader::identity`](crate::Leader::identity)
    /// (etcd's campaign value, client-go's holder identity). Put what
    /// followers need in it, e.g. `"node-a http://10.0.0.5:8080"`; it is
    /// fixed for the term (a new value takes a new term, with a new token).
    pub identity: String,
    /// The three timings (see [`LeaderTimings`]), used here as follows.
    ///
    /// - `lease_duration`: the TTL each term's grant is acquired with. A
    ///   source may adjust it (etcd rounds up to whole seconds, ZooKeeper
    ///   negotiates the session timeout within the server's bounds); the
    ///   grant's actual TTL is what the loss rule uses.
    /// - `renew_deadline`: a leader whose lease was last renewed longer ago
    ///   than this counts as having lost leadership. It must comfortably
    ///   exceed the backend's renewal interval (a third of the grant's TTL
    ///   on etcd, ZooKeeper and LocalSource, the retry period on
    ///   Kubernetes) plus one round trip, or a healthy leader steps down
    ///   between two renewals; `campaign` refuses with [`Error::Config`]
    ///   below 1.2 x the interval of the TTL actually granted.
    /// - `retry_period`: how often an [`Observer`](crate::Observer) asks for
    ///   the current leader, and the pause before a candidate retries after
    ///   a failed attempt, plus a random extra of up to 1.2 times it
    ///   (client-go's `JitterFactor`), so candidates do not retry in step.
    pub timings: LeaderTimings,
}

use fencing_core::LeaderTimings;

impl ElectionConfig {
    /// A candidate named `identity` with client-go's default timings.
    #[must_use]
    pub fn new(identity: impl Into<String>) -> Self {
        ElectionConfig {
            identity: identity.into(),
            timings: LeaderTimings::default(),
        }
    }

    /// Replaces all three timings.
    #[must_use]
    pub fn timings(mut self, timings: LeaderTimings) -> Self {
        self.timings = timings;
        self
    }

    /// Sets the lease duration.
    #[must_use]
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.timings.lease_duration = d;
        self
    }

    /// Sets the renew deadline.
    #[must_use]
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.timings.renew_deadline = d;
        self
    }

    /// Sets the retry period.
    #[must_use]
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.timings.retry_period = d;
        self
    }

    /// Checks a non-empty identity and the timings' rule
    /// ([`LeaderTimings::check`]). The [`Error::Config`] names the rule
    /// that failed.
    pub fn check(&self) -> Result<()> {
        if self.identity.is_empty() {
            return Err(Error::Config(
                "election identity must not be empty".to_owned(),
            ));
        }
        self.timings.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(config: &ElectionConfig) -> String {
        match config.check() {
            Err(Error::Config(m)) => m,
            other => panic!("expected a Config error for {config:?}, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_client_go_s_and_valid() {
        let c = ElectionConfig::new("a");
        assert_eq!(c.timings, LeaderTimings::default());
        c.check().unwrap();
    }

    #[test]
    fn empty_identity_is_refused_by_name() {
        assert!(message(&ElectionConfig::new("")).contains("identity"));
    }

    /// `Duration::MAX` in any timing is a config error naming it, never a
    /// candidate whose deadlines overflow later.
    #[test]
    fn unbounded_timings_are_refused_by_name() {
        let c = ElectionConfig::new("a");
        for (huge, field) in [
            (c.clone().lease_duration(Duration::MAX), "lease_duration"),
            (c.clone().renew_deadline(Duration::MAX), "renew_deadline"),
            (c.clone().retry_period(Duration::MAX), "retry_period"),
        ] {
            let m = message(&huge);
            assert!(m.contains(field) && m.contains("at most"), "{m}");
        }
    }

    #[test]
    fn the_builders_set_the_timings_and_validate_checks_them() {
        let s = Duration::from_secs;
        let c = ElectionConfig::new("a")
            .lease_duration(s(10))
            .renew_deadline(s(10))
            .retry_period(s(1));
        assert_eq!(
            c.timings,
            LeaderTimings::default()
                .lease_duration(s(10))
                .renew_deadline(s(10))
                .retry_period(s(1))
        );
        assert!(message(&c).contains("greater than renew_deadline"));
        let scaled = c.timings(LeaderTimings::scaled_to(s(3)));
        assert_eq!(scaled.timings.renew_deadline, s(2));
        scaled.check().unwrap();
    }
}
