//! Unit tests of the checker: the shared history builder and the
//! whole-report cases; one file per property besides.

use super::*;
use crate::history::test_events::{
    ev, fault_end, fault_start, grant, lost, release, start, write, MS,
};
use crate::history::{WriteOutcome, NEMESIS};

mod durability;
mod liveness;
mod loss;
mod report;
mod tokens;

/// Builds histories of [`crate::history::test_events`]; `add` returns the
/// event's index.
#[derive(Default)]
struct H(Vec<Event>);

impl H {
    fn add(&mut self, event: Event) -> usize {
        self.0.push(event);
        self.0.len() - 1
    }
    fn push(&mut self, at: u64, client: &str, kind: EventKind) -> usize {
        self.add(ev(at, client, kind))
    }
    /// The write at `i` gets `outcome`.
    fn set_outcome(&mut self, i: usize, outcome: WriteOutcome) {
        match &mut self.0[i].kind {
            EventKind::Write { outcome: o, .. } => *o = outcome,
            other => panic!("event {i} is no write: {other:?}"),
        }
    }
    /// The grant or write at `i` gets `token`.
    fn set_token(&mut self, i: usize, token: u64) {
        match &mut self.0[i].kind {
            EventKind::Grant { token: t, .. } | EventKind::Write { token: t, .. } => *t = token,
            other => panic!("event {i} is neither grant nor write: {other:?}"),
        }
    }
    fn fault(&mut self, from: u64, to: u64, fault: &str, target: &str, id: u64) {
        self.add(fault_start(from, fault, target, id));
        self.add(fault_end(to, id));
    }
}

/// c1 holds 1, writes, releases; c2 acquires meanwhile, gets 2 when c1
/// released, writes; a partition comes and goes; c1 gets 3.
fn clean() -> H {
    let mut h = H::default();
    h.add(start(0, "c1"));
    h.add(grant(1, "c1", 1));
    h.add(start(2, "c2"));
    h.add(write(3, 4, "c1", 1, WriteOutcome::Accepted, 10));
    h.add(release(5, "c1", 1));
    h.add(grant(6, "c2", 2));
    h.add(write(7, 8, "c2", 2, WriteOutcome::Accepted, 20));
    h.add(write(8, 9, "c2", 2, WriteOutcome::Accepted, 21));
    h.fault(10, 20, "partition-leader", "n1", 1);
    h.add(start(11, "c1"));
    h.add(lost(12, "c2", 2, "lease expired"));
    h.add(grant(25, "c1", 3));
    h.add(write(26, 27, "c1", 3, WriteOutcome::Accepted, 30));
    h.add(write(26, 28, "c2", 2, WriteOutcome::Refused, 22));
    h
}

fn assert_only_fails(report: &Report, name: &str) {
    for p in &report.properties {
        assert_eq!(p.passed, p.name != name, "{}\n{report}", p.name);
    }
    assert!(!report.passed());
    let v = &report.property(name).unwrap().violations;
    assert!(!v.is_empty());
}

#[test]
fn clean_history_passes() {
    let h = clean();
    let report = check(&h.0);
    assert!(report.passed(), "{report}");
    assert_eq!(report.properties.len(), 6);
    let f = &report.figures;
    assert_eq!((f.grants, f.clients, f.events), (3, 2, h.0.len()));
    assert_eq!(
        (f.writes_accepted, f.writes_refused, f.writes_unknown),
        (4, 1, 0)
    );
    assert_eq!(f.faults_by_kind.get("partition-leader"), Some(&1));
    assert_eq!(f.recovery_ms, Some(5.0));
    assert_eq!(f.max_grant_gap_ms, Some(19.0));
    let hold = f.max_hold.as_ref().unwrap();
    assert_eq!((hold.client.as_str(), hold.token, hold.ms), ("c2", 2, 6.0));
    assert_eq!(
        report.property(DURABILITY).unwrap().notes,
        vec!["not checked".to_string()]
    );
    let text = report.to_string();
    assert!(
        text.contains("durability") && text.contains("not checked"),
        "{text}"
    );
    assert!(!text.contains("FAIL"), "{text}");
}

#[test]
fn shuffled_file_order_is_tolerated() {
    let mut events = clean().0;
    events.reverse();
    assert!(check(&events).passed());
}

/// c1 holds 1 and never notices; c2 is granted 2 at 10 ms.
fn overlap(lost_at: u64) -> H {
    let mut h = H::default();
    h.add(start(0, "c1"));
    h.add(grant(1, "c1", 1));
    h.add(write(2, 3, "c1", 1, WriteOutcome::Accepted, 10));
    h.add(start(4, "c2"));
    h.add(grant(10, "c2", 2));
    h.add(write(11, 12, "c2", 2, WriteOutcome::Accepted, 20));
    h.add(lost(lost_at, "c1", 1, "lease expired"));
    h.add(write(14, 15, "c1", 1, WriteOutcome::Refused, 11));
    h
}

#[test]
fn empty_history_passes() {
    let report = check(&[]);
    assert!(report.passed());
    assert_eq!(report.figures.events, 0);
    let _ = report.to_string();
}
