//! When `fence run` must start stopping the command, so that it is dead
//! before anyone else can be granted the lock.
//!
//! The rule, in terms of the lease window W: how long after a renewal's
//! send time the holder may count on the lease (the grant's local deadline
//! minus that send time; 0.9 x TTL, on Kubernetes 0.9 x the renew
//! deadline). The coordinator cannot grant the lock to anyone else before
//! the full TTL has passed since that send time, which is later still.
//!
//! - SIGKILL at the local deadline minus W/20 (0.855 x TTL after the last
//!   renewal was sent), so the kill has landed with time to spare;
//! - the watchdog, should `fence` be frozen or dead, SIGKILLs at the
//!   deadline minus W/40, after `fence` would have;
//! - SIGTERM `--grace` before that;
//! - `--grace` at most 9/20 x W, so SIGTERM never comes before half of the
//!   window: renewals run every TTL/3 or more often, and a lease whose next
//!   renewal succeeds is never cut short;
//! - `--grace` defaults to W/10, at most 10 s.

use std::time::Duration;

use fencing::Grant;
use tokio::time::Instant;

use crate::failure::{Failure, Result};

/// The longest default grace, as before the rule existed.
const DEFAULT_GRACE_CAP: Duration = Duration::from_secs(10);

/// The stopping schedule of one grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The lease window W (see the module documentation).
    pub window: Duration,
    /// Time between SIGTERM and SIGKILL.
    pub grace: Duration,
}

impl Timing {
    /// The schedule for `grant`, with the grace the user asked for (checked)
    /// or the default.
    pub fn for_grant(grant: &Grant, grace: Option<Duration>) -> Result<Timing> {
        let window = grant
            .deadline()
            .saturating_duration_since(grant.lease().last_renewal());
        Timing::new(window, grace, &format!("the {:?} lease", grant.ttl()))
    }

    /// The schedule for a window; `lease` names the lease in the message.
    pub fn new(window: Duration, grace: Option<Duration>, lease: &str) -> Result<Timing> {
        let grace = match grace {
            None => default_grace(window),
            Some(g) if g <= max_grace(window) => g,
            Some(g) => return Err(too_long(g, window, lease)),
        };
        Ok(Timing { window, grace })
    }

    /// When the command must be dead, for the local deadline `deadline`.
    pub fn kill_at(&self, deadline: Instant) -> Instant {
        deadline.checked_sub(self.window / 20).unwrap_or(deadline)
    }

    /// When the watchdog kills the group if `fence` has not: half way
    /// between `fence`'s own kill time and the deadline, so that it acts
    /// only when `fence` could not.
    pub fn watchdog_at(&self, deadline: Instant) -> Instant {
        deadline.checked_sub(self.window / 40).unwrap_or(deadline)
    }

    /// When the command gets SIGTERM, unless the deadline moves first.
    pub fn stop_at(&self, deadline: Instant) -> Instant {
        let kill = self.kill_at(deadline);
        kill.checked_sub(self.grace).unwrap_or(kill)
    }

    /// How often the supervisor looks at the deadline to pass renewals on
    /// to the watchdog: a frozen supervisor leaves the watchdog with a kill
    /// time at most this much earlier than needed (the safe direction).
    pub fn check_every(&self) -> Duration {
        (self.window / 10).max(Duration::from_millis(10))
    }
}

/// The window of a lease of `ttl`, as every backend but Kubernetes (whose
/// window is shorter) computes it: known before connecting, so a grace that
/// cannot fit is refused before anything is acquired.
pub fn window_for_ttl(ttl: Duration) -> Duration {
    ttl.saturating_sub(fencing::core::backend::drift_margin(ttl))
}

/// SIGTERM no earlier than half the window, SIGKILL W/20 before its end.
pub fn max_grace(window: Duration) -> Duration {
    window * 9 / 20
}

/// Enough for a command to flush and exit, short enough that renewals get
/// several tries before stopping starts.
pub fn default_grace(window: Duration) -> Duration {
    (window / 10).min(DEFAULT_GRACE_CAP)
}

fn too_long(grace: Duration, window: Duration, lease: &str) -> Failure {
    Failure::usage(format!(
        "--grace {grace:?} does not fit in {lease}: the holder can count on it for {window:?} \
         after each renewal, the command must be dead {:?} before that ends and may not be \
         told to stop before half of it has passed, so --grace can be at most {:?}; \
         lower --grace or raise --ttl",
        window / 20,
        max_grace(window)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_fifteen_second_ttl_kills_at_twelve_point_eight_and_allows_six_seconds() {
        let window = window_for_ttl(ms(15_000));
        assert_eq!(window, ms(13_500));
        assert_eq!(max_grace(window), ms(6_075));
        assert_eq!(default_grace(window), ms(1_350));
        let t = Timing::new(window, Some(ms(6_000)), "the lease").unwrap();
        let sent = Instant::now();
        let deadline = sent + window;
        assert_eq!(t.kill_at(deadline) - sent, ms(12_825));
        assert_eq!(t.stop_at(deadline) - sent, ms(6_825));
        assert_eq!(
            t.watchdog_at(deadline) - sent,
            ms(13_162) + Duration::from_micros(500)
        );
    }

    #[test]
    fn sigterm_never_comes_before_half_the_window() {
        for ttl in [300, 1_000, 2_000, 15_000, 300_000] {
            let window = window_for_ttl(ms(ttl));
            let t = Timing::new(window, Some(max_grace(window)), "l").unwrap();
            let sent = Instant::now();
            assert!(t.stop_at(sent + window) - sent >= window / 2, "ttl {ttl}");
            // The next renewal is due a third of the TTL after the last.
            assert!(t.stop_at(sent + window) - sent > ms(ttl) / 3, "ttl {ttl}");
        }
    }

    #[test]
    fn a_grace_that_cannot_fit_is_refused_with_the_limit() {
        let window = window_for_ttl(ms(2_000));
        let f = Timing::new(window, Some(ms(1_000)), "a 2s lease").unwrap_err();
        assert_eq!(f.code, crate::failure::USAGE);
        assert!(f.message.contains("--grace 1s"), "{}", f.message);
        assert!(f.message.contains("at most 810ms"), "{}", f.message);
        assert!(Timing::new(window, Some(ms(810)), "l").is_ok());
    }

    #[test]
    fn the_default_grace_is_a_tenth_of_the_window_up_to_ten_seconds() {
        assert_eq!(default_grace(ms(9_000)), ms(900));
        assert_eq!(default_grace(ms(270_000)), DEFAULT_GRACE_CAP);
    }
}
