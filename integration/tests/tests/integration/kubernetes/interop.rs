//! Rust and Go candidates on ONE Lease of a real kube-apiserver: a
//! KubeLeaseSource and client-go's own leader election
//! (`integration/anchors/go/client-go-elector`, LeaseLock) alternate
//! leadership.
//!
//! Both sides write, while they lead, to one gate: a tiny HTTP store on
//! loopback that admits each PUT's `Fencing-Token` through a MemoryGate
//! and records the verdict in a History; the Rust side writes through the
//! same History and gate directly. Overlapping terms would show up as a
//! refused write or a token going backwards. Each side must also see the
//! other as holder: client-go's `new_leader` events name the Rust identity,
//! and `holder()` on the Rust side names the Go identity.

use std::sync::Arc;
use std::time::Duration;

use fencing::{AcquireOptions, FencingSource, FencingToken, Gate, MemoryGate, ResourceName};
use fencing_harness::kubernetes::cluster::{client_go_elector_binary, KubeUser};
use fencing_harness::kubernetes::fixture::{client_go_timing_flags, KubeFixture, TEST_LEASE};
use fencing_harness::Reaped;
use fencing_testkit::{Event, History};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LEASE: &str = "interop";
const GO_ID: &str = "go-elector";
const RUST_ID: &str = "rust-candidate";
/// History client ids.
const RUST: usize = 0;
const GO: usize = 1;
const ROUNDS: usize = 4;

/// The HTTP store both sides write to; its task ends when dropped.
struct GateStore {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GateStore {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GateStore {
    async fn start(history: History, gate: Arc<MemoryGate>) -> GateStore {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let (history, gate) = (history.clone(), gate.clone());
                connections.spawn(async move {
                    let _ =
                        tokio::time::timeout(Duration::from_secs(10), serve(stream, history, gate))
                            .await;
                });
            }
        });
        GateStore { addr, task }
    }

    fn url(&self) -> String {
        format!("http://{}/{LEASE}", self.addr)
    }
}

