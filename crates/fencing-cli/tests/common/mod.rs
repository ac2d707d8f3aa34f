//! What the `fence run` tests share: a `fence` process killed on drop, and
//! the pause scenario every backend must pass.

#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fencing::{AcquireOptions, ResourceName};
use rustix::process::{kill_process, Pid, Signal};

/// `fence run`'s documented status when the lock was lost.
pub const LOST: i32 = 75;

pub fn fence() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fence"));
    cmd.env_remove("RUST_LOG");
    cmd
}

/// Runs `fence ARGS` and checks the contract for a command-line mistake:
/// exit status 2 and exactly one line on stderr that names `names`.
pub fn assert_usage_error(args: &[&str], names: &str) {
    let out = fence().args(args).output().expect("run fence");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(
        stderr.contains(names),
        "{args:?} should name {names:?}: {stderr}"
    );
}

/// A `fence` process that is killed if the test fails half way.
pub struct Running(Child);

impl Running {
    pub fn start(args: &[&str]) -> Self {
        Running(
            fence()
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start fence"),
        )
    }

    pub fn signal(&self, signal: Signal) {
        kill_process(Pid::from_raw(self.0.id() as i32).unwrap(), signal).expect("signal fence");
    }

    /// Waits (bounded) for the exit; returns the code and stderr.
    pub fn finish(mut self, within: Duration) -> (Option<i32>, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                let mut err = String::new();
                use std::io::Read;
                self.0
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                return (status.code(), err);
            }
            assert!(
                start.elapsed() < within,
                "fence did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The complete text of a file written by a child, once its line is done.
pub fn wait_for_file(path: &Path, within: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(
            start.elapsed() < within,
            "{} did not appear",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A zombie still has a /proc entry, but `fence` reaps its child, so once
/// `fence` has exited the entry is gone for good.
pub fn process_exists(pid: i32) -> bool {
    PathBuf::from(format!("/proc/{pid}")).exists()
}

/// The scenario on any source URL: the child of `fence run` sees the
/// grant's token; `fence` is frozen past its lease while another client takes
/// the lock; once thawed, `fence` stops the child and exits with [`LOST`].
pub async fn frozen_fence_run_stops_its_child(url: &str, ttl_secs: &str) {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let script = format!(
        "echo \"$FENCING_TOKEN $$\" > {}; exec sleep 120",
        seen.display()
    );
    let run = Running::start(&[
        "run", "--source", url, "--lock", "ledger", "--ttl", ttl_secs, "--grace", "2", "--", "sh",
        "-c", &script,
    ]);
    let seen = wait_for_file(&seen, Duration::from_secs(30));
    let (token, child) = seen.trim().split_once(' ').unwrap();
    let child: i32 = child.parse().unwrap();

    let source = fencing::connect(url).await.unwrap();
    let ledger = ResourceName::new("ledger").unwrap();
    let holder = source
        .holder(&ledger)
        .await
        .unwrap()
        .expect("held by fence run");
    assert_eq!(
        token,
        holder.token.to_string(),
        "FENCING_TOKEN is the grant's token"
    );

    run.signal(Signal::STOP);
    let taken = source
        .acquire(
            &ledger,
            &AcquireOptions::new().timeout(Duration::from_secs(40)),
        )
        .await
        .expect("the frozen holder's lease runs out");
    assert!(taken.token() > holder.token);
    assert!(
        process_exists(child),
        "the child runs on while fence is frozen"
    );
    run.signal(Signal::CONT);

    let (code, stderr) = tokio::task::spawn_blocking(move || run.finish(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(code, Some(LOST), "{stderr}");
    assert!(stderr.contains("lost"), "{stderr}");
    assert!(!process_exists(child), "the child must be gone");
    assert!(
        source.validate(&taken).await.unwrap(),
        "the new holder keeps the lock"
    );
    taken.release().await.unwrap();
}
