//! The demo's storage: a tiny key-value server on a Unix socket, owned by
//! the parent process so that no client can tamper with what it records.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use fencing::{Error, FencingToken, FileGate, Gate, ResourceName};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Mutex;
use tokio::task::{JoinHandle, JoinSet};

use super::protocol::{read_line, Reply, Request};

/// One write the storage saw, whatever became of it.
#[derive(Debug, Clone)]
pub struct WriteRecord {
    pub client: String,
    pub token: FencingToken,
    pub value: String,
    pub reply: Reply,
}

struct State {
    /// `None` stores blindly, the way most storage does.
    gate: Option<FileGate>,
    values: HashMap<ResourceName, String>,
    log: Vec<WriteRecord>,
}

/// A running storage server; dropping it stops the server and every
/// connection it serves.
pub struct Storage {
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl Storage {
    /// Listens on `socket` and serves until dropped.
    pub fn start(socket: &Path, gate: Option<FileGate>) -> std::io::Result<Storage> {
        let listener = UnixListener::bind(socket)?;
        let state = Arc::new(Mutex::new(State {
            gate,
            values: HashMap::new(),
            log: Vec::new(),
        }));
        let server = tokio::spawn(serve(listener, state.clone()));
        Ok(Storage { state, server })
    }

    pub async fn value(&self, resource: &ResourceName) -> Option<String> {
        self.state.lock().await.values.get(resource).cloned()
    }

    pub async fn log(&self) -> Vec<WriteRecord> {
        self.state.lock().await.log.clone()
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // The JoinSet inside the task is dropped with it, which aborts the
        // connection tasks too.
        self.server.abort();
    }
}

async fn serve(listener: UnixListener, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, state.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "storage accept failed"),
            },
            Some(_) = connections.join_next() => {}
        }
    }
}

async fn serve_connection(stream: UnixStream, state: Arc<Mutex<State>>) {
    let mut stream = BufReader::new(stream);
    let mut client = String::from("anonymous");
    loop {
        let line = match read_line(&mut stream).await {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(%client, error = %e, "dropping storage connection");
                return;
            }
        };
        let reply = match Request::parse(&line) {
            Err(e) => Reply::Err(e.to_string()),
            Ok(Request::Hello { client: name }) => {
                client = name;
                Reply::Ok
            }
            Ok(Request::Write {
                resource,
                token,
                value,
            }) => apply(&state, &client, resource, token, value).await,
        };
        if stream
            .get_mut()
            .write_all(format!("{reply}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Checks the token (if gated) and stores the value as one step: the state
/// lock is held across both so no admitted write can land after a newer one.
async fn apply(
    state: &Mutex<State>,
    client: &str,
    resource: ResourceName,
    token: FencingToken,
    value: String,
) -> Reply {
    let mut state = state.lock().await;
    let verdict = match &state.gate {
        None => Ok(()),
        Some(gate) => gate.admit_any_source(&resource, token).await,
    };
    let reply = match verdict {
        Ok(()) => {
            state.values.insert(resource, value.clone());
            Reply::Ok
        }
        Err(Error::Stale { presented, highest }) => Reply::Rejected { presented, highest },
        Err(other) => Reply::Err(other.to_string()),
    };
    state.log.push(WriteRecord {
        client: client.to_owned(),
        token,
        value,
        reply: reply.clone(),
    });
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn exchange(stream: &mut BufReader<UnixStream>, line: &str) -> String {
        stream
            .get_mut()
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        read_line(stream).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn gated_storage_refuses_a_lower_token_and_keeps_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let storage =
            Storage::start(&sock, Some(FileGate::open(dir.path().join("g")).unwrap())).unwrap();
        let mut c = BufReader::new(UnixStream::connect(&sock).await.unwrap());
        assert_eq!(exchange(&mut c, "HELLO tester").await, "OK");
        assert_eq!(exchange(&mut c, "WRITE ledger 5 a").await, "OK");
        assert_eq!(exchange(&mut c, "WRITE ledger 5 b").await, "OK");
        assert_eq!(exchange(&mut c, "WRITE ledger 4 c").await, "REJECTED 4 5");
        assert!(exchange(&mut c, "WRITE ledger x c")
            .await
            .starts_with("ERR "));
        assert!(exchange(&mut c, "garbage").await.starts_with("ERR "));
        let ledger = ResourceName::new("ledger").unwrap();
        assert_eq!(storage.value(&ledger).await.as_deref(), Some("b"));
        let log = storage.log().await;
        assert_eq!(log.len(), 3);
        assert_eq!(log[2].client, "tester");
        assert_eq!(
            log[2].reply,
            Reply::Rejected {
                presented: FencingToken::new(4),
                highest: FencingToken::new(5)
            }
        );
    }

    #[tokio::test]
    async fn blind_storage_takes_whatever_comes_last() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let storage = Storage::start(&sock, None).unwrap();
        let mut c = BufReader::new(UnixStream::connect(&sock).await.unwrap());
        assert_eq!(exchange(&mut c, "WRITE ledger 5 new").await, "OK");
        assert_eq!(exchange(&mut c, "WRITE ledger 4 old").await, "OK");
        let ledger = ResourceName::new("ledger").unwrap();
        assert_eq!(storage.value(&ledger).await.as_deref(), Some("old"));
        assert_eq!(storage.log().await[1].client, "anonymous");
    }
}
