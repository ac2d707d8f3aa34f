//! durability.

use super::*;

#[test]
fn acknowledged_write_missing_afterwards_fails_durability() {
    let h = clean();
    let all = |writes: &[(u64, u64)]| Stored {
        gate: "g".into(),
        writes: writes.iter().map(|&(t, v)| ("r".into(), t, v)).collect(),
        ..Stored::default()
    };
    // Refused writes need not be there; extra ones (unknown outcomes
    // that landed) may be.
    let kept = all(&[(1, 10), (2, 20), (2, 21), (3, 30), (9, 99)]);
    let report = check_with_stored(&h.0, &kept, BackendFacts::default());
    assert!(report.passed(), "{report}");
    assert!(report.property(DURABILITY).unwrap().notes[0].starts_with("4 acknowledged"));

    let lost = all(&[(1, 10), (2, 20), (3, 30)]);
    let report = check_with_stored(&h.0, &lost, BackendFacts::default());
    assert_only_fails(&report, DURABILITY);
    let v = &report.property(DURABILITY).unwrap().violations;
    assert_eq!(v.len(), 1);
    assert!(
        v[0].message.starts_with("c2's write of 21 with token 2"),
        "{}",
        v[0].message
    );
    assert_eq!(v[0].events, vec![7]);

    // Another gate's writes are not its business.
    let other = Stored {
        gate: "other".into(),
        ..Stored::default()
    };
    assert!(check_with_stored(&h.0, &other, BackendFacts::default()).passed());
}

#[test]
fn a_mark_below_an_acknowledged_token_fails_durability() {
    // The clean history's gate g acknowledged tokens up to 3 on r.
    let h = clean();
    let marked = |mark: u64| Stored {
        gate: "other".into(),
        marks: [(("g".to_string(), "r".to_string()), mark)].into(),
        ..Stored::default()
    };
    // Higher than every acknowledged token: an unknown write landed.
    for mark in [3, 4] {
        let report = check_with_stored(&h.0, &marked(mark), BackendFacts::default());
        assert!(report.passed(), "{report}");
    }
    let report = check_with_stored(&h.0, &marked(2), BackendFacts::default());
    assert_only_fails(&report, DURABILITY);
    let v = &report.property(DURABILITY).unwrap().violations;
    assert!(
        v.iter().all(|v| v.message.contains("with token 3 to g/r")),
        "{v:?}"
    );

    // The notes count each resource's own writes.
    let mut two = marked(3);
    two.marks.insert(("g".into(), "elsewhere".into()), 0);
    let report = check_with_stored(&h.0, &two, BackendFacts::default());
    let notes = &report.property(DURABILITY).unwrap().notes;
    assert!(
        notes.contains(&"g/elsewhere: mark 0 (0 acknowledged writes)".to_string()),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("g/r: mark 3 (") && !n.contains("(0 ")),
        "{notes:?}"
    );
}
