//! `fence elect` and `fence observe` as scripts use them: real processes,
//! JSON lines on stdout, a LocalSource directory shared between them.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fencing_harness::Reaped;
use rustix::process::Signal;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

/// A `fence` process whose stdout is read as JSON lines; killed on drop.
struct Fence(Reaped);

impl Fence {
    fn start(args: &[&str]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fence"));
        cmd.args(args).env_remove("RUST_LOG").stderr(Stdio::null());
        Fence(Reaped::spawn(&mut cmd).expect("start fence"))
    }

    fn next_event(&self) -> Value {
        let line = self.0.next_line(WAIT).expect("an event line in time");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"))
    }

    fn expect(&self, event: &str) -> Value {
        let v = self.next_event();
        assert_eq!(v["event"], event, "{v}");
        v
    }

    fn signal(&self, signal: Signal) {
        self.0.signal(signal);
    }

    fn exit_code(mut self) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait() {
                return status.code();
            }
            assert!(start.elapsed() < WAIT, "fence did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn token(v: &Value) -> u64 {
    v["token"]
        .as_str()
        .expect("token is a string")
        .parse()
        .unwrap()
}

fn candidate(url: &str, identity: &str) -> Fence {
    Fence::start(&[
        "elect",
        "--source",
        url,
        "--election",
        "sched",
        "--identity",
        identity,
        "--lease-duration",
        "2",
        "--renew-deadline",
        "1.5",
        "--retry-period",
        "0.2",
    ])
}

#[test]
fn resign_hands_over_and_observe_reports_each_leader() {
    let dir = tempfile::tempdir().unwrap();
    resign_hands_over_and_observe_reports_it(&format!("local://{}", dir.path().display()));
}

/// The same on PostgreSQL, through `postgres://` URLs (the lock table made
/// by `fence schema`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_resign_hands_over_and_observe_reports_each_leader() {
    let server = fencing_harness::postgres::server::PgServer::start()
        .await
        .unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?table=elect_locks",
        server.port()
    );
    tokio::task::spawn_blocking(move || {
        common::fence_schema(&url);
        resign_hands_over_and_observe_reports_it(&url);
    })
    .await
    .unwrap();
}

fn resign_hands_over_and_observe_reports_it(url: &str) {
    let url = url.to_owned();
    let observer = Fence::start(&[
        "observe",
        "--source",
        &url,
        "--election",
        "sched",
        "--retry-period",
        "0.1",
    ]);
    assert_eq!(observer.expect("no_leader")["election"], "sched");

    let a = candidate(&url, "a");
    let elected_a = a.expect("elected");
    assert_eq!(elected_a["identity"], "a");
    let seen = observer.expect("leader");
    assert_eq!(
        (seen["identity"].clone(), token(&seen)),
        ("a".into(), token(&elected_a))
    );

    let b = candidate(&url, "b");
    // b waits while a leads; SIGTERM makes a resign.
    let asked = Instant::now();
    a.signal(Signal::TERM);
    let resigned = a.expect("resigned");
    assert_eq!(token(&resigned), token(&elected_a));
    assert_eq!(a.exit_code(), Some(0));
    let elected_b = b.expect("elected");
    println!("handover after resign: {:?}", asked.elapsed());
    assert!(token(&elected_b) > token(&elected_a));
    let seen = observer.expect("leader");
    assert_eq!(
        (seen["identity"].clone(), token(&seen)),
        ("b".into(), token(&elected_b))
    );
}

#[test]
fn a_leader_paused_past_its_lease_reports_the_loss_and_a_new_term_follows() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("local://{}", dir.path().display());
    let a = candidate(&url, "a");
    let first = a.expect("elected");
    let b = candidate(&url, "b");
    a.signal(Signal::STOP);
    let elected_b = b.expect("elected");
    assert!(token(&elected_b) > token(&first));
    a.signal(Signal::CONT);
    let lost = a.expect("lost");
    assert_eq!(token(&lost), token(&first));
    assert!(!lost["reason"].as_str().unwrap().is_empty());
    // a campaigns again and gets the next term after b resigns.
    b.signal(Signal::TERM);
    b.expect("resigned");
    let again = a.expect("elected");
    assert!(token(&again) > token(&elected_b));
}

#[test]
fn command_line_mistakes_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("local://{}", dir.path().display());
    // Each command line split on spaces; URL is the local source's, '' an
    // empty argument.
    let cases = [
        ("elect --source URL", "--election"),
        ("elect --election e", "--source"),
        ("elect --source zz://x --election e", "zz"),
        (
            "elect --source URL --election e --lease-duration 5",
            "lease_duration",
        ),
        ("elect --source URL --election e --identity ''", "identity"),
        (
            "elect --source URL --election '' --lease-duration 5",
            "--election",
        ),
        (
            "elect --source URL --election e --coordinated 1.36.0",
            "kube://",
        ),
        (
            "elect --source kube://ns --election e --coordinated 1.36",
            "MAJOR.MINOR.PATCH",
        ),
        (
            "elect --source kube://ns --election e --coordinated 1.0.0&ttl=1",
            "BINARY[:EMULATION]",
        ),
        (
            "elect --source kube://ns --election e --coordinated 1.0.0:1.0.1",
            "above binary version",
        ),
        ("observe --source URL", "--election"),
        // Refused before connecting: nothing listens on port 1.
        (
            "observe --source etcd://127.0.0.1:1/e --election Jobs",
            "--election",
        ),
        ("observe --source etcd:// --election e", "etcd://"),
        (
            "observe --source URL --election e --retry-period -1",
            "--retry-period",
        ),
    ];
    for (line, names) in cases {
        let args: Vec<&str> = line
            .split(' ')
            .map(|a| match a {
                "URL" => url.as_str(),
                "''" => "",
                a => a,
            })
            .collect();
        common::assert_usage_error(&args, names);
    }
}

#[test]
fn help_of_every_command_has_an_example() {
    for command in ["demo", "run", "elect", "observe"] {
        let out = Command::new(env!("CARGO_BIN_EXE_fence"))
            .args([command, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{command}");
        assert!(
            help.contains(&format!("fence {command} ")),
            "{command}: {help}"
        );
    }
}
