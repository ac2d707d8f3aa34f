//! Kubernetes coordinated leader election (KEP-4355, beta in 1.33): the
//! apiserver's election controller, not the candidates, picks who holds a
//! Lease whose `strategy` is set. A candidate publishes a
//! `coordination.k8s.io/v1beta1` LeaseCandidate named after its holder
//! identity, answers the controller's pings (a `pingTime` later than its
//! `renewTime`), and waits until the controller writes its identity into
//! the Lease; then it renews the Lease itself, as client-go's elector does
//! with `Coordinated: true`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use fencing_core::{Error, ResourceName, Result};
use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use crate::client::Scope;
use crate::error::{Call, Failure};
use crate::record::micro_time;

/// The only strategy kube-apiserver implements: the candidate with the
/// oldest emulation version leads, then the oldest binary version.
pub const OLDEST_EMULATION_VERSION: &str = "OldestEmulationVersion";

/// How a source takes part in coordinated leader election: the versions
/// the controller compares candidates by, as full `MAJOR.MINOR.PATCH`
/// (the apiserver refuses `1.36`).
///
/// ```
/// use fencing::kube::{Candidacy, LeaseOptions};
///
/// let me = Candidacy::new("1.36.0")?.emulation_version("1.35.0")?;
/// let options = LeaseOptions::default().coordinated(me);
/// assert!(options.check().is_ok());
/// assert!(Candidacy::new("1.36").is_err()); // not MAJOR.MINOR.PATCH
/// assert!(Candidacy::new("1.35.0")?.emulation_version("1.36.0").is_err()); // above the binary
/// # Ok::<(), fencing::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidacy {
    /// The version of the candidate's binary.
    pub binary_version: String,
    /// The version whose behaviour it emulates; at most the binary version.
    pub emulation_version: String,
    /// The strategy the candidate asks for ([`OLDEST_EMULATION_VERSION`]).
    pub strategy: String,
}

impl Candidacy {
    /// A candidate of this binary version, emulating the same version.
    pub fn new(binary_version: impl Into<String>) -> Result<Self> {
        let binary_version = binary_version.into();
        semver(&binary_version, "binary version")?;
        Ok(Candidacy {
            emulation_version: binary_version.clone(),
            binary_version,
            strategy: OLDEST_EMULATION_VERSION.to_owned(),
        })
    }

    /// Emulates an older version than the binary's.
    pub fn emulation_version(mut self, version: impl Into<String>) -> Result<Self> {
        self.emulation_version = version.into();
        self.check()?;
        Ok(self)
    }

    /// Both versions full `MAJOR.MINOR.PATCH`, the emulation version at
    /// most the binary version, the one known strategy; else
    /// [`Error::Config`] naming the problem.
    pub fn check(&self) -> Result<()> {
        let binary = semver(&self.binary_version, "binary version")?;
        let emulation = semver(&self.emulation_version, "emulation version")?;
        if emulation > binary {
            return Err(Error::Config(format!(
                "coordinated election: emulation version {} is above binary version {}",
                self.emulation_version, self.binary_version
            )));
        }
        if self.strategy != OLDEST_EMULATION_VERSION {
            return Err(Error::Config(format!(
                "coordinated election: strategy {:?} is not one kube-apiserver implements ({OLDEST_EMULATION_VERSION})",
                self.strategy
            )));
        }
        Ok(())
    }
}

/// `MAJOR.MINOR.PATCH` as numbers, as the apiserver validates them.
fn semver(version: &str, what: &str) -> Result<(u64, u64, u64)> {
    let bad = || {
        Error::Config(format!(
            "coordinated election: {what} {version:?} is not MAJOR.MINOR.PATCH (e.g. 1.36.0)"
        ))
    };
    let mut parts = version.split('.').map(|p| {
        let canonical = !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && (p == "0" || !p.starts_with('0'));
        canonical.then(|| p.parse::<u64>().ok()).flatten()
    });
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Some(a)), Some(Some(b)), Some(Some(c)), None) => Ok((a, b, c)),
        _ => Err(bad()),
    }
}

/// The holder identity names the LeaseCandidate, and the controller writes
/// that name into the Lease: it must be a DNS-1123 subdomain.
pub(crate) fn check_identity(holder: &str) -> Result<()> {
    // The portable resource-name rule is exactly the DNS-1123 subdomain rule.
    match ResourceName::new(holder) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::Config(format!(
            "coordinated election: holder identity {holder:?} names the LeaseCandidate, so it must be a \
             DNS-1123 subdomain ({e}); set AcquireOptions::holder"
        ))),
    }
}

