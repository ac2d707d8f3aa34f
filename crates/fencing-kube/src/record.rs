//! Pure logic on Lease records: whether a candidate may take a Lease (expiry
//! judged on the local clock), the records to write for a grant, a renewal
//! and a release, and resource versions as fencing tokens. No I/O here.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencing_core::{Error, FencingToken, Result};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use tokio::time::Instant;

/// Annotation in which our holders record their token: `RV;TRANSITIONS;HOLDER`.
///
/// A token is the resourceVersion of the write that made its grant, which
/// the write cannot contain itself; each renewal writes it here, bound to
/// the grant's holder identity and transitions count so that a stale value
/// (client-go keeps annotations it does not know) is never taken for the
/// current holder's.
pub const TOKEN_ANNOTATION: &str = "fencing.rs/token";

/// What we read from a Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeaseView {
    pub(crate) rv: String,
    pub(crate) uid: String,
    pub(crate) holder: String,
    pub(crate) duration: Duration,
    pub(crate) transitions: i32,
    pub(crate) note: Option<String>,
    /// Set when kube-apiserver's coordinated leader election manages the
    /// Lease (e.g. `OldestEmulationVersion`).
    pub(crate) strategy: Option<String>,
    /// Whom the manager asks to hold the Lease next.
    pub(crate) preferred: Option<String>,
    /// Whether `acquireTime` is set: a candidate's take writes it, the
    /// coordinated election controller's naming of a holder clears it.
    pub(crate) acquired: bool,
}

impl LeaseView {
    pub(crate) fn of(lease: &Lease) -> Self {
        let meta = &lease.metadata;
        let spec = lease.spec.as_ref();
        LeaseView {
            rv: meta.resource_version.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default(),
            duration: Duration::from_secs(
                spec.and_then(|s| s.lease_duration_seconds)
                    .map_or(0, |s| u64::try_from(s).unwrap_or(0)),
            ),
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
            note: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(TOKEN_ANNOTATION).cloned()),
            strategy: spec
                .and_then(|s| s.strategy.clone())
                .filter(|s| !s.is_empty()),
            preferred: spec
                .and_then(|s| s.preferred_holder.clone())
                .filter(|s| !s.is_empty()),
            acquired: spec.is_some_and(|s| s.acquire_time.is_some()),
        }
    }

    /// True while the record names this grant: same holder identity, same
    /// transitions count, same Lease object.
    pub(crate) fn names(&self, grant: &GrantKey) -> bool {
        !self.holder.is_empty()
            && self.holder == grant.holder
            && self.transitions == grant.transitions
            && self.uid == grant.uid
    }

    /// Another identity the Lease's `preferredHolder` asks to take over
    /// from `holder`, if any.
    pub(crate) fn asks_to_yield(&self, holder: &str) -> Option<&str> {
        self.preferred.as_deref().filter(|p| *p != holder)
    }

    /// The current holder and its token, if the Lease names a holder.
    ///
    /// Our own holders record their token in [`TOKEN_ANNOTATION`]. A holder
    /// that does not (client-go), or one of ours before its first renewal,
    /// is given the Lease's current resourceVersion: for ours before the
    /// first renewal that *is* the acquiring version; for client-go it is a
    /// version written during its tenure, so it is above every token of
    /// earlier holders and below every token of later ones.
    pub(crate) fn holder_token(&self) -> Result<Option<(String, FencingToken)>> {
        if self.holder.is_empty() {
            return Ok(None);
        }
        let token = parse_rv(self.recorded_token().unwrap_or(&self.rv))?;
        Ok(Some((self.holder.clone(), token)))
    }

    /// The token our holder recorded in [`TOKEN_ANNOTATION`], if the note
    /// is for the current holder and transitions count.
    fn recorded_token(&self) -> Option<&str> {
        self.note.as_deref().and_then(|n| {
            let mut parts = n.splitn(3, ';');
            let (rv, transitions, holder) = (parts.next()?, parts.next()?, parts.next()?);
            (transitions.parse() == Ok(self.transitions) && holder == self.holder).then_some(rv)
        })
    }
}

/// Identifies one grant on one Lease object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GrantKey {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) holder: String,
    pub(crate) transitions: i32,
}

impl GrantKey {
    /// The text kept in [`GrantInfo::key`](fencing_core::GrantInfo):
    /// `NAMESPACE/NAME@UID#TRANSITIONS`, so that any client of the source
    /// can validate the grant.
    pub(crate) fn encode(&self) -> String {
        format!(
            "{}/{}@{}#{}",
            self.namespace, self.name, self.uid, self.transitions
        )
    }

