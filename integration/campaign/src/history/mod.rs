//! The history a campaign records: one JSON object per line (JSONL), each an
//! [`Event`] stamped with the shared monotonic clock (`CLOCK_MONOTONIC`, the
//! same in every process of the machine).
//!
//! A line looks like
//!
//! ```text
//! {"at_ns":1500000,"client":"c1","kind":"grant","resource":"r","token":7}
//! ```
//!
//! Writers append lines as things happen, from several processes, so a
//! file may be slightly out of `at_ns` order: everything that reads a
//! history orders it first ([`sorted_order`], [`History::new`]), stably, so
//! events with equal stamps keep their order in the file.
//!
//! Besides the format this module pairs events up the way the checker and
//! the timeline both need: grants with the event that ends them
//! ([`holds`]) and nemesis faults with their ends ([`fault_spans`]).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The client name the nemesis records its faults under.
pub const NEMESIS: &str = "nemesis";

/// One thing that happened, at `at_ns` on the shared monotonic clock, to or
/// by `client`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Nanoseconds on `CLOCK_MONOTONIC`.
    pub at_ns: u64,
    /// The client process (or [`NEMESIS`] for fault events).
    pub client: String,
    /// What happened; its fields sit next to `at_ns` and `client` in the
    /// JSON object, with the variant's name in `"kind"`.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What an [`Event`] records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// The client began an acquire of `resource`.
    AcquireStart { resource: String },
    /// An acquire returned this grant (`at_ns`: when it returned).
    Grant { resource: String, token: u64 },
    /// The holder's `lost()` fired for this grant.
    Lost {
        resource: String,
        token: u64,
        reason: String,
    },
    /// A release of this grant completed.
    Release { resource: String, token: u64 },
    /// A write through a gate carrying `token`: sent at `start_ns`, its
    /// outcome known at the event's `at_ns`.
    Write {
        resource: String,
        token: u64,
        gate: String,
        start_ns: u64,
        outcome: WriteOutcome,
        value: u64,
    },
    /// The client process was SIGKILLed: every grant it held ends here.
    Crash {},
    /// The nemesis started fault `id`, named by
    /// [`Fault::name`](super::nemesis::Fault::name).
    FaultStart {
        fault: String,
        target: String,
        id: u64,
    },
    /// The nemesis ended fault `id`.
    FaultEnd { id: u64 },
}

/// How a gated write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteOutcome {
    /// The gate accepted the token and the write was applied.
    Accepted,
    /// The gate refused the token (lower than the highest it accepted).
    Refused,
    /// No answer (timeout, connection lost): it may or may not have been
    /// applied, now or later.
    Unknown,
}

impl Event {
    /// An event of `client` at `at_ns`.
    pub fn new(at_ns: u64, client: impl Into<String>, kind: EventKind) -> Self {
        Event {
            at_ns,
            client: client.into(),
            kind,
        }
    }
}

impl EventKind {
    /// The `"kind"` string of this variant in the JSON form.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::AcquireStart { .. } => "acquire_start",
            EventKind::Grant { .. } => "grant",
            EventKind::Lost { .. } => "lost",
            EventKind::Release { .. } => "release",
            EventKind::Write { .. } => "write",
            EventKind::Crash {} => "crash",
            EventKind::FaultStart { .. } => "fault_start",
            EventKind::FaultEnd { .. } => "fault_end",
        }
    }

    /// The resource the event is about, if any.
    pub fn resource(&self) -> Option<&str> {
        match self {
            EventKind::AcquireStart { resource }
            | EventKind::Grant { resource, .. }
            | EventKind::Lost { resource, .. }
            | EventKind::Release { resource, .. }
            | EventKind::Write { resource, .. } => Some(resource),
            _ => None,
        }
    }

    /// The fencing token the event carries, if any.
    pub fn token(&self) -> Option<u64> {
        match self {
            EventKind::Grant { token, .. }
            | EventKind::Lost { token, .. }
            | EventKind::Release { token, .. }
            | EventKind::Write { token, .. } => Some(*token),
            _ => None,
        }
    }
}

