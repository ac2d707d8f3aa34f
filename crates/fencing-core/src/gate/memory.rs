//! An in-memory gate for tests and single-process stores.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use async_trait::async_trait;

use super::{check_source, check_token, Gate};
use crate::error::Result;
use crate::grant::SourceId;
use crate::resource::ResourceName;
use crate::token::FencingToken;

/// A gate whose marks live in memory: fast and safe under concurrent
/// callers, but forgotten on restart, so use it only where the data it
/// guards is forgotten too. For durable data use [`FileGate`](super::FileGate)
/// or a gate inside the store.
#[derive(Debug, Default)]
pub struct MemoryGate {
    // Known resources are admitted under the read lock; the write lock is
    // only taken for a new resource.
    marks: RwLock<HashMap<ResourceName, Arc<Slot>>>,
}

/// One resource's mark.
///
/// A bound mark's source never changes, so bound admits are one atomic
/// compare-and-swap on `token` with no lock. An unbound mark can become
/// bound, and the token and the binding must then change as one step: every
/// writer of an unbound mark (unbound admits and the binding admit) holds
/// `unbound_writers`, and the binding is published only after the raise.
#[derive(Debug)]
struct Slot {
    token: AtomicU64,
    source: OnceLock<SourceId>,
    unbound_writers: Mutex<()>,
}

impl Slot {
    fn new(token: FencingToken, source: Option<&SourceId>) -> Arc<Slot> {
        let slot = Slot {
            token: AtomicU64::new(token.get()),
            source: OnceLock::new(),
            unbound_writers: Mutex::new(()),
        };
        if let Some(s) = source {
            let _ = slot.source.set(s.clone());
        }
        Arc::new(slot)
    }

    fn admit(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        if let Some(bound) = self.source.get() {
            check_source(resource, Some(bound), source)?;
            return raise(&self.token, token);
        }
        let _writers = self
            .unbound_writers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Bound while we waited: the lock-free rule applies again.
        if let Some(bound) = self.source.get() {
            check_source(resource, Some(bound), source)?;
            return raise(&self.token, token);
        }
        raise(&self.token, token)?;
        if let Some(s) = source {
            let _ = self.source.set(s.clone());
        }
        Ok(())
    }
}

impl MemoryGate {
    /// An empty gate.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The synchronous form of [`Gate::admit_any_source`], for hot paths.
    pub fn admit_now(&self, resource: &ResourceName, token: FencingToken) -> Result<()> {
        self.admit_sync(resource, None, token)
    }

    /// The synchronous form of [`Gate::admit_from`], for hot paths.
    pub fn admit_from_now(
        &self,
        resource: &ResourceName,
        source: &SourceId,
        token: FencingToken,
    ) -> Result<()> {
        self.admit_sync(resource, Some(source), token)
    }

    /// The synchronous form of [`Gate::high_water`].
    #[must_use]
    pub fn high_water_now(&self, resource: &ResourceName) -> Option<FencingToken> {
        self.read()
            .get(resource)
            .map(|m| FencingToken::new(m.token.load(Ordering::Acquire)))
    }

    /// The source the resource's mark is bound to, `None` while unbound or
    /// before the first admit.
    #[must_use]
    pub fn bound_source(&self, resource: &ResourceName) -> Option<SourceId> {
        self.read().get(resource)?.source.get().cloned()
    }

    fn admit_sync(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        let existing = self.read().get(resource).cloned();
        let slot = match existing {
            Some(slot) => slot,
            None => {
                let mut map = self.marks.write().unwrap_or_else(|p| p.into_inner());
                match map.get(resource) {
                    Some(slot) => slot.clone(),
                    None => {
                        map.insert(resource.clone(), Slot::new(token, source));
                        return Ok(());
                    }
                }
            }
        };
        slot.admit(resource, source, token)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ResourceName, Arc<Slot>>> {
        self.marks.read().unwrap_or_else(|p| p.into_inner())
    }
}

fn raise(mark: &AtomicU64, token: FencingToken) -> Result<()> {
    let mut current = mark.load(Ordering::Acquire);
    loop {
        if !check_token(Some(FencingToken::new(current)), token)? {
            return Ok(());
        }
        match mark.compare_exchange_weak(current, token.get(), Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Ok(()),
            Err(seen) => current = seen,
        }
    }
}

#[async_trait]
impl Gate for MemoryGate {
    async fn admit_with(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        self.admit_sync(resource, source, token)
    }

    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(self.high_water_now(resource))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::SourceId;

    // The gate rules themselves: fencing-testkit's gate_keeps_the_rules.

    #[test]
    fn racing_sources_bind_an_unbound_mark_once() {
        for _ in 0..50 {
            let g = Arc::new(MemoryGate::new());
            let r = ResourceName::new("shared").unwrap();
            g.admit_now(&r, FencingToken::new(1)).unwrap();
            let threads: Vec<_> = ["a", "b", "a", "b"]
                .into_iter()
                .enumerate()
                .map(|(t, name)| {
                    let (g, r) = (g.clone(), r.clone());
                    std::thread::spawn(move || {
                        let source = SourceId::new(name);
                        (0..200u64)
                            .filter(|i| {
                                let token = FencingToken::new(2 + i * 4 + t as u64);
                                g.admit_from_now(&r, &source, token).is_ok()
                            })
                            .map(|_| name)
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let winners: std::collections::BTreeSet<_> = threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect();
            assert_eq!(winners.len(), 1, "both sources admitted: {winners:?}");
            let bound = g.bound_source(&r).unwrap();
            assert_eq!(Some(&bound.as_str()), winners.first());
            assert!(g.admit_now(&r, FencingToken::new(u64::MAX)).is_err());
        }
    }

    #[test]
    fn concurrent_admits_keep_the_maximum_and_reject_only_lower() {
        let g = Arc::new(MemoryGate::new());
        let r = ResourceName::new("shared").unwrap();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (g, r) = (g.clone(), r.clone());
                std::thread::spawn(move || {
                    let mut history = Vec::new();
                    for i in 0..2000u64 {
                        let token = FencingToken::new(i * 4 + t);
                        history.push((token, g.admit_now(&r, token).is_ok()));
                    }
                    history
                })
            })
            .collect();
        let histories: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let max = histories.iter().flatten().map(|(t, _)| *t).max().unwrap();
        assert_eq!(g.high_water_now(&r), Some(max));
        // A token may only be refused when a higher one was accepted.
        let highest_accepted = histories
            .iter()
            .flatten()
            .filter(|(_, ok)| *ok)
            .map(|(t, _)| *t)
            .max();
        for (token, ok) in histories.iter().flatten() {
            assert!(
                *ok || Some(*token) < highest_accepted,
                "{token} refused without a higher token"
            );
        }
    }
}
