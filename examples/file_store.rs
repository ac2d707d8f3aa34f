//! A tiny file-backed store with a fence, used by the examples as "the
//! storage": the check lives where the data lives, not in the client.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use fencing::{Error, FencingToken, FileGate, Gate, ResourceName, Result};

/// Values in `DIR/<resource>.value`, high-water marks in `DIR/marks.gate`,
/// and one line `<token> <writer> <value>` per accepted write in
/// `DIR/audit.log`. Several processes may share a directory: each write
/// holds `DIR/store.lock` from the token check to the end of the write, so
/// no lower token can slip in between.
#[derive(Clone, Debug)]
pub struct FileStore {
    dir: PathBuf,
}

/// One accepted write, as the audit log recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The token the write carried.
    pub token: FencingToken,
    /// Who wrote.
    pub writer: String,
    /// What was written.
    pub value: String,
}

impl FileStore {
    /// A store in `dir` (created when missing).
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        Ok(FileStore { dir })
    }

    /// Writes `value` if `token` is not lower than any token this store
    /// accepted for `resource`; otherwise [`Error::Stale`] and nothing changes.
    pub async fn write(
        &self,
        resource: &ResourceName,
        token: FencingToken,
        writer: &str,
        value: &str,
    ) -> Result<()> {
        let dir = self.dir.clone();
        let (lock, gate) = blocking(move || {
            let lock = File::create(dir.join("store.lock")).map_err(|e| io_error(&dir, e))?;
            lock.lock().map_err(|e| io_error(&dir, e))?;
            Ok((lock, FileGate::open(dir.join("marks.gate"))?))
        })
        .await?;
        gate.admit_any_source(resource, token).await?;
        let (dir, resource) = (self.dir.clone(), resource.clone());
        let line = format!("{token} {writer} {value}\n");
        let value = value.to_owned();
        blocking(move || {
            let target = dir.join(format!("{resource}.value"));
            let tmp = dir.join(format!("{resource}.value.tmp"));
            std::fs::write(&tmp, &value).map_err(|e| io_error(&tmp, e))?;
            std::fs::rename(&tmp, &target).map_err(|e| io_error(&target, e))?;
            let log = dir.join("audit.log");
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .map_err(|e| io_error(&log, e))?;
            drop((gate, lock));
            Ok(())
        })
        .await
    }

    /// The current value of `resource`, if any write was accepted.
    pub fn read(&self, resource: &ResourceName) -> Result<Option<String>> {
        read_optional(&self.dir.join(format!("{resource}.value")))
    }

    /// Every accepted write, oldest first.
    pub fn audit(&self) -> Result<Vec<Accepted>> {
        let text = read_optional(&self.dir.join("audit.log"))?.unwrap_or_default();
        text.lines()
            .map(|line| {
                let mut parts = line.splitn(3, ' ');
                let token = parts.next().unwrap_or("").parse()?;
                let writer = parts.next().unwrap_or("").to_owned();
                let value = parts.next().unwrap_or("").to_owned();
                Ok(Accepted {
                    token,
                    writer,
                    value,
                })
            })
            .collect()
    }
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path, e)),
    }
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_owned(),
        source,
    }
}

/// File locks and fsyncs block; keep them off the runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend("file store task", e))?
}
