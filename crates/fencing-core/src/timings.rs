//! client-go's three leader-election timings, in one type that the elector
//! and the Kubernetes backend share.

use std::time::Duration;

use crate::error::{Error, Result};

/// client-go's default lease duration (LeaseDuration).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// client-go's default renew deadline (RenewDeadline).
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// client-go's default retry period (RetryPeriod).
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// The longest timing [`LeaderTimings::check`] accepts: `i32::MAX` seconds,
/// about 68 years. Kubernetes stores a Lease's duration as 32-bit seconds,
/// so nothing longer could be written there anyway, and every deadline
/// built from a checked timing (`Instant + Duration`, a jittered retry
/// period) stays far inside what the clock types can count.
const MAX_TIMING: Duration = Duration::from_secs(i32::MAX as u64);

/// How long a lease lasts, how soon its holder without a renewal gives it
/// up, and how often others look and retry: client-go's
/// `LeaderElectionConfig` timings, with its names, defaults (15 s, 10 s,
/// 2 s) and rule (`lease_duration > renew_deadline > 1.2 x retry_period`,
/// 1.2 being client-go's jitter factor: a renewal retried with jitter must
/// still land before the deadline).
///
/// The elector's `ElectionConfig` and the Kubernetes backend's
/// `LeaseOptions` both hold one, so a value checked once means the same
/// thing in both places.
///
/// ```
/// use std::time::Duration;
/// use fencing_core::LeaderTimings;
///
/// let t = LeaderTimings::default()
///     .lease_duration(Duration::from_secs(6))
///     .renew_deadline(Duration::from_secs(4))
///     .retry_period(Duration::from_secs(1));
/// t.check()?;
/// assert!(t.renew_deadline(Duration::from_secs(6)).check().is_err());
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderTimings {
    /// How long the coordinator keeps a silent holder's lease before others
    /// may take over.
    pub lease_duration: Duration,
    /// A holder whose lease was last renewed longer ago than this counts as
    /// having lost it, before the lease can run out at the coordinator.
    pub renew_deadline: Duration,
    /// How often others look at the lease, and the pause before a retry.
    pub retry_period: Duration,
}

impl Default for LeaderTimings {
    fn default() -> Self {
        LeaderTimings {
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }
}

impl LeaderTimings {
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

    /// Timings for a lease of `lease`, with client-go's proportions
    /// (15 : 10 : 2), which follow the rule for any lease of at least 1 µs.
    #[must_use]
    pub fn scaled_to(lease: Duration) -> Self {
        LeaderTimings {
            lease_duration: lease,
            renew_deadline: lease * 2 / 3,
            retry_period: lease * 2 / 15,
        }
    }

    /// Checks that each timing is at most `i32::MAX` seconds (about 68
    /// years: what a Kubernetes Lease can store, and far from where a
    /// deadline `now + timing` could overflow), then client-go's rule:
    /// `retry_period > 0` and `lease_duration > renew_deadline > 1.2 x
    /// retry_period`. The [`Error::Config`] names the field or the rule
    /// that failed.
    pub fn check(&self) -> Result<()> {
        self.check_bounds()?;
        let (lease, renew, retry) = (self.lease_duration, self.renew_deadline, self.retry_period);
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

    /// Each timing at most [`MAX_TIMING`], checked before any rule that
    /// compares or scales them.
    fn check_bounds(&self) -> Result<()> {
        for (field, value) in [
            ("lease_duration", self.lease_duration),
            ("renew_deadline", self.renew_deadline),
            ("retry_period", self.retry_period),
        ] {
            if value > MAX_TIMING {
                return Err(Error::Config(format!(
                    "{field} ({value:?}) must be at most {MAX_TIMING:?} (i32::MAX seconds)"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn defaults_are_client_go_s_and_valid() {
        let t = LeaderTimings::default();
        assert_eq!(
            (t.lease_duration, t.renew_deadline, t.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        t.check().unwrap();
    }

    #[test]
    fn each_rule_is_named() {
        let s = Duration::from_secs;
        let message = |t: LeaderTimings| match t.check() {
            Err(Error::Config(m)) => m,
            other => panic!("{t:?}: {other:?}"),
        };
        let t = LeaderTimings::default();
        assert!(message(t.retry_period(Duration::ZERO)).contains("greater than zero"));
        assert!(message(t.renew_deadline(s(15))).contains("greater than renew_deadline"));
        assert!(message(t.renew_deadline(s(2)).lease_duration(s(3))).contains("1.2 x"));
        // 5 x 12 = 6 x 10: exactly 1.2 x is refused, just above passes.
        let edge = t
            .renew_deadline(Duration::from_millis(12))
            .retry_period(Duration::from_millis(10));
        assert!(edge.check().is_err());
        assert!(edge
            .renew_deadline(Duration::from_micros(12_001))
            .check()
            .is_ok());
    }

    /// A timing past the bound is refused by name, before any rule that
    /// compares timings (where `Instant + Duration` would later overflow).
    #[test]
    fn durations_past_the_bound_are_refused_by_name() {
        let message = |t: LeaderTimings| match t.check() {
            Err(Error::Config(m)) => m,
            other => panic!("{t:?}: {other:?}"),
        };
        let t = LeaderTimings::default();
        let bound = Duration::from_secs(i32::MAX.unsigned_abs().into());
        for (huge, field) in [
            (t.lease_duration(Duration::MAX), "lease_duration"),
            (t.renew_deadline(Duration::MAX), "renew_deadline"),
            (t.retry_period(Duration::MAX), "retry_period"),
            (
                t.lease_duration(Duration::MAX)
                    .renew_deadline(Duration::MAX / 2)
                    .retry_period(Duration::MAX / 4),
                "lease_duration",
            ),
            (
                t.lease_duration(bound + Duration::from_nanos(1)),
                "lease_duration",
            ),
        ] {
            let m = message(huge);
            assert!(m.contains(field) && m.contains("at most"), "{huge:?}: {m}");
        }
        t.lease_duration(bound).check().unwrap();
    }

    proptest! {
        #[test]
        fn scaled_timings_always_pass(micros in 1u64..1_000_000_000_000) {
            let t = LeaderTimings::scaled_to(Duration::from_micros(micros));
            prop_assert!(t.check().is_ok(), "{:?}", t);
        }
    }
}
