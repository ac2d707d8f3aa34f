//! A real axum server on loopback, a tiny key-value store behind
//! `FencingLayer`, driven by a real HTTP client.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::put;
use axum::Router;
use bytes::Bytes;
use fencing_core::{Error, FencingToken, FileGate, Gate, MemoryGate};
use fencing_http::{stale_from_response, token_from_headers, FencedRequest, FencingLayer};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What the store holds, and every write in the order it applied them.
#[derive(Default)]
struct Store {
    kv: HashMap<String, Bytes>,
    applied: Vec<(String, u64, Bytes)>,
}

type Shared = Arc<Mutex<Store>>;

/// PUT /kv/{key}: a slow write (a pause between the gate and the apply,
/// varying per token) so that unserialised writers would overtake.
async fn put_kv(
    State(store): State<Shared>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let Ok(Some(token)) = token_from_headers(&headers) else {
        // The layer never lets such a request through.
        return StatusCode::INTERNAL_SERVER_ERROR;
    };
    let pause = token.get().wrapping_mul(7919) % 3000;
    tokio::time::sleep(Duration::from_micros(pause)).await;
    let mut store = store.lock().unwrap();
    store.applied.push((key.clone(), token.get(), body.clone()));
    store.kv.insert(key, body);
    StatusCode::NO_CONTENT
}

async fn get_kv(State(store): State<Shared>, Path(key): Path<String>) -> Result<Bytes, StatusCode> {
    store
        .lock()
        .unwrap()
        .kv
        .get(&key)
        .cloned()
        .ok_or(StatusCode::NOT_FOUND)
}

struct Server {
    addr: SocketAddr,
    store: Shared,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

async fn start<G: Gate + 'static>(gate: Arc<G>) -> Server {
    let store = Shared::default();
    let app = Router::new()
        .route("/kv/{key}", put(put_kv).get(get_kv))
        .with_state(store.clone())
        .layer(FencingLayer::by_path(gate));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
    });
    Server {
        addr,
        store,
        stop,
        task,
    }
}

impl Server {
    /// Stops accepting, waits for every connection (and so every clone of
    /// the router and its gate) to be gone.
    async fn shut_down(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("server did not shut down")
            .unwrap()
            .unwrap();
    }

    fn applied(&self) -> Vec<(String, u64, Bytes)> {
        self.store.lock().unwrap().applied.clone()
    }
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn new_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

struct Answer {
    status: StatusCode,
    content_type: Option<String>,
    body: Bytes,
}

async fn send(client: &HttpClient, request: Request<Full<Bytes>>) -> Answer {
    let response = client.request(request).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        content_type,
        body,
    }
}

async fn put_with(
    client: &HttpClient,
    addr: SocketAddr,
    key: &str,
    token: u64,
    value: &str,
) -> Answer {
    let request = Request::put(format!("http://{addr}/kv/{key}"))
        .fencing_token(FencingToken::new(token))
        .body(Full::new(Bytes::from(value.to_owned())))
        .unwrap();
    send(client, request).await
}

async fn get(client: &HttpClient, addr: SocketAddr, key: &str) -> Answer {
    let request = Request::get(format!("http://{addr}/kv/{key}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    send(client, request).await
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(body)))
}

const TASKS: u64 = 4;
const WRITES: u64 = 25;

