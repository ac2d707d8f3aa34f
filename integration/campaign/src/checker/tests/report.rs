//! The report's `Display`.

use super::*;

#[test]
fn display_lists_failures_and_caps_violations() {
    let mut h = H::default();
    for k in 0..15 {
        h.add(grant(k, &format!("c{k}"), 1));
    }
    let report = check(&h.0);
    let text = report.to_string();
    assert!(
        text.contains("unique-tokens") && text.contains("FAIL"),
        "{text}"
    );
    // 1 duplicate group: one violation naming all 15 grants.
    assert_eq!(report.property(UNIQUE_TOKENS).unwrap().violations.len(), 1);

    let mut h = H::default();
    for k in 0..12u64 {
        h.add(write(
            2 * k + 2,
            2 * k + 3,
            "c",
            1,
            WriteOutcome::Accepted,
            k,
        ));
    }
    h.add(write(0, 1, "c0", 9, WriteOutcome::Accepted, 99));
    let report = check(&h.0);
    assert_eq!(
        report.property(GATE_MONOTONIC).unwrap().violations.len(),
        12
    );
    let text = report.to_string();
    assert!(text.contains("... and 2 more"), "{text}");
    assert_eq!(text.matches("  - gate g accepted").count(), 10, "{text}");
}
