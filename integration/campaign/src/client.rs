//! One campaign client: a separate process (inside its own network
//! namespace) that acquires, writes through the gates while it believes it
//! holds the lock, and releases, over and over (or, as a candidate of a
//! `LeaderElector`, leads, writes and resigns). It reports what it sees as
//! JSON lines on stdout; the controller stamps them on arrival with one
//! clock for every process (a grant and a loss carry the client's own stamp
//! on that clock, see [`monotonic_ns`]) and answers writes to its in-memory
//! gate on stdin.

use std::sync::Arc;
use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, FencingToken, Gate, Grant, ResourceName};
use fencing_election::{ElectionConfig, LeaderElector};
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
    /// `at_ns`: when the acquire returned, by [`monotonic_ns`] (absent
    /// from an anchor's lines: the controller stamps those on arrival).
    Grant {
        resource: String,
        token: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ns: Option<u64>,
    },
    /// `at_ns`: when the client saw the loss, by [`monotonic_ns`].
    Lost {
        resource: String,
        token: u64,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ns: Option<u64>,
    },
    /// The holder stops acting as one; answered with a [`Reply`] once
    /// recorded, and only then is the release sent, so the record cannot
    /// come after the next holder's grant (lines of different clients are
    /// stamped in the order the controller happens to read them).
    Release {
        resource: String,
        token: u64,
        id: u64,
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

/// Nanoseconds on the machine's `CLOCK_MONOTONIC`, for the stamps a
/// client puts on its grants and losses. Lines reach the controller through
/// a pipe it reads among many: under load a loss can arrive milliseconds
/// after the next holder's grant although it happened before. rustix reads
/// the clock through the vDSO, not libc, so the libfaketime a client under
/// a clock fault preloads does not skew these stamps.
pub fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let (secs, nanos) = (u64::try_from(now.tv_sec), u64::try_from(now.tv_nsec));
    secs.unwrap_or(0) * 1_000_000_000 + nanos.unwrap_or(0)
}

/// The controller's answer to a [`ClientLine::MemWrite`] or a
/// [`ClientLine::Release`].
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
    /// Ignore `lost()` and write through the whole hold (lock workload).
    pub careless: bool,
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

/// A write the coordinator itself guards with the grant (etcd's
/// `guarded_txn`, ZooKeeper's `guarded_multi`): applied only while the
/// grant's key is still there, refused with [`Error::Lost`] after. Writes
/// `value` to the resource's data key.
pub type GuardedWrite = Arc<
    dyn for<'g> Fn(
            &'g Grant,
            u64,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = fencing::Result<()>> + Send + 'g>,
        > + Send
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

/// The shared tail of both loops: the gates, and the ids and values of
/// the writes a client makes.
struct Writer<'a> {
    io: &'a Io,
    gate: &'a Option<(String, GateMaker)>,
    guarded: &'a Option<(String, GuardedWrite)>,
    resource: &'a ResourceName,
    every: Duration,
    next_id: u64,
    value: u64,
    /// The gate write in flight, if any: cut short by a loss, its outcome
    /// is unknown (the server may still apply it).
    in_flight: Option<u64>,
    /// Set when the controller asks the client to stop: the hold ends early
    /// and is released as usual.
    stop: tokio::sync::watch::Receiver<bool>,
    /// This hold writes to the storage only, not to the cluster: see
    /// [`QUIET_HOLDS`].
    quiet: bool,
}

/// One hold in this many writes to the storage only. ZooKeeper answers a
/// session's requests in order, so a holder's write through its own session
/// that a leader without a quorum cannot commit holds back the heartbeat
/// behind it: with the old `sync` heartbeat, holders that wrote lost their
/// lease 0.6 s after a `depose-leader` cut, while quiet ones went on
/// renewing through the isolated leader for 2 s. Only a quiet holder shows
/// what such a leader still answers on its own.
const QUIET_HOLDS: usize = 3;

