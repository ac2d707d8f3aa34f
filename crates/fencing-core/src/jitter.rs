//! Random spread on retry pauses, so that many clients that failed together
//! (a leader election, a restarted server, a released lock) do not retry
//! in lockstep.

use std::time::Duration;

/// client-go's `JitterFactor` for a candidate's acquire attempts: each
/// pause is the retry period plus up to 1.2 times it.
pub const JITTER_FACTOR: f64 = 1.2;

/// `pause` plus a uniformly random extra of up to `max_factor x pause`
/// (client-go's `wait.Jitter`). A factor that is not positive and finite
/// gives `pause` unchanged.
///
/// ```
/// use std::time::Duration;
/// use fencing_core::__private::jittered;
///
/// let d = jittered(Duration::from_secs(2), 1.2);
/// assert!(d >= Duration::from_secs(2) && d <= Duration::from_millis(4400));
/// ```
#[must_use]
pub fn jittered(pause: Duration, max_factor: f64) -> Duration {
    if !(max_factor.is_finite() && max_factor > 0.0) {
        return pause;
    }
    pause + pause.mul_f64(fastrand::f64() * max_factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn stays_within_pause_and_pause_times_one_plus_factor(
            millis in 0u64..1_000_000, factor in -2.0f64..3.0
        ) {
            let pause = Duration::from_millis(millis);
            let d = jittered(pause, factor);
            prop_assert!(d >= pause);
            prop_assert!(d <= pause.mul_f64(1.0 + factor.max(0.0)) + Duration::from_nanos(1));
        }
    }

    #[test]
    fn pauses_spread_over_the_range() {
        let pause = Duration::from_millis(1000);
        let draws: Vec<Duration> = (0..200).map(|_| jittered(pause, JITTER_FACTOR)).collect();
        let (min, max) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        // 200 uniform draws over [1 s, 2.2 s]: both ends are within 0.3 s
        // of the bounds unless the draws are not spread at all.
        assert!(*min < Duration::from_millis(1300), "{min:?}");
        assert!(*max > Duration::from_millis(1900), "{max:?}");
        assert_eq!(jittered(pause, f64::NAN), pause);
        assert_eq!(jittered(pause, 0.0), pause);
    }
}