/// LeaseCandidate calls in one namespace, and the candidacies this source
/// has published there.
#[derive(Clone)]
pub(crate) struct Candidates {
    api: Api<LeaseCandidate>,
    scope: Scope,
    /// Our live candidacies by name (the holder identity). The controller
    /// writes a candidate's name into the Lease's holderIdentity, so one
    /// identity is one LeaseCandidate per namespace, whatever the Lease:
    /// acquires of one identity share it, and it goes with the last of them.
    published: Arc<Mutex<HashMap<String, Weak<Published>>>>,
    /// Held while a candidacy is published or deleted, so that a deletion
    /// never removes one that a new acquire has just published.
    changing: Arc<tokio::sync::Mutex<()>>,
}

impl Candidates {
    pub(crate) fn new(client: kube::Client, scope: Scope) -> Self {
        Candidates {
            api: Api::namespaced(client, &scope.namespace),
            scope,
            published: Arc::default(),
            changing: Arc::default(),
        }
    }

    /// Our live candidacy named `name`, if any: not one a release has
    /// withdrawn, which lives on only until that release ends.
    fn live(&self, name: &str) -> Option<Arc<Published>> {
        let published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        published
            .get(name)
            .and_then(Weak::upgrade)
            .filter(|p| !p.withdrawn.load(Ordering::Relaxed))
    }

    /// Deletes candidate `name` unless a live candidacy of ours uses it.
    async fn delete_unused(&self, name: &str) -> Result<()> {
        let _changing = self.changing.lock().await;
        if self.live(name).is_some() {
            return Ok(());
        }
        self.delete(name).await
    }

    fn call<'a>(&'a self, verb: &'static str, name: &'a str) -> Call<'a> {
        self.scope.call("LeaseCandidate", verb, name)
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseCandidate>> {
        let call = self.call("get", name);
        match self.scope.run(call, self.api.get(name)).await {
            Ok(c) => Ok(Some(c)),
            Err(Failure::NotFound) => Ok(None),
            Err(f) => Err(f.into_error(call)),
        }
    }

    /// Creates our candidate, or takes over one a former run of the same
    /// identity left (its spec replaced with ours).
    async fn publish(&self, name: &str, spec: LeaseCandidateSpec) -> Result<()> {
        let call = self.call("create", name);
        let fresh = LeaseCandidate {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(spec.clone()),
        };
        match self.scope.run(call, self.api.create(&PostParams::default(), &fresh)).await {
            Ok(_) => Ok(()),
            Err(Failure::Conflict) => {
                let Some(mut old) = self.get(name).await? else {
                    return Err(Error::backend(call.to_string(), "exists, then vanished; retried next time"));
                };
                old.spec = Some(spec);
                self.replace(&old).await
            }
            Err(Failure::NotFound) => Err(Error::Config(format!(
                "{call}: 404: is coordination.k8s.io/v1beta1 served (kube-apiserver --runtime-config=coordination.k8s.io/v1beta1=true with the CoordinatedLeaderElection feature gate)?"
            ))),
            Err(f) => Err(f.into_error(call)),
        }
    }

    async fn replace(&self, candidate: &LeaseCandidate) -> Result<()> {
        let name = candidate.metadata.name.as_deref().unwrap_or_default();
        let call = self.call("update", name);
        self.scope
            .run(
                call,
                self.api.replace(name, &PostParams::default(), candidate),
            )
            .await
            .map(drop)
            .map_err(|f| f.into_error(call))
    }

    async fn delete(&self, name: &str) -> Result<()> {
        let call = self.call("delete", name);
        match self
            .scope
            .run(call, self.api.delete(name, &DeleteParams::default()))
            .await
        {
            Ok(_) | Err(Failure::NotFound) => Ok(()),
            Err(f) => Err(f.into_error(call)),
        }
    }
}

/// Our published candidacy for one Lease: kept (pings answered) while any
/// clone lives, deleted when the last one goes. An acquire holds it while
/// it waits, the grant while it is held; acquires of the same identity for
/// the same Lease share one.
#[derive(Clone)]
pub(crate) struct Candidate(Arc<Published>);

struct Published {
    candidates: Candidates,
    name: String,
    lease: String,
    keeper: JoinHandle<()>,
    /// Its keeper stopped by [`Candidate::leave`]: no acquire may join it
    /// any more (the release that withdrew it still holds it until it has
    /// cleared the Lease, and an acquire of the same identity that shared
    /// it would wait, unkept and unseen by the controller, for nothing).
    withdrawn: AtomicBool,
    /// Deleted already by [`Candidate::leave`].
    left: AtomicBool,
    /// Where the deletion runs when the last clone is dropped, so that the
    /// source's `close()` waits for it.
    background: TaskTracker,
}

