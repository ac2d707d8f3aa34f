//! loss-before-next-grant, its exemptions and stale writes.

use super::*;

#[test]
fn holder_without_loss_fails_loss_before_next_grant() {
    assert!(check(&overlap(9).0).passed());
    assert!(check(&overlap(10).0).passed(), "at the grant is in time");
    let h = overlap(13);
    let report = check(&h.0);
    assert_only_fails(&report, LOSS_BEFORE_NEXT_GRANT);
    let v = &report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().violations;
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].events, vec![1, 4, 6]);
    let m = &v[0].message;
    assert!(m.contains("c1 still held token 1") && m.contains("c2 was granted token 2"));
    assert!(m.contains("both held it for 3.000 ms"), "{m}");

    // Never lost at all: overlap to the end of the history (15 ms).
    let mut h = overlap(13);
    h.0.remove(6);
    let report = check(&h.0);
    let m = &report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().violations[0].message;
    assert!(m.contains("never lost") && m.contains("5.000 ms"), "{m}");

    // A crash before the grant ends the hold; a crash after does not.
    let mut h = overlap(13);
    h.0.remove(6);
    h.push(9, "c1", EventKind::Crash {});
    assert!(check(&h.0).passed());
    h.0.last_mut().unwrap().at_ns = 11 * MS;
    assert!(!check(&h.0).passed());
}

#[test]
fn paused_holder_is_exempt_unless_stale_write_accepted() {
    // Same overlap, but c1 was paused over it.
    let mut h = overlap(13);
    h.fault(5, 12, "pause-client", "c1", 1);
    let report = check(&h.0);
    assert!(report.passed(), "{report}");
    assert!(report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().notes[0].contains("exempt"));

    // A pause of another client, or a fault before the grant, does not
    // excuse c1.
    let mut other = overlap(13);
    other.fault(5, 12, "pause-client", "c2", 1);
    assert!(!check(&other.0).passed());
    let mut before = overlap(13);
    before.fault(0, 1, "clock-fast", "c1", 1);
    before.0[1].at_ns = 2 * MS; // grant after the fault ended
    assert!(!check(&before.0).passed());
    let mut clock = overlap(13);
    clock.fault(5, 12, "clock-fast", "c1", 1);
    assert!(check(&clock.0).passed());
    // Leases are timed on the monotonic clock: a jump of the wall clock
    // is no excuse.
    let mut wall = overlap(13);
    wall.fault(5, 12, "wall-jump-back", "c1", 1);
    assert!(!check(&wall.0).passed());
    // Deleting the Leases revokes every holder without telling it.
    let mut deleted = overlap(13);
    deleted.fault(5, 12, "delete-leases", "deleted [\"r\"]", 1);
    assert!(check(&deleted.0).passed());
    let mut deleted = overlap(13);
    deleted.fault(
        5,
        12,
        "delete-holders",
        "m1: deleted [\"/campaign/r/1\"]",
        1,
    );
    assert!(check(&deleted.0).passed());

    // The paused holder's stale write, sent at 14 ms after c2's write
    // with token 2 completed at 12 ms, is accepted by the gate.
    h.set_outcome(7, WriteOutcome::Accepted);
    let report = check(&h.0);
    let p = report.property(LOSS_BEFORE_NEXT_GRANT).unwrap();
    assert!(!p.passed, "{report}");
    assert_eq!(p.violations.len(), 1);
    assert!(p.violations[0]
        .message
        .starts_with("stale write accepted from a holder past its lease"));
    assert_eq!(p.violations[0].events, vec![1, 5, 7]);
    // (gate-monotonic sees the same write.)
    assert!(!report.property(GATE_MONOTONIC).unwrap().passed);
}

#[test]
fn a_resumed_leaders_revoke_is_excused_only_where_the_server_has_that_bug() {
    let bugs = BackendFacts {
        resumed_leader_revokes_leases: true,
        ..BackendFacts::default()
    };
    // A member paused until 1 ms, i.e. 9 ms (within the grace) before
    // c2's grant at 10 ms: its late revoke may have deleted c1's key.
    let mut h = overlap(13);
    h.fault(0, 1, "pause-member", "m2", 1);
    assert!(
        !check(&h.0).passed(),
        "no excuse on a server without the bug"
    );
    let report = run(&h.0, None, bugs);
    assert!(report.passed(), "{report}");
    assert!(report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().notes[0]
        .contains("server or client-go bug"));
    // Long after the pause ended, it is no excuse.
    let mut late = overlap(13);
    late.fault(0, 1, "pause-member", "m2", 1);
    for e in &mut late.0 {
        if e.client != "nemesis" {
            e.at_ns += 3_000 * MS;
        }
        if let EventKind::Write { start_ns, .. } = &mut e.kind {
            *start_ns += 3_000 * MS;
        }
    }
    assert!(!run(&late.0, None, bugs).passed());
    // The excused holder's stale write is still checked.
    h.set_outcome(7, WriteOutcome::Accepted);
    assert!(!run(&h.0, None, bugs).passed());
}

