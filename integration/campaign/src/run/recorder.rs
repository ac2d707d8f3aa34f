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
    /// how long they have held it (ns), longest first.
    pub fn holders(&self) -> Vec<(String, u64)> {
        let events = self.events.lock().unwrap();
        let mut since: HashMap<&str, Option<u64>> = HashMap::new();
        for e in events.iter() {
            let held = match e.kind {
                EventKind::Grant { .. } => Some(e.at_ns),
                EventKind::Release { .. } | EventKind::Lost { .. } | EventKind::Crash {} => None,
                _ => continue,
            };
            since.insert(e.client.as_str(), held);
        }
        let now = self.now_ns();
        let mut held: Vec<(String, u64)> = since
            .into_iter()
            .filter_map(|(c, at)| Some((c.to_owned(), now.saturating_sub(at?))))
            .collect();
        held.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        held
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
}
