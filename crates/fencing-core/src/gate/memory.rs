//! An in-memory gate for tests and single-process stores.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;

use super::{check_token, Gate};
use crate::error::Result;
use crate::resource::ResourceName;
use crate::token::FencingToken;

/// A gate whose marks live in memory: fast and safe under concurrent
/// callers, but forgotten on restart, so use it only where the data it
/// guards is forgotten too. For durable data use [`FileGate`](super::FileGate)
/// or a gate inside the store.
#[derive(Debug, Default)]
pub struct MemoryGate {
    // Known resources are admitted under the read lock with one atomic
    // compare-and-swap; the write lock is only taken for a new resource.
    marks: RwLock<HashMap<ResourceName, Arc<AtomicU64>>>,
}

impl MemoryGate {
    /// An empty gate.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The synchronous form of [`Gate::admit`], for hot paths.
    pub fn admit_now(&self, resource: &ResourceName, token: FencingToken) -> Result<()> {
        let existing = self.read().get(resource).cloned();
        let mark = match existing {
            Some(mark) => mark,
            None => {
                let mut map = self.marks.write().unwrap_or_else(|p| p.into_inner());
                match map.get(resource) {
                    Some(mark) => mark.clone(),
                    None => {
                        map.insert(resource.clone(), Arc::new(AtomicU64::new(token.get())));
                        return Ok(());
                    }
                }
            }
        };
        raise(&mark, token)
    }

    /// The synchronous form of [`Gate::high_water`].
    #[must_use]
    pub fn high_water_now(&self, resource: &ResourceName) -> Option<FencingToken> {
        self.read()
            .get(resource)
            .map(|m| FencingToken::new(m.load(Ordering::Acquire)))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ResourceName, Arc<AtomicU64>>> {
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
    async fn admit(&self, resource: &ResourceName, token: FencingToken) -> Result<()> {
        self.admit_now(resource, token)
    }

    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(self.high_water_now(resource))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn accepts_equal_and_higher_rejects_lower() {
        let g = MemoryGate::new();
        let r = ResourceName::new("r").unwrap();
        assert_eq!(g.high_water_now(&r), None);
        g.admit_now(&r, FencingToken::new(5)).unwrap();
        g.admit_now(&r, FencingToken::new(5)).unwrap();
        g.admit_now(&r, FencingToken::new(9)).unwrap();
        match g.admit_now(&r, FencingToken::new(8)) {
            Err(Error::Stale { presented, highest }) => {
                assert_eq!((presented.get(), highest.get()), (8, 9));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(g.high_water_now(&r), Some(FencingToken::new(9)));
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