/// One request per connection: the head's `Fencing-Token` goes through the
/// gate (recorded as a write by the Go side); 200 if admitted, 409 if
/// stale, 400 without a valid token.
async fn serve(mut stream: TcpStream, history: History, gate: Arc<MemoryGate>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    // Drain the body so the client sees a clean exchange.
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + 4 + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let token: Option<FencingToken> = header("fencing-token").and_then(|v| v.parse().ok());
    let status = match token {
        None => "400 Bad Request",
        Some(t) => match history
            .write(gate.as_ref() as &dyn Gate, &resource(), GO, t)
            .await
        {
            Ok(()) => "200 OK",
            Err(_) => "409 Conflict",
        },
    };
    let reply = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn resource() -> ResourceName {
    ResourceName::new(LEASE).unwrap()
}

/// Collects the Go program's JSON lines until "done" (or 180 s), then the
/// process is killed and reaped; `campaigning` hears when it first saw the
/// Rust candidate lead: it has read the Lease, so it is in the race.
fn collect_go(go: Reaped, campaigning: tokio::sync::oneshot::Sender<()>) -> Vec<serde_json::Value> {
    let mut events = Vec::new();
    let mut campaigning = Some(campaigning);
    while let Some(line) = go.next_line(Duration::from_secs(180)) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["event"] == "new_leader" && v["identity"] == RUST_ID {
            if let Some(tx) = campaigning.take() {
                let _ = tx.send(());
            }
        }
        let done = v["event"] == "done";
        events.push(v);
        if done {
            break;
        }
    }
    drop(go);
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_client_go_alternate_on_one_lease() {
    let f = KubeFixture::start().await;
    let binary = client_go_elector_binary().unwrap_or_else(|e| panic!("{e}"));
    let history = History::new();
    let gate = Arc::new(MemoryGate::new());
    let store = GateStore::start(history.clone(), gate.clone()).await;

    let rust = f.source().await;
    let observer = f.source().await;
    let go = Reaped::spawn(
        f.client_go_elector(&binary, KubeUser::LeaseUser, LEASE, GO_ID)
            .args(client_go_timing_flags())
            .args([
                "--rounds",
                &ROUNDS.to_string(),
                "--hold",
                "1500ms",
                "--pause",
                "700ms",
            ])
            .args(["--gate-url", &store.url(), "--writes", "3"]),
    )
    .expect("start client-go-elector");
    let (campaigning, go_campaigns) = tokio::sync::oneshot::channel();
    let go_events = tokio::task::spawn_blocking(move || collect_go(go, campaigning));
    let mut go_campaigns = Some(go_campaigns);

    // The Rust side's view of the holder, sampled while it runs.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (observer, stop) = (observer.clone(), stop.clone());
        async move {
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(Some(h)) = observer.holder(&resource()).await {
                    seen.push(h);
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            seen
        }
    });

    let opts = AcquireOptions::new()
        .ttl(TEST_LEASE)
        .wait(Duration::from_secs(60))
        .holder(RUST_ID);
    let mut rust_tokens = Vec::new();
    for _ in 0..ROUNDS {
        let g = rust
            .acquire(&resource(), &opts)
            .await
            .expect("Rust acquire");
        history.granted(RUST, g.token()).await;
        rust_tokens.push(g.token());
        for _ in 0..3 {
            history
                .write(gate.as_ref(), &resource(), RUST, g.token())
                .await
                .expect("the Rust holder's write was refused");
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        // A client-go that joins after Rust's last round never alternates
        // with it (seen once on a loaded machine): Rust's first term lasts
        // until client-go has seen it lead.
        if let Some(campaigns) = go_campaigns.take() {
            tokio::time::timeout(Duration::from_secs(60), campaigns)
                .await
                .expect("client-go-elector did not see the Rust leader within 60 s")
                .expect("client-go-elector exited before it campaigned");
        }
        history.released(RUST, g.token()).await;
        g.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
    }

    let go_events = tokio::time::timeout(Duration::from_secs(200), go_events)
        .await
        .expect("client-go-elector finished")
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = sampler.await.unwrap();

    // The gate: every write admitted, by both sides, and the lead changed
    // hands between the languages.
    let events = history.events().await;
    let writes: Vec<(usize, FencingToken, bool)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Write {
                client,
                token,
                accepted,
            } => Some((*client, *token, *accepted)),
            _ => None,
        })
        .collect();
    eprintln!("gate saw {} writes", writes.len());
    assert!(
        writes.iter().all(|w| w.2),
        "a write was refused, so two terms overlapped: {writes:?}"
    );
    let go_writes = writes.iter().filter(|w| w.0 == GO).count();
    assert_eq!(writes.len() - go_writes, ROUNDS * 3, "Rust writes");
    assert!(go_writes >= 3, "client-go never wrote: {go_events:?}");
    let switches = writes.windows(2).filter(|w| w[0].0 != w[1].0).count();
    assert!(switches >= 2, "the lead never alternated: {writes:?}");
    history.check().await.unwrap();

    // client-go's events: every Go write admitted, and it saw us lead.
    let go_leads: Vec<u64> = go_events
        .iter()
        .filter(|e| e["event"] == "leading")
        .map(|e| e["token"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(!go_leads.is_empty(), "client-go never led: {go_events:?}");
    assert!(
        go_events
            .iter()
            .filter(|e| e["event"] == "write")
            .all(|e| e["status"] == 200),
        "a client-go write was refused: {go_events:?}"
    );
    assert!(
        go_events
            .iter()
            .any(|e| e["event"] == "new_leader" && e["identity"] == RUST_ID),
        "client-go never saw the Rust candidate lead: {go_events:?}"
    );
    assert_eq!(
        go_events.last().map(|e| e["event"].clone()),
        Some("done".into())
    );

    // The Rust side saw client-go lead, with a token from its term: above
    // every Rust token handed out before it.
    let go_seen: Vec<_> = seen.iter().filter(|h| h.holder == GO_ID).collect();
    assert!(
        !go_seen.is_empty(),
        "holder() never named client-go: {seen:?}"
    );
    for h in &go_seen {
        assert!(
            go_leads.iter().any(|&t| h.token.get() >= t),
            "holder() token {} for client-go is below every token it led with: {go_leads:?}",
            h.token
        );
    }
    assert!(seen
        .iter()
        .any(|h| h.holder == RUST_ID && rust_tokens.contains(&h.token)));
    // Tokens of all terms, in the order the gate saw them, strictly grow
    // from one term to the next.
    let mut terms: Vec<FencingToken> = writes.iter().map(|w| w.1).collect();
    terms.dedup();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
    eprintln!(
        "{} terms alternated between Rust and client-go; {} Go writes",
        terms.len(),
        go_writes
    );
}

/// Waits (at most `limit`) for the Go program's line with `event`; false
/// if it never came.
fn await_go_event(go: &Reaped, event: &str, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        let Some(line) = go.next_line(left) else {
            return false;
        };
        if serde_json::from_str::<serde_json::Value>(&line).is_ok_and(|v| v["event"] == event) {
            return true;
        }
    }
    false
}