    pub(crate) fn decode(key: &str, holder: &str) -> Result<GrantKey> {
        let bad = || {
            Error::backend(
                "kube validate",
                format!("grant key {key:?} is not NAMESPACE/NAME@UID#TRANSITIONS"),
            )
        };
        let (path, transitions) = key.rsplit_once('#').ok_or_else(bad)?;
        let (path, uid) = path.rsplit_once('@').ok_or_else(bad)?;
        let (namespace, name) = path.split_once('/').ok_or_else(bad)?;
        Ok(GrantKey {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            holder: holder.to_owned(),
            transitions: transitions.parse().map_err(|_| bad())?,
        })
    }
}

/// When each Lease's resourceVersion was last seen to change, on our
/// monotonic clock: the base of expiry.
///
/// The time only moves when the version changed: a holder that keeps
/// renewing keeps moving it, a silent one does not. A version never seen
/// before counts as changed now, so a fresh candidate waits a full lease
/// duration, whatever the Lease's renewTime says (other machines' wall
/// clocks are not trusted). Forgetting a Lease is therefore always safe:
/// it only makes the next candidate wait a full duration again. Leases not
/// read for [`FORGET_AFTER`] are forgotten, so the map holds what was read
/// lately, not every name a long-lived source ever touched.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    leases: HashMap<String, Observed>,
    /// The size at which unread Leases are next pruned: twice what the
    /// last pruning kept, so pruning costs O(1) per read.
    prune_at: usize,
}

#[derive(Debug)]
struct Observed {
    rv: String,
    /// When `rv` was first read.
    at: Instant,
    /// When the Lease was last read.
    read: Instant,
}

/// How long a Lease nobody reads is remembered: far longer than any
/// waiting acquire's retry period, which reads it again each period.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(120);

/// The least size at which pruning starts.
const PRUNE_FROM: usize = 1024;

impl Seen {
    /// When `name` was last seen to change, given that a read that returned
    /// at `now` found version `rv` (`None`: no Lease).
    ///
    /// `now` must be taken after the read returned: the version was written
    /// before then, so the holder's renewal was sent no later than `now`.
    pub(crate) fn observed_at(&mut self, name: &str, rv: Option<&str>, now: Instant) -> Instant {
        let Some(rv) = rv else {
            self.leases.remove(name);
            return now;
        };
        if let Some(seen) = self.leases.get_mut(name).filter(|o| o.rv == rv) {
            seen.read = now;
            return seen.at;
        }
        if self.leases.len() >= self.prune_at {
            self.prune(now);
        }
        let seen = Observed {
            rv: rv.to_owned(),
            at: now,
            read: now,
        };
        self.leases.insert(name.to_owned(), seen);
        now
    }

    fn prune(&mut self, now: Instant) {
        self.leases
            .retain(|_, o| now.saturating_duration_since(o.read) < FORGET_AFTER);
        if self.leases.capacity() > 4 * self.leases.len().max(PRUNE_FROM) {
            self.leases.shrink_to(2 * self.leases.len());
        }
        self.prune_at = (2 * self.leases.len()).max(PRUNE_FROM);
    }

    /// How many Leases are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.leases.len()
    }
}

/// What a candidate does with what it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// No Lease: create one.
    Create,
    /// Free or expired: replace it (with its resourceVersion as the
    /// precondition), with this transitions count.
    Take { transitions: i32 },
    /// Someone holds it until at least `until` on our clock.
    Held { holder: String, until: Instant },
    /// Coordinated leader election picks its holder (`strategy` set): not
    /// ours to take.
    Managed { strategy: String },
}

/// The decision for a candidate at `now` that last saw the Lease change at
/// `observed_at`. A Lease that ran out with a holder still named (never
/// released) stays held for `lock_delay` longer.
pub(crate) fn decide(
    current: Option<&LeaseView>,
    observed_at: Instant,
    now: Instant,
    lock_delay: Duration,
) -> Result<Decision> {
    let Some(lease) = current else {
        return Ok(Decision::Create);
    };
    if let Some(strategy) = &lease.strategy {
        return Ok(Decision::Managed {
            strategy: strategy.clone(),
        });
    }
    let until = observed_at
        .checked_add(lease.duration)
        .and_then(|t| t.checked_add(lock_delay))
        .ok_or_else(|| {
            Error::Config(format!(
                "lock_delay {lock_delay:?} is too long: added to the Lease's {:?} it is past what the clock can count",
                lease.duration
            ))
        })?;
    if lease.holder.is_empty() || now > until {
        // client-go counts only changes of holder; we count every grant so
        // that two grants of one identity are told apart by validate.
        let transitions = lease.transitions.checked_add(1).ok_or_else(|| {
            Error::backend(
                "kube acquire",
                format!(
                    "leaseTransitions of Lease {:?} is at its maximum; delete the Lease",
                    lease.uid
                ),
            )
        })?;
        return Ok(Decision::Take { transitions });
    }
    Ok(Decision::Held {
        holder: lease.holder.clone(),
        until,
    })
}

