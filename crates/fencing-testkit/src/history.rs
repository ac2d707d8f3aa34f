//! Histories of grants and gated writes, and the safety properties checked
//! on them.

use std::sync::Arc;

use fencing_core::{Error, FencingToken, Gate, ResourceName};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// One thing a test saw happen.
#[derive(Clone, Debug)]
pub enum Event {
    /// `client` returned from acquire holding `token`.
    Granted {
        /// Which client.
        client: usize,
        /// The token it got.
        token: FencingToken,
        /// When acquire returned.
        at: Instant,
    },
    /// `client` is about to release (or stopped using) `token`.
    Released {
        /// Which client.
        client: usize,
        /// The token it gives up.
        token: FencingToken,
        /// When it gave up.
        at: Instant,
    },
    /// The gate judged a write carrying `token`.
    Write {
        /// Which client wrote.
        client: usize,
        /// The token the write carried.
        token: FencingToken,
        /// The gate's verdict.
        accepted: bool,
    },
}

/// A shared, totally ordered record of grants and gated writes.
///
/// Writes go through [`History::write`], which holds the history's lock
/// around the gate call, so the recorded order is the order the gate
/// decided in.
#[derive(Clone, Default)]
pub struct History {
    events: Arc<Mutex<Vec<Event>>>,
}

impl History {
    /// An empty history.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `client` got `token` now (call it when acquire returns).
    pub async fn granted(&self, client: usize, token: FencingToken) {
        self.granted_at(client, token, Instant::now()).await;
    }

    /// Records that `client`'s acquire of `token` returned at `at`.
    pub async fn granted_at(&self, client: usize, token: FencingToken, at: Instant) {
        self.events
            .lock()
            .await
            .push(Event::Granted { client, token, at });
    }

    /// Records that `client` stops using `token` now: call it when release
    /// starts, or when `lost()` fired, never earlier, or the check cannot
    /// see an overlap.
    pub async fn released(&self, client: usize, token: FencingToken) {
        self.released_at(client, token, Instant::now()).await;
    }

    /// Records that `client` stopped using `token` at `at` (for example the
    /// moment its `lost()` fired, seen by a watcher task).
    pub async fn released_at(&self, client: usize, token: FencingToken, at: Instant) {
        self.events
            .lock()
            .await
            .push(Event::Released { client, token, at });
    }

    /// Sends a write through the gate and records the verdict.
    pub async fn write(
        &self,
        gate: &dyn Gate,
        resource: &ResourceName,
        client: usize,
        token: FencingToken,
    ) -> Result<(), Error> {
        let mut events = self.events.lock().await;
        let verdict = gate.admit_any_source(resource, token).await;
        let accepted = match &verdict {
            Ok(()) => true,
            Err(Error::Stale { .. }) => false,
            Err(_) => return verdict,
        };
        events.push(Event::Write {
            client,
            token,
            accepted,
        });
        verdict
    }

    /// A copy of every event so far.
    pub async fn events(&self) -> Vec<Event> {
        self.events.lock().await.clone()
    }

    /// Checks every safety property; returns the first violation.
    pub async fn check(&self) -> Result<(), String> {
        let events = self.events().await;
        check_grants(&events)?;
        check_writes(&events)
    }

    /// Checks only the gate's verdicts: for scenarios where a holder is
    /// frozen on purpose, so it still believes it holds (no release can be
    /// recorded for it) while the next holder is granted.
    pub async fn check_writes(&self) -> Result<(), String> {
        check_writes(&self.events().await)
    }
}

