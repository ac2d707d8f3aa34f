//! What every reproduction shares: a step-driven anchor process (one JSON
//! line per event on its stdout, one stdin line to pass each step) and the
//! verdict line `scripts/anchor-bugs.sh` turns into its table.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// An anchor program paused at explicit steps. Killed when dropped.
pub struct Stepped {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    /// Every line read so far, for the failure message.
    seen: Vec<String>,
}

impl Stepped {
    /// Starts `cmd` with stdin and stdout piped (stderr is inherited: the
    /// anchors log there).
    pub fn spawn(cmd: &mut Command) -> Stepped {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the anchor program");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        Stepped {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            seen: Vec::new(),
        }
    }

    /// Reads lines until one whose "event" is `event` and returns it; panics
    /// (with every line seen) on an "error" event, the end of output, or
    /// when none came within `limit`.
    pub async fn expect(&mut self, event: &str, limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let line = match tokio::time::timeout_at(deadline, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(_) => panic!("anchor ended before {event:?}: {:#?}", self.seen),
                Err(_) => panic!("no {event:?} within {limit:?}: {:#?}", self.seen),
            };
            self.seen.push(line.clone());
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            match v.get("event").and_then(Value::as_str) {
                Some(e) if e == event => return v,
                Some("error") => panic!("anchor failed before {event:?}: {:#?}", self.seen),
                _ => {}
            }
        }
    }

    /// Lets the anchor go past the step it waits at.
    pub async fn next(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(b"next\n")
            .await
            .expect("write to the anchor");
        stdin.flush().await.expect("flush to the anchor");
    }

    /// Closes stdin (the anchors take it as "stop") and waits, at most
    /// `limit`, for the process to end; kills it otherwise.
    pub async fn finish(mut self, limit: Duration) {
        self.stdin.take();
        if tokio::time::timeout(limit, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// A string field of an anchor event ("" when absent).
pub fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

/// An integer field of an anchor event (0 when absent).
pub fn int(v: &Value, field: &str) -> i64 {
    v.get(field).and_then(Value::as_i64).unwrap_or(0)
}

/// A boolean field of an anchor event (false when absent); the Java
/// anchor writes booleans as strings.
pub fn flag(v: &Value, field: &str) -> bool {
    match v.get(field) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true",
        _ => false,
    }
}

/// Prints the verdict line the script's table is made of, then asserts
/// both halves: the anchor showed the bug, ours did not.
pub fn verdict(bug: &str, anchor_reproduced: bool, ours_correct: bool, detail: &str) {
    let yes = |b: bool| if b { "yes" } else { "no" };
    println!(
        "ANCHOR-BUG|{bug}|reproduced={}|ours-correct={}",
        yes(anchor_reproduced),
        yes(ours_correct)
    );
    println!("  {detail}");
    assert!(
        anchor_reproduced,
        "{bug}: the anchor did not show the bug: {detail}"
    );
    assert!(ours_correct, "{bug}: our crate got it wrong: {detail}");
}

/// The verdict of a bug the anchor's pinned version no longer has: the
/// test asserts the anchor's correct behaviour under the fault (so a
/// regression, or a wrong claim in the docs, fails it) and ours.
pub fn verdict_not_reproduced(bug: &str, anchor_fixed: bool, ours_correct: bool, detail: &str) {
    let yes = |b: bool| if b { "yes" } else { "no" };
    println!(
        "ANCHOR-BUG|{bug}|reproduced=no (fixed in the pinned version: {})|ours-correct={}",
        yes(anchor_fixed),
        yes(ours_correct)
    );
    println!("  {detail}");
    assert!(
        anchor_fixed,
        "{bug}: the anchor did not behave as the fixed version should: {detail}"
    );
    assert!(ours_correct, "{bug}: our crate got it wrong: {detail}");
}
