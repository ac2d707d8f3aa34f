//! `fence run` as users script it: the real binary, a real child process and
//! a LocalSource directory shared with the test.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{
    fence, last_stamp, process_alive, process_state, stamp_loop, wait_for_file, wait_until,
    wall_ns, KillOnDrop, Running, LOST,
};
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
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_past_its_lease_fence_kills_the_child_and_exits_75() {
    let dir = tempfile::tempdir().unwrap();
    common::frozen_fence_run_stops_its_child(&source_url(dir.path()), "1").await;
}

/// Fence is alive but its renewals fail (the source directory was moved
/// away), so the lease runs out. The child ignores SIGTERM and keeps writing:
/// it must be SIGKILLed, and its last write must come before the next
/// holder's grant, which the other client takes from the moved directory
/// the moment the lease has expired there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_traps_sigterm_is_dead_before_the_next_holder_is_granted() {
    let dir = tempfile::tempdir().unwrap();
    let url = source_url(&dir.path().join("src"));
    let pid_file = dir.path().join("pid");
    let stamps = dir.path().join("stamps");
    let script = format!(
        "trap '' TERM; echo $$ > {}; {}",
        pid_file.display(),
        stamp_loop(&stamps)
    );
    let run = Running::start(&[
        "run", "--source", &url, "--lock", "l", "--ttl", "2", "--grace", "0.8", "--", "sh", "-c",
        &script,
    ]);
    let child: i32 = wait_for_file(&pid_file, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(vec![child]);

    std::fs::rename(dir.path().join("src"), dir.path().join("moved")).unwrap();
    let source = LocalSource::open(dir.path().join("moved")).unwrap();
    let next = source
        .acquire(
            &ResourceName::new("l").unwrap(),
            &AcquireOptions::new().wait(Duration::from_secs(20)),
        )
        .await
        .expect("fence's lease runs out");
    let granted = wall_ns();
    let child_alive = process_alive(child);
    let last = last_stamp(&stamps);
    assert!(!child_alive, "the child still runs at the next grant");
    assert!(
        last < granted,
        "the child wrote {} ms after the next grant",
        (last - granted) / 1_000_000
    );
    eprintln!(
        "the child's last write came {} ms before the next grant",
        (granted - last) / 1_000_000
    );

    let (code, stderr) = tokio::task::spawn_blocking(move || run.finish(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(code, Some(LOST), "{stderr}");
    assert!(stderr.contains("SIGKILL"), "{stderr}");
    next.release().await.unwrap();
}

/// `fence` SIGKILLed: its watchdog kills the command's whole process group,
/// the background `sleep` included, before the lease can run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grandchild_dies_with_a_sigkilled_fence_before_the_next_grant() {
    let dir = tempfile::tempdir().unwrap();
    let url = source_url(&dir.path().join("src"));
    let gc_file = dir.path().join("grandchild");
    let script = format!("sleep 300 & echo $! > {}; wait", gc_file.display());
    let run = Running::start(&[
        "run", "--source", &url, "--lock", "l", "--ttl", "2", "--", "sh", "-c", &script,
    ]);
    let grandchild: i32 = wait_for_file(&gc_file, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(vec![grandchild]);

    run.signal(Signal::KILL);
    let source = LocalSource::open(dir.path().join("src")).unwrap();
    let next = source
        .acquire(
            &ResourceName::new("l").unwrap(),
            &AcquireOptions::new().wait(Duration::from_secs(20)),
        )
        .await
        .expect("the killed fence's lease runs out");
    assert!(
        !process_alive(grandchild),
        "the grandchild outlived fence's lease"
    );
    next.release().await.unwrap();
}

/// The command exits but leaves a background process in its group that
/// takes a moment to honour SIGTERM: it must be gone before the lock is
/// released, i.e. before the waiting client is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_background_processes_are_killed_before_the_release() {
    let dir = tempfile::tempdir().unwrap();
    let url = source_url(&dir.path().join("src"));
    let bg_file = dir.path().join("bg");
    let go = dir.path().join("go");
    let script = format!(
        "(trap 'sleep 0.3; exit 0' TERM; while :; do sleep 0.05; done) & echo $! > {bg}; \
         while [ ! -e {go} ]; do sleep 0.05; done; exit 3",
        bg = bg_file.display(),
        go = go.display()
    );
    let run = Running::start(&[
        "run", "--source", &url, "--lock", "l", "--", "sh", "-c", &script,
    ]);
    let bg: i32 = wait_for_file(&bg_file, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(vec![bg]);

    let source = LocalSource::open(dir.path().join("src")).unwrap();
    let waiter = tokio::spawn(async move {
        let grant = source
            .acquire(
                &ResourceName::new("l").unwrap(),
                &AcquireOptions::new().wait(Duration::from_secs(20)),
            )
            .await
            .expect("released when the command exits");
        (process_alive(bg), grant)
    });
    std::fs::write(&go, "").unwrap();
    let (bg_alive, grant) = waiter.await.unwrap();
    assert!(!bg_alive, "the background process outlived the release");
    let (code, stderr) = tokio::task::spawn_blocking(move || run.finish(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(code, Some(3), "the command's own status: {stderr}");
    grant.release().await.unwrap();
}

/// A SIGTERM that arrives after the lock is granted but before the command
/// starts must not be lost. `fence`'s stderr is a full pipe, so `fence`
/// blocks in its "lock acquired" log line, right in that window, until the
/// test drains the pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_between_acquire_and_start_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let url = source_url(&dir.path().join("src"));
    let started = dir.path().join("started");
    let script = format!("echo > {}; sleep 30", started.display());
    let (reader, writer) = full_pipe();
    let child = fence()
        .args([
            "run", "--source", &url, "--lock", "l", "--", "sh", "-c", &script,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(writer)
        .spawn()
        .expect("start fence");
    let pid = child.id() as i32;
    let mut child = KillChild(child);

    let source = LocalSource::open(dir.path().join("src")).unwrap();
    let l = ResourceName::new("l").unwrap();
    let held = {
        let (source, l) = (source.clone(), l.clone());
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(source.holder(&l)).unwrap().is_some()
        }
    };
    tokio::task::spawn_blocking(move || {
        wait_until("fence holds the lock", Duration::from_secs(20), held)
    })
    .await
    .unwrap();
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), Signal::TERM)
        .unwrap();
    // Not an ordering for the fixed code, which keeps the signal however
    // long it waits: this only gives the old code's signal thread time to
    // take the signal and find no one listening.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let drain = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut { reader }, &mut text);
        text
    });
    let status = tokio::task::spawn_blocking(move || {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "fence ran on after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap();
    let stderr = drain.join().unwrap();
    assert_eq!(
        status.code(),
        Some(143),
        "{}",
        stderr.trim_start_matches('x')
    );
    assert!(
        !started.exists(),
        "the command must not start after SIGTERM"
    );
    // Released by hand: a grant dropped here would be released in the
    // background after the test's directory is gone, re-creating it.
    source
        .try_acquire(&l, &AcquireOptions::new())
        .await
        .unwrap()
        .expect("released")
        .release()
        .await
        .unwrap();
}

/// Kills a `fence` started by hand if the test fails half way.
struct KillChild(std::process::Child);

impl Drop for KillChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A pipe whose buffer is already full of `x`: the next write to it blocks
/// until the reader drains it.
fn full_pipe() -> (std::io::PipeReader, std::io::PipeWriter) {
    use std::io::Write;
    let (reader, mut writer) = std::io::pipe().unwrap();
    rustix::io::ioctl_fionbio(&writer, true).unwrap();
    let chunk = [b'x'; 4096];
    loop {
        match writer.write(&chunk) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
    loop {
        match writer.write(b"x") {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
    rustix::io::ioctl_fionbio(&writer, false).unwrap();
    (reader, writer)
}

/// The grace must fit in the lease (see `fence run --help`): with a 2 s TTL
/// the command may have at most 0.81 s between SIGTERM and SIGKILL. Refused
/// before connecting when --ttl is given, and right after the grant when the
/// TTL comes from the source; the command never runs and the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_that_does_not_fit_in_the_lease_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let ran_arg = ran.display().to_string();
    let src = dir.path().join("src");
    let url = source_url(&src);
    let url_ttl = format!("{url}?ttl=2");
    for args in [
        vec![
            "run", "--source", &url, "--lock", "l", "--ttl", "2", "--grace", "1", "--", "touch",
            &ran_arg,
        ],
        vec![
            "run", "--source", &url_ttl, "--lock", "l", "--grace", "1", "--", "touch", &ran_arg,
        ],
    ] {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            common::assert_usage_error(&args, "--grace");
        })
        .await
        .unwrap();
        assert!(!ran.exists(), "the command must not run");
    }
    let source = LocalSource::open(&src).unwrap();
    // Released by hand: a grant dropped here would be released in the
    // background after the test's directory is gone, re-creating it.
    source
        .try_acquire(&ResourceName::new("l").unwrap(), &AcquireOptions::new())
        .await
        .unwrap()
        .expect("the lock is free")
        .release()
        .await
        .unwrap();
}

/// Ctrl-Z: the terminal sends SIGTSTP to `fence` only (the command runs in
/// its own process group). The command must stop with `fence`, and `fg`
/// (SIGCONT to `fence`) must resume both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_z_stops_the_command_with_fence_and_fg_resumes_both() {
    let dir = tempfile::tempdir().unwrap();
    let url = source_url(&dir.path().join("src"));
    let pid_file = dir.path().join("pid");
    let go = dir.path().join("go");
    let script = format!(
        "echo $$ > {}; while [ ! -e {} ]; do sleep 0.05; done; exit 4",
        pid_file.display(),
        go.display()
    );
    let run = Running::start(&[
        "run", "--source", &url, "--lock", "l", "--", "sh", "-c", &script,
    ]);
    let child: i32 = wait_for_file(&pid_file, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    let fence_pid = run.pid();

    run.signal(Signal::TSTP);
    wait_until("fence stopped", Duration::from_secs(10), || {
        process_state(fence_pid) == Some('T')
    });
    wait_until("the command stopped too", Duration::from_secs(10), || {
        process_state(child) == Some('T')
    });
    run.signal(Signal::CONT);
    wait_until("both resumed", Duration::from_secs(10), || {
        process_state(fence_pid) != Some('T') && process_state(child) != Some('T')
    });
    std::fs::write(&go, "").unwrap();
    let (code, stderr) = tokio::task::spawn_blocking(move || run.finish(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(code, Some(4), "{stderr}");
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
    source
        .try_acquire(&l, &AcquireOptions::new())
        .await
        .unwrap()
        .expect("released on SIGTERM")
        .release()
        .await
        .unwrap();
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
    // Contention, named as such: not a silent cluster's timeout.
    assert!(
        stderr.contains("not granted within") && stderr.contains("held by"),
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
        // Refused before connecting: nothing listens on port 1.
        (
            &[
                "run",
                "--source",
                "zk://127.0.0.1:1/locks",
                "--lock",
                "Jobs",
                "--",
                "true",
            ],
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
