//! Histories and helpers the tests share.

use crate::history::{Event, EventKind, WriteOutcome, NEMESIS};

pub(super) const MS: u64 = 1_000_000;

pub(super) fn ev(at_ms: u64, client: &str, kind: EventKind) -> Event {
    Event::new(at_ms * MS, client, kind)
}

pub(super) fn grant(at: u64, c: &str, token: u64) -> Event {
    ev(
        at,
        c,
        EventKind::Grant {
            resource: "r".into(),
            token,
        },
    )
}

pub(super) fn write(sent: u64, at: u64, c: &str, token: u64, outcome: WriteOutcome) -> Event {
    ev(
        at,
        c,
        EventKind::Write {
            resource: "r".into(),
            token,
            gate: "g".into(),
            start_ns: sent * MS,
            outcome,
            value: at,
        },
    )
}

/// c1 holds 1 past c2's grant of 2 (a violation), c3 crashes under a
/// pause, a partition spans all lanes.
pub(super) fn small() -> Vec<Event> {
    vec![
        ev(
            0,
            "c1",
            EventKind::AcquireStart {
                resource: "r".into(),
            },
        ),
        grant(1, "c1", 1),
        write(2, 3, "c1", 1, WriteOutcome::Accepted),
        ev(
            3,
            NEMESIS,
            EventKind::FaultStart {
                fault: "partition-leader".into(),
                target: "n1".into(),
                id: 1,
            },
        ),
        ev(
            4,
            "c2",
            EventKind::AcquireStart {
                resource: "r".into(),
            },
        ),
        grant(10, "c2", 2),
        write(11, 12, "c2", 2, WriteOutcome::Accepted),
        ev(
            13,
            "c1",
            EventKind::Lost {
                resource: "r".into(),
                token: 1,
                reason: "<expired> & \"gone\"".into(),
            },
        ),
        write(14, 15, "c1", 1, WriteOutcome::Refused),
        write(14, 16, "c2", 2, WriteOutcome::Unknown),
        ev(16, NEMESIS, EventKind::FaultEnd { id: 1 }),
        ev(
            17,
            NEMESIS,
            EventKind::FaultStart {
                fault: "pause-client".into(),
                target: "c3".into(),
                id: 2,
            },
        ),
        ev(18, "c3", EventKind::Crash {}),
        ev(19, NEMESIS, EventKind::FaultEnd { id: 2 }),
        ev(
            20,
            "c2",
            EventKind::Release {
                resource: "r".into(),
                token: 2,
            },
        ),
    ]
}

/// The opening tag of the element carrying `data-ev="i"`.
pub(super) fn tag_of(html: &str, i: usize) -> &str {
    let at = html
        .find(&format!("data-ev=\"{i}\""))
        .unwrap_or_else(|| panic!("event {i} is drawn"));
    let start = html[..at].rfind('<').unwrap();
    let end = at + html[at..].find('>').unwrap();
    &html[start..=end]
}
