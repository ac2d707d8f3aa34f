//! What the `fence run` tests share: a `fence` process killed on drop, and
//! the pause scenario every backend must pass.

#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fencing::{AcquireOptions, ResourceName};
use rustix::process::{kill_process, Pid, Signal};

/// `fence run`'s documented status when the lock was lost.
pub const LOST: i32 = 75;

pub fn fence() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fence"));
    cmd.env_remove("RUST_LOG").env_remove("FENCING_SOURCE_URL");
    cmd
}

/// Runs `fence schema --source URL`, which must succeed; what it printed.
pub fn fence_schema(url: &str) -> String {
    let out = fence()
        .args(["schema", "--source", url])
        .output()
        .expect("run fence schema");
    assert!(
        out.status.success(),
        "fence schema --source {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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

    pub fn pid(&self) -> i32 {
        self.0.id() as i32
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

/// The process's state letter from /proc (R, S, T, Z, ...), None once it is
/// gone.
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name in parentheses may contain anything; the state is the
    // first field after the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// True while the process can still run: it exists and is no zombie (a
/// zombie whose parent is frozen or gone may linger, but does nothing).
pub fn process_alive(pid: i32) -> bool {
    !matches!(process_state(pid), None | Some('Z') | Some('X'))
}

/// Polls `done` until it holds, failing the test after `within`.
pub fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills the listed processes when dropped, so a failing test leaves no
/// stray `sleep 300` behind.
pub struct KillOnDrop(pub Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
    }
}

/// Wall-clock nanoseconds, the unit `date +%s%N` writes.
pub fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Shell lines that append a wall-clock timestamp to `path` every 20 ms,
/// forever: the child's "writes", whose last one must precede the next grant.
pub fn stamp_loop(path: &Path) -> String {
    format!(
        "while :; do date +%s%N >> {}; sleep 0.02; done",
        path.display()
    )
}

/// The last complete timestamp `stamp_loop` wrote.
pub fn last_stamp(path: &Path) -> u128 {
    let text = std::fs::read_to_string(path).expect("the child wrote timestamps");
    text.lines()
        .filter_map(|l| l.trim().parse::<u128>().ok())
        .next_back()
        .expect("at least one timestamp")
}

/// The scenario on any source URL: the child of `fence run` sees the
/// grant's token; `fence` is frozen (SIGSTOP) while the child keeps writing
/// timestamps and another client waits for the lock. A frozen `fence` can
/// neither renew nor stop its child, so its watchdog must: by the time the
/// other client is granted, the child is dead and its last write came
/// before the grant. Once thawed, `fence` reports the loss with [`LOST`].
pub async fn frozen_fence_run_stops_its_child(url: &str, ttl_secs: &str) {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let stamps = dir.path().join("stamps");
    let script = format!(
        "echo \"$FENCING_TOKEN $$\" > {}; {}",
        seen.display(),
        stamp_loop(&stamps)
    );
    let run = Running::start(&[
        "run", "--source", url, "--lock", "ledger", "--ttl", ttl_secs, "--", "sh", "-c", &script,
    ]);
    let seen = wait_for_file(&seen, Duration::from_secs(30));
    let (token, child) = seen.trim().split_once(' ').unwrap();
    let child: i32 = child.parse().unwrap();
    let _cleanup = KillOnDrop(vec![child]);

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
            &AcquireOptions::new().wait(Duration::from_secs(40)),
        )
        .await
        .expect("the frozen holder's lease runs out");
    // Both taken at the moment the next holder has its grant in hand.
    let granted = wall_ns();
    let child_alive = process_alive(child);
    assert!(taken.token() > holder.token);
    assert!(
        !child_alive,
        "the child of the frozen fence still runs when the next holder is granted"
    );
    let last = last_stamp(&stamps);
    assert!(
        last < granted,
        "the child wrote {} ms after the next grant",
        (last - granted) / 1_000_000
    );
    eprintln!(
        "the child's last write came {} ms before the next grant",
        (granted - last) / 1_000_000
    );
    run.signal(Signal::CONT);

    let (code, stderr) = tokio::task::spawn_blocking(move || run.finish(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(code, Some(LOST), "{stderr}");
    assert!(stderr.contains("lost"), "{stderr}");
    assert!(
        source.validate(&taken).await.unwrap(),
        "the new holder keeps the lock"
    );
    taken.release().await.unwrap();
}
