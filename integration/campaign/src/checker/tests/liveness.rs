//! liveness, after the last fault and after every heal.

use super::*;

#[test]
fn a_lock_left_without_a_grant_after_a_heal_fails_liveness() {
    // c2 waits for r from 4 ms; a member fault heals at 5 ms, the next
    // grant comes at 10 ms: 5 ms of fault-free waiting.
    let mut h = overlap(9);
    h.fault(2, 5, "kill-leader", "m1", 1);
    let bound = |ms: u64| BackendFacts {
        heal_bound: Some(Duration::from_millis(ms)),
        ..BackendFacts::default()
    };
    let report = run(&h.0, None, bound(6));
    assert!(report.passed(), "{report}");
    let report = run(&h.0, None, bound(4));
    assert_only_fails(&report, LIVENESS);
    let v = &report.property(LIVENESS).unwrap().violations;
    assert!(
        v[0].message.contains("r waited 0.01 s") && v[0].message.contains("kill-leader 1"),
        "{}",
        v[0].message
    );
    // A second leader fault from 6 to 9 ms explains 3 ms of the wait.
    let mut two = overlap(9);
    two.fault(2, 5, "kill-leader", "m1", 1);
    two.fault(6, 9, "pause-leader", "m2", 2);
    assert!(run(&two.0, None, bound(4)).passed());
    // A client's fault does not stop grants: it explains nothing.
    let mut client = overlap(9);
    client.fault(2, 5, "kill-leader", "m1", 1);
    client.fault(6, 9, "pause-client", "c3", 2);
    assert!(!run(&client.0, None, bound(4)).passed());
}

#[test]
fn stuck_after_last_fault_fails_liveness() {
    let mut h = clean();
    h.fault(30, 40, "kill-member", "n2", 2);
    h.add(start(41, "c2"));
    let report = check(&h.0);
    assert_only_fails(&report, LIVENESS);
    let v = &report.property(LIVENESS).unwrap().violations;
    assert!(v[0].message.starts_with("stuck"), "{}", v[0].message);
    assert_eq!(report.figures.recovery_ms, None);

    h.add(release(42, "c1", 3));
    h.add(grant(45, "c2", 4));
    let report = check(&h.0);
    assert!(report.passed(), "{report}");
    assert_eq!(report.figures.recovery_ms, Some(5.0));
    assert_eq!(report.figures.faults_by_kind.len(), 2);

    // Nobody tries after the last fault: not stuck.
    let mut quiet = clean();
    quiet.fault(30, 40, "kill-member", "n2", 2);
    assert!(check(&quiet.0).passed());
}
