//! The coordinated-election workload (Kubernetes, KEP-4355): each client
//! process is a candidate of kube-apiserver's election controller in two
//! elections at once, on one source, under identities derived from its
//! name; and what the run may leave behind in the cluster once every client
//! stopped ([`judge`]).
//!
//! The controller, not the candidates, picks a Lease's holder: the
//! candidate with the oldest emulation version that answered its last ping.
//! So the clients get different emulation versions ([`emulation_version`]),
//! and leadership moves whenever a better candidate (re)joins: the holder
//! is told to yield (`LossReason::Yielded`) and releases.

use serde::{Deserialize, Serialize};

use crate::history::{Event, EventKind};

/// The binary version every candidate reports: one release, as in a
/// rolling upgrade where only the emulation versions differ.
pub const BINARY_VERSION: &str = "1.36.0";

/// The elections each client process runs at once.
pub const ELECTIONS: usize = 2;

/// The emulation version of client `i` (from 0): `1.35.i`, so no two
/// clients tie (a tie would be broken by the LeaseCandidates' creation
/// times, which change at every rejoin) and client 1 is everyone's first
/// choice. Older than [`BINARY_VERSION`], as the apiserver requires.
pub fn emulation_version(i: usize) -> String {
    format!("1.35.{i}")
}

/// The URL of client `i`'s source: the harness's `kube://` URL with the
/// candidacy of [`KubeLeaseConfig::from_url`](fencing::kube::KubeLeaseConfig::from_url).
pub fn candidate_url(base: &str, i: usize) -> String {
    let join = if base.contains('?') { '&' } else { '?' };
    format!(
        "{base}{join}coordinated=true&binary_version={BINARY_VERSION}&emulation_version={}",
        emulation_version(i)
    )
}

/// The Leases of client `i`'s two elections: its own lock (`i % n`, as
/// in the other workloads) and the next one. Two elections of one process
/// never share a Lease, so with two locks every client stands in both
/// elections. `None` with fewer than two locks.
pub fn election_locks(i: usize, locks: &[String]) -> Option<[String; ELECTIONS]> {
    let n = locks.len();
    (n >= ELECTIONS).then(|| [locks[i % n].clone(), locks[(i + 1) % n].clone()])
}

/// The holder identity of election `k` of client `name`: `NAME-a`,
/// `NAME-b`. It names the LeaseCandidate, so it is a DNS-1123 subdomain;
/// one identity can stand for one Lease at a time in a namespace, hence one
/// per election; and it is derived from the name alone, so a client the
/// campaign kills and starts again comes back as the same candidate.
pub fn identity(name: &str, k: usize) -> String {
    let letter = char::from(b'a' + (k % 26) as u8);
    format!("{name}-{letter}")
}

/// The client whose election an identity of [`identity`] is.
pub fn client_of(identity: &str) -> &str {
    identity
        .rsplit_once('-')
        .map_or(identity, |(client, _)| client)
}

/// A Lease of the run as an administrator reads it after every client
/// stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftLease {
    pub name: String,
    /// Empty when free.
    pub holder: String,
    /// A candidate took it (`acquireTime` set): the controller's naming of
    /// a holder leaves that unset.
    pub taken: bool,
    /// The token of the holder's grant: the one its renewals recorded, or
    /// (before the first renewal) the Lease's resourceVersion.
    pub token: Option<u64>,
}

/// A LeaseCandidate as an administrator reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftCandidate {
    pub name: String,
    /// The Lease it stands for.
    pub lease: String,
}

/// What is left in the namespace once every client stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leftovers {
    pub leases: Vec<LeftLease>,
    pub candidates: Vec<LeftCandidate>,
}

/// What `left` shows that a client that stopped should have cleared, one
/// line each; empty when clean.
///
/// - A Lease the controller named a candidate in but nobody took is not a
///   leftover: the controller may elect a candidate whose withdrawal it
///   has not seen yet, and with no candidate left it never comes back to
///   that Lease.
/// - A Lease taken and never released, or a LeaseCandidate, is one, unless
///   a run the campaign killed left it and the client's last process never
///   came back to that election (as the lock workload excuses a Lease named
///   to a killed process): a killed process clears nothing, and its
///   successor, under the same identity, takes over the candidacy only
///   when it joins that election, and the Lease only when it is granted.
pub fn judge(left: &Leftovers, events: &[Event]) -> Vec<String> {
    let mut found = Vec::new();
    for lease in left
        .leases
        .iter()
        .filter(|l| l.taken && !l.holder.is_empty())
    {
        let client = client_of(&lease.holder);
        if !left_by_killed_run(events, client, &lease.name, lease.token) {
            found.push(format!(
                "Lease {} still held by {} (token {}), never released",
                lease.name,
                lease.holder,
                lease.token.map_or("?".to_owned(), |t| t.to_string())
            ));
        }
    }
    for c in &left.candidates {
        let client = client_of(&c.name);
        if !killed_and_never_rejoined(events, client, &c.lease) {
            found.push(format!(
                "LeaseCandidate {} (for Lease {}) left behind",
                c.name, c.lease
            ));
        }
    }
    found
}

/// Whether the grant of `token` on `lease` that names `client` is one a
/// killed process of that client held: its hold ended in the crash, or it
/// was never reported (the process died between the take and its report)
/// and the client was killed after which it was never granted that Lease
/// again (a later grant would have replaced the take, and then released
/// it).
fn left_by_killed_run(events: &[Event], client: &str, lease: &str, token: Option<u64>) -> bool {
    let holds = crate::history::holds(events);
    let mut ours = holds
        .iter()
        .filter(|h| h.client == client && h.resource == lease);
    if let Some(h) = ours.clone().find(|h| Some(h.token) == token) {
        return h.end_kind == Some(crate::history::HoldEnd::Crash);
    }
    match last_crash(events, client) {
        Some(crash) => !ours.any(|h| h.start_ns > crash),
        None => false,
    }
}

/// Whether `client` was killed and after its last kill never began an
/// acquire of `lease`: its last process never joined that election, so
/// the candidacy is the killed one's.
fn killed_and_never_rejoined(events: &[Event], client: &str, lease: &str) -> bool {
    let Some(crash) = last_crash(events, client) else {
        return false;
    };
    !events.iter().any(|e| {
        e.client == client
            && e.at_ns > crash
            && matches!(&e.kind, EventKind::AcquireStart { resource } if resource == lease)
    })
}

/// When `client` was last killed, if ever.
fn last_crash(events: &[Event], client: &str) -> Option<u64> {
    events
        .iter()
        .filter(|e| e.client == client && matches!(e.kind, EventKind::Crash {}))
        .map(|e| e.at_ns)
        .max()
}

#[cfg(test)]
mod tests;