/// How often an unpinged candidate renews anyway: the controller's garbage
/// collector removes candidates not renewed for hours.
const RENEW_ANYWAY: Duration = Duration::from_secs(60);

impl Candidate {
    /// Publishes the LeaseCandidate `holder` for Lease `lease` and starts
    /// answering pings every `period`; or joins the candidacy this source
    /// already has for them. An identity that is already a candidate for
    /// another Lease is refused with [`Error::Config`]: its one
    /// LeaseCandidate cannot stand for two Leases.
    pub(crate) async fn join(
        candidates: &Candidates,
        lease: &str,
        holder: &str,
        candidacy: &Candidacy,
        period: Duration,
        background: &TaskTracker,
    ) -> Result<Candidate> {
        let _changing = candidates.changing.lock().await;
        if let Some(live) = candidates.live(holder) {
            if live.lease != lease {
                return Err(Error::Config(format!(
                    "coordinated election: holder identity {holder:?} is already a candidate for Lease {:?} \
                     in namespace {:?}; the election controller names a holder by its LeaseCandidate, which \
                     is named after the identity, so one identity can stand for one Lease at a time in a \
                     namespace: give this acquire another identity (AcquireOptions::holder)",
                    live.lease, candidates.scope.namespace
                )));
            }
            return Ok(Candidate(live));
        }
        let spec = LeaseCandidateSpec {
            lease_name: lease.to_owned(),
            binary_version: candidacy.binary_version.clone(),
            emulation_version: Some(candidacy.emulation_version.clone()),
            strategy: candidacy.strategy.clone(),
            renew_time: Some(micro_time(SystemTime::now())),
            ping_time: None,
        };
        candidates.publish(holder, spec.clone()).await?;
        let keeper = tokio::spawn(keep(candidates.clone(), holder.to_owned(), spec, period));
        let published = Arc::new(Published {
            candidates: candidates.clone(),
            name: holder.to_owned(),
            lease: lease.to_owned(),
            keeper,
            withdrawn: AtomicBool::new(false),
            left: AtomicBool::new(false),
            background: background.clone(),
        });
        let mut registry = candidates
            .published
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        registry.insert(holder.to_owned(), Arc::downgrade(&published));
        Ok(Candidate(published))
    }

    /// Deletes the candidate now (on release), so the controller does not
    /// elect us again, unless another acquire of this source still waits
    /// on it; the drop then has nothing left to do.
    pub(crate) async fn leave(&self) -> Result<()> {
        let _changing = self.0.candidates.changing.lock().await;
        // Ours and the registry's weak one: any other strong one is an
        // acquire of the same identity that still needs the candidacy.
        if Arc::strong_count(&self.0) > 1 {
            return Ok(());
        }
        self.0.keeper.abort();
        self.0.withdrawn.store(true, Ordering::Relaxed);
        self.0.candidates.delete(&self.0.name).await?;
        self.0.left.store(true, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        self.keeper.abort();
        {
            let mut registry = self
                .candidates
                .published
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if registry
                .get(&self.name)
                .is_some_and(|w| w.strong_count() == 0)
            {
                registry.remove(&self.name);
            }
        }
        if self.left.load(Ordering::Relaxed) {
            return;
        }
        let (candidates, name) = (self.candidates.clone(), std::mem::take(&mut self.name));
        if tokio::runtime::Handle::try_current().is_ok() {
            self.background.spawn(async move {
                if let Err(e) = candidates.delete_unused(&name).await {
                    tracing::warn!(candidate = name, error = %e, "could not delete a LeaseCandidate; the controller's collector removes it later");
                }
            });
        }
    }
}

/// Answers the controller's pings: a `pingTime` after our `renewTime`
/// gets a renewal; recreates the candidate if someone deleted it.
async fn keep(candidates: Candidates, name: String, spec: LeaseCandidateSpec, period: Duration) {
    let mut renewed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(period).await;
        let outcome = match candidates.get(&name).await {
            Ok(None) => candidates.publish(&name, renewed_spec(spec.clone())).await,
            Ok(Some(mut c)) if pinged(&c) || renewed.elapsed() >= RENEW_ANYWAY => {
                c.spec = c.spec.map(renewed_spec);
                candidates.replace(&c).await
            }
            Ok(Some(_)) => continue,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => renewed = tokio::time::Instant::now(),
            Err(e) => {
                tracing::warn!(candidate = name, error = %e, "LeaseCandidate renewal failed; retrying")
            }
        }
    }
}