#[test]
fn a_fast_candidate_is_the_documented_limit_only_on_kubernetes() {
    // c2, the next holder, ran on a fast clock over c1's hold.
    let mut h = overlap(13);
    h.fault(5, 12, "clock-fast", "c2", 1);
    assert!(
        !check(&h.0).passed(),
        "no excuse where the server keeps the time"
    );
    let kube = BackendFacts {
        candidates_judge_expiry_on_their_clocks: true,
        ..BackendFacts::default()
    };
    let report = run(&h.0, None, kube);
    assert!(report.passed(), "{report}");
    let notes = &report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().notes;
    assert!(
        notes.iter().any(|n| n.starts_with("DOCUMENTED LIMIT")),
        "{notes:?}"
    );
    // A slow clock, or another client's fast one, is not that limit.
    let mut slow = overlap(13);
    slow.fault(5, 12, "clock-slow", "c2", 1);
    assert!(!run(&slow.0, None, kube).passed());
    let mut other = overlap(13);
    other.fault(5, 12, "clock-fast", "c3", 1);
    assert!(!run(&other.0, None, kube).passed());
    // The holder's stale write is still checked.
    h.set_outcome(7, WriteOutcome::Accepted);
    assert!(!run(&h.0, None, kube).passed());
}

#[test]
fn anchor_and_careless_holders_are_exempt_unless_stale_write_accepted() {
    let deaf = [
        ("go1", "an anchor, told of no loss in time"),
        ("careless1", "careless by design, deaf to its loss"),
    ];
    for (name, why) in deaf {
        // The same overlap, c1 never hearing of (or heeding) its loss.
        let mut h = overlap(13);
        for e in h.0.iter_mut().filter(|e| e.client == "c1") {
            e.client = name.into();
        }
        let report = check(&h.0);
        assert!(report.passed(), "{report}");
        // Its stale write accepted after c2's newer one.
        h.set_outcome(7, WriteOutcome::Accepted);
        let report = check(&h.0);
        let p = report.property(LOSS_BEFORE_NEXT_GRANT).unwrap();
        assert_eq!(p.violations.len(), 1, "{report}");
        let message = &p.violations[0].message;
        assert!(message.contains(&format!("{name}'s write with token 1")));
        assert!(
            message.ends_with(&format!("(exempt as {why})")),
            "{message}"
        );
    }
    assert!(!is_careless("careless") && !is_careless("careless1x"));
}

/// clientgo1 holds 1 and is superseded by c2 (2); it releases its
/// stale term, which clears c2's Lease, and wins 3 at once; c2 hears of
/// it at its next renewal. c2's write with 2 after the write with 3 is
/// refused.
fn cleared_by_client_go() -> H {
    let mut h = H::default();
    h.add(grant(1, "clientgo1", 1));
    h.add(grant(10, "c2", 2));
    h.add(release(20, "clientgo1", 1));
    h.add(grant(21, "clientgo1", 3));
    h.add(write(22, 23, "clientgo1", 3, WriteOutcome::Accepted, 30));
    h.add(write(24, 25, "c2", 2, WriteOutcome::Refused, 20));
    h.add(lost(26, "c2", 2, "lease expired"));
    h
}

#[test]
fn a_lease_cleared_by_client_go_release_excuses_its_holder() {
    let report = check(&cleared_by_client_go().0);
    assert!(report.passed(), "{report}");
    assert!(report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().notes[0].contains("client-go"));

    // The gate accepting c2's stale write is still caught.
    let mut h = cleared_by_client_go();
    h.set_outcome(5, WriteOutcome::Accepted);
    let report = check(&h.0);
    let v = &report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().violations;
    assert!(
        v[0].message.contains("client-go's release() bug"),
        "{report}"
    );

    // No excuse without the stale release, from another library, or
    // from a release that was no longer stale (before c2's grant).
    let mut without = cleared_by_client_go();
    without.0.remove(2);
    for renamed in ["go1", "c1"] {
        let mut h = cleared_by_client_go();
        for e in h.0.iter_mut().filter(|e| e.client == "clientgo1") {
            e.client = renamed.into();
        }
        assert!(!check(&h.0).passed(), "{renamed}");
    }
    let mut early = cleared_by_client_go();
    early.0[2].at_ns = 5 * MS;
    for h in [without, early] {
        assert_only_fails(&check(&h.0), LOSS_BEFORE_NEXT_GRANT);
    }
}

#[test]
fn anchors_are_named_by_library_and_number() {
    for anchor in ["go4", "curator4", "clientgo12"] {
        assert!(is_anchor(anchor), "{anchor}");
    }
    for client in ["c1", "c12", "go", "curator", "gopher1", "c", NEMESIS] {
        assert!(!is_anchor(client), "{client}");
    }
}

#[test]
fn a_second_grant_to_a_holding_client_counts_only_where_it_stands_for_one_identity() {
    // c1 holds token 1 and is granted token 2 of the same lock before it
    // released token 1: two grants to one coordinated identity at once.
    let mut h = H::default();
    h.add(start(0, "c1"));
    h.add(grant(1, "c1", 1));
    h.add(start(2, "c1"));
    h.add(grant(4, "c1", 2));
    h.add(release(6, "c1", 1));
    h.add(release(8, "c1", 2));
    assert!(
        check(&h.0).passed(),
        "a client's own grants are unordered by default"
    );
    let coordinated = BackendFacts {
        own_next_grant_counts: true,
        ..BackendFacts::default()
    };
    let report = run(&h.0, None, coordinated);
    assert_only_fails(&report, LOSS_BEFORE_NEXT_GRANT);
    let m = &report.property(LOSS_BEFORE_NEXT_GRANT).unwrap().violations[0].message;
    assert!(
        m.contains("c1 still held token 1") && m.contains("c1 was granted token 2"),
        "{m}"
    );
    // Released first: the standing acquire's grant is in order.
    h.0[4].at_ns = 3 * MS;
    assert!(run(&h.0, None, coordinated).passed());
}
