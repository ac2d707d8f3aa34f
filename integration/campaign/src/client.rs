//! One campaign client: a separate process (inside its own network
//! namespace) that acquires, writes through the gates while it believes it
//! holds the lock, and releases, over and over (or, as a candidate of a
//! `LeaderElector`, leads, writes and resigns). It reports what it sees as
//! JSON lines on stdout; the controller stamps them on arrival with one
//! clock for every process (a grant and a loss carry the client's own stamp
//! on that clock, see [`monotonic_ns`]) and answers writes to its in-memory
//! gate on stdin.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, FencingToken, Gate, Grant, ResourceName};
use fencing_election::{ElectionConfig, LeaderElector};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{oneshot, Mutex};

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
    /// The holder identity of the acquires (the source's default if
    /// `None`). Coordinated candidates name theirs: it names the
    /// LeaseCandidate, and a restarted client must come back as itself.
    pub holder: Option<String>,
    /// Begin the next acquire as soon as granted rather than after the
    /// release: a coordinated candidate then stays one between its terms,
    /// and its library must not grant that standing acquire (the same
    /// identity) while the grant it holds lives. One that withdrew at each
    /// release and joined again at once stalled its Lease for 5-10 s
    /// whenever it was the controller's first choice: the controller names
    /// the next best when the Lease goes free, then prefers the one that
    /// rejoined; the named one does not take a Lease whose
    /// `preferredHolder` names another (nor does client-go), and the
    /// preferred one is not named, so nobody takes it until the
    /// controller's naming runs out.
    pub stand_between_holds: bool,
    /// One hold in this many (none if 0) is followed by a break out of the
    /// running, drawn from `step_out`, with no acquire standing: the next
    /// best candidate is elected meanwhile, and told to yield when this
    /// one, if better, is back.
    pub step_out_one_in: usize,
    pub step_out: (Duration, Duration),
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

/// A client's line protocol with the controller, shared by its loops: a
/// process with two elections runs two, and a reply goes to the one that
/// waits for its id (ids are unique in the process).
struct Io {
    out: Mutex<tokio::io::Stdout>,
    waiting: std::sync::Mutex<HashMap<u64, oneshot::Sender<bool>>>,
    last_id: AtomicU64,
}

impl Io {
    fn new() -> Self {
        Io {
            out: Mutex::new(tokio::io::stdout()),
            waiting: std::sync::Mutex::default(),
            last_id: AtomicU64::new(0),
        }
    }

    /// A fresh id for a write or a release.
    fn next_id(&self) -> u64 {
        self.last_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Hands a reply to the loop that waits for it (none after its limit).
    fn deliver(&self, reply: Reply) {
        let waiter = self.waiting.lock().unwrap().remove(&reply.id);
        if let Some(waiter) = waiter {
            let _ = waiter.send(reply.accepted);
        }
    }

    async fn send(&self, line: ClientLine) {
        let mut text = serde_json::to_string(&line).expect("client lines serialise");
        text.push('\n');
        let mut out = self.out.lock().await;
        // A closed stdout means the controller is gone: the run is over.
        if out.write_all(text.as_bytes()).await.is_err() || out.flush().await.is_err() {
            std::process::exit(0);
        }
    }

    /// Sends `line`, a memory write or a release with id `id`, and waits
    /// for the controller's answer; `None` after the write limit (the
    /// outcome is then unknown to the controller too). The waiter is in
    /// place before the line goes out, so no answer can come too soon.
    async fn ask(&self, id: u64, line: ClientLine) -> Option<bool> {
        let (answer, waiter) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id, answer);
        self.send(line).await;
        let answer = tokio::time::timeout(WRITE_LIMIT, waiter).await;
        self.waiting.lock().unwrap().remove(&id);
        answer.ok().and_then(Result::ok)
    }
}

