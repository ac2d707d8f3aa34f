//! Time the machine spent suspended, which tokio's clock does not see.
//!
//! Deadlines are kept on tokio's `Instant`, which is CLOCK_MONOTONIC on
//! Linux: it stands still while the machine is suspended, while the
//! coordinator's clock runs on and its TTL ends. CLOCK_BOOTTIME counts the
//! suspended time too, so the two drift apart by exactly that time. Where
//! there is no boot-time clock (not Linux), nothing is detected: a lease
//! then only holds across a suspend shorter than its remaining time.

use std::time::Duration;

/// Two clock reads are not one: differences below this are noise, not a
/// suspend.
const NOISE: Duration = Duration::from_millis(1);

/// How long the machine has been suspended since it booted (to within
/// [`NOISE`]), as a running total: only differences between two reads mean
/// anything.
pub(crate) fn total() -> Duration {
    let total = boot_minus_monotonic() + injected();
    // Rounded down to whole NOISE units, so that jitter between the two
    // reads never shows up as a new suspend.
    let units = total.as_nanos() / NOISE.as_nanos();
    NOISE * u32::try_from(units).unwrap_or(u32::MAX)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn boot_minus_monotonic() -> Duration {
    use rustix::time::{clock_gettime, ClockId};
    let of = |t: rustix::time::Timespec| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        )
    };
    let boot = of(clock_gettime(ClockId::Boottime));
    let monotonic = of(clock_gettime(ClockId::Monotonic));
    boot.saturating_sub(monotonic)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn boot_minus_monotonic() -> Duration {
    Duration::ZERO
}

#[cfg(test)]
thread_local! {
    static INJECTED: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// A suspend the tests inject on their own thread (tokio's paused clock
/// plays CLOCK_MONOTONIC, which stands still meanwhile).
#[cfg(test)]
pub(crate) fn inject(suspended: Duration) {
    INJECTED.with(|i| i.set(i.get() + suspended));
}

#[cfg(test)]
fn injected() -> Duration {
    INJECTED.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn injected() -> Duration {
    Duration::ZERO
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_never_goes_back_and_counts_injected_suspends() {
        let before = total();
        inject(Duration::from_secs(30));
        let after = total();
        assert!(
            after >= before + Duration::from_secs(30),
            "{before:?} -> {after:?}"
        );
        assert!(total() >= after);
    }
}