impl Writer<'_> {
    /// Writes through the storage, the cluster's gate and (given the
    /// grant: not in an election's term) the guarded write, every `every`
    /// until `until`.
    async fn write_until(
        &mut self,
        token: FencingToken,
        grant: Option<&Grant>,
        until: tokio::time::Instant,
    ) {
        let cluster_gate = match self.gate {
            Some((_, make)) if !self.quiet => make().await,
            _ => None,
        };
        let resource = self.resource.as_str();
        while tokio::time::Instant::now() < until && !*self.stop.borrow() {
            tokio::time::sleep(self.every).await;
            self.value += 1;
            // The three writes take turns going first: the first write
            // after a pause races the holder's loss, which every gate must
            // meet (the ones behind it rarely get sent late).
            for k in 0..3 {
                match (self.value as usize + k) % 3 {
                    0 => {
                        self.next_id += 1;
                        let (id, value) = (self.next_id, self.value);
                        write_memory(self.io, id, resource, token.get(), value).await;
                    }
                    _ if self.quiet => {}
                    1 => {
                        if let (Some((name, _)), Some(gate)) = (self.gate, &cluster_gate) {
                            let write = gate.admit_any_source(self.resource, token);
                            self.write_through(name, token, write).await;
                        }
                    }
                    _ => {
                        if let (Some((name, write)), Some(grant)) = (self.guarded, grant) {
                            self.write_through(name, token, write(grant, self.value))
                                .await;
                        }
                    }
                }
            }
        }
    }

    /// One write to a cluster, reported before it is sent and after.
    async fn write_through(
        &mut self,
        name: &str,
        token: FencingToken,
        write: impl std::future::Future<Output = fencing::Result<()>>,
    ) {
        self.next_id += 1;
        self.in_flight = Some(self.next_id);
        let (id, value) = (self.next_id, self.value);
        let resource = self.resource.as_str().to_owned();
        self.io
            .send(ClientLine::WriteStart {
                id,
                gate: name.to_owned(),
                resource,
                token: token.get(),
                value,
            })
            .await;
        let outcome = match tokio::time::timeout(WRITE_LIMIT, write).await {
            Ok(Ok(())) => WriteOutcome::Accepted,
            // A gate refuses with Stale, a guarded write with Lost (its
            // compare failed: nothing was applied).
            Ok(Err(Error::Stale { .. } | Error::Lost { .. })) => WriteOutcome::Refused,
            Ok(Err(e)) => {
                eprintln!("{name} write of token {token}: {e}");
                WriteOutcome::Unknown
            }
            Err(_) => WriteOutcome::Unknown,
        };
        self.io.send(ClientLine::WriteEnd { id, outcome }).await;
        self.in_flight = None;
    }

    /// Reports the write a loss cut short.
    async fn cut_short(&mut self) {
        if let Some(id) = self.in_flight.take() {
            let outcome = WriteOutcome::Unknown;
            self.io.send(ClientLine::WriteEnd { id, outcome }).await;
        }
    }
}

/// Mostly short holds (many grants), sometimes long ones: only a hold that
/// outlasts a session can be caught out by a partition.
pub fn next_hold(rng: &mut Rng, plan: &ClientPlan) -> Duration {
    if rng.below(100) < plan.long_hold_percent {
        rng.duration(plan.long_hold.0, plan.long_hold.1)
    } else {
        rng.duration(plan.hold.0, plan.hold.1)
    }
}

/// Runs the acquire / write / release loop until stdin closes; with
/// `election`, the campaign / write / resign loop of `LeaderElector::run`
/// instead.
pub async fn run(
    source: Arc<dyn FencingSource>,
    gate: Option<(String, GateMaker)>,
    guarded: Option<(String, GuardedWrite)>,
    plan: ClientPlan,
    election: Option<ElectionConfig>,
) {
    let (reply_tx, reply_rx) = mpsc::channel(64);
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    read_stdin(reply_tx, stop_tx);
    let io = Io {
        out: Mutex::new(tokio::io::stdout()),
        replies: Mutex::new(reply_rx),
    };
    let mut rng = Rng::new(plan.seed);
    let mut writer = Writer {
        io: &io,
        gate: &gate,
        guarded: &guarded,
        resource: &plan.resource,
        every: plan.write_every,
        next_id: 0,
        value: 0,
        in_flight: None,
        stop: stop.clone(),
        quiet: false,
    };
    let elector = match election {
        Some(config) => match LeaderElector::new(source.clone(), plan.resource.clone(), config) {
            Ok(e) => Some(e),
            Err(e) => {
                eprintln!("elector: {e}");
                return;
            }
        },
        None => None,
    };
    while !*stop.borrow() {
        io.send(ClientLine::AcquireStart {
            resource: plan.resource.as_str().to_owned(),
        })
        .await;
        let hold = next_hold(&mut rng, &plan);
        writer.quiet = rng.below(QUIET_HOLDS) == 0;
        let one = async {
            match &elector {
                Some(elector) => lead_once(elector, &mut writer, hold).await,
                None => hold_once(&source, &plan, &mut writer, hold).await,
            }
        };
        tokio::pin!(one);
        tokio::select! {
            () = &mut one => {}
            _ = stop.changed() => {
                // The writes stop; a hold is released before the process
                // exits (a grant merely dropped is released by a task that
                // the runtime's shutdown may cut short, and a Kubernetes
                // Lease would go on naming this client).
                let _ = tokio::time::timeout(STOP_LIMIT, one).await;
                break;
            }
        }
    }
}

