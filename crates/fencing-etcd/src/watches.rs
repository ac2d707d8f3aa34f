//! Every watch of one source on one gRPC Watch stream, as Go's clientv3
//! does. A stream per watch costs a server stream slot each: with a cap of
//! 100 concurrent streams (a common server or proxy setting), a few hundred
//! held locks took every slot, the lease keep-alive could not get one, and
//! every grant was lost at once (integration/tests/tests/integration/etcd/many_locks.rs).
//!
//! One task owns the stream. Watch ids on the stream are chosen here (etcd
//! 3.4+ accepts them), so creates need no reply to be matched, and each
//! create gets a new one: the server keeps the id of a watch it cancelled
//! for compaction and refuses it again. When the stream breaks,
//! every watch is created again on a new one from the revision it started
//! at, so a delete that happened in between is still seen; when the server
//! has compacted that revision away, the key is read instead.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse,
    WatchResponseStream,
};
use fencing_core::backend::LeaseTracker;
use fencing_core::{Error, LossReason, Result};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::conn::Conn;
use crate::lock;

/// Pause before a broken stream is opened again or a failed read retried.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// How long a grant's own key goes unwatched. A grant released sooner
/// costs no watch at all: creating and cancelling one were half of the
/// requests of an uncontended acquire + release (cycle-bench: 4 gRPC
/// messages per cycle against Go's 2). Nothing is missed meanwhile, since
/// the watch starts at the revision after the key's creation and the server
/// replays a delete from there; only its report comes up to this much later.
/// Loss by expiry does not depend on it: the session's own deadline fires.
pub(crate) const OWN_KEY_WATCH_DELAY: Duration = Duration::from_millis(100);

/// The handle to the stream's task; the task ends when the last handle
/// (the source's, or a grant's guard) is dropped.
pub(crate) struct Watches {
    commands: mpsc::UnboundedSender<Command>,
    next_id: AtomicI64,
    task: JoinHandle<()>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Ends its watch when dropped.
pub(crate) struct WatchGuard {
    watches: Arc<Watches>,
    id: i64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let _ = self.watches.commands.send(Command::Remove(self.id));
    }
}

impl Watches {
    pub(crate) fn start(conn: Conn) -> Arc<Watches> {
        let (commands, inbox) = mpsc::unbounded_channel();
        let hub = Hub {
            conn,
            watches: HashMap::new(),
            routes: HashMap::new(),
            next_stream_id: 1,
            stream: None,
            reopen_at: Instant::now(),
            checks: JoinSet::new(),
            deferred: VecDeque::new(),
        };
        Arc::new(Watches {
            commands,
            next_id: AtomicI64::new(1),
            task: tokio::spawn(hub.run(inbox)),
        })
    }

    /// Marks `lease` lost when the key created at `rev` is deleted (or
    /// replaced), until the guard is dropped.
    pub(crate) fn own_key(
        self: &Arc<Self>,
        key: &str,
        rev: i64,
        lease: LeaseTracker,
    ) -> WatchGuard {
        let due = Instant::now() + OWN_KEY_WATCH_DELAY;
        self.add(key.as_bytes().to_vec(), rev, OnDelete::Lose(lease), due)
    }

    /// Resolves when `key`, which existed at revision `seen_at`, is deleted.
    /// An error means the watch could not be kept (compaction): look again.
    pub(crate) async fn deleted(self: &Arc<Self>, key: &[u8], seen_at: i64) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        let _guard = self.add(key.to_vec(), seen_at, OnDelete::Wake(tx), Instant::now());
        rx.await
            .unwrap_or_else(|_| Err(Error::backend("etcd watch", "watch task ended")))
    }

    fn add(
        self: &Arc<Self>,
        key: Vec<u8>,
        seen_at: i64,
        on_delete: OnDelete,
        due: Instant,
    ) -> WatchGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let watch = Watch {
            key,
            seen_at,
            from: seen_at + 1,
            stream_id: None,
            on_delete,
        };
        let _ = self.commands.send(Command::Add(id, watch, due));
        WatchGuard {
            watches: self.clone(),
            id,
        }
    }
}

enum Command {
    /// A watch to create on the stream from `Instant` on.
    Add(i64, Watch, Instant),
    Remove(i64),
}

struct Watch {
    key: Vec<u8>,
    /// A revision at which the key existed (for a lock key: its creation).
    seen_at: i64,
    /// Where the watch (re)starts. Starting after the current revision also
    /// keeps it in etcd's "synced" group, which is served at once; an older
    /// start is caught up by a background loop every 100 ms.
    from: i64,
    /// Its id on the current stream, once created there.
    stream_id: Option<i64>,
    on_delete: OnDelete,
}

enum OnDelete {
    /// A held grant's own key: the grant is lost.
    Lose(LeaseTracker),
    /// A waiter's predecessor: the waiter wakes.
    Wake(oneshot::Sender<Result<()>>),
}

