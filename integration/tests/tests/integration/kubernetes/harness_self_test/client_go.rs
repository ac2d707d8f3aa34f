//! The client-go elector program leading on the harness's apiserver.

use super::*;

/// A minimal HTTP endpoint for the elector's `--gate-url`: answers 200 to
/// every request and records each request's `Fencing-Token` header.
async fn recording_gate() -> (String, tokio::task::JoinHandle<()>, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/resource", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            // One request per connection ("Connection: close"); the whole
            // request is small, so reading up to the blank line after the
            // headers and the body's bytes is enough.
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                match tokio::time::timeout(CALL, conn.read(&mut chunk)).await {
                    Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => break None,
                }
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(i);
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let header = |name: &str| {
                head.lines()
                    .find_map(|l| {
                        l.split_once(':')
                            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                    })
                    .map(|(_, v)| v.trim().to_string())
            };
            let length: usize = header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while buf.len() < head_end + 4 + length {
                match tokio::time::timeout(CALL, conn.read(&mut chunk)).await {
                    Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => break,
                }
            }
            record
                .lock()
                .unwrap()
                .push(header("fencing-token").unwrap_or_default());
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
        }
    });
    (url, server, seen)
}

/// The elector's output lines, parsed, until `done` (or 60 s).
async fn elector_events(
    elector: &Reaped,
    mut on_event: impl AsyncFnMut(&serde_json::Value),
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut events = Vec::new();
    while Instant::now() < deadline {
        // Non-blocking: the runtime thread must not wait on the channel.
        let Some(line) = elector.next_line(Duration::ZERO) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let event: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("elector printed a non-JSON line {line:?}: {e}"));
        assert!(
            event["t"].as_i64().is_some_and(|t| t > 0),
            "no time in {line}"
        );
        on_event(&event).await;
        let done = event["event"] == "done";
        events.push(event);
        if done {
            return events;
        }
    }
    panic!("the elector printed no done line within 60 s; so far: {events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_go_elector_leads_with_the_lease_resource_version() {
    let binary = client_go_elector_binary().unwrap_or_else(|e| panic!("{e}"));
    let cluster = start().await;
    let admin: Api<Lease> = Api::namespaced(cluster.admin_client(), TEST_NAMESPACE);
    // A released Lease (no holder), as client-go leaves it.
    let before = call(
        "create",
        admin.create(&PostParams::default(), &lease("go-elector", "")),
    )
    .await
    .expect("create the Lease");
    let (gate_url, gate, gate_tokens) = recording_gate().await;

    let log = cluster.dir().join("client-go-elector.stderr");
    let stderr = std::fs::File::create(&log).expect("elector log");
    let elector = Reaped::spawn(
        Command::new(&binary)
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig(KubeUser::LeaseUser))
            .args(["--namespace", TEST_NAMESPACE, "--name", "go-elector"])
            .args(["--identity", "go-1"])
            .args([
                "--lease-duration",
                "4s",
                "--renew-deadline",
                "3s",
                "--retry-period",
                "500ms",
            ])
            .args(["--hold", "2s", "--writes", "3", "--gate-url", &gate_url])
            .stderr(Stdio::from(stderr)),
    )
    .expect("start the elector");

    let mut seen_while_leading = None;
    let events = elector_events(&elector, async |event| {
        if event["event"] == "leading" {
            let lease = call("get", admin.get("go-elector"))
                .await
                .expect("get while leading");
            seen_while_leading = Some(lease);
        }
    })
    .await;
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let stderr_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let leading: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["event"] == "leading").collect();
    assert_eq!(leading.len(), 1, "one term: {names:?}\n{}", stderr_text());
    let token: u64 = leading[0]["token"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("token is not a numeric string: {}", leading[0]));
    assert_eq!(leading[0]["identity"], "go-1");
    assert!(
        token > rv(&before),
        "token {token} is not above the earlier write {}",
        rv(&before)
    );
    let during = seen_while_leading.expect("the Lease was read while leading");
    let t = |name: &str| {
        events
            .iter()
            .find(|e| e["event"] == name)
            .and_then(|e| e["t"].as_i64())
    };
    eprintln!(
        "client-go elector: rv before {}, token {token}, rv read while leading {}, \
         started -> leading {:?} ms",
        rv(&before),
        rv(&during),
        t("leading")
            .zip(t("started"))
            .map(|(l, s)| (l - s) / 1_000_000)
    );
    assert_eq!(holder(&during), Some("go-1"), "the Lease names the leader");
    assert!(rv(&during) >= token, "the Lease went back below the token");

    // Order of the contract: started, ..., leading, writes, stopped_leading, done.
    let pos = |name: &str| names.iter().position(|n| *n == name);
    assert_eq!(pos("started"), Some(0), "{names:?}");
    assert!(pos("leading") < pos("stopped_leading"), "{names:?}");
    assert_eq!(names.last(), Some(&"done"));
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "new_leader" && e["identity"] == "go-1"),
        "OnNewLeader reported go-1: {names:?}"
    );
    let writes: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] == "write").collect();
    assert_eq!(writes.len(), 3, "{names:?}");
    for w in &writes {
        assert_eq!(w["status"], 200, "{w}");
        assert_eq!(w["token"].as_str(), Some(token.to_string().as_str()));
    }
    assert_eq!(
        *gate_tokens.lock().unwrap(),
        vec![token.to_string(); 3],
        "the gate saw the token"
    );
    gate.abort();

    // Released on cancel: no holder, a later write than the token.
    let after = call("get", admin.get("go-elector"))
        .await
        .expect("get after");
    assert_eq!(holder(&after).unwrap_or(""), "", "released");
    assert!(rv(&after) > token);
    let mut elector = elector;
    let deadline = Instant::now() + CALL;
    let status = loop {
        if let Some(status) = elector.try_wait() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the elector did not exit after done"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit {status}: {}", stderr_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_go_elector_rejects_missing_flags() {
    let binary = client_go_elector_binary().unwrap_or_else(|e| panic!("{e}"));
    let out = tokio::time::timeout(
        CALL,
        tokio::process::Command::new(&binary)
            .args([
                "--namespace",
                "ns",
                "--name",
                "n",
                "--kubeconfig",
                "/nonexistent",
            ])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the elector exits at once")
    .expect("run the elector");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing on stdout");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--identity is required"), "{stderr}");
}
