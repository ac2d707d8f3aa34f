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

    /// Records that `client` got `token`.
    pub async fn granted(&self, client: usize, token: FencingToken) {
        self.events.lock().await.push(Event::Granted {
            client,
            token,
            at: Instant::now(),
        });
    }

    /// Records that `client` stops using `token`.
    pub async fn released(&self, client: usize, token: FencingToken) {
        self.events.lock().await.push(Event::Released {
            client,
            token,
            at: Instant::now(),
        });
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
        let verdict = gate.admit(resource, token).await;
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
}

/// Grants: tokens strictly increase in the order they were handed out, and
/// a grant never starts before the previous holder released.
fn check_grants(events: &[Event]) -> Result<(), String> {
    let mut open: Option<(usize, FencingToken)> = None;
    let mut last: Option<FencingToken> = None;
    for e in events {
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
