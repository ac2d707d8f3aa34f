//! `fence run` as users script it: the real binary, a real child process and
//! a LocalSource directory shared with the test.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{fence, process_exists, wait_for_file, Running, LOST};
use fencing::{AcquireOptions, FencingSource, LocalSource, ResourceName};
use rustix::process::Signal;

fn output(args: &[&str]) -> Output {
    fence().args(args).output().expect("run fence")
}

fn source_url(dir: &Path) -> String {
    format!("local://{}", dir.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_gets_the_grants_token_and_its_exit_code_is_passed_through() {
    let dir = tempfile::tempdir().unwrap();
    let url = source_url(&dir.path().join("src"));
    let env_file = dir.path().join("env");
    let go = dir.path().join("go");
    let script = format!(
        "printf '%s %s %s\\n' \"$FENCING_TOKEN\" \"$FENCING_LOCK\" \"$FENCING_SOURCE\" > {env}; \
         while [ ! -e {go} ]; do sleep 0.05; done; exit 7",
        env = env_file.display(),
        go = go.display()
    );
    let run = Running::start(&[
        "run", "--source", &url, "--lock", "ledger", "--", "sh", "-c", &script,
    ]);
    let seen = wait_for_file(&env_file, Duration::from_secs(20));
    let fields: Vec<&str> = seen.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{seen:?}");

    // The coordinator's view of the holder names the token the child got.
    let source = LocalSource::open(dir.path().join("src")).unwrap();
    let ledger = ResourceName::new("ledger").unwrap();
    let holder = source
        .holder(&ledger)
        .await
        .unwrap()
        .expect("the lock is held");
    assert_eq!(fields[0], holder.token.to_string());
    assert_eq!(fields[1], "ledger");
    assert_eq!(fields[2], source.identity().as_str());

    std::fs::write(&go, "").unwrap();
    let (code, stderr) = tokio::task::spawn_blocking(move || run.finish(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(code, Some(7), "{stderr}");
    // Released on exit: free at once, and the next token is higher.
    let next = source
        .try_acquire(&ledger, &AcquireOptions::new())
        .await
        .unwrap()
        .expect("released when the command exited");
    assert!(next.token() > holder.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_past_its_lease_fence_kills_the_child_and_exits_75() {
    let dir = tempfile::tempdir().unwrap();
    common::frozen_fence_run_stops_its_child(&source_url(dir.path()), "1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let url = source_url(&dir.path().join("src"));
    let pid_file = dir.path().join("pid");
    let script = format!(
        "trap '' TERM; echo $$ > {}; while true; do sleep 0.1; done",
        pid_file.display()
    );
    let run = Running::start(&[
        "run", "--source", &url, "--lock", "l", "--ttl", "1", "--grace", "0.5", "--", "sh", "-c",
        &script,
    ]);
    let child: i32 = wait_for_file(&pid_file, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    run.signal(Signal::STOP);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    run.signal(Signal::CONT);
    let (code, stderr) = tokio::task::spawn_blocking(move || run.finish(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(code, Some(LOST), "{stderr}");
    assert!(stderr.contains("SIGKILL"), "{stderr}");
    assert!(!process_exists(child));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_fence_is_passed_to_the_child_and_the_lock_released() {
    let dir = tempfile::tempdir().unwrap();
    let url = source_url(&dir.path().join("src"));
    let ready = dir.path().join("ready");
    let script = format!(
        "trap 'exit 9' TERM; echo > {}; while true; do sleep 0.05; done",
        ready.display()
    );
    let run = Running::start(&[
        "run", "--source", &url, "--lock", "l", "--", "sh", "-c", &script,
    ]);
    wait_for_file(&ready, Duration::from_secs(20));
    run.signal(Signal::TERM);
    let (code, stderr) = tokio::task::spawn_blocking(move || run.finish(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(code, Some(9), "the child's own status: {stderr}");
    let source = LocalSource::open(dir.path().join("src")).unwrap();
    let l = ResourceName::new("l").unwrap();
    assert!(source
        .try_acquire(&l, &AcquireOptions::new())
        .await
        .unwrap()
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_gives_up_with_exit_1_while_someone_else_holds_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let source = LocalSource::open(dir.path()).unwrap();
    let held = source
        .acquire(&ResourceName::new("l").unwrap(), &AcquireOptions::new())
        .await
        .unwrap();
    let url = source_url(dir.path());
    let out = tokio::task::spawn_blocking(move || {
        output(&[
            "run", "--source", &url, "--lock", "l", "--wait", "0.5", "--", "true",
        ])
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("timed out") || stderr.contains("Timeout") || stderr.contains("timeout"),
        "{stderr}"
    );
    held.release().await.unwrap();
}

#[test]
fn every_command_line_mistake_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let url = source_url(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--source", &url, "--", "true"], "--lock"),
        (&["run", "--lock", "l", "--", "true"], "--source"),
        (&["run", "--source", &url, "--lock", "l", "--"], "CMD"),
        (&["run", "--source", &url, "--lock", "l"], "CMD"),
        (
            &["run", "--source", "nope://x", "--lock", "l", "--", "true"],
            "nope",
        ),
        (
            &["run", "--source", "local://", "--lock", "l", "--", "true"],
            "local://",
        ),
        (
            &["run", "--source", "etcd://", "--lock", "l", "--", "true"],
            "etcd://",
        ),
        (
            &["run", "--source", "not a url", "--lock", "l", "--", "true"],
            "not a url",
        ),
        (
            &["run", "--source", &url, "--lock", "", "--", "true"],
            "--lock",
        ),
        (
            &["run", "--source", &url, "--lock", "a\u{7}b", "--", "true"],
            "--lock",
        ),
        (
            &[
                "run", "--source", &url, "--lock", "l", "--ttl", "0", "--", "true",
            ],
            "--ttl",
        ),
        (
            &[
                "run", "--source", &url, "--lock", "l", "--grace", "x", "--", "true",
            ],
            "--grace",
        ),
    ];
    for (args, names) in cases {
        common::assert_usage_error(args, names);
    }
}

#[test]
fn help_shows_an_example_and_the_exit_codes() {
    let out = output(&["run", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(help.contains("fence run --source"), "{help}");
    assert!(help.contains("75"), "{help}");
    assert!(help.contains("FENCING_TOKEN"), "{help}");
}