/// Writes `e` as one JSON line (with its newline) to `w`.
pub fn write_line(w: &mut impl Write, e: &Event) -> std::io::Result<()> {
    serde_json::to_writer(&mut *w, e)?;
    w.write_all(b"\n")
}

/// Parses one JSON line.
pub fn parse_line(line: &str) -> Result<Event, String> {
    serde_json::from_str(line).map_err(|e| e.to_string())
}

/// Parses JSONL text; blank lines are skipped. The error names the first
/// bad line (counting from 1).
pub fn parse_jsonl(text: &str) -> Result<Vec<Event>, String> {
    read_lines(text.as_bytes(), "history")
}

/// Reads a JSONL history file, in file order. The error names the file and
/// the first bad line (counting from 1).
pub fn read_jsonl(path: impl AsRef<Path>) -> Result<Vec<Event>, String> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    read_lines(BufReader::new(file), &path.display().to_string())
}

fn read_lines(reader: impl BufRead, what: &str) -> Result<Vec<Event>, String> {
    let mut events = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line_no = n + 1;
        let line = line.map_err(|e| format!("{what}: line {line_no}: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let event =
            parse_line(&line).map_err(|e| format!("{what}: line {line_no}: {e}: {line:?}"))?;
        events.push(event);
    }
    Ok(events)
}

/// Writes `events` to `path` as JSONL (replacing the file).
pub fn write_jsonl(path: impl AsRef<Path>, events: &[Event]) -> std::io::Result<()> {
    let mut w = BufWriter::new(File::create(path)?);
    for e in events {
        write_line(&mut w, e)?;
    }
    w.flush()
}

/// Indices into `events` in `at_ns` order; ties keep their order in the
/// slice.
pub fn sorted_order(events: &[Event]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| events[i].at_ns);
    order
}

/// A history ordered by `at_ns` (stably), with helpers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    events: Vec<Event>,
}

impl History {
    /// Orders `events` stably by `at_ns`.
    pub fn new(mut events: Vec<Event>) -> Self {
        events.sort_by_key(|e| e.at_ns);
        History { events }
    }

    /// Reads and orders a JSONL file (see [`read_jsonl`]).
    pub fn read(path: impl AsRef<Path>) -> Result<Self, String> {
        read_jsonl(path).map(History::new)
    }

    /// Writes the ordered history as JSONL.
    pub fn write(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        write_jsonl(path, &self.events)
    }

    /// The events in `at_ns` order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The events, giving up the wrapper.
    pub fn into_events(self) -> Vec<Event> {
        self.events
    }

    /// Every client name that occurs, sorted (including [`NEMESIS`] if it
    /// recorded faults).
    pub fn clients(&self) -> Vec<&str> {
        let set: BTreeSet<&str> = self.events.iter().map(|e| e.client.as_str()).collect();
        set.into_iter().collect()
    }

    /// Every resource that occurs, sorted.
    pub fn resources(&self) -> Vec<&str> {
        let set: BTreeSet<&str> = self
            .events
            .iter()
            .filter_map(|e| e.kind.resource())
            .collect();
        set.into_iter().collect()
    }

    /// First and last `at_ns`, `None` when empty.
    pub fn span_ns(&self) -> Option<(u64, u64)> {
        Some((self.events.first()?.at_ns, self.events.last()?.at_ns))
    }

    /// See [`holds`].
    pub fn holds(&self) -> Vec<Hold> {
        holds(&self.events)
    }

    /// See [`fault_spans`].
    pub fn fault_spans(&self) -> Vec<FaultSpan> {
        fault_spans(&self.events)
    }
}

/// How a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    Lost,
    Release,
    Crash,
}

