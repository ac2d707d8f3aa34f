//! The campaign's storage: a process of its own that keeps one register per
//! lock behind a `FileGate`, so that the nemesis can kill and pause the
//! storage as it does the clients. A write is acknowledged only once its
//! value is on disk. The gate's marks must survive every restart (the
//! checker's gate-monotonic), and the registers' final values, read back
//! after the run, must hold the last acknowledged write (its durability).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::convert::Infallible;

use fencing::http::{
    refusal_from_response, token_from_headers, FencedRequest, FencingBody, FencingLayer,
};
use fencing::{Error, FencingToken, FileGate};
use http_body_util::BodyExt;
use rustix::process::{kill_process, Pid, Signal};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{oneshot, Mutex};
use tokio::task::JoinHandle;
use tower::{Layer, ServiceExt};

use super::checker::Stored;
use super::client::Reply;

/// The gate name of the storage's writes in the history.
pub const GATE: &str = "file";
/// The registers: one JSON record per acknowledged write, appended.
const DATA: &str = "data.jsonl";
const MARKS: &str = "marks.gate";
/// How long the controller waits for an answer; shorter than a client's
/// own limit, so the client hears "refused or unknown" before it gives up.
const ANSWER_LIMIT: Duration = Duration::from_millis(1500);

#[derive(Serialize, Deserialize)]
struct Request {
    id: u64,
    resource: String,
    token: u64,
    value: u64,
}

#[derive(Serialize, Deserialize)]
struct Record {
    resource: String,
    token: u64,
    value: u64,
}

