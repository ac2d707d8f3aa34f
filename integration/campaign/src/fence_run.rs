//! The `fence run` workload: each campaign client runs `fence run` over and
//! over, and the command `fence run` supervises is a campaign child that
//! holds the lock as `FENCING_TOKEN` says and writes with it until its hold
//! ends, or until `fence run` stops it (SIGTERM, then SIGKILL) because the
//! lease is about to run out.
//!
//! The child reports on a Unix socket of its client (not on stdout, which
//! `fence run` shares): the client relays its lines to the controller and
//! the controller's replies back. When the socket closes without a release
//! or a loss, the child died holding (SIGKILLed by `fence run` or its
//! watchdog), and the client reports the loss then: a dead child writes no
//! more, which is all the checker asks of a holder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::client::{monotonic_ns, next_hold, ClientLine, ClientPlan, Reply};
use super::rng::Rng;

/// What one client does, and where.
pub struct Wrapper {
    /// The `fence` CLI.
    pub fence: PathBuf,
    /// The campaign binary (its `child` command is what `fence run` runs).
    pub exe: PathBuf,
    pub source: String,
    pub socket: PathBuf,
    /// The lock, TTL, seed and holds, as a library client draws them.
    pub plan: ClientPlan,
}

/// The socket of client `name`: named after the controller (the client's
/// parent), so a restarted client takes over its predecessor's path and
/// the controller removes them all at the end ([`remove_sockets`]).
pub fn socket_path(name: &str) -> PathBuf {
    let controller = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    std::env::temp_dir().join(format!("campaign-{controller}-{name}.sock"))
}

/// Removes the sockets the clients of this controller left.
pub fn remove_sockets(clients: &[String]) {
    for name in clients {
        let path = format!("campaign-{}-{name}.sock", std::process::id());
        let _ = std::fs::remove_file(std::env::temp_dir().join(path));
    }
}

/// How long `fence run` may wait for the lock before it gives up.
const WAIT_SECS: &str = "5";
/// Longest a child waits for the controller's answer to a write.
const REPLY_LIMIT: Duration = Duration::from_secs(2);

/// Runs `fence run` until stdin closes, relaying the children's lines.
pub async fn run_wrapper(w: Wrapper) -> std::io::Result<()> {
    let _ = std::fs::remove_file(&w.socket);
    let listener = UnixListener::bind(&w.socket)?;
    let (reply_tx, mut replies) = mpsc::channel::<String>(64);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = reply_tx.send(line).await;
        }
        let _ = stop_tx.send(true);
    });
    let mut rng = Rng::new(w.plan.seed);
    let lock = w.plan.resource.as_str();
    let ttl = w.plan.ttl.as_secs_f64().to_string();
    while !*stop.borrow() {
        send(&ClientLine::AcquireStart {
            resource: lock.to_owned(),
        })
        .await;
        let hold = next_hold(&mut rng, &w.plan);
        // Half the commands ignore SIGTERM: only `fence run`'s
        // SIGKILL (or its watchdog's) stops them before the lease ends.
        let stubborn = rng.below(2) == 0;
        let mut fence = tokio::process::Command::new(&w.fence);
        fence
            .args(["run", "--source", &w.source, "--lock", lock])
            .args(["--ttl", &ttl, "--wait", WAIT_SECS])
            .arg("--")
            .arg(&w.exe)
            .args(["child", "--socket"])
            .arg(&w.socket)
            .args(["--lock", lock, "--hold-ms", &hold.as_millis().to_string()])
            .args(stubborn.then_some("--stubborn"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        // A killed client takes its `fence run` with it (whose watchdog
        // then stops the command), as a crashed host would.
        fencing_harness::process::die_with_parent(
            fence.as_std_mut(),
            rustix::process::Signal::KILL,
        );
        let mut fence = fence.spawn()?;
        let mut stopping = stop.clone();
        let pid = fence
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32));
        // SIGTERM to `fence run` stops its command and releases the lock.
        let term = || {
            if let Some(pid) = pid {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        };
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((child, _)) = accepted {
                    relay(child, &mut replies, &mut stopping, term).await;
                }
            }
            status = fence.wait() => {
                eprintln!("fence run ended before its command reported: {status:?}");
                continue;
            }
            _ = stopping.changed() => term(),
        }
        match tokio::time::timeout(Duration::from_secs(10), fence.wait()).await {
            Ok(status) => eprintln!("fence run: {status:?}"),
            Err(_) => eprintln!("fence run did not exit within 10 s; killed"),
        }
    }
    Ok(())
}

