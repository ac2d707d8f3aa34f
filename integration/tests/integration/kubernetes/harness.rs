//! Tests of the real kube-apiserver harness itself: the users' rights
//! (including the RBAC manifest `deploy/kubernetes/rbac.yaml`), Leases that
//! survive an apiserver restart and an etcd crash with resource versions
//! that keep growing, and the client-go elector program leading on it.
//!
//! The binaries come from `scripts/install/kube-apiserver.sh`,
//! `scripts/install/etcd.sh` and `scripts/install/client-go-interop.sh`;
//! without them these tests fail with a message naming the script.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencing_integration::kubernetes::cluster::{
    client_go_elector_binary, KubeCluster, KubeUser, OTHER_NAMESPACE, TEST_NAMESPACE,
};
use fencing_integration::kubernetes::rbac::{lease_user_rbac, RBAC_MANIFEST};
use fencing_integration::Reaped;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};

/// A bound for any single request in these tests.
const CALL: Duration = Duration::from_secs(10);

async fn start() -> KubeCluster {
    let t = Instant::now();
    let cluster = KubeCluster::start()
        .await
        .unwrap_or_else(|e| panic!("kube cluster did not start: {e}"));
    eprintln!(
        "etcd + kube-apiserver ready, RBAC in effect, after {:?}",
        t.elapsed()
    );
    cluster
}

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        }),
    }
}

async fn leases(cluster: &KubeCluster, user: KubeUser, namespace: &str) -> Api<Lease> {
    let client = cluster
        .client(user)
        .await
        .unwrap_or_else(|e| panic!("client for {user}: {e}"));
    Api::namespaced(client, namespace)
}

async fn call<T>(
    what: &str,
    f: impl std::future::Future<Output = kube::Result<T>>,
) -> kube::Result<T> {
    tokio::time::timeout(CALL, f)
        .await
        .unwrap_or_else(|_| panic!("{what} took over {CALL:?}"))
}

/// The HTTP status of a refused request; panics if it was not refused.
fn refused<T: std::fmt::Debug>(what: &str, result: kube::Result<T>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("{what}: expected an API error status, got {other:?}"),
    }
}

fn rv(lease: &Lease) -> u64 {
    let rv = lease
        .metadata
        .resource_version
        .as_deref()
        .expect("a resourceVersion");
    rv.parse()
        .unwrap_or_else(|_| panic!("resourceVersion {rv:?} is not a number"))
}

fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

/// Replaces the Lease's holder with the given resourceVersion (an update
/// with optimistic concurrency, as client-go does).
async fn take(api: &Api<Lease>, current: &Lease, holder: &str) -> kube::Result<Lease> {
    let mut next = current.clone();
    next.spec
        .get_or_insert_with(LeaseSpec::default)
        .holder_identity = Some(holder.into());
    let name = current.metadata.name.clone().expect("a name");
    call("replace", api.replace(&name, &PostParams::default(), &next)).await
}

#[test]
fn the_rbac_manifest_grants_exactly_get_create_update_on_leases() {
    let (role, binding) =
        lease_user_rbac(RBAC_MANIFEST, "ns-x", "someone").expect("manifest parses");
    assert_eq!(role.metadata.namespace.as_deref(), Some("ns-x"));
    assert_eq!(binding.metadata.namespace.as_deref(), Some("ns-x"));
    let rules = role.rules.expect("rules");
    assert_eq!(rules.len(), 1, "one rule: {rules:?}");
    let rule = &rules[0];
    assert_eq!(
        rule.api_groups.as_deref(),
        Some(&["coordination.k8s.io".to_string()][..])
    );
    assert_eq!(rule.resources.as_deref(), Some(&["leases".to_string()][..]));
    let mut verbs = rule.verbs.clone();
    verbs.sort();
    assert_eq!(verbs, ["create", "get", "update"]);
    assert_eq!(binding.role_ref.kind, "Role");
    assert_eq!(
        Some(binding.role_ref.name.as_str()),
        role.metadata.name.as_deref()
    );
    let subjects = binding.subjects.expect("subjects");
    assert_eq!(subjects.len(), 1);
    assert_eq!(
        (subjects[0].kind.as_str(), subjects[0].name.as_str()),
        ("User", "someone")
    );
}