/// What a coordinated candidate does with what it read: the controller,
/// not the candidates, names the holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Coordinated {
    /// Not (or no longer, or not yet safely) ours: look again later.
    Wait,
    /// The controller named us: write our first renewal, with this
    /// transitions count, on its write as the precondition.
    Take { transitions: i32 },
}

/// The decision for coordinated candidate `holder`. A Lease the controller
/// names us in is ours to take only as the controller left it: its naming
/// write clears `acquireTime` and counts no transitions. One that already
/// carries a take (`acquireTime` set) or a renewal by our identity in its
/// current transitions count is a term of this identity in progress: ours
/// from another acquire (a second elector on the same identity, a retried
/// acquire whose first write landed), or a former run's that may still be
/// alive. As in [`decide`], it is taken only once it has not changed for
/// its lease duration. (The take's first renewal, which writes the token
/// note, comes a retry period after it: the note alone left that window
/// open to a second grant.)
pub(crate) fn decide_coordinated(
    current: Option<&LeaseView>,
    holder: &str,
    observed_at: Instant,
    now: Instant,
) -> Result<Coordinated> {
    let Some(lease) = current else {
        return Ok(Coordinated::Wait);
    };
    if lease.strategy.is_none() || lease.holder != holder || lease.asks_to_yield(holder).is_some() {
        return Ok(Coordinated::Wait);
    }
    let in_progress = lease.acquired || lease.recorded_token().is_some();
    if in_progress && now <= observed_at + lease.duration {
        return Ok(Coordinated::Wait);
    }
    let transitions = lease.transitions.checked_add(1).ok_or_else(|| {
        Error::backend(
            "kube acquire",
            format!(
                "leaseTransitions of Lease {:?} is at its maximum",
                lease.uid
            ),
        )
    })?;
    Ok(Coordinated::Take { transitions })
}

/// A MicroTime for a wall-clock instant. Only informational for us (expiry
/// is judged on the local monotonic clock) but read by client-go and kubectl.
pub(crate) fn micro_time(at: SystemTime) -> MicroTime {
    let micros = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    let ts = k8s_openapi::jiff::Timestamp::from_microsecond(micros)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    MicroTime(ts)
}

/// The Lease to create for a first grant.
pub(crate) fn new_lease(name: &str, holder: &str, lease_seconds: i32, now: SystemTime) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(lease_seconds),
            acquire_time: Some(micro_time(now)),
            renew_time: Some(micro_time(now)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    }
}

/// The read Lease rewritten to grant it to `holder`. Its resourceVersion
/// stays in the metadata: the apiserver refuses the replace with 409 if
/// anyone wrote in between. Fields we do not own (preferredHolder,
/// strategy, other annotations) are kept.
pub(crate) fn taken_lease(
    mut read: Lease,
    holder: &str,
    lease_seconds: i32,
    transitions: i32,
    now: SystemTime,
) -> Lease {
    set_note(&mut read, None);
    let spec = read.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(holder.to_owned());
    spec.lease_duration_seconds = Some(lease_seconds);
    spec.acquire_time = Some(micro_time(now));
    spec.renew_time = Some(micro_time(now));
    spec.lease_transitions = Some(transitions);
    read
}

/// How far ahead of the holder's wall clock a renewTime it writes may be.
///
/// The coordinated election controller judges a Lease expired once its
/// renewTime plus leaseDurationSeconds has passed on its own clock: a
/// renewTime an hour ahead (written once by a wrong wall clock) would keep
/// a dead holder's Lease for that hour if each renewal only added to it.
pub const RENEW_TIME_AHEAD_MAX: Duration = Duration::from_secs(1);

