//! Liveness after every heal: for each fault that ended and each lock that
//! had a waiter at that moment, how long until the lock was granted again.
//!
//! Only time in which no fault that can stop grants was active counts (a
//! later fault of the leader or of a quorum explains its own stretch), so
//! a long wait is one the cluster and our clients owe ([`QUIET_FAULTS`]
//! lists the faults that cannot stop grants: a cut-off, paused or killed
//! holder keeps its lock for at most its lease, which the bound includes).

use std::collections::{BTreeMap, BTreeSet};

use super::history::{Event, EventKind, FaultSpan};

/// One lock's wait after one heal.
#[derive(Clone, Debug, PartialEq)]
pub struct HealWait {
    /// The fault that healed: its kind and id.
    pub fault: String,
    pub id: u64,
    pub resource: String,
    /// The `FaultEnd` event's index and time.
    pub heal: usize,
    pub heal_ns: u64,
    /// The next grant of `resource` (index), `None` if none came.
    pub grant: Option<usize>,
    /// The time from the heal to that grant (or to the end of the
    /// history) during which no fault that stops grants was active.
    pub quiet_ns: u64,
}

/// Faults that leave a quorum and its leader serving: those of one
/// client (which hold a lock up for at most the victim's lease), of the
/// storage (which hold up writes, not grants), a cut-off follower or a cut
/// between two members (the third bridges them), maintenance, and an
/// administrator's deletes. The others (the leader cut off, paused,
/// killed or deposed, a member paused or killed, which may be the leader,
/// every member killed, the apiserver down) stop grants while they last.
const QUIET_FAULTS: [&str; 16] = [
    "partition-client",
    "pause-client",
    "kill-client",
    "clock-slow",
    "clock-fast",
    "wall-jump-forward",
    "wall-jump-back",
    "kill-storage",
    "pause-storage",
    "kill-postgres",
    "pause-postgres",
    "partition-follower",
    "partition-bridge",
    "compact-defrag",
    "delete-holders",
    "delete-leases",
];

fn stops_grants(fault: &str) -> bool {
    !QUIET_FAULTS.contains(&fault)
}

/// Every heal's waits, in history order. `order` sorts `events` by time;
/// `end_ns` is the last event's time.
pub fn heal_waits(
    events: &[Event],
    order: &[usize],
    faults: &[FaultSpan],
    end_ns: u64,
) -> Vec<HealWait> {
    let grants = grants_by_resource(events, order);
    let mut blocking: Vec<(u64, u64)> = faults
        .iter()
        .filter(|f| stops_grants(&f.fault))
        .map(|f| (f.start_ns, f.end_ns.unwrap_or(end_ns)))
        .collect();
    blocking.sort_unstable();
    let mut out = Vec::new();
    for (heal, resources) in heals_with_waiters(events, order) {
        let Some(fault) = faults.iter().find(|f| f.end == Some(heal)) else {
            continue;
        };
        let heal_ns = events[heal].at_ns;
        for resource in resources {
            let grant = grants.get(resource.as_str()).and_then(|list| {
                let at = list.partition_point(|&(ns, _)| ns < heal_ns);
                list.get(at).map(|&(_, i)| i)
            });
            let until = grant.map_or(end_ns, |g| events[g].at_ns);
            out.push(HealWait {
                fault: fault.fault.clone(),
                id: fault.id,
                resource,
                heal,
                heal_ns,
                grant,
                quiet_ns: quiet(heal_ns, until, &blocking),
            });
        }
    }
    out
}

/// Each resource's grants as (time, event index), in time order.
fn grants_by_resource<'a>(
    events: &'a [Event],
    order: &[usize],
) -> BTreeMap<&'a str, Vec<(u64, usize)>> {
    let mut grants: BTreeMap<&str, Vec<(u64, usize)>> = BTreeMap::new();
    for &i in order {
        if let EventKind::Grant { resource, .. } = &events[i].kind {
            grants
                .entry(resource)
                .or_default()
                .push((events[i].at_ns, i));
        }
    }
    grants
}

/// Every `FaultEnd` (index) with the resources someone was acquiring at
/// that moment: an acquire begun and neither granted nor ended by its
/// client's crash.
fn heals_with_waiters(events: &[Event], order: &[usize]) -> Vec<(usize, BTreeSet<String>)> {
    let mut pending: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut out = Vec::new();
    for &i in order {
        let client = events[i].client.as_str();
        match &events[i].kind {
            EventKind::AcquireStart { resource } => {
                pending.insert((client, resource));
            }
            EventKind::Grant { resource, .. } => {
                pending.remove(&(client, resource.as_str()));
            }
            EventKind::Crash {} => pending.retain(|&(c, _)| c != client),
            EventKind::FaultEnd { .. } if !pending.is_empty() => {
                let resources = pending.iter().map(|&(_, r)| r.to_owned()).collect();
                out.push((i, resources));
            }
            _ => {}
        }
    }
    out
}

/// The part of `[from, to]` that no interval of `blocking` (sorted by
/// start) covers.
fn quiet(from: u64, to: u64, blocking: &[(u64, u64)]) -> u64 {
    let mut covered = 0;
    let mut reach = from;
    for &(start, end) in blocking {
        if start >= to {
            break;
        }
        let (start, end) = (start.max(reach), end.min(to));
        if end > start {
            covered += end - start;
            reach = end;
        }
    }
    (to - from).saturating_sub(covered)
}

/// `p` (0..=100) of `sorted` by nearest rank.
pub fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_under_a_blocking_fault_is_not_quiet() {
        let s = 1_000_000_000;
        assert_eq!(quiet(0, 10 * s, &[]), 10 * s);
        // Blocked from 2 to 5 and (overlapping) 4 to 6: 4 s of 10 covered.
        assert_eq!(quiet(0, 10 * s, &[(2 * s, 5 * s), (4 * s, 6 * s)]), 6 * s);
        // Intervals outside the window do not count.
        assert_eq!(quiet(3 * s, 4 * s, &[(0, s), (5 * s, 6 * s)]), s);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50), 50);
        assert_eq!(percentile(&v, 99), 99);
        assert_eq!(percentile(&v, 100), 100);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }
}