/// Grants, by the time they were recorded (not the order the records were
/// pushed, which a watcher task may delay): tokens strictly increase, and
/// no acquire returned before the previous holder stopped (its release
/// began, or its `lost()` fired). A release is recorded no later than the
/// coordinator freed the lock and a grant no earlier than it was made, so
/// a reported overlap is a real one.
fn check_grants(events: &[Event]) -> Result<(), String> {
    let mut timeline: Vec<&Event> = events
        .iter()
        .filter(|e| !matches!(e, Event::Write { .. }))
        .collect();
    // Stable: events at the same instant keep the order they were pushed.
    timeline.sort_by_key(|e| match e {
        Event::Released { at, .. } | Event::Granted { at, .. } => *at,
        Event::Write { .. } => unreachable!("filtered out"),
    });
    let mut open: Option<(usize, FencingToken)> = None;
    let mut last: Option<FencingToken> = None;
    for e in timeline {
        match *e {
            Event::Granted { client, token, .. } => {
                if let Some(prev) = last.filter(|p| token <= *p) {
                    return Err(format!("client {client} got token {token} after {prev}"));
                }
                if let Some((holder, held)) = open {
                    return Err(format!(
                        "client {client} got {token} while client {holder} still held {held}"
                    ));
                }
                open = Some((client, token));
                last = Some(token);
            }
            Event::Released { token, .. } if open.is_some_and(|(_, t)| t == token) => open = None,
            _ => {}
        }
    }
    Ok(())
}

/// Writes: the gate accepted tokens in non-decreasing order, and refused a
/// token only when a higher one had already been accepted.
fn check_writes(events: &[Event]) -> Result<(), String> {
    let mut highest: Option<FencingToken> = None;
    for e in events {
        if let Event::Write {
            client,
            token,
            accepted,
        } = *e
        {
            let stale = highest.is_some_and(|h| token < h);
            match (accepted, stale) {
                (true, true) => {
                    return Err(format!(
                        "stale write accepted: client {client} token {token} after {}",
                        highest.unwrap_or(FencingToken::ZERO)
                    ))
                }
                (false, false) => {
                    return Err(format!(
                        "client {client} token {token} refused without a higher one"
                    ))
                }
                (true, false) => highest = Some(token),
                (false, true) => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: u64) -> FencingToken {
        FencingToken::new(v)
    }

    #[test]
    fn detects_overlapping_grants_and_regressing_tokens() {
        let at = Instant::now();
        let ok = vec![
            Event::Granted {
                client: 0,
                token: t(1),
                at,
            },
            Event::Released {
                client: 0,
                token: t(1),
                at,
            },
            Event::Granted {
                client: 1,
                token: t(2),
                at,
            },
        ];
        assert!(check_grants(&ok).is_ok());
        let overlap = vec![
            ok[0].clone(),
            Event::Granted {
                client: 1,
                token: t(2),
                at,
            },
        ];
        assert!(check_grants(&overlap).is_err());
        let backwards = vec![
            ok[0].clone(),
            ok[1].clone(),
            Event::Granted {
                client: 1,
                token: t(1),
                at,
            },
        ];
        assert!(check_grants(&backwards).is_err());
    }

    #[test]
    fn judges_by_the_recorded_times_not_the_push_order() {
        let start = Instant::now();
        let later = start + std::time::Duration::from_millis(5);
        // The old holder's loss was pushed after the new grant, but happened
        // before it: no overlap.
        let loss_seen_late = vec![
            Event::Granted {
                client: 0,
                token: t(1),
                at: start,
            },
            Event::Granted {
                client: 1,
                token: t(2),
                at: later,
            },
            Event::Released {
                client: 0,
                token: t(1),
                at: start,
            },
        ];
        assert!(check_grants(&loss_seen_late).is_ok());
        // Pushed in a harmless order, but the loss came after the grant.
        let loss_after_grant = vec![
            Event::Granted {
                client: 0,
                token: t(1),
                at: start,
            },
            Event::Released {
                client: 0,
                token: t(1),
                at: later,
            },
            Event::Granted {
                client: 1,
                token: t(2),
                at: start,
            },
        ];
        assert!(check_grants(&loss_after_grant).is_err());
    }

    #[test]
    fn detects_an_accepted_stale_write_and_a_wrong_refusal() {
        let w = |token: u64, accepted| Event::Write {
            client: 0,
            token: t(token),
            accepted,
        };
        assert!(check_writes(&[w(1, true), w(1, true), w(2, true), w(1, false)]).is_ok());
        assert!(check_writes(&[w(2, true), w(1, true)]).is_err());
        assert!(check_writes(&[w(2, true), w(3, false)]).is_err());
    }
}