/// The last written Lease with a new renewTime, our lease duration
/// (`lease_seconds`) and the holder's token recorded in [`TOKEN_ANNOTATION`].
///
/// The duration is written again on every renewal, as client-go writes its
/// whole record: a Lease re-read after a 409 may carry a duration someone
/// else shortened, and other candidates count from what they read, while
/// we count our renew deadline from ours.
///
/// The renewTime always differs from the last one: client-go candidates
/// see a renewal only as a change of the record, so a renewal written with
/// a wall clock standing still would look like silence, and they would
/// take the Lease while we renew it. It is the last one plus a microsecond
/// while that is after our wall clock by at most [`RENEW_TIME_AHEAD_MAX`],
/// else our wall clock (which then differs from the last one too).
pub(crate) fn renewed_lease(
    mut last: Lease,
    token: FencingToken,
    key: &GrantKey,
    lease_seconds: i32,
    now: SystemTime,
) -> Lease {
    let note = format!("{token};{};{}", key.transitions, key.holder);
    set_note(&mut last, Some(note));
    let spec = last.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(key.holder.clone());
    spec.lease_duration_seconds = Some(lease_seconds);
    let now = micro_time(now);
    let micros = |d: Duration| {
        k8s_openapi::jiff::SignedDuration::from_micros(i64::try_from(d.as_micros()).unwrap_or(0))
    };
    let after_last = spec
        .renew_time
        .as_ref()
        .and_then(|t| t.0.checked_add(micros(Duration::from_micros(1))).ok());
    let bound = now.0.checked_add(micros(RENEW_TIME_AHEAD_MAX)).ok();
    spec.renew_time = Some(match (after_last, bound) {
        (Some(next), Some(bound)) if next > now.0 && next <= bound => MicroTime(next),
        _ => now,
    });
    last
}

/// True when `current` still carries the grant that `written` (a create or
/// a take) would have made: the same holder, transitions count and
/// acquireTime, and for a take the same Lease object. The acquireTime, to
/// the microsecond, tells our write from any later grant to the same
/// identity, which counts one more transition anyway.
fn carries_write(current: &Lease, written: &Lease) -> bool {
    let (now, ours) = (LeaseView::of(current), LeaseView::of(written));
    let acquired = |l: &Lease| l.spec.as_ref().and_then(|s| s.acquire_time.clone());
    !now.holder.is_empty()
        && now.holder == ours.holder
        && now.transitions == ours.transitions
        && (ours.uid.is_empty() || now.uid == ours.uid)
        && acquired(current).is_some()
        && acquired(current) == acquired(written)
}

/// What one read of the Lease says about a grant write whose answer was
/// lost. The apiserver may still apply such a write after its client gave
/// up on the request (the storage call outlives it), so "not there yet" is
/// not "never": only a Lease that moved past the write's precondition rules
/// it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteFate {
    /// The Lease carries the grant the write made.
    Landed,
    /// The write's precondition no longer holds: it can never apply.
    CannotLand,
    /// The Lease is still the one the write was conditioned on.
    MayStillLand,
}

/// The fate of `written` (a create, or a replace guarded by its
/// resourceVersion) given the Lease as read now (`None`: absent).
pub(crate) fn write_fate(current: Option<&Lease>, written: &Lease) -> WriteFate {
    if current.is_some_and(|c| carries_write(c, written)) {
        return WriteFate::Landed;
    }
    let precondition = written.metadata.resource_version.as_deref();
    let still = match (current, precondition) {
        // A create waits for an absent Lease; a replace for its version.
        (None, None) => true,
        (Some(c), Some(rv)) => c.metadata.resource_version.as_deref() == Some(rv),
        // A create meets an existing Lease (409), a replace a deleted one (404).
        (Some(_), None) | (None, Some(_)) => false,
    };
    match still {
        true => WriteFate::MayStillLand,
        false => WriteFate::CannotLand,
    }
}

/// client-go's release (ReleaseOnCancel): empty holder, a one-second
/// duration, acquire and renew time now, transitions unchanged.
pub(crate) fn released_lease(mut last: Lease, now: SystemTime) -> Lease {
    set_note(&mut last, None);
    let spec = last.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(micro_time(now));
    spec.renew_time = Some(micro_time(now));
    last
}

fn set_note(lease: &mut Lease, note: Option<String>) {
    match note {
        Some(n) => {
            lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(TOKEN_ANNOTATION.to_owned(), n);
        }
        None => {
            if let Some(a) = lease.metadata.annotations.as_mut() {
                a.remove(TOKEN_ANNOTATION);
            }
        }
    }
}