/// A renewal acknowledges the ping by clearing it: the controller waits
/// out the whole election duration for a candidate whose `pingTime` is
/// still set, and reconsiders the election when it goes.
fn renewed_spec(mut spec: LeaseCandidateSpec) -> LeaseCandidateSpec {
    spec.renew_time = Some(micro_time(SystemTime::now()));
    spec.ping_time = None;
    spec
}

/// The controller asks for a renewal by setting `pingTime` after `renewTime`.
fn pinged(candidate: &LeaseCandidate) -> bool {
    let Some(spec) = &candidate.spec else {
        return false;
    };
    match (&spec.ping_time, &spec.renew_time) {
        (Some(ping), Some(renew)) => ping.0 > renew.0,
        (Some(_), None) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_must_be_full_semver_with_emulation_at_most_binary() {
        for good in ["1.36.0", "0.0.0", "10.2.33"] {
            assert!(Candidacy::new(good).is_ok(), "{good}");
        }
        for bad in [
            "1.36",
            "v1.36.0",
            "1.36.0.1",
            "01.2.3",
            "1.2.x",
            "",
            "1..3",
            "1.2.3-rc.1",
        ] {
            let e = Candidacy::new(bad).unwrap_err().to_string();
            assert!(e.contains("MAJOR.MINOR.PATCH"), "{bad}: {e}");
        }
        let c = Candidacy::new("1.36.2").unwrap();
        assert!(c.clone().emulation_version("1.36.2").is_ok());
        assert!(c.clone().emulation_version("1.9.99").is_ok());
        let e = c.emulation_version("1.36.10").unwrap_err().to_string();
        assert!(e.contains("above binary version"), "{e}");
    }

    #[test]
    fn a_candidate_identity_must_be_a_subdomain() {
        assert!(check_identity("app-0.team-a").is_ok());
        for bad in ["", "App", "-a", "a-", "a_b", "host:123", &"a".repeat(254)] {
            assert!(check_identity(bad).is_err(), "{bad}");
        }
    }

    /// Candidates of a source whose apiserver cannot be reached: enough to
    /// follow what the source shares, not what the server does.
    fn unreachable_candidates() -> Candidates {
        let url = "http://127.0.0.1:9";
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        Candidates::new(client, Scope::new("ns", url, Duration::from_millis(200)))
    }

    /// A published candidacy of identity `name`, registered as `join`
    /// registers one.
    fn published(candidates: &Candidates, name: &str) -> Candidate {
        let published = Arc::new(Published {
            candidates: candidates.clone(),
            name: name.to_owned(),
            lease: "lease-a".into(),
            keeper: tokio::spawn(std::future::pending()),
            withdrawn: AtomicBool::new(false),
            left: AtomicBool::new(false),
            background: TaskTracker::new(),
        });
        let mut registry = candidates.published.lock().unwrap();
        registry.insert(name.to_owned(), Arc::downgrade(&published));
        Candidate(published)
    }

    /// A release withdraws the candidacy (its keeper stops, its
    /// LeaseCandidate is deleted) while the grant that holds it is still
    /// being released: an acquire of the same identity that joins in that
    /// window must publish a candidacy of its own, not share the withdrawn
    /// one, which nobody keeps and the controller no longer sees (the
    /// coordinated campaign's acquires, begun before the release, waited
    /// their whole timeout on it and were never elected). Here the deletion
    /// cannot reach an apiserver, which changes nothing: the keeper is
    /// stopped either way.
    #[tokio::test]
    async fn a_withdrawn_candidacy_is_not_shared_with_a_later_join() {
        let candidates = unreachable_candidates();
        let held = published(&candidates, "x");
        let waiting = held.clone();
        // Another acquire still stands on it: the release keeps it.
        assert!(held.leave().await.is_ok());
        assert!(candidates.live("x").is_some());
        drop(waiting);
        let _ = held.leave().await;
        assert!(
            candidates.live("x").is_none(),
            "a join during the release would share the withdrawn candidacy"
        );
        drop(held);
    }

    #[test]
    fn a_ping_after_the_renewal_asks_for_another() {
        let at = |s: u64| Some(micro_time(SystemTime::UNIX_EPOCH + Duration::from_secs(s)));
        let candidate = |ping, renew| LeaseCandidate {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseCandidateSpec {
                ping_time: ping,
                renew_time: renew,
                ..LeaseCandidateSpec::default()
            }),
        };
        assert!(pinged(&candidate(at(10), at(5))));
        assert!(pinged(&candidate(at(10), None)));
        assert!(!pinged(&candidate(at(5), at(10))));
        assert!(!pinged(&candidate(None, at(10))));
    }
}