/// Relays one child's lines to stdout and the controller's replies to the
/// child, until the child closes its socket; reports the loss of a child
/// that died holding. On a stop, `stop_child` asks `fence run` to end it.
async fn relay(
    child: UnixStream,
    replies: &mut mpsc::Receiver<String>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    stop_child: impl Fn(),
) {
    let (read, mut write) = child.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut held: Option<(String, u64)> = None;
    let mut stopped = *stop.borrow();
    if stopped {
        stop_child();
    }
    loop {
        tokio::select! {
            line = lines.next_line() => {
                let Ok(Some(line)) = line else { break };
                match serde_json::from_str::<ClientLine>(&line) {
                    Ok(ClientLine::Grant {
                        resource, token, ..
                    }) => held = Some((resource, token)),
                    Ok(ClientLine::Release { .. } | ClientLine::Lost { .. }) => held = None,
                    _ => {}
                }
                println!("{line}");
            }
            Some(reply) = replies.recv() => {
                let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
            }
            _ = stop.changed(), if !stopped => {
                stopped = true;
                stop_child();
            }
        }
    }
    if let Some((resource, token)) = held {
        let reason = "the command died holding (killed by fence run or its watchdog)".into();
        send(&ClientLine::Lost {
            resource,
            token,
            reason,
            at_ns: Some(monotonic_ns()),
        })
        .await;
    }
}

async fn send(line: &ClientLine) {
    let mut out = tokio::io::stdout();
    let text = format!(
        "{}\n",
        serde_json::to_string(line).expect("lines serialise")
    );
    if out.write_all(text.as_bytes()).await.is_err() || out.flush().await.is_err() {
        std::process::exit(0);
    }
}

/// The command `fence run` runs: holds with the token it was given, writes
/// every `every` until `hold` is over, releases; on SIGTERM (the lease is
/// ending, or the campaign stops) reports the loss and exits, unless it is
/// `stubborn`: then it goes on until SIGKILL or the end of its hold.
pub async fn run_child(
    socket: &Path,
    lock: String,
    hold: Duration,
    every: Duration,
    stubborn: bool,
) -> Result<(), String> {
    let token: u64 = std::env::var("FENCING_TOKEN")
        .map_err(|e| format!("FENCING_TOKEN: {e}"))?
        .parse()
        .map_err(|e| format!("FENCING_TOKEN: {e}"))?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|e| format!("{}: {e}", socket.display()))?;
    let (read, mut write) = stream.into_split();
    let mut replies = BufReader::new(read).lines();
    let line = |l: ClientLine| format!("{}\n", serde_json::to_string(&l).expect("serialises"));
    let io = |e: std::io::Error| e.to_string();
    let resource = lock;
    let grant = line(ClientLine::Grant {
        resource: resource.clone(),
        token,
        at_ns: Some(monotonic_ns()),
    });
    write.write_all(grant.as_bytes()).await.map_err(io)?;
    let until = tokio::time::Instant::now() + hold;
    let mut id = 0;
    let terminated = loop {
        if tokio::time::Instant::now() >= until {
            break false;
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = term.recv(), if !stubborn => break true,
        }
        id += 1;
        let w = line(ClientLine::MemWrite {
            id,
            resource: resource.clone(),
            token,
            value: id,
        });
        write.write_all(w.as_bytes()).await.map_err(io)?;
        tokio::select! {
            () = await_reply(&mut replies, id) => {}
            _ = term.recv(), if !stubborn => break true,
        }
    };
    if terminated {
        let reason = "SIGTERM from fence run".into();
        let lost = line(ClientLine::Lost {
            resource,
            token,
            reason,
            at_ns: Some(monotonic_ns()),
        });
        // Best effort: the socket may be gone with the client.
        let _ = write.write_all(lost.as_bytes()).await;
        return Ok(());
    }
    id += 1;
    let release = line(ClientLine::Release {
        resource,
        token,
        id,
    });
    write.write_all(release.as_bytes()).await.map_err(io)?;
    await_reply(&mut replies, id).await;
    Ok(())
}

async fn await_reply(
    replies: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    id: u64,
) {
    let wait = async {
        while let Ok(Some(text)) = replies.next_line().await {
            if serde_json::from_str::<Reply>(&text).is_ok_and(|r| r.id == id) {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(REPLY_LIMIT, wait).await;
}