/// A resourceVersion as a fencing token. The apiserver promises only an
/// opaque string; an etcd-backed one writes etcd's revision, a decimal
/// number that grows with every write in the cluster. Anything else is an
/// [`Error::InvalidToken`] naming the version.
pub(crate) fn parse_rv(rv: &str) -> Result<FencingToken> {
    let shown: String = rv.chars().take(64).collect();
    let invalid = |reason: &str| Error::InvalidToken {
        input: shown.clone(),
        reason: reason.into(),
    };
    let token: FencingToken = rv.parse().map_err(|_| {
        invalid("Lease resourceVersion is not a canonical decimal number, so it cannot be a fencing token (is the apiserver backed by etcd?)")
    })?;
    if token == FencingToken::ZERO {
        return Err(invalid("Lease resourceVersion 0 cannot be a fencing token"));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn view(holder: &str, secs: u64, transitions: i32) -> LeaseView {
        LeaseView {
            rv: "100".into(),
            uid: "u1".into(),
            holder: holder.into(),
            duration: Duration::from_secs(secs),
            transitions,
            note: None,
            strategy: None,
            preferred: None,
            acquired: false,
        }
    }

    /// A Lease as stored (version 10) and our take of it, written at t0 + 1 s.
    fn stored_and_taken(t0: SystemTime) -> (Lease, Lease) {
        let mut stored = new_lease("l", "me", 15, t0);
        stored.metadata.uid = Some("u1".into());
        stored.metadata.resource_version = Some("10".into());
        let ours = taken_lease(stored.clone(), "me", 15, 3, t0 + Duration::from_secs(1));
        (stored, ours)
    }

    #[test]
    fn only_the_lease_our_write_made_counts_as_carrying_it() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let (stored, ours) = stored_and_taken(t0);
        let mut landed = ours.clone();
        landed.metadata.resource_version = Some("11".into());
        assert!(carries_write(&landed, &ours));
        // Renewed by nobody but annotated: still ours.
        set_note(&mut landed, Some("x".into()));
        assert!(carries_write(&landed, &ours));
        // Not landed: the stored record is the one we read.
        assert!(!carries_write(&stored, &ours));
        // A later grant to the same identity, or another Lease object.
        let later = taken_lease(landed.clone(), "me", 15, 4, t0 + Duration::from_secs(2));
        assert!(!carries_write(&later, &ours));
        let mut recreated = landed.clone();
        recreated.metadata.uid = Some("u2".into());
        assert!(!carries_write(&recreated, &ours));
        // Released, or taken by someone else.
        assert!(!carries_write(&released_lease(landed.clone(), t0), &ours));
        let other = taken_lease(landed, "other", 15, 3, t0 + Duration::from_secs(1));
        assert!(!carries_write(&other, &ours));
        // A create has no uid yet: any object with our fields carries it.
        let created = new_lease("l", "me", 15, t0 + Duration::from_secs(5));
        let mut stored = created.clone();
        stored.metadata.uid = Some("u9".into());
        assert!(carries_write(&stored, &created));
    }

    /// A write whose answer was lost is ruled out only once the Lease moved
    /// past its precondition; until then the apiserver may still apply it.
    #[test]
    fn a_lost_write_is_ruled_out_only_past_its_precondition() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let (stored, ours) = stored_and_taken(t0);
        assert_eq!(write_fate(Some(&stored), &ours), WriteFate::MayStillLand);
        let mut landed = ours.clone();
        landed.metadata.resource_version = Some("11".into());
        assert_eq!(write_fate(Some(&landed), &ours), WriteFate::Landed);
        let mut renewed = stored.clone();
        renewed.metadata.resource_version = Some("12".into());
        assert_eq!(write_fate(Some(&renewed), &ours), WriteFate::CannotLand);
        assert_eq!(write_fate(None, &ours), WriteFate::CannotLand);
        // A create: pending while no Lease exists, dead once another does.
        let created = new_lease("l", "me", 15, t0);
        assert_eq!(write_fate(None, &created), WriteFate::MayStillLand);
        let other = new_lease("l", "other", 15, t0);
        assert_eq!(write_fate(Some(&other), &created), WriteFate::CannotLand);
        assert_eq!(write_fate(Some(&created), &created), WriteFate::Landed);
    }

    /// Only the controller names a coordinated holder; one that carries a
    /// renewal of ours in its transitions count (a former run of our
    /// identity) is taken only once it has been still for its duration.
    #[test]
    fn a_coordinated_candidate_takes_only_what_the_controller_named_it_in() {
        let t0 = Instant::now();
        let named = |holder: &str| LeaseView {
            strategy: Some("OldestEmulationVersion".into()),
            ..view(holder, 5, 2)
        };
        let decide =
            |v: Option<&LeaseView>, at: Instant| decide_coordinated(v, "me", t0, at).unwrap();
        assert_eq!(
            decide(Some(&named("me")), t0),
            Coordinated::Take { transitions: 3 }
        );
        assert_eq!(decide(None, t0), Coordinated::Wait);
        assert_eq!(decide(Some(&named("other")), t0), Coordinated::Wait);
        assert_eq!(
            decide(Some(&view("me", 5, 2)), t0),
            Coordinated::Wait,
            "no strategy"
        );
        let leaving = LeaseView {
            preferred: Some("other".into()),
            ..named("me")
        };
        assert_eq!(decide(Some(&leaving), t0), Coordinated::Wait);
        let former = LeaseView {
            note: Some("90;2;me".into()),
            ..named("me")
        };
        assert_eq!(
            decide(Some(&former), t0 + Duration::from_secs(5)),
            Coordinated::Wait
        );
        assert_eq!(
            decide(Some(&former), t0 + Duration::from_secs(6)),
            Coordinated::Take { transitions: 3 }
        );
        // A note from an earlier transitions count is not a term of ours.
        let stale = LeaseView {
            note: Some("90;1;me".into()),
            ..named("me")
        };
        assert_eq!(
            decide(Some(&stale), t0),
            Coordinated::Take { transitions: 3 }
        );
        // Our take before its first renewal: acquireTime set, no note yet
        // (issue 54: a second acquire of the identity was granted here).
        let taken = LeaseView {
            acquired: true,
            ..named("me")
        };
        assert_eq!(
            decide(Some(&taken), t0 + Duration::from_secs(5)),
            Coordinated::Wait
        );
        assert_eq!(
            decide(Some(&taken), t0 + Duration::from_secs(6)),
            Coordinated::Take { transitions: 3 }
        );
    }

    /// A lock delay past what the clock can count is a configuration
    /// error naming it (issue 54: `Instant + Duration::MAX` panicked).
    #[test]
    fn a_huge_lock_delay_is_refused_not_a_panic() {
        let t0 = Instant::now();
        match decide(Some(&view("other", 15, 4)), t0, t0, Duration::MAX) {
            Err(Error::Config(msg)) => assert!(msg.contains("lock_delay"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn absent_free_and_expired_leases_can_be_taken() {
        let t0 = Instant::now();
        assert_eq!(
            decide(None, t0, t0, Duration::ZERO).unwrap(),
            Decision::Create
        );
        assert_eq!(
            decide(Some(&view("", 15, 4)), t0, t0, Duration::ZERO).unwrap(),
            Decision::Take { transitions: 5 }
        );
        let held = view("other", 15, 4);
        assert_eq!(
            decide(
                Some(&held),
                t0,
                t0 + Duration::from_secs(15),
                Duration::ZERO
            )
            .unwrap(),
            Decision::Held {
                holder: "other".into(),
                until: t0 + Duration::from_secs(15)
            }
        );
        assert_eq!(
            decide(
                Some(&held),
                t0,
                t0 + Duration::from_millis(15_001),
                Duration::ZERO
            )
            .unwrap(),
            Decision::Take { transitions: 5 }
        );
        assert!(decide(Some(&view("", 0, i32::MAX)), t0, t0, Duration::ZERO).is_err());
    }

    #[test]
    fn a_lease_with_a_strategy_is_managed_whatever_its_state() {
        let t0 = Instant::now();
        for holder in ["", "other"] {
            let mut managed = view(holder, 15, 4);
            managed.strategy = Some("OldestEmulationVersion".into());
            assert_eq!(
                decide(
                    Some(&managed),
                    t0,
                    t0 + Duration::from_secs(60),
                    Duration::ZERO
                )
                .unwrap(),
                Decision::Managed {
                    strategy: "OldestEmulationVersion".into()
                }
            );
        }
        let mut lease = new_lease("l", "me", 15, SystemTime::now());
        lease.spec.as_mut().unwrap().strategy = Some(String::new());
        assert_eq!(
            LeaseView::of(&lease).strategy,
            None,
            "an empty strategy is none"
        );
    }

    #[test]
    fn only_a_preferred_holder_naming_someone_else_asks_to_yield() {
        let mut v = view("me", 15, 1);
        assert_eq!(v.asks_to_yield("me"), None);
        v.preferred = Some("me".into());
        assert_eq!(v.asks_to_yield("me"), None);
        v.preferred = Some("next".into());
        assert_eq!(v.asks_to_yield("me"), Some("next"));
    }

    #[test]
    fn lock_delay_holds_an_expired_lease_but_not_a_released_one() {
        let t0 = Instant::now();
        let delay = Duration::from_secs(5);
        let held = view("other", 15, 4);
        let at = |secs| t0 + Duration::from_secs(secs);
        assert!(matches!(
            decide(Some(&held), t0, at(19), delay).unwrap(),
            Decision::Held { until, .. } if until == at(20)
        ));
        assert_eq!(
            decide(Some(&held), t0, at(21), delay).unwrap(),
            Decision::Take { transitions: 5 }
        );
        // Released (holder empty): no delay.
        assert_eq!(
            decide(Some(&view("", 15, 4)), t0, t0, delay).unwrap(),
            Decision::Take { transitions: 5 }
        );
    }

    #[test]
    fn expiry_counts_from_the_last_observed_change_on_our_clock() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        let first = seen.observed_at("l", Some("7"), t0);
        assert_eq!(first, t0, "a version never seen counts as changed now");
        let same = seen.observed_at("l", Some("7"), t0 + Duration::from_secs(20));
        assert_eq!(same, t0, "an unchanged version keeps its first sighting");
        let moved_at = seen.observed_at("l", Some("9"), t0 + Duration::from_secs(21));
        assert_eq!(moved_at, t0 + Duration::from_secs(21));
        let gone = seen.observed_at("l", None, t0 + Duration::from_secs(22));
        assert_eq!(gone, t0 + Duration::from_secs(22));
        assert_eq!(seen.len(), 0, "an absent Lease is not remembered");

        // A renewing holder keeps its lease: each change restarts the wait.
        let held = view("h", 15, 1);
        assert!(matches!(
            decide(
                Some(&held),
                moved_at,
                t0 + Duration::from_secs(30),
                Duration::ZERO
            )
            .unwrap(),
            Decision::Held { .. }
        ));
        assert!(matches!(
            decide(
                Some(&held),
                same,
                t0 + Duration::from_secs(30),
                Duration::ZERO
            )
            .unwrap(),
            Decision::Take { .. }
        ));
    }

    /// A long-lived source that reads 100,000 distinct Leases over 20
    /// minutes remembers those read lately, not all of them (issue 54: it
    /// kept every one, 100,000 entries), and a Lease still being read is
    /// never forgotten, so its waiter's count is not restarted.
    #[test]
    fn leases_nobody_reads_are_forgotten() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        let step = Duration::from_millis(12);
        let mut at = t0;
        let mut most = 0;
        for i in 0..100_000u32 {
            at += step;
            seen.observed_at(&format!("lease-{i}"), Some("1"), at);
            // A waiter reads the same Lease every 2 s throughout.
            if i % 166 == 0 {
                assert_eq!(seen.observed_at("waited-on", Some("5"), at), t0 + step);
            }
            most = most.max(seen.len());
        }
        let recent = (FORGET_AFTER.as_millis() / step.as_millis()) as usize;
        assert!(most <= 2 * recent + 2, "{most} Leases remembered at once");
        // What an entry costs, roughly: the name, the version, two instants.
        let bytes = most * (std::mem::size_of::<Observed>() + 2 * 16 + 16);
        assert!(bytes < 8 << 20, "about {bytes} bytes");
    }

    #[test]
    fn grant_renew_and_release_records() {
        let now = SystemTime::now();
        let created = new_lease("l", "me", 15, now);
        let s = created.spec.as_ref().unwrap();
        assert_eq!(
            (s.holder_identity.as_deref(), s.lease_transitions),
            (Some("me"), Some(0))
        );
        let mut read = created.clone();
        read.metadata.resource_version = Some("41".into());
        let key = GrantKey {
            namespace: "ns".into(),
            name: "l".into(),
            uid: "u".into(),
            holder: "me".into(),
            transitions: 3,
        };
        // Someone shortened the duration: the renewal writes ours again
        // (issue 54: it kept the 1 s it re-read after a 409).
        read.spec.as_mut().unwrap().lease_duration_seconds = Some(1);
        let renewed = renewed_lease(read.clone(), FencingToken::new(40), &key, 15, now);
        let v = LeaseView::of(&renewed);
        assert_eq!(v.note.as_deref(), Some("40;3;me"));
        assert_eq!(v.duration, Duration::from_secs(15));
        let taken = taken_lease(renewed, "you", 6, 4, now);
        let v = LeaseView::of(&taken);
        assert_eq!(v.rv, "41", "the read version stays as the precondition");
        assert_eq!((v.holder.as_str(), v.transitions, v.note), ("you", 4, None));
        assert_eq!(v.duration, Duration::from_secs(6));
        let released = released_lease(taken, now);
        let v = LeaseView::of(&released);
        assert_eq!((v.holder.as_str(), v.transitions), ("", 4));
        assert_eq!(v.duration, Duration::from_secs(1));
    }

    /// A holder whose wall clock stands still or steps back a little still
    /// writes a renewTime later than the last (seen failing: it wrote the
    /// same one); one far behind the last writes its own clock, which
    /// differs from the last too, rather than run ahead of it (issue 54:
    /// it wrote the last plus a microsecond, an hour ahead, for good).
    #[test]
    fn renew_time_always_changes_and_stays_near_the_wall_clock() {
        let now = SystemTime::now();
        let key = GrantKey {
            namespace: "ns".into(),
            name: "l".into(),
            uid: "u".into(),
            holder: "me".into(),
            transitions: 0,
        };
        let mut lease = new_lease("l", "me", 15, now);
        let renew_time = |l: &Lease| l.spec.as_ref().unwrap().renew_time.clone().unwrap().0;
        let mut last = renew_time(&lease);
        for wall in [
            now,
            now,
            now - Duration::from_millis(500),
            now + Duration::from_secs(1),
        ] {
            lease = renewed_lease(lease, FencingToken::new(7), &key, 15, wall);
            let written = renew_time(&lease);
            assert!(
                written > last,
                "{written} after {last} (wall clock {wall:?})"
            );
            last = written;
        }
        assert_eq!(last, micro_time(now + Duration::from_secs(1)).0);
        for behind in [Duration::from_secs(60), Duration::from_secs(3600)] {
            let wall = now - behind;
            lease = renewed_lease(lease, FencingToken::new(7), &key, 15, wall);
            let written = renew_time(&lease);
            assert_ne!(written, last, "a renewal must change the record");
            assert_eq!(written, micro_time(wall).0, "{behind:?} behind the last");
            last = written;
        }
        // Standing still at a renewTime written at the bound: still a change.
        let wall = now - Duration::from_secs(3600);
        for _ in 0..3 {
            lease = renewed_lease(lease, FencingToken::new(7), &key, 15, wall);
            let written = renew_time(&lease);
            assert!(written > last && written <= micro_time(wall + RENEW_TIME_AHEAD_MAX).0);
            last = written;
        }
    }

    #[test]
    fn holder_token_uses_the_note_only_when_it_matches_the_grant() {
        let mut v = view("me", 15, 3);
        v.rv = "120".into();
        assert_eq!(v.holder_token().unwrap().unwrap().1, FencingToken::new(120));
        v.note = Some("100;3;me".into());
        assert_eq!(v.holder_token().unwrap().unwrap().1, FencingToken::new(100));
        for stale in ["100;2;me", "100;3;other", "garbage", "100;x;me"] {
            v.note = Some(stale.into());
            assert_eq!(
                v.holder_token().unwrap().unwrap().1,
                FencingToken::new(120),
                "{stale}"
            );
        }
        v.note = Some("abc;3;me".into());
        assert!(matches!(v.holder_token(), Err(Error::InvalidToken { .. })));
        assert_eq!(view("", 1, 3).holder_token().unwrap(), None);
    }

    #[test]
    fn names_checks_holder_transitions_and_uid() {
        let key = GrantKey {
            namespace: "ns".into(),
            name: "l".into(),
            uid: "u1".into(),
            holder: "me".into(),
            transitions: 2,
        };
        let mut v = view("me", 15, 2);
        assert!(v.names(&key));
        v.transitions = 3;
        assert!(!v.names(&key), "a later grant of the same identity");
        v.transitions = 2;
        v.uid = "u2".into();
        assert!(!v.names(&key), "a deleted and recreated Lease");
        assert_eq!(GrantKey::decode(&key.encode(), "me").unwrap(), key);
        assert!(GrantKey::decode("no-separators", "me").is_err());
    }

    proptest! {
        /// KEP-5504 (stable in Kubernetes 1.35) orders resourceVersions as
        /// decimal integers without leading zeros: the longer is later, and
        /// of equal length the lexically greater. Tokens keep that order.
        #[test]
        fn tokens_order_as_kep_5504_orders_resource_versions(a in 1u64.., b in 1u64..) {
            let (ra, rb) = (a.to_string(), b.to_string());
            let kep = (ra.len(), ra.as_str()).cmp(&(rb.len(), rb.as_str()));
            prop_assert_eq!(parse_rv(&ra).unwrap().cmp(&parse_rv(&rb).unwrap()), kep);
        }
    }

    #[test]
    fn resource_versions_as_tokens() {
        assert_eq!(parse_rv("12345").unwrap(), FencingToken::new(12345));
        for bad in ["", "0", "abc", "-1", "01", " 5", "99999999999999999999999"] {
            match parse_rv(bad) {
                Err(Error::InvalidToken { input, reason }) => {
                    assert_eq!(input, bad);
                    assert!(reason.contains("resourceVersion"), "{reason}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    proptest! {
        #[test]
        fn rv_parser_never_panics_and_round_trips(s in any::<String>()) {
            if let Ok(t) = parse_rv(&s) {
                prop_assert_eq!(t.to_string(), s);
            }
        }

        #[test]
        fn decimal_rvs_parse(n in 1u64..) {
            prop_assert_eq!(parse_rv(&n.to_string()).unwrap(), FencingToken::new(n));
        }

        #[test]
        fn grant_key_decode_never_panics(s in any::<String>()) {
            let _ = GrantKey::decode(&s, "h");
        }
    }
}
