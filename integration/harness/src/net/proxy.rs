//! A loopback TCP proxy that a test can switch to a blackhole: a network
//! partition between a client and a server that keeps every connection
//! open but lets no byte through.
//!
//! The proxy listens on `127.0.0.1:0` and forwards each accepted
//! connection to one target. While blackholed, bytes read in either
//! direction are silently discarded (nothing is reset or closed, so the
//! peers only notice through their own timeouts), and new connections are
//! still accepted but nothing passes them either. Turning the blackhole
//! off forwards again; bytes dropped meanwhile are lost for good, so a
//! protocol running over a connection that lost bytes may have to
//! reconnect, as after a real partition that outlived TCP's retransmits.
//!
//! Two finer faults make a request's outcome unknown to its client: drop
//! only the replies (requests still reach the server and apply), then cut
//! every open connection, so the client sees a broken connection after the
//! server acted.
//!
//! A third delays requests: while held, what the client sends is kept,
//! frame by frame (the connection speaks HTTP/2, as gRPC does), and later
//! delivered without the client's stream cancellations (`RST_STREAM`): a
//! request that the network delivered late while its client gave up on it
//! and re-sent it elsewhere, as a proposal held in a partitioned link
//! between members is delivered when the link heals.
//!
//! A fourth loses one request outright: after a given number of further
//! reads from clients, the connection that makes the next read has
//! everything it sends from then on dropped (it stays open), so the server
//! never sees the request its client is waiting on.
//!
//! A fifth slows the replies: each chunk the server sends is forwarded a
//! set delay after the proxy read it, in order, so a request reaches the
//! server at once and its answer arrives late (the server acted long
//! before its client learns of it).
//!
//! Every task belongs to the proxy and is aborted when it is dropped.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// How long the proxy tries to reach its target for one connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A TCP proxy on loopback; see the module documentation. Must be started
/// inside a tokio runtime; dropping it stops accepting and closes every
/// forwarded connection.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    target: SocketAddr,
    faults: Arc<Faults>,
    /// The accept loop; it owns the connection tasks in a `JoinSet`, so
    /// aborting it aborts them too.
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `target`.
    pub async fn start(target: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let faults = Arc::new(Faults::default());
        let accept = tokio::spawn(accept_loop(listener, target, faults.clone()));
        Ok(Proxy {
            addr,
            target,
            faults,
            accept,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address as `127.0.0.1:PORT`, the form etcd endpoints take.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// The address connections are forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Switches the blackhole on (drop every byte, both directions) or off
    /// (forward again).
    pub fn set_blackhole(&self, on: bool) {
        self.faults.blackhole.store(on, Ordering::SeqCst);
    }

    /// Whether the blackhole is on.
    pub fn is_blackholed(&self) -> bool {
        self.faults.blackhole.load(Ordering::SeqCst)
    }

    /// Drops (on) or forwards (off) what the target sends back, while the
    /// client's requests still pass.
    pub fn set_replies_dropped(&self, on: bool) {
        self.faults.replies_dropped.store(on, Ordering::SeqCst);
    }

    /// Closes every connection open now (both sides see the stream end);
    /// new connections are accepted as before.
    pub fn cut_connections(&self) {
        self.faults.cut.send_modify(|generation| *generation += 1);
    }

    /// Holds (`true`) what clients send, or delivers what was held, minus
    /// every `RST_STREAM` frame, and forwards again (`false`).
    pub fn set_requests_held(&self, on: bool) {
        self.faults.held.send_replace(on);
    }

    /// Forwards every reply `delay` after the server sent it (zero: at
    /// once, the default).
    pub fn set_reply_delay(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.faults.reply_delay_us.store(micros, Ordering::SeqCst);
    }

    /// Lets `reads` more reads from clients through, then drops everything
    /// the connection that makes the next read sends (that connection only,
    /// left open). With a warm connection and one request per read: the
    /// request after the next `reads` requests never reaches the server.
    pub fn drop_requests_after(&self, reads: u32) {
        self.faults
            .reads_left
            .store(i64::from(reads), Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The switches the test flips, shared with every connection task.
#[derive(Debug)]
struct Faults {
    blackhole: AtomicBool,
    replies_dropped: AtomicBool,
    /// Bumped by `cut_connections`; each connection ends when it changes.
    cut: watch::Sender<u64>,
    held: watch::Sender<bool>,
    /// Reads to let through before `drop_requests_after` strikes; negative
    /// when unarmed.
    reads_left: AtomicI64,
    /// How long each reply is kept before it is forwarded, in µs.
    reply_delay_us: AtomicU64,
}

impl Faults {
    /// Whether this read is the one `drop_requests_after` strikes at.
    fn strikes(&self) -> bool {
        let left = self.reads_left.load(Ordering::SeqCst);
        left >= 0 && self.reads_left.fetch_sub(1, Ordering::SeqCst) == 0
    }
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            blackhole: AtomicBool::new(false),
            replies_dropped: AtomicBool::new(false),
            cut: watch::channel(0).0,
            held: watch::channel(false).0,
            reads_left: AtomicI64::new(-1),
            reply_delay_us: AtomicU64::new(0),
        }
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, faults: Arc<Faults>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((inbound, _)) => {
                    connections.spawn(forward(inbound, target, faults.clone()));
                }
                // E.g. out of file descriptors: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn forward(inbound: TcpStream, target: SocketAddr, faults: Arc<Faults>) {
    let mut cut = faults.cut.subscribe();
    let outbound = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(stream)) => stream,
        // Target unreachable: close the inbound connection, as a router
        // whose next hop refuses would.
        _ => return,
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let replies_cut = cut.clone();
    let pumps = async {
        tokio::join!(
            pump_requests(in_read, out_write, &faults, faults.held.subscribe()),
            pump_replies(out_read, in_write, &faults, replies_cut),
        )
    };
    // Dropping the pumps closes both sockets.
    tokio::select! {
        _ = pumps => {}
        _ = cut.changed() => {}
    }
}

/// The server-to-client direction: copies until end of stream or an
/// error, discarding what it reads while the blackhole is on or replies
/// are dropped, and holding each chunk for the reply delay (a delay line:
/// the reads go on meanwhile, so the delays do not add up); forwards the
/// end of stream as a half-close. Nothing read after `cut_connections` is
/// forwarded: the connection's task ends only when it next runs, and a
/// test that cuts and then stops dropping replies must not see a reply
/// the cut was meant to lose.
async fn pump_replies(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    faults: &Faults,
    cut: watch::Receiver<u64>,
) {
    let (line, mut due) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if cut.has_changed().unwrap_or(true) {
                return;
            }
            if faults.blackhole.load(Ordering::SeqCst)
                || faults.replies_dropped.load(Ordering::SeqCst)
            {
                continue;
            }
            let delay = Duration::from_micros(faults.reply_delay_us.load(Ordering::SeqCst));
            if line
                .send((tokio::time::Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    };
    let write = async {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

/// HTTP/2's client preface, sent once before the first frame.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const RST_STREAM: u8 = 0x3;

/// Where a byte stream from an HTTP/2 client stands: in the preface, in a
/// frame header, or in a payload with this many bytes left.
#[derive(Default)]
struct Frames {
    seen: usize,
    header: Vec<u8>,
    payload_left: usize,
}

impl Frames {
    fn at_boundary(&self) -> bool {
        self.seen >= PREFACE_LEN && self.header.is_empty() && self.payload_left == 0
    }

    /// Advances over one byte; true when it ends a frame (or the preface).
    fn step(&mut self, byte: u8) -> bool {
        if self.seen < PREFACE_LEN {
            self.seen += 1;
            return self.seen == PREFACE_LEN;
        }
        if self.payload_left > 0 {
            self.payload_left -= 1;
            return self.payload_left == 0;
        }
        self.header.push(byte);
        if self.header.len() < FRAME_HEADER_LEN {
            return false;
        }
        let h = std::mem::take(&mut self.header);
        self.payload_left = payload_len(&h);
        self.payload_left == 0
    }
}

fn payload_len(header: &[u8]) -> usize {
    usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2])
}

/// The frames of `held` (which starts at a frame boundary) except every
/// `RST_STREAM`.
fn without_cancels(held: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(held.len());
    let mut at = 0;
    while at + FRAME_HEADER_LEN <= held.len() {
        let end = (at + FRAME_HEADER_LEN + payload_len(&held[at..])).min(held.len());
        if held[at + 3] != RST_STREAM {
            out.extend_from_slice(&held[at..end]);
        }
        at = end;
    }
    out
}

/// The client-to-server direction: as [`pump_replies`] (but no reply
/// dropping), and while requests are held, the frames begun meanwhile are
/// kept and delivered (without cancellations) when the hold ends.
async fn pump_requests(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    faults: &Faults,
    mut held: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    // Set for good once `drop_requests_after` struck this connection.
    let mut lost = false;
    let mut frames = Frames::default();
    let mut kept: Vec<u8> = Vec::new();
    // Whether the current frame began while held.
    let mut keeping = false;
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            changed = held.changed() => {
                if changed.is_err() {
                    break;
                }
                if !*held.borrow_and_update() && !kept.is_empty() {
                    let late = without_cancels(&std::mem::take(&mut kept));
                    if to.write_all(&late).await.is_err() {
                        break;
                    }
                }
                continue;
            }
        };
        lost = lost || faults.strikes();
        if lost || faults.blackhole.load(Ordering::SeqCst) {
            continue;
        }
        let hold = *held.borrow();
        let mut forward = Vec::with_capacity(n);
        for &byte in &buf[..n] {
            if frames.at_boundary() {
                keeping = hold;
            }
            if keeping {
                kept.push(byte);
            } else {
                forward.push(byte);
            }
            frames.step(byte);
        }
        if !forward.is_empty() && to.write_all(&forward).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, stream: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            0,
            0,
            0,
            0,
            stream,
        ];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn cancellations_are_dropped_and_other_frames_kept_in_order() {
        let headers = frame(0x1, 1, b"hdr");
        let data = frame(0x0, 1, b"request");
        let cancel = frame(RST_STREAM, 1, &[0, 0, 0, 8]);
        let ping = frame(0x6, 0, &[0; 8]);
        let held = [headers.clone(), data.clone(), cancel, ping.clone()].concat();
        assert_eq!(without_cancels(&held), [headers, data, ping].concat());
    }

    #[test]
    fn a_drop_strikes_once_after_the_reads_it_lets_through() {
        let faults = Faults::default();
        assert!(!faults.strikes(), "unarmed");
        faults.reads_left.store(1, Ordering::SeqCst);
        let reads: Vec<bool> = (0..4).map(|_| faults.strikes()).collect();
        assert_eq!(reads, [false, true, false, false]);
    }

    #[test]
    fn frame_boundaries_are_tracked_from_the_preface() {
        let mut frames = Frames::default();
        let stream = [vec![b'P'; PREFACE_LEN], frame(0x4, 0, &[1, 2, 3])].concat();
        let ends: Vec<usize> = stream
            .iter()
            .enumerate()
            .filter(|(_, &b)| frames.step(b))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(ends, [PREFACE_LEN - 1, stream.len() - 1]);
        assert!(frames.at_boundary());
    }
}
