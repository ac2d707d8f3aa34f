//! The relay of a client's stdout line protocol into the history: each
//! line an event, each storage write passed on to the storage (and
//! PostgreSQL) and its answer written back to the client's stdin.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdin;

use super::Recorder;
use crate::client::{ClientLine, Reply};
use crate::history::{EventKind, WriteOutcome};
use crate::pg_storage::{self, PgStore};
use crate::storage::{self, Storage};

/// Where a client's answers go (`None` once it stopped).
pub(super) type ClientStdin = Arc<tokio::sync::Mutex<Option<ChildStdin>>>;

/// The storages a client's writes go to.
type Stores = (Arc<Storage>, Option<Arc<PgStore>>);

/// Turns one client's lines into events; passes its writes to the storage.
pub(super) async fn relay(
    name: String,
    stdout: tokio::process::ChildStdout,
    stdin: ClientStdin,
    recorder: Arc<Recorder>,
    stores: Stores,
) {
    let mut lines = BufReader::new(stdout).lines();
    let mut started: HashMap<u64, (u64, ClientLine)> = HashMap::new();
    // Storage writes run beside the reading: a paused storage must not
    // delay the stamps of the client's next lines (its loss above all).
    let mut writes = tokio::task::JoinSet::new();
    while let Ok(Some(line)) = lines.next_line().await {
        while writes.try_join_next().is_some() {}
        let mut at = recorder.now_ns();
        let Ok(parsed) = serde_json::from_str::<ClientLine>(&line) else {
            continue;
        };
        let kind = match parsed {
            ClientLine::AcquireStart { resource } => EventKind::AcquireStart { resource },
            ClientLine::Grant {
                resource,
                token,
                at_ns,
            } => {
                at = recorder.client_stamp(at_ns, at);
                EventKind::Grant { resource, token }
            }
            ClientLine::Lost {
                resource,
                token,
                reason,
                at_ns,
            } => {
                at = recorder.client_stamp(at_ns, at);
                EventKind::Lost {
                    resource,
                    token,
                    reason,
                }
            }
            ClientLine::Release {
                resource,
                token,
                id,
            } => {
                recorder.record_at(at, &name, EventKind::Release { resource, token });
                answer(&stdin, &Reply { id, accepted: true }).await;
                continue;
            }
            start @ ClientLine::WriteStart { id, .. } => {
                started.insert(id, (at, start));
                continue;
            }
            ClientLine::WriteEnd { id, outcome } => {
                let Some((
                    start_ns,
                    ClientLine::WriteStart {
                        gate,
                        resource,
                        token,
                        value,
                        ..
                    },
                )) = started.remove(&id)
                else {
                    continue;
                };
                EventKind::Write {
                    resource,
                    token,
                    gate,
                    start_ns,
                    outcome,
                    value,
                }
            }
            ClientLine::MemWrite {
                id,
                resource,
                token,
                value,
            } => {
                let write = (stores.clone(), recorder.clone(), stdin.clone());
                writes.spawn(store(write, name.clone(), at, id, resource, token, value));
                continue;
            }
        };
        recorder.record_at(at, &name, kind);
    }
    // The process is gone, but the writes it sent are still in the storage's
    // hands (each bounded by its answer limit): their outcomes are history.
    while writes.join_next().await.is_some() {}
}

/// One write through the storage (and PostgreSQL), recorded, and answered
/// to the client.
async fn store(
    ((storage, postgres), recorder, stdin): (Stores, Arc<Recorder>, ClientStdin),
    client: String,
    start_ns: u64,
    id: u64,
    resource: String,
    token: u64,
    value: u64,
) {
    let write = |gate: &str, outcome| EventKind::Write {
        resource: resource.clone(),
        token,
        gate: gate.into(),
        start_ns,
        outcome,
        value,
    };
    let file = async {
        let outcome = match storage.write(&resource, token, value).await {
            Some(true) => WriteOutcome::Accepted,
            Some(false) => WriteOutcome::Refused,
            None => WriteOutcome::Unknown,
        };
        recorder.record(&client, write(storage::GATE, outcome));
        outcome
    };
    let pg = |gate: &'static str| {
        let (postgres, client, resource, recorder, write) =
            (&postgres, &client, &resource, &recorder, &write);
        async move {
            if let Some(pg) = postgres {
                let outcome = pg.write(gate, client, resource, token, value).await;
                recorder.record(client, write(gate, outcome));
            }
        }
    };
    let (outcome, (), ()) = tokio::join!(file, pg(pg_storage::GATE), pg(pg_storage::TABLE_GATE));
    let accepted = outcome == WriteOutcome::Accepted;
    answer(&stdin, &Reply { id, accepted }).await;
}

async fn answer(stdin: &tokio::sync::Mutex<Option<ChildStdin>>, reply: &Reply) {
    let mut line = serde_json::to_string(reply).expect("replies serialise");
    line.push('\n');
    if let Some(stdin) = stdin.lock().await.as_mut() {
        let _ = stdin.write_all(line.as_bytes()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::monotonic_ns;

    #[test]
    fn grant_and_loss_lines_carry_a_stamp_that_anchors_may_leave_out() {
        let anchor: ClientLine =
            serde_json::from_str(r#"{"grant":{"resource":"campaign-a","token":7}}"#).unwrap();
        assert_eq!(
            anchor,
            ClientLine::Grant {
                resource: "campaign-a".into(),
                token: 7,
                at_ns: None
            }
        );
        let lost = ClientLine::Lost {
            resource: "campaign-a".into(),
            token: 7,
            reason: "expired".into(),
            at_ns: Some(monotonic_ns()),
        };
        let text = serde_json::to_string(&lost).unwrap();
        assert!(text.contains("\"at_ns\":"), "{text}");
        assert_eq!(serde_json::from_str::<ClientLine>(&text).unwrap(), lost);
    }
}