/// 4 tasks x 25 writes on one key, tokens interleaved across tasks
/// (task t writes t+1, t+5, t+9, ...): in each round the four writes race.
/// Verdicts and the store's apply order are checked as properties.
async fn concurrent_writers_keep_the_newest<G: Gate + 'static>(gate: Arc<G>) {
    let server = start(gate).await;
    let addr = server.addr;
    let client = new_client();
    let round = Arc::new(tokio::sync::Barrier::new(TASKS as usize));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (client, round) = (client.clone(), round.clone());
            tokio::spawn(async move {
                let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                let mut verdicts = Vec::new();
                for i in 0..WRITES {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Each round the four writes race after a random pause;
                    // one that arrives after a higher token is stale.
                    round.wait().await;
                    tokio::time::sleep(Duration::from_micros(seed % 1500)).await;
                    let token = i * TASKS + t + 1;
                    let answer =
                        put_with(&client, addr, "shared", token, &format!("v{token}")).await;
                    verdicts.push((token, answer));
                }
                verdicts
            })
        })
        .collect();
    let mut verdicts = Vec::new();
    for task in tasks {
        verdicts.extend(task.await.unwrap());
    }
    let applied = server.applied();
    let applied_tokens: Vec<u64> = applied.iter().map(|(_, t, _)| *t).collect();

    // Accepted tokens, in the order the store applied them, never decrease.
    assert!(
        applied_tokens.windows(2).all(|w| w[0] <= w[1]),
        "store applied tokens out of order: {applied_tokens:?}"
    );
    let mut accepted = Vec::new();
    let mut refused = 0;
    for (token, answer) in &verdicts {
        match answer.status {
            StatusCode::NO_CONTENT => accepted.push(*token),
            StatusCode::CONFLICT => {
                refused += 1;
                assert_eq!(answer.content_type.as_deref(), Some("application/json"));
                let v = json(&answer.body);
                assert_eq!(v["error"], "stale fencing token");
                let presented = v["presented"].as_u64().expect("presented is a number");
                let highest = v["highest"].as_u64().expect("highest is a number");
                assert_eq!(presented, *token);
                assert!(highest > presented, "{v}");
                // The mark that refused it was set by a write the store applied.
                assert!(applied_tokens.contains(&highest), "{highest} never applied");
                match stale_from_response(answer.status, &answer.body) {
                    Some(e @ Error::Stale { .. }) => assert!(e.needs_reacquire()),
                    other => panic!("{other:?}"),
                }
            }
            other => panic!("token {token}: unexpected {other} {:?}", answer.body),
        }
    }
    // Exactly the accepted writes were applied, each once.
    accepted.sort_unstable();
    assert_eq!(accepted, applied_tokens);
    assert_eq!(accepted.len() + refused, (TASKS * WRITES) as usize);
    assert!(
        refused > 0,
        "no write was ever stale: the test raced nothing"
    );
    // The newest write always wins and is the final value.
    let newest = TASKS * WRITES;
    assert_eq!(applied_tokens.last(), Some(&newest));
    let value = get(&client, addr, "shared").await;
    assert_eq!(value.status, StatusCode::OK);
    assert_eq!(value.body, format!("v{newest}"));
    eprintln!("{} accepted, {refused} refused", accepted.len());

    drop(client);
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_over_a_memory_gate() {
    concurrent_writers_keep_the_newest(Arc::new(MemoryGate::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_over_a_file_gate() {
    let dir = tempfile::tempdir().unwrap();
    let gate = FileGate::open(dir.path().join("kv.gate")).unwrap();
    concurrent_writers_keep_the_newest(Arc::new(gate)).await;
}

#[tokio::test]
async fn retries_pass_bad_headers_are_refused_and_reads_need_no_token() {
    let gate = Arc::new(MemoryGate::new());
    let server = start(gate.clone()).await;
    let (addr, client) = (server.addr, new_client());

    // GET passes without a token (404: nothing stored yet, from the handler).
    assert_eq!(get(&client, addr, "k").await.status, StatusCode::NOT_FOUND);

    assert_eq!(
        put_with(&client, addr, "k", 5, "first").await.status,
        StatusCode::NO_CONTENT
    );
    // A retry with the same token passes and is applied.
    assert_eq!(
        put_with(&client, addr, "k", 5, "retry").await.status,
        StatusCode::NO_CONTENT
    );
    let read = get(&client, addr, "k").await;
    assert_eq!(
        (read.status, read.body.as_ref()),
        (StatusCode::OK, &b"retry"[..])
    );

    let stale = put_with(&client, addr, "k", 4, "old").await;
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert_eq!(
        stale.body.as_ref(),
        br#"{"error":"stale fencing token","presented":4,"highest":5}"#
    );

    let before = server.applied().len();
    let raw = |token: Option<&'static str>| {
        let mut b = Request::put(format!("http://{addr}/kv/k"));
        if let Some(t) = token {
            b = b.header("Fencing-Token", t);
        }
        b.body(Full::new(Bytes::from_static(b"bad"))).unwrap()
    };
    let missing = send(&client, raw(None)).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.content_type.as_deref(), Some("application/json"));
    assert_eq!(json(&missing.body)["error"], "missing Fencing-Token header");
    // (Whitespace around a value is not part of it in HTTP: the server
    // never sees " 7", so it is tested on the header map in the unit tests.)
    for bad in [
        "",
        "-1",
        "abc",
        "07",
        "99999999999999999999999",
        "+6",
        "6, 7",
    ] {
        let answer = send(&client, raw(Some(bad))).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad:?}");
        let message = json(&answer.body)["error"].as_str().unwrap().to_owned();
        assert!(
            message.starts_with("invalid fencing token"),
            "{bad:?}: {message}"
        );
    }
    // A resource name the gate cannot take: longer than 253 bytes.
    let long = put_with(&client, addr, &"x".repeat(300), 9, "long").await;
    assert_eq!(long.status, StatusCode::BAD_REQUEST);
    assert!(json(&long.body)["error"]
        .as_str()
        .unwrap()
        .contains("invalid resource name"));

    // None of them reached the store.
    assert_eq!(server.applied().len(), before);
    let read = get(&client, addr, "k").await;
    assert_eq!(read.body.as_ref(), b"retry");
    assert_eq!(
        gate.high_water(&fencing_core::ResourceName::nonportable("/kv/k").unwrap())
            .await
            .unwrap(),
        Some(FencingToken::new(5))
    );

    drop(client);
    server.shut_down().await;
}

#[tokio::test]
async fn a_restarted_file_gate_server_still_refuses_old_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.gate");

    let server = start(Arc::new(FileGate::open(&path).unwrap())).await;
    let client = new_client();
    assert_eq!(
        put_with(&client, server.addr, "k", 10, "ten").await.status,
        StatusCode::NO_CONTENT
    );
    drop(client);
    server.shut_down().await;

    // Every clone of the gate is gone with the server, so it reopens.
    let server = start(Arc::new(FileGate::open(&path).unwrap())).await;
    let client = new_client();
    let stale = put_with(&client, server.addr, "k", 9, "nine").await;
    assert_eq!(stale.status, StatusCode::CONFLICT);
    match stale_from_response(stale.status, &stale.body) {
        Some(Error::Stale { presented, highest }) => {
            assert_eq!((presented.get(), highest.get()), (9, 10));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        put_with(&client, server.addr, "k", 10, "ten again")
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        put_with(&client, server.addr, "k", 11, "eleven")
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let applied: Vec<u64> = server.applied().iter().map(|(_, t, _)| *t).collect();
    assert_eq!(applied, vec![10, 11]);
    drop(client);
    server.shut_down().await;
}
