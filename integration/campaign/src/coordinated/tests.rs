use super::*;
use crate::history::test_events::ev;
use fencing::kube::KubeLeaseConfig;

fn locks(n: usize) -> Vec<String> {
    crate::run::lock_names(n)
}

#[test]
fn every_client_stands_in_two_elections_on_two_leases() {
    assert_eq!(election_locks(0, &locks(1)), None);
    let two = locks(2);
    for i in 0..4 {
        let [first, second] = election_locks(i, &two).unwrap();
        assert_ne!(first, second, "client {i}");
        assert_eq!(first, two[i % 2]);
    }
    let [first, second] = election_locks(2, &locks(3)).unwrap();
    assert_eq!(
        (first.as_str(), second.as_str()),
        ("campaign-c", "campaign-a")
    );
}

#[test]
fn identities_are_subdomains_one_per_election_and_name_their_client() {
    let mut seen = std::collections::HashSet::new();
    for name in ["c1", "c2", "c12"] {
        for k in 0..ELECTIONS {
            let id = identity(name, k);
            assert!(fencing::ResourceName::new(&id).is_ok(), "{id}");
            assert_eq!(client_of(&id), name);
            // The same name gives the same identity: a restarted client
            // comes back as the candidate it was.
            assert_eq!(identity(name, k), id);
            assert!(seen.insert(id.clone()), "{id} twice");
        }
    }
    assert_eq!(identity("c1", 0), "c1-a");
    assert_eq!(identity("c1", 1), "c1-b");
}

#[test]
fn the_url_makes_a_coordinated_source_whose_clients_never_tie() {
    let base = "kube://default?kubeconfig=/k.yaml&ttl=2&request_timeout=1";
    let mut versions = std::collections::HashSet::new();
    for i in 0..8 {
        let cfg = KubeLeaseConfig::from_url(&candidate_url(base, i)).unwrap();
        let c = cfg.options.coordinated.expect("a candidacy");
        assert_eq!(c.binary_version, BINARY_VERSION);
        assert!(versions.insert(c.emulation_version.clone()), "a tie at {i}");
    }
    // Client 1 is the first choice: the oldest emulation version.
    assert_eq!(emulation_version(0), "1.35.0");
    let bare = candidate_url("kube://default", 3);
    assert!(KubeLeaseConfig::from_url(&bare).is_ok(), "{bare}");
}

fn acquire(at: u64, c: &str, r: &str) -> Event {
    let resource = r.into();
    ev(at, c, EventKind::AcquireStart { resource })
}

fn grant(at: u64, c: &str, r: &str, token: u64) -> Event {
    ev(
        at,
        c,
        EventKind::Grant {
            resource: r.into(),
            token,
        },
    )
}

fn release(at: u64, c: &str, r: &str, token: u64) -> Event {
    ev(
        at,
        c,
        EventKind::Release {
            resource: r.into(),
            token,
        },
    )
}

fn crash(at: u64, c: &str) -> Event {
    ev(at, c, EventKind::Crash {})
}

fn lease(holder: &str, taken: bool, token: u64) -> LeftLease {
    LeftLease {
        name: "campaign-a".into(),
        holder: holder.into(),
        taken,
        token: Some(token),
    }
}

fn leases(l: LeftLease) -> Leftovers {
    Leftovers {
        leases: vec![l],
        candidates: Vec::new(),
    }
}

fn candidate(name: &str) -> Leftovers {
    Leftovers {
        leases: Vec::new(),
        candidates: vec![LeftCandidate {
            name: name.into(),
            lease: "campaign-a".into(),
        }],
    }
}

#[test]
fn a_released_lease_or_one_only_named_by_the_controller_is_clean() {
    let history = [
        acquire(0, "c1", "campaign-a"),
        grant(10, "c1", "campaign-a", 7),
        release(20, "c1", "campaign-a", 7),
    ];
    assert!(judge(&Leftovers::default(), &history).is_empty());
    assert!(judge(&leases(lease("", false, 9)), &history).is_empty());
    // Elected after its client stopped, never taken.
    assert!(judge(&leases(lease("c2-a", false, 9)), &history).is_empty());
}

#[test]
fn a_lease_taken_and_never_released_is_left_behind_unless_a_killed_run_held_it() {
    let held = [
        acquire(0, "c1", "campaign-a"),
        grant(10, "c1", "campaign-a", 7),
        release(20, "c1", "campaign-a", 7),
    ];
    let found = judge(&leases(lease("c1-a", true, 7)), &held);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("c1-a") && found[0].contains("token 7"),
        "{found:?}"
    );
    // Held by the run that was killed: excused.
    let killed = [
        acquire(0, "c1", "campaign-a"),
        grant(10, "c1", "campaign-a", 7),
        crash(20, "c1"),
        acquire(30, "c1", "campaign-a"),
    ];
    assert!(judge(&leases(lease("c1-a", true, 7)), &killed).is_empty());
    // Killed between its take and the report: no grant of that token, and
    // no grant of that Lease to the client after the kill.
    let unreported = [acquire(0, "c1", "campaign-a"), crash(20, "c1")];
    assert!(judge(&leases(lease("c1-a", true, 9)), &unreported).is_empty());
    // A take nobody reported by a process that was never killed, or one
    // after the client's successor was granted the Lease again: the
    // library's to clear.
    let never_killed = [acquire(0, "c1", "campaign-a")];
    assert_eq!(
        judge(&leases(lease("c1-a", true, 9)), &never_killed).len(),
        1
    );
    let granted_again = [
        crash(5, "c1"),
        acquire(30, "c1", "campaign-a"),
        grant(40, "c1", "campaign-a", 8),
        release(50, "c1", "campaign-a", 8),
    ];
    assert_eq!(
        judge(&leases(lease("c1-a", true, 9)), &granted_again).len(),
        1
    );
}

#[test]
fn a_candidate_left_behind_is_excused_only_for_a_killed_run_that_never_rejoined() {
    let stopped = [acquire(0, "c1", "campaign-a")];
    let found = judge(&candidate("c1-a"), &stopped);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("LeaseCandidate c1-a"), "{found:?}");
    let killed = [acquire(0, "c1", "campaign-a"), crash(10, "c1")];
    assert!(judge(&candidate("c1-a"), &killed).is_empty());
    // Its successor joined that election: the candidacy was its own to
    // withdraw. Joining another election does not count.
    let rejoined = [crash(10, "c1"), acquire(20, "c1", "campaign-a")];
    assert_eq!(judge(&candidate("c1-a"), &rejoined).len(), 1);
    let elsewhere = [crash(10, "c1"), acquire(20, "c1", "campaign-b")];
    assert!(judge(&candidate("c1-a"), &elsewhere).is_empty());
}