/// One grant, from its [`EventKind::Grant`] to the first later event of the
/// same client that ends it: a `Lost` or `Release` of the same resource and
/// token, or any `Crash` of the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub client: String,
    pub resource: String,
    pub token: u64,
    /// Index of the `Grant` event (into the slice given to [`holds`]).
    pub grant: usize,
    pub start_ns: u64,
    /// Index of the ending event, `None` if the hold lasts to the end of
    /// the history.
    pub end: Option<usize>,
    pub end_ns: Option<u64>,
    pub end_kind: Option<HoldEnd>,
}

/// Every grant of `events` (any order) with the event that ends it, in
/// `at_ns` order of the grants. Indices refer to `events`.
pub fn holds(events: &[Event]) -> Vec<Hold> {
    let mut out: Vec<Hold> = Vec::new();
    // Open holds (indices into `out`) per client.
    let mut open: std::collections::HashMap<&str, Vec<usize>> = Default::default();
    for i in sorted_order(events) {
        let e = &events[i];
        let close = |out: &mut Vec<Hold>, h: usize, kind: HoldEnd| {
            out[h].end = Some(i);
            out[h].end_ns = Some(e.at_ns);
            out[h].end_kind = Some(kind);
        };
        match &e.kind {
            EventKind::Grant { resource, token } => {
                open.entry(e.client.as_str()).or_default().push(out.len());
                out.push(Hold {
                    client: e.client.clone(),
                    resource: resource.clone(),
                    token: *token,
                    grant: i,
                    start_ns: e.at_ns,
                    end: None,
                    end_ns: None,
                    end_kind: None,
                });
            }
            EventKind::Lost {
                resource, token, ..
            }
            | EventKind::Release { resource, token } => {
                let kind = if matches!(e.kind, EventKind::Lost { .. }) {
                    HoldEnd::Lost
                } else {
                    HoldEnd::Release
                };
                if let Some(list) = open.get_mut(e.client.as_str()) {
                    list.retain(|&h| {
                        let matches = out[h].resource == *resource && out[h].token == *token;
                        if matches {
                            close(&mut out, h, kind);
                        }
                        !matches
                    });
                }
            }
            EventKind::Crash {} => {
                if let Some(list) = open.get_mut(e.client.as_str()) {
                    for h in list.drain(..) {
                        close(&mut out, h, HoldEnd::Crash);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// One nemesis fault, from its `FaultStart` to the `FaultEnd` with the same
/// id (the first one after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSpan {
    pub fault: String,
    pub target: String,
    pub id: u64,
    /// Index of the `FaultStart` event.
    pub start: usize,
    pub start_ns: u64,
    /// Index of the `FaultEnd`, `None` if the fault lasts to the end.
    pub end: Option<usize>,
    pub end_ns: Option<u64>,
}

impl FaultSpan {
    /// Whether the fault was active at some moment of `[from_ns, to_ns]`
    /// (a fault without an end lasts forever).
    pub fn overlaps(&self, from_ns: u64, to_ns: u64) -> bool {
        self.start_ns <= to_ns && self.end_ns.is_none_or(|end| end >= from_ns)
    }
}

/// Every fault of `events`, in `at_ns` order of their starts. Indices refer
/// to `events`.
pub fn fault_spans(events: &[Event]) -> Vec<FaultSpan> {
    let mut out: Vec<FaultSpan> = Vec::new();
    let mut open: std::collections::HashMap<u64, Vec<usize>> = Default::default();
    for i in sorted_order(events) {
        let e = &events[i];
        match &e.kind {
            EventKind::FaultStart { fault, target, id } => {
                open.entry(*id).or_default().push(out.len());
                out.push(FaultSpan {
                    fault: fault.clone(),
                    target: target.clone(),
                    id: *id,
                    start: i,
                    start_ns: e.at_ns,
                    end: None,
                    end_ns: None,
                });
            }
            EventKind::FaultEnd { id } => {
                if let Some(list) = open.get_mut(id) {
                    if !list.is_empty() {
                        let f = list.remove(0);
                        out[f].end = Some(i);
                        out[f].end_ns = Some(e.at_ns);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod test_events;
#[cfg(test)]
mod tests;