/// What a read of a lock key whose watch the server cancelled found.
enum Check {
    /// Still ours at this revision: watch again from the next.
    Present(i64),
    Gone,
    /// The grant was lost meanwhile: nothing to watch.
    Ended,
}

struct Stream {
    requests: mpsc::UnboundedSender<Request>,
    sender: JoinHandle<()>,
    responses: WatchResponseStream,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.sender.abort();
    }
}

enum Request {
    Create(i64, Vec<u8>, i64),
    Cancel(i64),
}

enum Event {
    Command(Option<Command>),
    Response(std::result::Result<Option<WatchResponse>, etcd_client::Error>),
    Checked(i64, Check),
    Reopen,
    /// The oldest deferred watch is due.
    Due,
}

struct Hub {
    conn: Conn,
    /// By the id of their guard.
    watches: HashMap<i64, Watch>,
    /// Stream ids of the watches created on the current stream.
    routes: HashMap<i64, i64>,
    next_stream_id: i64,
    stream: Option<Stream>,
    reopen_at: Instant,
    checks: JoinSet<(i64, Check)>,
    /// Watches not created yet, oldest first (one delay for all keeps
    /// them in order of their due time).
    deferred: VecDeque<(Instant, i64)>,
}

impl Hub {
    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Command>) {
        loop {
            let wants_stream = self.stream.is_none() && !self.watches.is_empty();
            let next_due = self.deferred.front().map(|(due, _)| *due);
            let event = tokio::select! {
                c = inbox.recv() => Event::Command(c),
                r = next_response(&mut self.stream) => Event::Response(r),
                Some(Ok((id, check))) = self.checks.join_next() => Event::Checked(id, check),
                () = tokio::time::sleep_until(self.reopen_at), if wants_stream => Event::Reopen,
                () = sleep_until(next_due) => Event::Due,
            };
            match event {
                Event::Command(None) => return,
                Event::Command(Some(Command::Add(id, watch, due))) => {
                    self.watches.insert(id, watch);
                    if due > Instant::now() {
                        self.deferred.push_back((due, id));
                    } else if self.stream.is_some() {
                        self.create(id);
                    }
                }
                Event::Due => {
                    if let Some((_, id)) = self.deferred.pop_front() {
                        // Not if released meanwhile, or created by a stream opening.
                        let waiting = self.watches.get(&id).is_some_and(|w| w.stream_id.is_none());
                        if waiting && self.stream.is_some() {
                            self.create(id);
                        }
                    }
                }
                Event::Command(Some(Command::Remove(id))) => {
                    self.remove(id);
                }
                Event::Response(Ok(Some(resp))) => self.on_response(resp),
                Event::Response(_) => {
                    tracing::debug!("etcd watch stream broke; opening a new one");
                    self.stream = None;
                    self.routes.clear();
                    self.watches.values_mut().for_each(|w| w.stream_id = None);
                    self.reopen_at = Instant::now() + RETRY_PAUSE;
                }
                Event::Checked(id, check) => self.on_checked(id, check),
                Event::Reopen => self.open().await,
            }
        }
    }

    /// Opens a stream with one watch and creates the others on it.
    async fn open(&mut self) {
        let Some((&first, watch)) = self.watches.iter().next() else {
            return;
        };
        let stream_id = self.next_stream_id;
        let (key, opts) = (watch.key.clone(), options(stream_id, watch.from));
        let opened = self
            .conn
            .call("watch", |mut c| {
                let (key, opts) = (key.clone(), opts.clone());
                async move { c.watch(key, Some(opts)).await }
            })
            .await;
        let (sender, responses) = match opened {
            Ok(stream) => stream.split(),
            Err(e) => {
                tracing::debug!(error = %e, "opening the etcd watch stream failed");
                self.reopen_at = Instant::now() + RETRY_PAUSE;
                return;
            }
        };
        let (requests, queue) = mpsc::unbounded_channel();
        self.stream = Some(Stream {
            requests,
            sender: tokio::spawn(forward(sender, queue)),
            responses,
        });
        self.next_stream_id += 1;
        self.route(first, stream_id);
        let others: Vec<i64> = self
            .watches
            .keys()
            .copied()
            .filter(|&id| id != first)
            .collect();
        for id in others {
            self.create(id);
        }
    }

    /// Creates watch `id` on the current stream under a new stream id (a
    /// copy it may still have there is cancelled).
    fn create(&mut self, id: i64) {
        let Some(watch) = self.watches.get(&id) else {
            return;
        };
        if let Some(old) = watch.stream_id {
            self.routes.remove(&old);
            send(&self.stream, Request::Cancel(old));
        }
        let stream_id = self.next_stream_id;
        self.next_stream_id += 1;
        send(
            &self.stream,
            Request::Create(stream_id, watch.key.clone(), watch.from),
        );
        self.route(id, stream_id);
    }

    fn route(&mut self, id: i64, stream_id: i64) {
        if let Some(watch) = self.watches.get_mut(&id) {
            watch.stream_id = Some(stream_id);
            self.routes.insert(stream_id, id);
        }
    }

    /// Forgets watch `id` and cancels it at the server.
    fn remove(&mut self, id: i64) -> Option<Watch> {
        let watch = self.watches.remove(&id)?;
        if let Some(stream_id) = watch.stream_id {
            self.routes.remove(&stream_id);
            send(&self.stream, Request::Cancel(stream_id));
        }
        Some(watch)
    }

    fn on_response(&mut self, resp: WatchResponse) {
        let Some(&id) = self.routes.get(&resp.watch_id()) else {
            return;
        };
        if resp.canceled() {
            tracing::debug!(
                reason = resp.cancel_reason(),
                compacted = resp.compact_revision(),
                "etcd cancelled a watch"
            );
            self.routes.remove(&resp.watch_id());
            if let Some(watch) = self.watches.get_mut(&id) {
                watch.stream_id = None;
            }
            self.on_cancelled(id);
            return;
        }
        let deleted = resp
            .events()
            .iter()
            .any(|e| e.event_type() == EventType::Delete);
        if !deleted {
            return;
        }
        match self.remove(id).map(|w| w.on_delete) {
            Some(OnDelete::Lose(lease)) => {
                lease.mark_lost(LossReason::DeletedAtServer, "lock key deleted in etcd")
            }
            Some(OnDelete::Wake(tx)) => {
                let _ = tx.send(Ok(()));
            }
            None => {}
        }
    }

    /// The server ended a watch (its start revision was compacted): a
    /// waiter looks again by itself; a held key is read to learn whether
    /// it is still ours.
    fn on_cancelled(&mut self, id: i64) {
        let Some(watch) = self.watches.get(&id) else {
            return;
        };
        match &watch.on_delete {
            OnDelete::Lose(lease) => {
                let (conn, key, rev, lease) = (
                    self.conn.clone(),
                    watch.key.clone(),
                    watch.seen_at,
                    lease.clone(),
                );
                self.checks
                    .spawn(async move { (id, still_ours(conn, key, rev, lease).await) });
            }
            OnDelete::Wake(_) => {
                if let Some(OnDelete::Wake(tx)) = self.remove(id).map(|w| w.on_delete) {
                    let _ = tx.send(Err(Error::backend("etcd watch", "cancelled by the server")));
                }
            }
        }
    }

    fn on_checked(&mut self, id: i64, check: Check) {
        let Some(watch) = self.watches.get_mut(&id) else {
            return;
        };
        match check {
            Check::Present(rev) => {
                watch.from = rev + 1;
                if self.stream.is_some() {
                    self.create(id);
                }
            }
            Check::Gone => {
                if let Some(OnDelete::Lose(lease)) = self.remove(id).map(|w| w.on_delete) {
                    lease.mark_lost(LossReason::DeletedAtServer, "lock key deleted in etcd");
                }
            }
            Check::Ended => {
                self.remove(id);
            }
        }
    }
}