/// client-go's `release()` (v0.36.3) clears a Lease its elector lost
/// while paused: it re-reads the Lease for a fresh resourceVersion, then
/// asks `IsLeader()` of the record it observed before the pause, and so
/// writes an empty holder over the new holder's live record. The
/// campaign's checker excuses the victims of this (its
/// `stale_client_go_release`); this test shows the bug is real and that
/// our holder hears of it at its next renewal. client-go's first renewal
/// after the resume may observe the new holder first (then the release is
/// a no-op), which is Go's scheduler's choice, so up to `ATTEMPTS` pauses
/// are tried. Should client-go stop doing this, the test fails and the
/// excuse should go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_client_go_leader_clears_the_next_holders_lease_on_release() {
    const ATTEMPTS: usize = 5;
    let f = KubeFixture::start().await;
    let binary = client_go_elector_binary().unwrap_or_else(|e| panic!("{e}"));
    let (rust, observer) = (f.source().await, f.source().await);
    let opts = AcquireOptions::new()
        .ttl(TEST_LEASE)
        .wait(Duration::from_secs(30))
        .holder(RUST_ID);
    let mut kept = 0;
    for attempt in 0..ATTEMPTS {
        let name = format!("resumed-{attempt}");
        let resource = ResourceName::new(&name).unwrap();
        let go = Reaped::spawn(
            f.client_go_elector(&binary, KubeUser::LeaseUser, &name, GO_ID)
                .args(["--rounds", "1", "--hold", "500ms"])
                .args(client_go_timing_flags()),
        )
        .expect("start client-go-elector");
        let go = tokio::task::block_in_place(|| {
            assert!(
                await_go_event(&go, "leading", Duration::from_secs(30)),
                "client-go never led"
            );
            // Paused while leading; its hold ends during the pause.
            go.stop();
            go
        });
        let grant = rust
            .acquire(&resource, &opts)
            .await
            .expect("the Rust candidate takes the expired Lease");
        go.signal(rustix::process::Signal::CONT);
        let done =
            tokio::task::block_in_place(|| await_go_event(&go, "done", Duration::from_secs(30)));
        assert!(done, "client-go's round never ended after the resume");
        drop(go);
        match observer.holder(&resource).await.unwrap() {
            Some(h) if h.holder == RUST_ID => {
                kept += 1;
                grant.release().await.unwrap();
            }
            cleared => {
                assert!(cleared.is_none(), "cleared to {cleared:?}");
                let reason = tokio::time::timeout(TEST_LEASE, grant.lost())
                    .await
                    .expect("our holder never heard that its Lease was cleared");
                eprintln!(
                    "attempt {}: client-go's release cleared our live Lease ({} kept before); \
                     our holder lost it: {}",
                    attempt + 1,
                    kept,
                    reason.label()
                );
                return;
            }
        }
    }
    panic!("in {ATTEMPTS} pauses client-go's release never cleared the new holder's Lease");
}
