//! One campaign client: a separate process (inside its own network
//! namespace) that acquires, writes through the gates while it believes it
//! holds the lock, and releases, over and over. It reports what it sees as
//! JSON lines on stdout; the controller stamps them on arrival with one
//! clock for every process and answers writes to its in-memory gate on
//! stdin.

use std::sync::Arc;
use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, FencingToken, Gate, ResourceName};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Mutex};

use super::history::WriteOutcome;
use super::rng::Rng;

/// What a client tells the controller, one JSON object per line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClientLine {
    AcquireStart {
        resource: String,
    },
    Grant {
        resource: String,
        token: u64,
    },
    Lost {
        resource: String,
        token: u64,
        reason: String,
    },
    Release {
        resource: String,
        token: u64,
    },
    /// A write through the cluster's own gate is about to be sent.
    WriteStart {
        id: u64,
        gate: String,
        resource: String,
        token: u64,
        value: u64,
    },
    /// Its outcome.
    WriteEnd {
        id: u64,
        outcome: WriteOutcome,
    },
    /// A write to the controller's in-memory gate; answered with a [`Reply`].
    MemWrite {
        id: u64,
        resource: String,
        token: u64,
        value: u64,
    },
}

/// The controller's answer to a [`ClientLine::MemWrite`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    pub id: u64,
    pub accepted: bool,
}

/// How one client behaves.
#[derive(Clone, Debug)]
pub struct ClientPlan {
    pub resource: ResourceName,
    pub ttl: Duration,
    /// Bound of one acquire; a client waits, gives up, and tries again.
    pub acquire_wait: Duration,
    pub hold: (Duration, Duration),
    /// Share of holds (percent) drawn from `long_hold` instead.
    pub long_hold_percent: usize,
    pub long_hold: (Duration, Duration),
    pub write_every: Duration,
    pub seed: u64,
}

/// The cluster's own gate, when the backend has one.
pub type ClusterGate = Arc<dyn Gate>;

/// Makes the cluster's gate on the source's current session. Asked once
/// per grant: a ZooKeeper gate is bound to the session it was made on and
/// stays dead after that session expires.
pub type GateMaker = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<ClusterGate>> + Send>>
        + Send
        + Sync,
>;

/// The longest a single write may take before its outcome is "unknown".
const WRITE_LIMIT: Duration = Duration::from_secs(2);

struct Io {
    out: Mutex<tokio::io::Stdout>,
    replies: Mutex<mpsc::Receiver<Reply>>,
}

impl Io {
    async fn send(&self, line: ClientLine) {
        let mut text = serde_json::to_string(&line).expect("client lines serialise");
        text.push('\n');
        let mut out = self.out.lock().await;
        // A closed stdout means the controller is gone: the run is over.
        if out.write_all(text.as_bytes()).await.is_err() || out.flush().await.is_err() {
            std::process::exit(0);
        }
    }

    /// The controller's answer to memory write `id`, or `None` after the
    /// write limit (the outcome is then unknown to the controller too).
    async fn reply(&self, id: u64) -> Option<bool> {
        let mut replies = self.replies.lock().await;
        let wait = async {
            while let Some(r) = replies.recv().await {
                if r.id == id {
                    return Some(r.accepted);
                }
            }
            None
        };
        tokio::time::timeout(WRITE_LIMIT, wait).await.ok().flatten()
    }
}

/// Reads replies from stdin; returns when stdin closes (the controller's
/// signal to stop), which `stop` then reports.
fn read_stdin(replies: mpsc::Sender<Reply>, stop: tokio::sync::watch::Sender<bool>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(reply) = serde_json::from_str::<Reply>(&line) {
                let _ = replies.send(reply).await;
            }
        }
        let _ = stop.send(true);
    });
}