fn options(id: i64, from: i64) -> WatchOptions {
    WatchOptions::new()
        .with_watch_id(id)
        .with_start_revision(from)
        .with_filters([WatchFilterType::NoPut])
}

/// Queues a request on the current stream; without one, the watch is
/// created when a stream opens.
fn send(stream: &Option<Stream>, request: Request) {
    if let Some(s) = stream {
        let _ = s.requests.send(request);
    }
}

/// Sleeps until `due`, or forever without one.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

async fn next_response(
    stream: &mut Option<Stream>,
) -> std::result::Result<Option<WatchResponse>, etcd_client::Error> {
    match stream {
        Some(s) => s.responses.message().await,
        None => std::future::pending().await,
    }
}

/// Sends the queued requests in order. Runs apart from the reader so that
/// a full request buffer never stops the responses from being read (which
/// would stall the server's side of the stream too).
async fn forward(mut sender: WatchRequestSender, mut queue: mpsc::UnboundedReceiver<Request>) {
    while let Some(request) = queue.recv().await {
        let sent = match request {
            Request::Create(id, key, from) => sender.watch(key, Some(options(id, from))).await,
            Request::Cancel(id) => sender.cancel(id).await,
        };
        if sent.is_err() {
            return;
        }
    }
}

/// Reads a held lock key until the read succeeds or the grant is lost.
async fn still_ours(conn: Conn, key: Vec<u8>, rev: i64, lease: LeaseTracker) -> Check {
    loop {
        let read = tokio::select! {
            _ = lease.lost() => return Check::Ended,
            r = lock::read_key(&conn, &key) => r,
        };
        match read {
            Ok(read) if read.created() == Some(rev) => {
                return Check::Present(read.revision.max(rev))
            }
            Ok(_) => return Check::Gone,
            Err(e) => tracing::debug!(error = %e, "re-reading a held lock key failed"),
        }
        tokio::time::sleep(fencing_core::__private::jittered(RETRY_PAUSE, 1.0)).await;
    }
}
