//! Histories and helpers the tests share.

pub(super) use crate::history::test_events::{
    ev, fault_end, fault_start, grant, lost, release, start, write, MS,
};
use crate::history::{Event, EventKind, WriteOutcome};

/// c1 holds 1 past c2's grant of 2 (a violation), c3 crashes under a
/// pause, a partition spans all lanes.
pub(super) fn small() -> Vec<Event> {
    vec![
        start(0, "c1"),
        grant(1, "c1", 1),
        write(2, 3, "c1", 1, WriteOutcome::Accepted, 3),
        fault_start(3, "partition-leader", "n1", 1),
        start(4, "c2"),
        grant(10, "c2", 2),
        write(11, 12, "c2", 2, WriteOutcome::Accepted, 12),
        lost(13, "c1", 1, "<expired> & \"gone\""),
        write(14, 15, "c1", 1, WriteOutcome::Refused, 15),
        write(14, 16, "c2", 2, WriteOutcome::Unknown, 16),
        fault_end(16, 1),
        fault_start(17, "pause-client", "c3", 2),
        ev(18, "c3", EventKind::Crash {}),
        fault_end(19, 2),
        release(20, "c2", 2),
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
