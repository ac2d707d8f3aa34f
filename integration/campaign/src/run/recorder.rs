//! The history as it is recorded: every event on one clock, also streamed
//! to a file.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::client::monotonic_ns;
use crate::history::{self, Event, EventKind};

/// Every event of the run, stamped on one clock, also streamed to a file
/// so a killed run still leaves its history.
pub struct Recorder {
    /// [`monotonic_ns`] when the run began: stamps count from it.
    origin_ns: u64,
    /// The wall clock at that moment.
    pub(super) wall_origin: k8s_openapi::jiff::Timestamp,
    events: Mutex<Vec<Event>>,
    file: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl Recorder {
    pub(super) fn create(path: &std::path::Path) -> std::io::Result<Recorder> {
        Ok(Recorder {
            origin_ns: monotonic_ns(),
            wall_origin: k8s_openapi::jiff::Timestamp::now(),
            events: Mutex::new(Vec::new()),
            file: Mutex::new(std::io::BufWriter::new(std::fs::File::create(path)?)),
        })
    }

    pub fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.origin_ns)
    }

    /// The stamp of a line read at `read_at` that a client stamped
    /// `client_ns` ([`monotonic_ns`]): the client's, unless it is missing
    /// or implausible (after the read, or a second before it).
    pub(super) fn client_stamp(&self, client_ns: Option<u64>, read_at: u64) -> u64 {
        client_ns
            .and_then(|ns| ns.checked_sub(self.origin_ns))
            .filter(|&at| at <= read_at && read_at - at <= 1_000_000_000)
            .unwrap_or(read_at)
    }

    pub fn record_at(&self, at_ns: u64, client: &str, kind: EventKind) {
        let event = Event::new(at_ns, client, kind);
        let _ = history::write_line(&mut *self.file.lock().unwrap(), &event);
        self.events.lock().unwrap().push(event);
    }

    pub fn record(&self, client: &str, kind: EventKind) -> u64 {
        let at = self.now_ns();
        self.record_at(at, client, kind);
        at
    }

    pub(super) fn events(&self) -> Vec<Event> {
        use std::io::Write;
        let _ = self.file.lock().unwrap().flush();
        self.events.lock().unwrap().clone()
    }

    /// The member the latest grant's client is pinned to (client `i` of the
    /// first `members` talks to member `i` only), if it is pinned.
    pub fn holder_member(&self, members: usize) -> Option<usize> {
        let events = self.events.lock().unwrap();
        let last = events
            .iter()
            .rev()
            .find(|e| matches!(e.kind, EventKind::Grant { .. }))?;
        let index: usize = last.client.strip_prefix('c')?.parse().ok()?;
        (index >= 1 && index <= members).then(|| index - 1)
    }

    /// The clients that hold a grant now, as far as their reports go, with
    /// how long they have held it (ns), longest first; a client in two
    /// elections at once is there once for each grant it holds.
    pub fn holders(&self) -> Vec<(String, u64)> {
        let events = self.events.lock().unwrap();
        held_since(&events, self.now_ns())
    }

    /// How many grants the clients reported so far.
    pub fn grants(&self) -> usize {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Grant { .. }))
            .count()
    }

    /// Whether any client was granted the lock after `since_ns`.
    pub fn granted_since(&self, since_ns: u64) -> bool {
        self.events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.at_ns > since_ns && matches!(e.kind, EventKind::Grant { .. }))
    }
}

/// Per client and resource, the grant it holds at `now` (ns since it was
/// granted), longest first: a grant ends at its loss or release, or at a
/// crash of its client, which ends all of them.
fn held_since(events: &[Event], now: u64) -> Vec<(String, u64)> {
    let mut since: HashMap<(&str, &str), u64> = HashMap::new();
    for e in events {
        let client = e.client.as_str();
        match &e.kind {
            EventKind::Grant { resource, .. } => {
                since.insert((client, resource.as_str()), e.at_ns);
            }
            EventKind::Release { resource, .. } | EventKind::Lost { resource, .. } => {
                since.remove(&(client, resource.as_str()));
            }
            EventKind::Crash {} => since.retain(|(c, _), _| *c != client),
            _ => {}
        }
    }
    let mut held: Vec<(String, u64)> = since
        .into_iter()
        .map(|((c, _), at)| (c.to_owned(), now.saturating_sub(at)))
        .collect();
    held.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_stamp_counts_unless_missing_or_implausible() {
        let dir = tempfile::tempdir().unwrap();
        let recorder = Recorder::create(&dir.path().join("history.jsonl")).unwrap();
        let read_at = recorder.now_ns() + 5_000_000_000;
        let client = |at: u64| Some(recorder.origin_ns + at);
        // Stamped 2 ms before the controller read the line: the client's.
        let two_ms_early = read_at - 2_000_000;
        assert_eq!(
            recorder.client_stamp(client(two_ms_early), read_at),
            two_ms_early
        );
        assert_eq!(recorder.client_stamp(client(read_at), read_at), read_at);
        // An anchor's line has none; a stamp after the read, more than a
        // second before it, or before the run began cannot be right.
        assert_eq!(recorder.client_stamp(None, read_at), read_at);
        assert_eq!(recorder.client_stamp(client(read_at + 1), read_at), read_at);
        let too_early = read_at - 1_000_000_001;
        assert_eq!(recorder.client_stamp(client(too_early), read_at), read_at);
        assert_eq!(recorder.client_stamp(Some(0), read_at), read_at);
    }

    #[test]
    fn a_client_holds_each_of_its_elections_apart() {
        use crate::history::test_events::{ev, MS};
        let grant = |at, c: &str, r: &str| {
            let (resource, token) = (r.to_owned(), at);
            ev(at, c, EventKind::Grant { resource, token })
        };
        let release = |at, c: &str, r: &str, token| {
            let resource = r.to_owned();
            ev(at, c, EventKind::Release { resource, token })
        };
        let events = [
            grant(10, "c1", "a"),
            grant(20, "c1", "b"),
            grant(30, "c2", "a"),
            // The release of one election leaves the other held.
            release(40, "c1", "b", 20),
        ];
        let now = 100 * MS;
        assert_eq!(
            held_since(&events, now),
            [("c1".to_owned(), 90 * MS), ("c2".to_owned(), 70 * MS)]
        );
        let mut crashed = events.to_vec();
        crashed.push(grant(50, "c1", "b"));
        crashed.push(ev(60, "c1", EventKind::Crash {}));
        assert_eq!(held_since(&crashed, now), [("c2".to_owned(), 70 * MS)]);
    }
}
