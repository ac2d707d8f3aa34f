//! The child side of the demo: one lock holder in its own OS process.
//!
//! It acquires the lock, then writes its values to the storage carrying the
//! grant's token. With `--pause-before-last` it checks its lease, announces
//! the last write and waits for a line on stdin before doing it, which is
//! where the parent freezes it. After the pause it deliberately does NOT
//! check its lease again: that is the bug fencing exists to catch.

use std::path::PathBuf;
use std::time::Duration;

use fencing::{AcquireOptions, FencingToken, Grant, ResourceName};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::time::timeout;

use super::protocol::{is_word, read_line, Reply, Report, Request};

const IO_WAIT: Duration = Duration::from_secs(10);
/// Longer than any pause the parent imposes; EOF (parent gone) ends it sooner.
const RESUME_WAIT: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug)]
pub struct ClientArgs {
    #[arg(long)]
    source: String,
    #[arg(long)]
    lock: String,
    #[arg(long)]
    ttl_ms: u64,
    #[arg(long)]
    socket: PathBuf,
    #[arg(long)]
    name: String,
    /// Values to write, in order.
    #[arg(long, value_delimiter = ',', required = true)]
    values: Vec<String>,
    #[arg(long)]
    pause_before_last: bool,
}

/// Runs the client; every outcome, failures included, is reported on stdout.
pub async fn run(args: ClientArgs) -> u8 {
    die_with_parent();
    match client(&args).await {
        Ok(()) => 0,
        Err(msg) => {
            report(&Report::Error(msg)).await;
            1
        }
    }
}

/// The parent may be SIGKILLed before its guards run; without this, a
/// frozen child would stay stopped forever.
fn die_with_parent() {
    #[cfg(target_os = "linux")]
    {
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    }
}

async fn report(r: &Report) {
    let mut out = tokio::io::stdout();
    let _ = out.write_all(format!("{r}\n").as_bytes()).await;
    let _ = out.flush().await;
}

async fn client(args: &ClientArgs) -> Result<(), String> {
    if !is_word(&args.name) {
        return Err(format!("client name {:?} must be one word", args.name));
    }
    if let Some(bad) = args.values.iter().find(|v| !is_word(v)) {
        return Err(format!("value {bad:?} must be one word"));
    }
    let resource = ResourceName::new(args.lock.as_str()).map_err(|e| e.to_string())?;
    let source = fencing::connect(&args.source)
        .await
        .map_err(|e| e.to_string())?;
    let ttl = Duration::from_millis(args.ttl_ms);
    let options = AcquireOptions::new()
        .ttl(ttl)
        .holder(args.name.as_str())
        .wait(ttl + IO_WAIT);
    let grant = source
        .acquire(&resource, &options)
        .await
        .map_err(|e| format!("acquire: {e}"))?;
    report(&Report::Granted(grant.token())).await;

    let mut storage = Storage::connect(args).await?;
    let last = args.values.len() - 1;
    for (i, value) in args.values.iter().enumerate() {
        if i == last && args.pause_before_last {
            pause(&grant, value).await?;
        }
        let reply = storage.write(&resource, grant.token(), value).await?;
        report(&Report::Wrote {
            value: value.clone(),
            reply: reply.clone(),
        })
        .await;
        match reply {
            Reply::Ok => {}
            Reply::Rejected { .. } => {
                // The right answer to a fenced write: stop, and leave the
                // redo to a fresh grant. Releasing is harmless either way.
                report(&Report::GivingUp).await;
                let _ = timeout(IO_WAIT, grant.release()).await;
                return Ok(());
            }
            Reply::Err(msg) => return Err(format!("storage error: {msg}")),
        }
    }
    match timeout(IO_WAIT, grant.release()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("release: {e}")),
        Err(_) => return Err("release timed out".into()),
    }
    report(&Report::Released).await;
    Ok(())
}

/// The gap between deciding to write and writing, where a real process may
/// be descheduled for any length of time.
async fn pause(grant: &Grant, value: &str) -> Result<(), String> {
    report(&Report::Pausing {
        value: value.to_owned(),
        live: grant.is_live(),
    })
    .await;
    let mut stdin = BufReader::new(tokio::io::stdin());
    match timeout(RESUME_WAIT, read_line(&mut stdin)).await {
        Ok(Ok(Some(_))) => {
            report(&Report::Resumed).await;
            Ok(())
        }
        Ok(Ok(None)) => Err("stdin closed while paused".into()),
        Ok(Err(e)) => Err(format!("reading stdin: {e}")),
        Err(_) => Err("nobody resumed me".into()),
    }
}

struct Storage {
    conn: BufReader<UnixStream>,
}

impl Storage {
    async fn connect(args: &ClientArgs) -> Result<Storage, String> {
        let stream = match timeout(IO_WAIT, UnixStream::connect(&args.socket)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return Err(format!(
                    "connecting to storage {}: {e}",
                    args.socket.display()
                ))
            }
            Err(_) => return Err("connecting to storage timed out".into()),
        };
        let mut storage = Storage {
            conn: BufReader::new(stream),
        };
        match storage
            .call(&Request::Hello {
                client: args.name.clone(),
            })
            .await?
        {
            Reply::Ok => Ok(storage),
            other => Err(format!("storage refused HELLO: {other}")),
        }
    }

    async fn write(
        &mut self,
        resource: &ResourceName,
        token: FencingToken,
        value: &str,
    ) -> Result<Reply, String> {
        self.call(&Request::Write {
            resource: resource.clone(),
            token,
            value: value.to_owned(),
        })
        .await
    }

    async fn call(&mut self, request: &Request) -> Result<Reply, String> {
        let exchange = async {
            self.conn
                .get_mut()
                .write_all(format!("{request}\n").as_bytes())
                .await?;
            read_line(&mut self.conn).await
        };
        match timeout(IO_WAIT, exchange).await {
            Ok(Ok(Some(line))) => Reply::parse(&line).map_err(|e| format!("storage: {e}")),
            Ok(Ok(None)) => Err("storage closed the connection".into()),
            Ok(Err(e)) => Err(format!("storage: {e}")),
            Err(_) => Err("storage did not answer in time".into()),
        }
    }
}
