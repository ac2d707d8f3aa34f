//! One replay of the timeline: C1 takes the lease and is frozen mid-write,
//! C2 takes over, C1 wakes up and writes with its old token.

use std::ffi::OsString;
use std::time::Duration;

use fencing::{FencingToken, FileGate};
use rustix::process::Signal;
use tokio::time::Instant;

use super::process::ChildProc;
use super::protocol::{Reply, Report};
use super::storage::{Storage, WriteRecord};
use super::Setup;
use crate::failure::{Failure, Result};

/// What a run showed.
pub struct Outcome {
    pub late_write: Reply,
    pub final_value: Option<String>,
}

/// Prints timeline lines with the time since the run started.
struct Clock(Instant);

impl Clock {
    fn say(&self, what: impl AsRef<str>) {
        println!(
            "t={:.2}s  {}",
            self.0.elapsed().as_secs_f64(),
            what.as_ref()
        );
    }
}

pub async fn run(setup: &Setup, gated: bool) -> Result<Outcome> {
    let tag = if gated { "on" } else { "off" };
    let socket = setup.tmp.path().join(format!("storage-gate-{tag}.sock"));
    let gate = if gated {
        Some(open_gate(setup.tmp.path().join("storage.gate")).await?)
    } else {
        None
    };
    let storage = Storage::start(&socket, gate)
        .map_err(|e| Failure::runtime(format!("cannot listen on {}: {e}", socket.display())))?;
    let client_args = |name: &str, values: &str, pause: bool| {
        let mut args: Vec<OsString> = [
            "demo-client",
            "--source",
            &setup.source,
            "--lock",
            setup.lock.as_str(),
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        args.extend([
            "--ttl-ms".into(),
            setup.ttl.as_millis().to_string().into(),
            "--socket".into(),
        ]);
        args.push(socket.clone().into_os_string());
        args.extend([
            "--name".into(),
            name.into(),
            "--values".into(),
            values.into(),
        ]);
        if pause {
            args.push("--pause-before-last".into());
        }
        args
    };

    let clock = Clock(Instant::now());
    let ttl_ms = setup.ttl.as_millis();
    let mut c1 = ChildProc::spawn("C1", client_args("C1", "0,1", true), true)?;
    let t1 = expect_granted(&mut c1).await?;
    clock.say(format!(
        "C1 (pid {}) acquires the lease on {:?} for {ttl_ms} ms: token {t1}",
        pid(&c1),
        setup.lock.as_str()
    ));
    expect_accepted(&mut c1, &clock, "0", t1).await?;
    match c1.next_report().await? {
        Report::Pausing { value, live } => clock.say(format!(
            "C1 checks its lease ({}) and is about to write value={value}",
            if live { "live" } else { "NOT live" }
        )),
        other => return Err(unexpected(&c1, &other)),
    }

    c1.signal(Signal::STOP)?;
    let confirmed = c1.confirm_stopped().await?;
    clock.say(format!(
        "SIGSTOP -> C1 is frozen{}, as if stalled by garbage collection; nothing renews its lease now",
        if confirmed { "" } else { " (unconfirmed: no /proc)" }
    ));
    // The lease was renewed at most once more before the freeze, so it is
    // gone one TTL after it; the margin absorbs scheduling delay.
    tokio::time::sleep(setup.ttl + (setup.ttl / 5).max(Duration::from_millis(200))).await;
    match setup.coordinator.holder(&setup.lock).await {
        Ok(None) => clock.say(format!(
            "C1's lease has run out: {ttl_ms} ms without a renewal, the source shows no holder"
        )),
        Ok(Some(h)) => clock.say(format!(
            "the source still shows {} holding token {}; C2 will wait for it",
            h.holder, h.token
        )),
        Err(e) => {
            return Err(Failure::runtime(format!(
                "asking the source for the holder: {e}"
            )))
        }
    }

    let mut c2 = ChildProc::spawn("C2", client_args("C2", "100", false), false)?;
    let t2 = expect_granted(&mut c2).await?;
    clock.say(format!(
        "C2 (pid {}) acquires the lease: token {t2}",
        pid(&c2)
    ));
    if t2 <= t1 {
        return Err(Failure::runtime(format!(
            "the source minted token {t2} after {t1}: not monotonic"
        )));
    }
    expect_accepted(&mut c2, &clock, "100", t2).await?;
    match c2.next_report().await? {
        Report::Released => {}
        other => return Err(unexpected(&c2, &other)),
    }
    let status = c2.wait_exit().await?;
    if !status.success() {
        return Err(Failure::runtime(format!("C2 exited with {status}")));
    }
    clock.say("C2 releases the lease and exits");

    c1.signal(Signal::CONT)?;
    c1.send_line("go").await?;
    clock.say(format!(
        "SIGCONT -> C1 resumes and, without re-checking its lease, writes value=1 with its old token {t1}"
    ));
    let late_write = loop {
        match c1.next_report().await? {
            Report::Resumed => continue,
            Report::Wrote { value, reply } if value == "1" => break reply,
            other => return Err(unexpected(&c1, &other)),
        }
    };
    match &late_write {
        Reply::Ok => clock.say(format!("C1 writes value=1 with token {t1} -> accepted: C2's value=100 is destroyed")),
        Reply::Rejected { presented, highest } => clock.say(format!(
            "C1 writes value=1 with token {t1} -> REJECTED (presented {presented} < highest {highest})"
        )),
        Reply::Err(msg) => return Err(Failure::runtime(format!("storage error on C1's late write: {msg}"))),
    }
    // Drain C1 to its exit so a failure in its last steps is not missed.
    while let Some(report) = c1.next_report_or_exit().await? {
        match report {
            Report::GivingUp => {
                clock.say("C1 sees the rejection: its token is stale, so it must take a new lease and start over from a fresh read; it exits")
            }
            Report::Released => {}
            other => return Err(unexpected(&c1, &other)),
        }
    }
    let status = c1.wait_exit().await?;
    if !status.success() {
        return Err(Failure::runtime(format!("C1 exited with {status}")));
    }

    let final_value = storage.value(&setup.lock).await;
    println!(
        "final value: {}",
        final_value.as_deref().unwrap_or("(none)")
    );
    print_log(&storage.log().await);
    Ok(Outcome {
        late_write,
        final_value,
    })
}

async fn open_gate(path: std::path::PathBuf) -> Result<FileGate> {
    let shown = path.display().to_string();
    tokio::task::spawn_blocking(move || FileGate::open(path))
        .await
        .map_err(|e| Failure::runtime(format!("gate opener task: {e}")))?
        .map_err(|e| Failure::runtime(format!("cannot open gate {shown}: {e}")))
}

fn pid(c: &ChildProc) -> String {
    c.pid().map_or_else(|| "?".into(), |p| p.to_string())
}

fn unexpected(c: &ChildProc, r: &Report) -> Failure {
    Failure::runtime(format!("{} reported {r:?} out of turn", c.name()))
}

async fn expect_granted(c: &mut ChildProc) -> Result<FencingToken> {
    match c.next_report().await? {
        Report::Granted(token) => Ok(token),
        other => Err(unexpected(c, &other)),
    }
}

/// An on-time write must be accepted; anything else means the demo itself
/// is broken, not that fencing worked.
async fn expect_accepted(
    c: &mut ChildProc,
    clock: &Clock,
    want: &str,
    token: FencingToken,
) -> Result<()> {
    match c.next_report().await? {
        Report::Wrote {
            value,
            reply: Reply::Ok,
        } if value == want => {
            clock.say(format!(
                "{} writes value={value} with token {token} -> accepted",
                c.name()
            ));
            Ok(())
        }
        other => Err(unexpected(c, &other)),
    }
}

fn print_log(log: &[WriteRecord]) {
    println!("storage log:");
    for w in log {
        let outcome = match &w.reply {
            Reply::Ok => "accepted".to_owned(),
            Reply::Rejected { highest, .. } => format!("REJECTED (highest {highest})"),
            Reply::Err(msg) => format!("error: {msg}"),
        };
        println!(
            "  {:<3} token {:<3} value={:<4} {outcome}",
            w.client,
            w.token.to_string(),
            w.value
        );
    }
}