#[test]
fn a_manifest_without_a_binding_is_a_typed_error() {
    let only_role = RBAC_MANIFEST.split("\n---").next().expect("first document");
    let err = lease_user_rbac(only_role, "ns", "u").expect_err("no RoleBinding");
    assert!(err.to_string().contains("RoleBinding"), "{err}");
    let err = lease_user_rbac("kind: [unclosed", "ns", "u").expect_err("bad YAML");
    assert!(err.to_string().contains("RBAC manifest"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_have_exactly_their_rights() {
    let cluster = start().await;
    assert_eq!(cluster.namespace(), TEST_NAMESPACE);
    assert!(cluster.server_url().starts_with("https://127.0.0.1:"));

    // admin: create and read in both namespaces.
    let admin = leases(&cluster, KubeUser::Admin, TEST_NAMESPACE).await;
    let made = call(
        "admin create",
        admin.create(&PostParams::default(), &lease("by-admin", "admin")),
    )
    .await
    .expect("admin creates a Lease");
    let read = call("admin get", admin.get("by-admin"))
        .await
        .expect("admin reads it");
    assert_eq!(holder(&read), Some("admin"));
    assert_eq!(rv(&read), rv(&made));
    let admin_other = leases(&cluster, KubeUser::Admin, OTHER_NAMESPACE).await;
    call(
        "admin create",
        admin_other.create(&PostParams::default(), &lease("elsewhere", "admin")),
    )
    .await
    .expect("admin creates in the other namespace");

    // lease-user: get, create, update in the test namespace; nothing else.
    let user = leases(&cluster, KubeUser::LeaseUser, TEST_NAMESPACE).await;
    let mine = call(
        "user create",
        user.create(&PostParams::default(), &lease("by-user", "a")),
    )
    .await
    .expect("lease-user creates a Lease");
    let got = call("user get", user.get("by-user"))
        .await
        .expect("lease-user reads it");
    let updated = take(&user, &got, "b").await.expect("lease-user updates it");
    assert!(
        rv(&updated) > rv(&mine),
        "an update raises the resourceVersion"
    );
    assert_eq!(holder(&updated), Some("b"));
    // A stale resourceVersion is a conflict, not a lost update.
    assert_eq!(refused("stale update", take(&user, &got, "c").await), 409);
    assert_eq!(
        refused(
            "user delete",
            call("delete", user.delete("by-user", &DeleteParams::default())).await
        ),
        403
    );
    assert_eq!(
        refused(
            "user list",
            call("list", user.list(&Default::default())).await
        ),
        403
    );
    let user_other = leases(&cluster, KubeUser::LeaseUser, OTHER_NAMESPACE).await;
    assert_eq!(
        refused(
            "user get elsewhere",
            call("get", user_other.get("elsewhere")).await
        ),
        403
    );
    assert_eq!(
        refused(
            "user create elsewhere",
            call(
                "create",
                user_other.create(&PostParams::default(), &lease("x", "a"))
            )
            .await
        ),
        403
    );

    // lease-reader: get only.
    let reader = leases(&cluster, KubeUser::LeaseReader, TEST_NAMESPACE).await;
    let seen = call("reader get", reader.get("by-user"))
        .await
        .expect("lease-reader reads");
    assert_eq!(
        refused("reader update", take(&reader, &seen, "reader").await),
        403
    );
    assert_eq!(
        refused(
            "reader create",
            call(
                "create",
                reader.create(&PostParams::default(), &lease("r", "r"))
            )
            .await
        ),
        403
    );

    // nobody: authenticated, no rights.
    let nobody = leases(&cluster, KubeUser::Nobody, TEST_NAMESPACE).await;
    assert_eq!(
        refused("nobody get", call("get", nobody.get("by-user")).await),
        403
    );

    // untrusted certificate: not authenticated at all.
    let untrusted = leases(&cluster, KubeUser::Untrusted, TEST_NAMESPACE).await;
    assert_eq!(
        refused("untrusted get", call("get", untrusted.get("by-user")).await),
        401
    );
}

/// VmRSS and VmHWM (peak) of a process, in MiB, for the printed figures.
fn rss_mib(pid: Option<u32>) -> String {
    let Some(pid) = pid else {
        return "(not running)".into();
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or("?".to_string(), |kib| (kib / 1024).to_string())
    };
    format!("RSS {} MiB, peak {} MiB", field("VmRSS:"), field("VmHWM:"))
}

/// Creates the Lease `name` (holder `before`) before a fault.
async fn lease_survives(before: &Api<Lease>, name: &str) -> Lease {
    call(
        "create",
        before.create(&PostParams::default(), &lease(name, "before")),
    )
    .await
    .expect("create before the fault")
}

/// Checks through `after` (a client made before the fault) that the Lease
/// is unchanged and that a new write gets a numerically greater
/// resourceVersion.
async fn check_after(after: &Api<Lease>, written: &Lease) {
    let name = written.metadata.name.clone().expect("a name");
    // The first requests after a restart may meet closed pooled
    // connections; a client retries, so the test does too (bounded).
    let mut read = None;
    for _ in 0..20 {
        match call("get after", after.get(&name)).await {
            Ok(l) => {
                read = Some(l);
                break;
            }
            Err(e) => {
                eprintln!("get after the fault: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    let read = read.expect("the Lease is readable after the fault");
    assert_eq!(rv(&read), rv(written), "the Lease is unchanged");
    assert_eq!(holder(&read), Some("before"));
    let next = take(after, &read, "after")
        .await
        .expect("update after the fault");
    assert!(
        rv(&next) > rv(written),
        "resourceVersion {} after the fault is not above {} before",
        rv(&next),
        rv(written)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_survives_an_apiserver_restart() {
    let mut cluster = start().await;
    eprintln!(
        "apiserver after start: {}",
        rss_mib(cluster.apiserver_pid())
    );
    let api = leases(&cluster, KubeUser::LeaseUser, TEST_NAMESPACE).await;
    let written = lease_survives(&api, "survives-apiserver").await;
    let old_pid = cluster.apiserver_pid();
    let t = Instant::now();
    cluster
        .restart_apiserver()
        .await
        .expect("restart the apiserver");
    eprintln!(
        "apiserver restart (graceful stop + ready) took {:?}",
        t.elapsed()
    );
    assert_ne!(cluster.apiserver_pid(), old_pid, "a new process");
    check_after(&api, &written).await;
    eprintln!(
        "apiserver after restart and writes: {}",
        rss_mib(cluster.apiserver_pid())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_survives_an_etcd_crash_under_the_apiserver() {
    let mut cluster = start().await;
    let api = leases(&cluster, KubeUser::LeaseUser, TEST_NAMESPACE).await;
    let written = lease_survives(&api, "survives-etcd").await;
    let apiserver = cluster.apiserver_pid();
    let t = Instant::now();
    cluster.kill_etcd();
    // With etcd gone, requests that need storage fail (or time out); they
    // must not succeed from some cache pretending to be authoritative.
    let mut attempt = written.clone();
    attempt
        .spec
        .get_or_insert_with(LeaseSpec::default)
        .holder_identity = Some("during".into());
    let during = tokio::time::timeout(
        Duration::from_secs(5),
        api.replace("survives-etcd", &PostParams::default(), &attempt),
    )
    .await;
    assert!(
        !matches!(during, Ok(Ok(_))),
        "an update succeeded while etcd was down: {during:?}"
    );
    cluster.start_etcd().await.expect("start etcd again");
    eprintln!(
        "etcd kill + restart until the apiserver is ready: {:?}",
        t.elapsed()
    );
    assert_eq!(
        cluster.apiserver_pid(),
        apiserver,
        "the apiserver kept running"
    );
    check_after(&api, &written).await;

    let t = Instant::now();
    cluster.restart_etcd().await.expect("restart etcd");
    eprintln!("restart_etcd took {:?}", t.elapsed());
    let again = call("get", api.get("survives-etcd"))
        .await
        .expect("get after restart_etcd");
    assert_eq!(holder(&again), Some("after"));
}

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
