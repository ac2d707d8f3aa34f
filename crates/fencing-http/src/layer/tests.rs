use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fencing_core::{Error, FencingToken, MemoryGate};
use http::StatusCode;
use http_body_util::BodyExt;
use tower::{service_fn, ServiceExt};

use super::*;
use crate::FencedRequest;

type Log = Arc<Mutex<Vec<(Method, String)>>>;

/// An inner service that records every call (method, body) and answers 200.
fn recorder(
    log: Log,
) -> impl Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
       + Send
       + 'static {
    service_fn(move |req: Request<String>| {
        let log = log.clone();
        async move {
            let (parts, body) = req.into_parts();
            log.lock().unwrap().push((parts.method, body));
            Ok::<_, Infallible>(Response::new(String::from("done")))
        }
    })
}

fn put(path: &str, token: Option<&str>) -> Request<String> {
    let mut b = Request::put(path);
    if let Some(t) = token {
        b = b.header("Fencing-Token", t);
    }
    b.body(format!("{path} {token:?}")).unwrap()
}

async fn answer<B: http_body::Body<Data = Bytes>>(resp: Response<B>) -> (StatusCode, String)
where
    B::Error: std::fmt::Debug,
{
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

struct FailingGate;

#[async_trait]
impl Gate for FailingGate {
    async fn admit_with(
        &self,
        _: &ResourceName,
        _: Option<&fencing_core::SourceId>,
        _: FencingToken,
    ) -> fencing_core::Result<()> {
        Err(Error::Corrupt {
            path: "/secret/gate".into(),
            reason: "disk on fire".into(),
        })
    }
    async fn high_water(&self, _: &ResourceName) -> fencing_core::Result<Option<FencingToken>> {
        Ok(None)
    }
}

#[tokio::test]
async fn every_refusal_is_answered_without_calling_the_inner_service() {
    let log = Log::default();
    let gate = Arc::new(MemoryGate::new());
    let layer = FencingLayer::by_path(gate.clone());
    let svc = layer.layer(recorder(log.clone()));

    let (s, b) = answer(svc.clone().oneshot(put("/kv/a", Some("5"))).await.unwrap()).await;
    assert_eq!((s, b.as_str()), (StatusCode::OK, "done"));

    let long = format!("/{}", "x".repeat(300));
    let cases: Vec<(Request<String>, StatusCode, &str)> = vec![
        (
            put("/kv/a", None),
            StatusCode::BAD_REQUEST,
            r#"{"error":"missing Fencing-Token header"}"#,
        ),
        (put("/kv/a", Some("")), StatusCode::BAD_REQUEST, "empty"),
        (
            put("/kv/a", Some("-1")),
            StatusCode::BAD_REQUEST,
            "not a decimal number",
        ),
        (
            put("/kv/a", Some("abc")),
            StatusCode::BAD_REQUEST,
            "not a decimal number",
        ),
        (
            put("/kv/a", Some("18446744073709551616")),
            StatusCode::BAD_REQUEST,
            "above the 64-bit range",
        ),
        (
            put(&long, Some("9")),
            StatusCode::BAD_REQUEST,
            "invalid resource name",
        ),
        (
            put("/kv/%0A", Some("9")),
            StatusCode::BAD_REQUEST,
            "control character",
        ),
        (
            put("/kv/a", Some("4")),
            StatusCode::CONFLICT,
            r#"{"error":"stale fencing token","presented":4,"highest":5}"#,
        ),
    ];
    for (req, status, needle) in cases {
        let resp = svc.clone().oneshot(req).await.unwrap();
        assert_eq!(
            resp.headers()[http::header::CONTENT_TYPE],
            "application/json"
        );
        let (s, body) = answer(resp).await;
        assert_eq!(s, status, "{body}");
        assert!(body.contains(needle), "{body} lacks {needle}");
    }
    let mut twice = put("/kv/a", Some("6"));
    twice
        .headers_mut()
        .append("fencing-token", "6".parse().unwrap());
    let (s, body) = answer(svc.clone().oneshot(twice).await.unwrap()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");

    let failing = FencingLayer::by_path(Arc::new(FailingGate)).layer(recorder(log.clone()));
    let (s, body) = answer(failing.oneshot(put("/kv/a", Some("9"))).await.unwrap()).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, r#"{"error":"fencing gate unavailable"}"#);

    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "inner service called for a refusal"
    );
    assert_eq!(
        gate.high_water_now(&ResourceName::nonportable("/kv/a").unwrap()),
        Some(FencingToken::new(5))
    );
    assert_eq!(layer.locks.len(), 0);
}

#[tokio::test]
async fn equal_token_retries_pass_and_higher_tokens_raise_the_mark() {
    let log = Log::default();
    let gate = Arc::new(MemoryGate::new());
    let svc = FencingLayer::by_path(gate.clone()).layer(recorder(log.clone()));
    for t in ["3", "3", "8", "8"] {
        let (s, _) = answer(svc.clone().oneshot(put("/r", Some(t))).await.unwrap()).await;
        assert_eq!(s, StatusCode::OK, "token {t}");
    }
    let (s, _) = answer(svc.clone().oneshot(put("/r", Some("7"))).await.unwrap()).await;
    assert_eq!(s, StatusCode::CONFLICT);
    // Other resources have their own marks.
    let (s, _) = answer(svc.clone().oneshot(put("/other", Some("1"))).await.unwrap()).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(log.lock().unwrap().len(), 5);
}

#[tokio::test]
async fn safe_methods_pass_by_default_and_gating_is_configurable() {
    let log = Log::default();
    let gate = Arc::new(MemoryGate::new());
    let layer = FencingLayer::by_path(gate.clone());
    let get = || Request::get("/kv/a").body(String::new()).unwrap();
    let with = |m: Method| {
        Request::builder()
            .method(m)
            .uri("/kv/a")
            .body(String::new())
            .unwrap()
    };

    let svc = layer.clone().layer(recorder(log.clone()));
    for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
        let (s, _) = answer(svc.clone().oneshot(with(m.clone())).await.unwrap()).await;
        assert_eq!(s, StatusCode::OK, "{m}");
    }
    let custom = Method::from_bytes(b"PURGE").unwrap();
    for m in [
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        custom,
    ] {
        let (s, _) = answer(svc.clone().oneshot(with(m.clone())).await.unwrap()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{m}");
    }

    let all = layer
        .clone()
        .gate_all_methods()
        .layer(recorder(log.clone()));
    let (s, _) = answer(all.clone().oneshot(get()).await.unwrap()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = answer(
        all.oneshot(get().fencing_token(FencingToken::new(2)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);

    let only_delete = layer
        .gate_methods([Method::DELETE])
        .layer(recorder(log.clone()));
    let (s, _) = answer(
        only_delete
            .clone()
            .oneshot(put("/kv/a", None))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = answer(only_delete.oneshot(with(Method::DELETE)).await.unwrap()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn by_path_decodes_so_two_spellings_share_one_mark() {
    let gate = Arc::new(MemoryGate::new());
    let svc = FencingLayer::by_path(gate.clone()).layer(recorder(Log::default()));
    let (s, _) = answer(
        svc.clone()
            .oneshot(put("/kv/a?x=1", Some("10")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, body) = answer(
        svc.clone()
            .oneshot(put("/kv/%61", Some("9")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{body}");
    let (s, _) = answer(
        svc.clone()
            .oneshot(put("/kv/%ff", Some("9")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(percent_decode("/a%2Fb%zz%4").as_deref(), Some("/a/b%zz%4"));
    assert_eq!(percent_decode("/%C3%A9").as_deref(), Some("/é"));
}

#[tokio::test]
async fn a_custom_extractor_names_the_resource() {
    let gate = Arc::new(MemoryGate::new());
    let layer = FencingLayer::new(gate.clone(), |req: &Request<String>| {
        req.headers()
            .get("tenant")?
            .to_str()
            .ok()
            .map(|t| format!("tenant/{t}"))
    });
    let svc = layer.layer(recorder(Log::default()));
    let req = |tenant: Option<&str>, token: u64| {
        let mut b = Request::put("/anything").fencing_token(FencingToken::new(token));
        if let Some(t) = tenant {
            b = b.header("tenant", t);
        }
        b.body(String::new()).unwrap()
    };
    let (s, _) = answer(svc.clone().oneshot(req(Some("x"), 4)).await.unwrap()).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = answer(svc.clone().oneshot(req(Some("x"), 3)).await.unwrap()).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, body) = answer(svc.clone().oneshot(req(None, 3)).await.unwrap()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(body.contains("names no fenced resource"), "{body}");
    assert_eq!(
        gate.high_water_now(&ResourceName::nonportable("tenant/x").unwrap()),
        Some(FencingToken::new(4))
    );
}

/// The writer admitted first is slow; the newer one arrives while it is
/// still writing. Without the per-resource mutex the newer write lands
/// first and the older one overwrites it.
#[tokio::test(start_paused = true)]
async fn a_slow_writer_admitted_first_lands_before_a_newer_one() {
    let applied: Arc<Mutex<Vec<u64>>> = Arc::default();
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered_tx = Arc::new(Mutex::new(Some(entered_tx)));
    let inner = {
        let applied = applied.clone();
        service_fn(move |req: Request<String>| {
            let (applied, entered_tx) = (applied.clone(), entered_tx.clone());
            async move {
                let token = token_from_headers(req.headers()).unwrap().unwrap().get();
                if let Some(tx) = entered_tx.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                let pause = if token == 1 { 50 } else { 1 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
                applied.lock().unwrap().push(token);
                Ok::<_, Infallible>(Response::new(String::new()))
            }
        })
    };
    let layer = FencingLayer::by_path(Arc::new(MemoryGate::new()));
    let svc = layer.layer(inner);
    let slow = tokio::spawn(svc.clone().oneshot(put("/k", Some("1"))));
    entered_rx.await.unwrap();
    let fast = tokio::spawn(svc.clone().oneshot(put("/k", Some("2"))));
    assert_eq!(slow.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(fast.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(*applied.lock().unwrap(), vec![1, 2]);
    assert_eq!(layer.locks.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn different_resources_do_not_wait_for_each_other_and_cancelled_waiters_leave_nothing() {
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = {
        let calls = calls.clone();
        service_fn(move |req: Request<String>| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                if req.uri().path() == "/slow" {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Ok::<_, Infallible>(Response::new(String::new()))
            }
        })
    };
    let layer = FencingLayer::by_path(Arc::new(MemoryGate::new()));
    let svc = layer.layer(inner);
    let holder = tokio::spawn(svc.clone().oneshot(put("/slow", Some("1"))));
    tokio::time::sleep(Duration::from_millis(1)).await;
    let waiter = tokio::spawn(svc.clone().oneshot(put("/slow", Some("2"))));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the waiter entered while the holder writes"
    );
    let other = svc.clone().oneshot(put("/fast", Some("1"))).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(layer.locks.len(), 1);
    waiter.abort();
    let _ = waiter.await;
    holder.abort();
    let _ = holder.await;
    assert_eq!(layer.locks.len(), 0);
}

fn put_from(path: &str, token: &str, source: &str) -> Request<String> {
    Request::put(path)
        .header("Fencing-Token", token)
        .header("Fencing-Source", source)
        .body(String::new())
        .unwrap()
}

/// A token from source A sets the mark; a higher token from source B is
/// refused with 409 naming both sources, and the mark is unchanged.
#[tokio::test]
async fn a_higher_token_of_another_source_is_refused() {
    let log = Log::default();
    let gate = Arc::new(MemoryGate::new());
    let svc = FencingLayer::by_path(gate.clone()).layer(recorder(log.clone()));
    let (s, _) = answer(
        svc.clone()
            .oneshot(put_from("/kv/a", "5", "etcd:a"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, body) = answer(
        svc.clone()
            .oneshot(put_from("/kv/a", "9", "zk:b"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{body}");
    assert_eq!(
        body,
        r#"{"error":"foreign fencing source","resource":"/kv/a","expected":"etcd:a","presented":"zk:b"}"#
    );
    let r = ResourceName::nonportable("/kv/a").unwrap();
    assert_eq!(gate.high_water_now(&r), Some(FencingToken::new(5)));
    // A token that names no source cannot pass a bound mark either.
    let (s, body) = answer(svc.clone().oneshot(put("/kv/a", Some("9"))).await.unwrap()).await;
    assert_eq!(s, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("fencing source required"), "{body}");
    assert_eq!(gate.high_water_now(&r), Some(FencingToken::new(5)));
    let malformed = svc.clone().oneshot(put_from("/kv/a", "9", "etcd%3aa"));
    let (s, body) = answer(malformed.await.unwrap()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("invalid fencing source"), "{body}");
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "inner service called for a refusal"
    );
    let same = svc.clone().oneshot(put_from("/kv/a", "6", "etcd:a"));
    let (s, _) = answer(same.await.unwrap()).await;
    assert_eq!(
        s,
        StatusCode::OK,
        "the source that set the mark still writes"
    );
}