/// The storage process (`campaign storage --dir D`): answers each request
/// line on stdin with a [`Reply`] line on stdout, one at a time, until
/// stdin closes. A request whose outcome it cannot tell (an I/O error) is
/// not answered.
///
/// Each write is an HTTP `PUT /<lock>` carrying its token in the
/// `Fencing-Token` header, served by a [`FencingLayer`] over a `FileGate`
/// (a tower service fed from stdin rather than a socket: the layer, its
/// 409 and the client's reading of it are what is under test), whose
/// handler appends the value.
pub async fn serve(dir: &Path) -> Result<(), String> {
    let store = open_store(dir).await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        let Ok(req) = serde_json::from_str::<Request>(&line) else {
            continue;
        };
        let accepted = match put(store.clone(), &req).await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("storage: write of token {}: {e}", req.token);
                continue;
            }
        };
        let mut reply = serde_json::to_string(&Reply {
            id: req.id,
            accepted,
        })
        .expect("replies serialise");
        reply.push('\n');
        out.write_all(reply.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        out.flush().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The store of `dir`: the layer over the `FileGate`, its handler
/// appending to the registers.
async fn open_store(dir: &Path) -> Result<impl Store, String> {
    let marks = dir.join(MARKS);
    let gate = tokio::task::spawn_blocking(move || FileGate::open(marks))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let data = Arc::new(Mutex::new(open_data(&dir.join(DATA)).await?));
    let handler = tower::service_fn(move |req: http::Request<String>| {
        let data = data.clone();
        async move { Ok::<_, Infallible>(append(&data, req).await) }
    });
    Ok(FencingLayer::by_path(Arc::new(gate)).layer(handler))
}

/// What [`open_store`] makes.
trait Store:
    tower::Service<
        http::Request<String>,
        Response = http::Response<FencingBody<String>>,
        Error = Infallible,
    > + Clone
{
}

impl<S> Store for S where
    S: tower::Service<
            http::Request<String>,
            Response = http::Response<FencingBody<String>>,
            Error = Infallible,
        > + Clone
{
}

/// One `PUT /<lock>` with the token in its header: `Ok(true)` when stored,
/// `Ok(false)` when the layer refused a stale token.
async fn put(store: impl Store, req: &Request) -> Result<bool, String> {
    let request = http::Request::put(format!("/{}", req.resource))
        .fencing_token(FencingToken::new(req.token))
        .body(req.value.to_string())
        .map_err(|e| e.to_string())?;
    let Ok(response) = store.oneshot(request).await;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    match refusal_from_response(status, &body) {
        _ if status == http::StatusCode::OK => Ok(true),
        Some(Error::Stale { .. }) => Ok(false),
        _ => Err(format!("{status}: {}", String::from_utf8_lossy(&body))),
    }
}

/// The store's handler: the value on disk before the answer.
async fn append(
    data: &Mutex<tokio::fs::File>,
    req: http::Request<String>,
) -> http::Response<String> {
    // The layer admitted the token: it is there and well formed.
    let token = token_from_headers(req.headers()).ok().flatten();
    let (Some(token), Ok(value)) = (token, req.body().parse()) else {
        return answer(http::StatusCode::BAD_REQUEST, "no token or no number");
    };
    let record = Record {
        resource: req.uri().path().trim_start_matches('/').to_owned(),
        token: token.get(),
        value,
    };
    let mut line = serde_json::to_string(&record).expect("records serialise");
    line.push('\n');
    let mut data = data.lock().await;
    match async {
        data.write_all(line.as_bytes()).await?;
        data.sync_data().await
    }
    .await
    {
        Ok(()) => answer(http::StatusCode::OK, String::new()),
        Err(e) => answer(http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn answer(status: http::StatusCode, body: impl Into<String>) -> http::Response<String> {
    let mut response = http::Response::new(body.into());
    *response.status_mut() = status;
    response
}

/// Opens the register file for appending. A kill in the middle of an
/// append leaves a partial last record, never acknowledged: it is cut off,
/// or the next record would be glued to it.
async fn open_data(path: &Path) -> Result<tokio::fs::File, String> {
    let text = tokio::fs::read(path).await.unwrap_or_default();
    let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
        .map_err(|e| e.to_string())?;
    if whole < text.len() {
        file.set_len(whole as u64)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(file)
}

/// The controller's handle on the storage process.
pub struct Storage {
    exe: PathBuf,
    dir: PathBuf,
    proc: Mutex<Option<Proc>>,
    pending: Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<bool>>>>,
    next_id: AtomicU64,
}

struct Proc {
    child: Child,
    stdin: ChildStdin,
    /// Reads the answers; ends when the process's stdout closes.
    reader: JoinHandle<()>,
}

impl Storage {
    /// Starts `exe storage` on `dir` (created), its log in `dir/storage.log`.
    pub async fn start(exe: &Path, dir: &Path) -> Result<Storage, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let storage = Storage {
            exe: exe.to_owned(),
            dir: dir.to_owned(),
            proc: Mutex::new(None),
            pending: Arc::default(),
            next_id: AtomicU64::new(0),
        };
        storage.restart().await?;
        Ok(storage)
    }

    /// Starts the process again (after a kill); a no-op while it runs.
    pub async fn restart(&self) -> Result<(), String> {
        let mut proc = self.proc.lock().await;
        if proc.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("storage.log"))
            .map_err(|e| e.to_string())?;
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.arg("storage")
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        fencing_harness::process::die_with_parent(&mut cmd, Signal::KILL);
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting the storage: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let reader = tokio::spawn(read_answers(stdout, self.pending.clone()));
        *proc = Some(Proc {
            child,
            stdin,
            reader,
        });
        Ok(())
    }

    /// SIGKILL and reap; writes in flight get no answer.
    pub async fn kill(&self) {
        if let Some(mut proc) = self.proc.lock().await.take() {
            let _ = proc.child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), proc.child.wait()).await;
            let _ = proc.reader.await;
        }
    }

    /// SIGSTOP or SIGCONT.
    pub async fn signal(&self, signal: Signal) {
        let proc = self.proc.lock().await;
        let pid = proc.as_ref().and_then(|p| p.child.id());
        if let Some(pid) = pid.and_then(|p| Pid::from_raw(p as i32)) {
            let _ = kill_process(pid, signal);
        }
    }

    /// Writes `value` with `token`: `Some(accepted)`, or `None` when no
    /// answer came in time (the write may still be applied).
    pub async fn write(&self, resource: &str, token: u64, value: u64) -> Option<bool> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let request = Request {
            id,
            resource: resource.to_owned(),
            token,
            value,
        };
        let answer = tokio::time::timeout(ANSWER_LIMIT, async {
            let mut line = serde_json::to_string(&request).expect("requests serialise");
            line.push('\n');
            let mut proc = self.proc.lock().await;
            proc.as_mut()?.stdin.write_all(line.as_bytes()).await.ok()?;
            drop(proc);
            rx.await.ok()
        })
        .await;
        self.pending.lock().unwrap().remove(&id);
        answer.ok().flatten()
    }

    /// Stops the process (closing its stdin) and reads back every write
    /// it stored, for the checker's durability property.
    pub async fn finish(&self) -> Result<Stored, String> {
        self.signal(Signal::CONT).await;
        if let Some(mut proc) = self.proc.lock().await.take() {
            drop(proc.stdin);
            if tokio::time::timeout(Duration::from_secs(5), proc.child.wait())
                .await
                .is_err()
            {
                let _ = proc.child.start_kill();
                let _ = proc.child.wait().await;
            }
            let _ = proc.reader.await;
        }
        let text =
            std::fs::read_to_string(self.dir.join(DATA)).map_err(|e| format!("registers: {e}"))?;
        Ok(stored(&text))
    }
}

