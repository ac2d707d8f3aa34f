use super::*;

fn every_kind() -> Vec<Event> {
    vec![
        Event::new(
            1_000,
            "c1",
            EventKind::AcquireStart {
                resource: "r".into(),
            },
        ),
        Event::new(
            2_000,
            "c1",
            EventKind::Grant {
                resource: "r".into(),
                token: 7,
            },
        ),
        Event::new(
            3_000,
            "c1",
            EventKind::Write {
                resource: "r".into(),
                token: 7,
                gate: "g1".into(),
                start_ns: 2_500,
                outcome: WriteOutcome::Accepted,
                value: 42,
            },
        ),
        Event::new(
            3_100,
            "c1",
            EventKind::Write {
                resource: "r".into(),
                token: 7,
                gate: "g1".into(),
                start_ns: 3_050,
                outcome: WriteOutcome::Refused,
                value: 43,
            },
        ),
        Event::new(
            3_200,
            "c1",
            EventKind::Write {
                resource: "r".into(),
                token: u64::MAX,
                gate: "g2".into(),
                start_ns: 3_150,
                outcome: WriteOutcome::Unknown,
                value: u64::MAX,
            },
        ),
        Event::new(
            4_000,
            "c1",
            EventKind::Lost {
                resource: "r".into(),
                token: 7,
                reason: "lease expired \"quoted\"\nnewline".into(),
            },
        ),
        Event::new(
            5_000,
            "c1",
            EventKind::Release {
                resource: "r".into(),
                token: 7,
            },
        ),
        Event::new(6_000, "c2", EventKind::Crash {}),
        Event::new(
            7_000,
            NEMESIS,
            EventKind::FaultStart {
                fault: "pause-client".into(),
                target: "c2".into(),
                id: 3,
            },
        ),
        Event::new(8_000, NEMESIS, EventKind::FaultEnd { id: 3 }),
    ]
}

#[test]
fn every_kind_round_trips_through_jsonl() {
    let events = every_kind();
    let mut buf = Vec::new();
    for e in &events {
        write_line(&mut buf, e).unwrap();
    }
    let text = String::from_utf8(buf).unwrap();
    assert_eq!(text.lines().count(), events.len());
    let kinds: BTreeSet<&str> = events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds.len(), 8, "every EventKind is covered");
    for (line, e) in text.lines().zip(&events) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["kind"], e.kind.name(), "{line}");
        assert_eq!(v["client"], e.client.as_str(), "{line}");
        assert_eq!(v["at_ns"], e.at_ns, "{line}");
    }
    assert_eq!(parse_jsonl(&text).unwrap(), events);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    write_jsonl(&path, &events).unwrap();
    assert_eq!(read_jsonl(&path).unwrap(), events);
}

#[test]
fn json_shape_is_flat() {
    let e = Event::new(
        1_500_000,
        "c1",
        EventKind::Grant {
            resource: "r".into(),
            token: 7,
        },
    );
    assert_eq!(
        serde_json::to_string(&e).unwrap(),
        r#"{"at_ns":1500000,"client":"c1","kind":"grant","resource":"r","token":7}"#
    );
    let crash = Event::new(5, "c2", EventKind::Crash {});
    assert_eq!(
        serde_json::to_string(&crash).unwrap(),
        r#"{"at_ns":5,"client":"c2","kind":"crash"}"#
    );
    let w: Event = serde_json::from_str(
        r#"{"kind":"write","outcome":"refused","at_ns":9,"client":"c","resource":"r","token":1,"gate":"g","start_ns":8,"value":0}"#,
    )
    .unwrap();
    assert!(matches!(
        w.kind,
        EventKind::Write {
            outcome: WriteOutcome::Refused,
            ..
        }
    ));
}

#[test]
fn malformed_line_is_named() {
    let mut buf = Vec::new();
    for e in &every_kind()[..2] {
        write_line(&mut buf, e).unwrap();
    }
    buf.extend_from_slice(b"\n{\"at_ns\":1,\"client\":\"c\",\"kind\":\"grant\"}\n");
    let text = String::from_utf8(buf).unwrap();
    let err = parse_jsonl(&text).unwrap_err();
    assert!(err.contains("line 4"), "{err}");

    let err = parse_jsonl("{\"at_ns\":1,\"client\":\"c\",\"kind\":\"teleport\"}").unwrap_err();
    assert!(err.contains("line 1"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, "not json\n").unwrap();
    let err = read_jsonl(&path).unwrap_err();
    assert!(err.contains("line 1") && err.contains("bad.jsonl"), "{err}");
}

#[test]
fn history_sorts_stably_and_pairs() {
    let mut events = every_kind();
    events.swap(0, 1); // grant before its acquire_start in the file
    events.push(Event::new(
        2_000,
        "c3",
        EventKind::AcquireStart {
            resource: "r".into(),
        },
    ));
    let h = History::new(events);
    let at: Vec<u64> = h.events().iter().map(|e| e.at_ns).collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]));
    // Equal stamps keep file order: c1's grant, then c3's start.
    assert_eq!(h.events()[1].kind.name(), "grant");
    assert_eq!(h.events()[2].client, "c3");
    assert_eq!(h.clients(), vec!["c1", "c2", "c3", NEMESIS]);

    let holds = h.holds();
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].end_kind, Some(HoldEnd::Lost));
    assert_eq!(holds[0].end_ns, Some(4_000));
    let faults = h.fault_spans();
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].end_ns, Some(8_000));
    assert!(faults[0].overlaps(8_000, 9_000));
    assert!(!faults[0].overlaps(8_001, 9_000));
}