/// Reads replies from stdin; returns when stdin closes (the controller's
/// signal to stop), which `stop` then reports.
fn read_stdin(io: Arc<Io>, stop: tokio::sync::watch::Sender<bool>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(reply) = serde_json::from_str::<Reply>(&line) {
                io.deliver(reply);
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
                        let (id, value) = (self.io.next_id(), self.value);
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
        let id = self.io.next_id();
        self.in_flight = Some(id);
        let value = self.value;
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

/// Runs the acquire / write / release loop until stdin closes, one for
/// each plan at once (the coordinated workload's two elections); with
/// `election`, the campaign / write / resign loop of `LeaderElector::run`
/// instead.
pub async fn run(
    source: Arc<dyn FencingSource>,
    gate: Option<(String, GateMaker)>,
    guarded: Option<(String, GuardedWrite)>,
    plans: Vec<ClientPlan>,
    election: Option<ElectionConfig>,
) {
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let io = Arc::new(Io::new());
    read_stdin(io.clone(), stop_tx);
    let mut loops = tokio::task::JoinSet::new();
    for plan in plans {
        let (source, gate, guarded) = (source.clone(), gate.clone(), guarded.clone());
        let (io, stop, election) = (io.clone(), stop.clone(), election.clone());
        loops.spawn(async move {
            let gates = Gates {
                gate: &gate,
                guarded: &guarded,
            };
            one_loop((&source, &plan, &io), gates, election, stop).await
        });
    }
    while loops.join_next().await.is_some() {}
}

/// The cluster's gate and guarded write, as one client loop borrows them.
#[derive(Clone, Copy)]
struct Gates<'a> {
    gate: &'a Option<(String, GateMaker)>,
    guarded: &'a Option<(String, GuardedWrite)>,
}

/// One plan's holds, one after the other, until stdin closes.
async fn one_loop(
    (source, plan, io): (&Arc<dyn FencingSource>, &ClientPlan, &Arc<Io>),
    gates: Gates<'_>,
    election: Option<ElectionConfig>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut rng = Rng::new(plan.seed);
    let mut writer = Writer {
        io,
        gate: gates.gate,
        guarded: gates.guarded,
        resource: &plan.resource,
        every: plan.write_every,
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
    let mut pending: Option<Pending> = None;
    while !*stop.borrow() {
        let acquire = match (&elector, pending.take()) {
            (Some(_), _) => {
                let resource = plan.resource.as_str().to_owned();
                io.send(ClientLine::AcquireStart { resource }).await;
                None
            }
            (None, Some(begun)) => Some(begun),
            (None, None) => Some(begin_acquire(source, plan, io).await),
        };
        let hold = next_hold(&mut rng, plan);
        writer.quiet = rng.below(QUIET_HOLDS) == 0;
        let step_out = step_out(&mut rng, plan);
        let one = async {
            let standing = (plan.stand_between_holds && step_out.is_zero()).then_some(&mut pending);
            match (&elector, acquire) {
                (Some(elector), _) => lead_once(elector, &mut writer, hold).await,
                (None, Some(acquire)) => {
                    let how = (source, plan, io);
                    hold_once(how, acquire, (&mut writer, standing), hold).await
                }
                (None, None) => {}
            }
        };
        tokio::pin!(one);
        tokio::select! {
            () = &mut one => {
                if !step_out.is_zero() {
                    let _ = tokio::time::timeout(step_out, stop.changed()).await;
                }
            }
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
    if let Some(begun) = pending {
        give_back(begun, &mut writer).await;
    }
}

/// An acquire running in a task of its own, which reports its grant the
/// moment it returns: so that it can be begun while the last grant is still
/// held ([`ClientPlan::stand_between_holds`]), and a grant it makes too
/// soon shows in the history when it is made.
struct Pending {
    task: tokio::task::JoinHandle<Option<Acquired>>,
    /// Dropped to give the acquire up (a grant it already made is kept).
    cancel: Option<oneshot::Sender<()>>,
}

/// An acquire's outcome, and the stamp its grant was reported with.
type Acquired = (fencing::Result<Grant>, u64);

impl Pending {
    /// The acquire's outcome; `None` if it was given up first.
    async fn outcome(&mut self) -> Option<Acquired> {
        match (&mut self.task).await {
            Ok(acquired) => acquired,
            Err(e) => {
                eprintln!("acquire task: {e}");
                None
            }
        }
    }
}

/// Dropped unfinished only when a stopping client's hold outlived its stop
/// limit: the acquire is cut off like one awaited in place.
impl Drop for Pending {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The break after this hold ([`ClientPlan::step_out_one_in`]), zero for
/// none; nothing is drawn for a plan without breaks, so the other
/// workloads' seeds replay the holds they always did.
fn step_out(rng: &mut Rng, plan: &ClientPlan) -> Duration {
    if plan.step_out_one_in == 0 || rng.below(plan.step_out_one_in) != 0 {
        return Duration::ZERO;
    }
    rng.duration(plan.step_out.0, plan.step_out.1)
}

/// Reports the start of an acquire and begins it, in a task of its own (it
/// may run on while the last grant is released).
async fn begin_acquire(
    source: &Arc<dyn FencingSource>,
    plan: &ClientPlan,
    io: &Arc<Io>,
) -> Pending {
    io.send(ClientLine::AcquireStart {
        resource: plan.resource.as_str().to_owned(),
    })
    .await;
    let mut options = AcquireOptions::new().ttl(plan.ttl).wait(plan.acquire_wait);
    if let Some(holder) = &plan.holder {
        options = options.holder(holder.as_str());
    }
    let (source, resource, io) = (source.clone(), plan.resource.clone(), io.clone());
    let (cancel, cancelled) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let acquired = tokio::select! {
            biased;
            acquired = source.acquire(&resource, &options) => acquired,
            _ = cancelled => return None,
        };
        let granted_ns = match &acquired {
            Ok(grant) => granted(&io, &resource, grant.token()).await,
            Err(_) => 0,
        };
        Some((acquired, granted_ns))
    });
    Pending {
        task,
        cancel: Some(cancel),
    }
}

/// Ends an acquire the client no longer waits for: cancelled, or, if it
/// was granted already, reported and released as any grant is.
async fn give_back(mut acquire: Pending, writer: &mut Writer<'_>) {
    acquire.cancel = None;
    if let Some((Ok(grant), _)) = acquire.outcome().await {
        released(writer, grant.resource(), grant.token()).await;
        let _ = tokio::time::timeout(WRITE_LIMIT, grant.release()).await;
    }
}

/// How long a stopping client may take to finish its acquire and release:
/// an acquire may take its whole 5 s wait and the release its 2 s limit,
/// and a release cut short leaves a Kubernetes Lease naming the client.
pub const STOP_LIMIT: Duration = Duration::from_secs(9);

/// One acquire (begun by the caller), hold with writes, and release (or
/// loss); given `standing`, the next acquire begins there as soon as this
/// one is granted ([`ClientPlan::stand_between_holds`]).
async fn hold_once(
    (source, plan, io): (&Arc<dyn FencingSource>, &ClientPlan, &Arc<Io>),
    mut acquire: Pending,
    (writer, standing): (&mut Writer<'_>, Option<&mut Option<Pending>>),
    hold: Duration,
) {
    let (grant, granted_ns) = match acquire.outcome().await {
        Some((Ok(grant), granted_ns)) => (grant, granted_ns),
        Some((Err(e), _)) => {
            eprintln!("acquire: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
        None => return,
    };
    if let Some(standing) = standing.filter(|_| !*writer.stop.borrow()) {
        *standing = Some(begin_acquire(source, plan, io).await);
    }
    let token = grant.token();
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
    let id = writer.io.next_id();
    let resource = resource.as_str().to_owned();
    let token = token.get();
    let line = ClientLine::Release {
        resource,
        token,
        id,
    };
    let _ = writer.io.ask(id, line).await;
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
    let line = ClientLine::MemWrite {
        id,
        resource: resource.to_owned(),
        token,
        value,
    };
    // The controller records the outcome; the client only waits for it.
    let _ = io.ask(id, line).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(step_out_one_in: usize) -> ClientPlan {
        ClientPlan {
            resource: ResourceName::new("r").unwrap(),
            ttl: Duration::from_secs(2),
            acquire_wait: Duration::from_secs(5),
            hold: (Duration::from_millis(10), Duration::from_millis(150)),
            long_hold_percent: 5,
            long_hold: (Duration::from_secs(1), Duration::from_secs(5)),
            write_every: Duration::from_millis(25),
            seed: 7,
            careless: false,
            holder: None,
            stand_between_holds: false,
            step_out_one_in,
            step_out: (Duration::from_secs(1), Duration::from_secs(3)),
        }
    }

    #[test]
    fn breaks_come_one_hold_in_n_and_cost_other_plans_no_draw() {
        // Without breaks nothing is drawn: the holds a seed gave before
        // come out the same.
        let (mut with, mut without) = (Rng::new(9), Rng::new(9));
        assert_eq!(step_out(&mut with, &plan(0)), Duration::ZERO);
        assert_eq!(with.next_u64(), without.next_u64());
        let mut rng = Rng::new(9);
        let breaks: Vec<Duration> = (0..400).map(|_| step_out(&mut rng, &plan(4))).collect();
        let taken: Vec<&Duration> = breaks.iter().filter(|d| !d.is_zero()).collect();
        assert!(
            (60..140).contains(&taken.len()),
            "{} breaks in 400",
            taken.len()
        );
        for d in taken {
            assert!((1000..=3000).contains(&d.as_millis()), "{d:?}");
        }
    }
}