/// Every whole record; a partial last line (a kill during its append)
/// is skipped.
fn stored(text: &str) -> Stored {
    let writes = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .map(|r| (r.resource, r.token, r.value))
        .collect();
    Stored {
        gate: GATE.to_owned(),
        writes,
        ..Stored::default()
    }
}

async fn read_answers(
    stdout: tokio::process::ChildStdout,
    pending: Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<bool>>>>,
) {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(reply) = serde_json::from_str::<Reply>(&line) {
            if let Some(tx) = pending.lock().unwrap().remove(&reply.id) {
                let _ = tx.send(reply.accepted);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(dir: &Path, write: (&str, u64, u64)) -> bool {
        let text = std::fs::read_to_string(dir.join(DATA)).unwrap();
        stored(&text)
            .writes
            .contains(&(write.0.to_owned(), write.1, write.2))
    }

    #[tokio::test]
    async fn the_store_refuses_stale_tokens_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let req = |token, value| Request {
            id: 0,
            resource: "campaign-a".into(),
            token,
            value,
        };
        {
            let store = open_store(dir.path()).await.unwrap();
            assert_eq!(put(store.clone(), &req(5, 1)).await, Ok(true));
            assert_eq!(put(store.clone(), &req(5, 2)).await, Ok(true));
            assert_eq!(put(store, &req(4, 3)).await, Ok(false));
        }
        // Opened again, as after a kill: the mark and the values are back.
        let store = open_store(dir.path()).await.unwrap();
        assert_eq!(put(store.clone(), &req(4, 4)).await, Ok(false));
        assert!(has(dir.path(), ("campaign-a", 5, 2)));
        assert!(!has(dir.path(), ("campaign-a", 4, 3)));
        assert_eq!(put(store, &req(6, 5)).await, Ok(true));
        assert!(has(dir.path(), ("campaign-a", 6, 5)));
    }

    #[tokio::test]
    async fn a_partial_record_is_cut_off_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DATA);
        std::fs::write(
            &path,
            "{\"resource\":\"a\",\"token\":1,\"value\":1}\n{\"reso",
        )
        .unwrap();
        let mut file = open_data(&path).await.unwrap();
        file.write_all(b"{\"resource\":\"a\",\"token\":2,\"value\":9}\n")
            .await
            .unwrap();
        file.flush().await.unwrap();
        assert!(has(dir.path(), ("a", 1, 1)) && has(dir.path(), ("a", 2, 9)));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(stored(&text).writes.len(), 2);
    }
}
