//! Events for unit tests, built tersely: times in ms, every event on the
//! resource `r`, every write through the gate `g`. The checker's and the
//! timeline's tests share them.

use super::{Event, EventKind, WriteOutcome, NEMESIS};

pub(crate) const MS: u64 = 1_000_000;

pub(crate) fn ev(at_ms: u64, client: &str, kind: EventKind) -> Event {
    Event::new(at_ms * MS, client, kind)
}

pub(crate) fn start(at: u64, c: &str) -> Event {
    let resource = "r".into();
    ev(at, c, EventKind::AcquireStart { resource })
}

pub(crate) fn grant(at: u64, c: &str, token: u64) -> Event {
    let resource = "r".into();
    ev(at, c, EventKind::Grant { resource, token })
}

pub(crate) fn lost(at: u64, c: &str, token: u64, reason: &str) -> Event {
    let (resource, reason) = ("r".into(), reason.into());
    ev(
        at,
        c,
        EventKind::Lost {
            resource,
            token,
            reason,
        },
    )
}

pub(crate) fn release(at: u64, c: &str, token: u64) -> Event {
    let resource = "r".into();
    ev(at, c, EventKind::Release { resource, token })
}

/// A write sent at `sent` and answered at `at`.
pub(crate) fn write(
    sent: u64,
    at: u64,
    c: &str,
    token: u64,
    outcome: WriteOutcome,
    value: u64,
) -> Event {
    let kind = EventKind::Write {
        resource: "r".into(),
        token,
        gate: "g".into(),
        start_ns: sent * MS,
        outcome,
        value,
    };
    ev(at, c, kind)
}

pub(crate) fn fault_start(at: u64, fault: &str, target: &str, id: u64) -> Event {
    let (fault, target) = (fault.into(), target.into());
    ev(at, NEMESIS, EventKind::FaultStart { fault, target, id })
}

pub(crate) fn fault_end(at: u64, id: u64) -> Event {
    ev(at, NEMESIS, EventKind::FaultEnd { id })
}