/// Runs the acquire / write / release loop until stdin closes.
pub async fn run(
    source: Arc<dyn FencingSource>,
    gate: Option<(String, GateMaker)>,
    plan: ClientPlan,
) {
    let (reply_tx, reply_rx) = mpsc::channel(64);
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    read_stdin(reply_tx, stop_tx);
    let io = Io {
        out: Mutex::new(tokio::io::stdout()),
        replies: Mutex::new(reply_rx),
    };
    let mut rng = Rng::new(plan.seed);
    let mut next_id = 0u64;
    let mut value = 0u64;
    let resource = plan.resource.as_str().to_owned();
    let options = AcquireOptions::new()
        .ttl(plan.ttl)
        .timeout(plan.acquire_wait);
    while !*stop.borrow() {
        io.send(ClientLine::AcquireStart {
            resource: resource.clone(),
        })
        .await;
        let grant = tokio::select! {
            r = source.acquire(&plan.resource, &options) => r,
            _ = stop.changed() => break,
        };
        let grant = match grant {
            Ok(g) => g,
            Err(e) => {
                eprintln!("acquire: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let token = grant.token().get();
        io.send(ClientLine::Grant {
            resource: resource.clone(),
            token,
        })
        .await;
        let cluster_gate = match &gate {
            Some((_, make)) => make().await,
            None => None,
        };
        // Mostly short holds (many grants), sometimes long ones: only a
        // hold that outlasts a session can be caught out by a partition.
        let hold = if rng.below(100) < plan.long_hold_percent {
            rng.duration(plan.long_hold.0, plan.long_hold.1)
        } else {
            rng.duration(plan.hold.0, plan.hold.1)
        };
        let until = tokio::time::Instant::now() + hold;
        // The gate write in flight, if any: cut short by a loss, its outcome
        // is unknown (the server may still apply it).
        let in_flight = std::cell::Cell::new(None);
        let work = async {
            while tokio::time::Instant::now() < until {
                tokio::time::sleep(plan.write_every).await;
                value += 1;
                next_id += 1;
                write_memory(&io, next_id, &resource, token, value).await;
                if let (Some((name, _)), Some(gate)) = (&gate, &cluster_gate) {
                    next_id += 1;
                    in_flight.set(Some(next_id));
                    let (resource, token) = (&plan.resource, grant.token());
                    write_gate(&io, next_id, name, gate, resource, token, value).await;
                    in_flight.set(None);
                }
            }
        };
        // lost() is watched during the writes too, so the loss is reported
        // when it fires, not when a slow write returns.
        let lost = tokio::select! {
            reason = grant.lost() => Some(reason),
            () = work => None,
        };
        if let Some(id) = in_flight.get() {
            let outcome = WriteOutcome::Unknown;
            io.send(ClientLine::WriteEnd { id, outcome }).await;
        }
        match lost {
            Some(reason) => {
                io.send(ClientLine::Lost {
                    resource: resource.clone(),
                    token,
                    reason,
                })
                .await;
                let _ = tokio::time::timeout(WRITE_LIMIT, grant.release()).await;
            }
            None => {
                // The holder stops acting as one before the release is sent:
                // the next grant may follow the server's delete at once.
                io.send(ClientLine::Release {
                    resource: resource.clone(),
                    token,
                })
                .await;
                let released = tokio::time::timeout(WRITE_LIMIT, grant.release()).await;
                if !matches!(released, Ok(Ok(()))) {
                    eprintln!("release of token {token}: {released:?}");
                }
            }
        }
    }
}

async fn write_memory(io: &Io, id: u64, resource: &str, token: u64, value: u64) {
    io.send(ClientLine::MemWrite {
        id,
        resource: resource.to_owned(),
        token,
        value,
    })
    .await;
    // The controller records the outcome; the client only waits for it.
    let _ = io.reply(id).await;
}

async fn write_gate(
    io: &Io,
    id: u64,
    name: &str,
    gate: &ClusterGate,
    resource: &ResourceName,
    token: FencingToken,
    value: u64,
) {
    io.send(ClientLine::WriteStart {
        id,
        gate: name.to_owned(),
        resource: resource.as_str().to_owned(),
        token: token.get(),
        value,
    })
    .await;
    let outcome = match tokio::time::timeout(WRITE_LIMIT, gate.admit(resource, token)).await {
        Ok(Ok(())) => WriteOutcome::Accepted,
        Ok(Err(Error::Stale { .. })) => WriteOutcome::Refused,
        Ok(Err(e)) => {
            eprintln!("gate write of token {token}: {e}");
            WriteOutcome::Unknown
        }
        Err(_) => WriteOutcome::Unknown,
    };
    io.send(ClientLine::WriteEnd { id, outcome }).await;
}
