//! unique-tokens, monotonic-grants and gate-monotonic.

use super::*;

#[test]
fn duplicate_token_fails_unique_tokens() {
    let mut h = clean();
    // c1's last grant carries c2's token 2 (granted in real time after
    // c2's lost 2, so monotonic-grants fails too).
    h.set_token(12, 2);
    // Keep the writes consistent so only token properties break.
    h.set_token(13, 2);
    let report = check(&h.0);
    let p = report.property(UNIQUE_TOKENS).unwrap();
    assert!(!p.passed, "{report}");
    assert_eq!(p.violations.len(), 1);
    assert_eq!(p.violations[0].events, vec![5, 12]);
    assert!(p.violations[0]
        .message
        .contains("token 2 of r granted 2 times"));
    assert!(!report.property(MONOTONIC_GRANTS).unwrap().passed);
    assert!(report.property(GATE_MONOTONIC).unwrap().passed);
}

#[test]
fn duplicate_token_in_overlapping_acquires_fails_only_unique_tokens() {
    let mut h = H::default();
    h.add(start(0, "c1"));
    h.add(start(0, "c2"));
    h.add(grant(1, "c1", 4));
    h.add(release(2, "c1", 4));
    h.add(grant(3, "c2", 4));
    assert!(!check(&h.0).property(UNIQUE_TOKENS).unwrap().passed);
    assert!(check(&h.0).property(MONOTONIC_GRANTS).unwrap().passed);
}

#[test]
fn token_going_down_in_real_time_fails_monotonic_grants() {
    let mut h = clean();
    h.set_token(12, 0); // c1 acquires at 11 ms, after c2's grant of 2 at 6 ms
    h.0.truncate(13); // without the writes (gate-monotonic would see them)
    let report = check(&h.0);
    assert_only_fails(&report, MONOTONIC_GRANTS);
    let v = &report.property(MONOTONIC_GRANTS).unwrap().violations;
    assert_eq!(v.len(), 1, "{report}");
    assert_eq!(v[0].events, vec![5, 10, 12]);
    assert!(
        v[0].message.contains("c1 was granted token 0"),
        "{}",
        v[0].message
    );
    assert!(
        v[0].message.contains("c2 was granted token 2"),
        "{}",
        v[0].message
    );
}

#[test]
fn overlapping_acquires_are_unordered() {
    let mut h = H::default();
    h.add(start(0, "c1"));
    h.add(start(1, "c2"));
    h.add(grant(2, "c2", 5));
    h.add(release(3, "c2", 5));
    h.add(grant(4, "c1", 4)); // began before c2's grant returned: fine
    h.add(release(5, "c1", 4));
    assert!(check(&h.0).passed(), "{}", check(&h.0));
    // ... but had c1 begun after c2's grant returned, it is not.
    h.0[0].at_ns = 2 * MS + 1;
    let report = check(&h.0);
    assert_only_fails(&report, MONOTONIC_GRANTS);
}

#[test]
fn gate_accepting_lower_after_higher_fails_gate_monotonic() {
    let mut h = H::default();
    h.add(write(0, 1, "c2", 7, WriteOutcome::Accepted, 70));
    h.add(write(1, 2, "c1", 5, WriteOutcome::Refused, 50));
    h.add(write(1, 3, "c1", 7, WriteOutcome::Accepted, 71)); // equal: a retry
    assert!(check(&h.0).passed());
    // Concurrent with the 7: may be ordered before it.
    h.add(write(0, 3, "c1", 5, WriteOutcome::Accepted, 51));
    assert!(check(&h.0).passed(), "{}", check(&h.0));
    // Sent after the 7 completed: must have been refused.
    let w = h.add(write(2, 4, "c1", 5, WriteOutcome::Accepted, 52));
    let report = check(&h.0);
    assert_only_fails(&report, GATE_MONOTONIC);
    let v = &report.property(GATE_MONOTONIC).unwrap().violations;
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].events, vec![0, w]);
    assert!(v[0].message.contains("token 5") && v[0].message.contains("token 7"));
    // Another gate is independent.
    let EventKind::Write { gate, .. } = &mut h.0[w].kind else {
        panic!()
    };
    *gate = "other".into();
    assert!(check(&h.0).passed());
}