/// How long a stopping client may take to finish its acquire and release:
/// an acquire may take its whole 5 s wait and the release its 2 s limit,
/// and a release cut short leaves a Kubernetes Lease naming the client.
pub const STOP_LIMIT: Duration = Duration::from_secs(9);

/// One acquire, hold with writes, and release (or loss).
async fn hold_once(
    source: &Arc<dyn FencingSource>,
    plan: &ClientPlan,
    writer: &mut Writer<'_>,
    hold: Duration,
) {
    let options = AcquireOptions::new()
        .ttl(plan.ttl)
        .timeout(plan.acquire_wait);
    let grant = match source.acquire(&plan.resource, &options).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("acquire: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
    };
    let (io, token) = (writer.io, grant.token());
    let granted_ns = granted(io, &plan.resource, token).await;
    let until = tokio::time::Instant::now() + hold;
    // lost() is watched during the writes too, so the loss is reported
    // when it fires, not when a slow write returns. A write that returns
    // as the loss fires (the task polled once for both, after a stall)
    // must not turn the loss into a release: the tracker's loss is
    // reported, at the instant the library marked it.
    let lost = if plan.careless {
        writer.write_until(token, Some(&grant), until).await;
        None
    } else {
        tokio::select! {
            biased;
            reason = grant.lost() => Some(reason),
            () = writer.write_until(token, Some(&grant), until) => grant.lease().loss_reason(),
        }
    };
    writer.cut_short().await;
    match lost {
        Some(reason) => {
            // A grant can die in the moment between the acquire's return
            // and its stamp: the loss is never stamped before the grant.
            let at = grant.lease().lost_at().map(|at| (at, granted_ns));
            lost_it(io, &plan.resource, token, reason.to_string(), at).await;
            let _ = tokio::time::timeout(WRITE_LIMIT, grant.release()).await;
        }
        None => {
            // The holder stops acting as one before the release is sent:
            // the next grant may follow the server's delete at once.
            released(writer, &plan.resource, token).await;
            let released = tokio::time::timeout(WRITE_LIMIT, grant.release()).await;
            if !matches!(released, Ok(Ok(()))) {
                eprintln!("release of token {token}: {released:?}");
            }
        }
    }
}

/// One term of `LeaderElector::run`: the work writes for `hold`, then
/// returns, and the elector resigns; a loss cancels the work.
async fn lead_once(elector: &LeaderElector, writer: &mut Writer<'_>, hold: Duration) {
    let resource = elector.election().clone();
    let io = writer.io;
    let mut term = None;
    let outcome = elector
        .run(|ctx| {
            let token = ctx.token();
            term = Some(token);
            let writer = &mut *writer;
            let resource = &resource;
            async move {
                granted(io, resource, token).await;
                writer
                    .write_until(token, None, tokio::time::Instant::now() + hold)
                    .await;
                // As for a lock: no longer acting as leader before resigning.
                released(writer, resource, token).await;
            }
        })
        .await;
    writer.cut_short().await;
    match (outcome, term) {
        (Ok(()), _) => {}
        (Err(Error::Lost { reason, .. }), Some(token)) => {
            lost_it(io, &resource, token, reason, None).await
        }
        (Err(e), _) => {
            eprintln!("elector: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Reports a grant; returns its stamp.
async fn granted(io: &Io, resource: &ResourceName, token: FencingToken) -> u64 {
    let resource = resource.as_str().to_owned();
    let token = token.get();
    let now = monotonic_ns();
    io.send(ClientLine::Grant {
        resource,
        token,
        at_ns: Some(now),
    })
    .await;
    now
}

async fn released(writer: &mut Writer<'_>, resource: &ResourceName, token: FencingToken) {
    writer.next_id += 1;
    let id = writer.next_id;
    let resource = resource.as_str().to_owned();
    let token = token.get();
    writer
        .io
        .send(ClientLine::Release {
            resource,
            token,
            id,
        })
        .await;
    let _ = writer.io.reply(id).await;
}

/// Reports a loss, as of `at` (the tracker's loss instant, but not before
/// the grant's stamp given with it) or now.
async fn lost_it(
    io: &Io,
    resource: &ResourceName,
    token: FencingToken,
    reason: String,
    at: Option<(tokio::time::Instant, u64)>,
) {
    let now = monotonic_ns();
    let at_ns = Some(at.map_or(now, |(at, not_before)| {
        let ago = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        now.saturating_sub(ago).max(not_before)
    }));
    let resource = resource.as_str().to_owned();
    let token = token.get();
    io.send(ClientLine::Lost {
        resource,
        token,
        reason,
        at_ns,
    })
    .await;
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
