//! A durable gate kept in one file.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{check_token, Gate};
use crate::durable::{self, Reader};
use crate::error::{Error, Result};
use crate::resource::ResourceName;
use crate::token::FencingToken;

const MAGIC: &[u8; 8] = b"FNCGATE1";

/// A gate whose high-water marks survive crashes and restarts.
///
/// Every raise of a mark rewrites the file durably (write a temporary file,
/// fsync, rename over, fsync the directory) before `admit` returns, so no
/// crash at any point can lower a stored mark. Retries at the mark cost no
/// I/O. The file is checksummed: one truncated or modified by hand is
/// reported as [`Error::Corrupt`] by [`FileGate::open`], never read as empty.
///
/// One process owns a gate file at a time: `open` takes an exclusive lock on
/// `<path>.lock` and a second `open` fails until the first gate is dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing_core::Result<()> {
/// use fencing_core::{FencingToken, FileGate, Gate, ResourceName};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("marks.gate");
/// let r = ResourceName::new("orders")?;
/// FileGate::open(&path)?.admit(&r, FencingToken::new(7)).await?;
/// // Reopened (as after a restart) it still refuses older tokens.
/// let gate = FileGate::open(&path)?;
/// assert!(gate.admit(&r, FencingToken::new(6)).await.is_err());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FileGate {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    marks: Mutex<BTreeMap<ResourceName, FencingToken>>,
    _owner: File,
}

impl FileGate {
    /// Opens (or creates on first admit) the gate file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let owner = lock_owner(&path)?;
        let marks = match durable::read_framed(&path, MAGIC)? {
            Some(payload) => decode(&payload).map_err(|reason| Error::corrupt(&path, reason))?,
            None => BTreeMap::new(),
        };
        tracing::debug!(path = %path.display(), resources = marks.len(), "opened file gate");
        Ok(FileGate {
            inner: Arc::new(Inner {
                path,
                marks: Mutex::new(marks),
                _owner: owner,
            }),
        })
    }

    /// The file holding the marks.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

impl Inner {
    fn admit_blocking(&self, resource: &ResourceName, token: FencingToken) -> Result<()> {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        if !check_token(marks.get(resource).copied(), token)? {
            return Ok(());
        }
        // Persist before publishing: a failed write leaves the old mark and
        // refuses this write, it never admits a write the file forgot.
        let mut next = marks.clone();
        next.insert(resource.clone(), token);
        durable::write_framed(&self.path, MAGIC, &encode(&next))?;
        *marks = next;
        Ok(())
    }
}

#[async_trait]
impl Gate for FileGate {
    async fn admit(&self, resource: &ResourceName, token: FencingToken) -> Result<()> {
        let (inner, resource) = (self.inner.clone(), resource.clone());
        tokio::task::spawn_blocking(move || inner.admit_blocking(&resource, token))
            .await
            .map_err(|e| Error::backend("file gate writer task", e))?
    }

    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let marks = self.inner.marks.lock().unwrap_or_else(|p| p.into_inner());
        Ok(marks.get(resource).copied())
    }
}

fn lock_owner(path: &Path) -> Result<File> {
    let lock_path = durable::sibling(path, ".lock");
    let file = durable::open_lock_file(&lock_path)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Config(format!(
            "gate file {} is open in another FileGate (lock {} is held)",
            path.display(),
            lock_path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(&lock_path, e)),
    }
}

fn encode(marks: &BTreeMap<ResourceName, FencingToken>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + marks.len() * 32);
    out.extend_from_slice(&(marks.len() as u32).to_le_bytes());
    for (resource, token) in marks {
        durable::put_string(&mut out, resource.as_str());
        out.extend_from_slice(&token.get().to_le_bytes());
    }
    out
}

/// Parses a payload; any inconsistency is an error, never a default.
fn decode(payload: &[u8]) -> std::result::Result<BTreeMap<ResourceName, FencingToken>, String> {
    let mut r = Reader::new(payload);
    let count = r.u32()?;
    let mut marks = BTreeMap::new();
    for _ in 0..count {
        let name = r.string()?;
        let resource = ResourceName::nonportable(name).map_err(|e| e.to_string())?;
        let token = FencingToken::new(r.u64()?);
        if marks.insert(resource, token).is_some() {
            return Err("a resource is listed twice".into());
        }
    }
    r.finish()?;
    Ok(marks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(name: &str) -> ResourceName {
        ResourceName::new(name).unwrap()
    }

    #[tokio::test]
    async fn marks_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        {
            let g = FileGate::open(&path).unwrap();
            g.admit(&r("a"), FencingToken::new(3)).await.unwrap();
            g.admit(&r("b"), FencingToken::new(10)).await.unwrap();
            g.admit(&r("a"), FencingToken::new(4)).await.unwrap();
        }
        let g = FileGate::open(&path).unwrap();
        assert_eq!(
            g.high_water(&r("a")).await.unwrap(),
            Some(FencingToken::new(4))
        );
        assert!(matches!(
            g.admit(&r("b"), FencingToken::new(9)).await,
            Err(Error::Stale { .. })
        ));
        g.admit(&r("b"), FencingToken::new(10)).await.unwrap();
    }

    #[tokio::test]
    async fn a_second_open_of_the_same_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        let _first = FileGate::open(&path).unwrap();
        assert!(matches!(FileGate::open(&path), Err(Error::Config(_))));
    }

    #[tokio::test]
    async fn truncated_or_modified_files_are_reported_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        {
            let g = FileGate::open(&path).unwrap();
            g.admit(&r("a"), FencingToken::new(3)).await.unwrap();
        }
        let good = std::fs::read(&path).unwrap();
        let damaged: Vec<Vec<u8>> = vec![
            Vec::new(),
            good[..good.len() - 1].to_vec(),
            good[..5].to_vec(),
            {
                let mut b = good.clone();
                b[14] ^= 0x01;
                b
            },
        ];
        for bytes in damaged {
            std::fs::write(&path, &bytes).unwrap();
            match FileGate::open(&path) {
                Err(Error::Corrupt { .. }) => {}
                other => panic!("{} bytes: {other:?}", bytes.len()),
            }
        }
    }

    proptest! {
        #[test]
        fn loader_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = durable::unframe(Path::new("x"), MAGIC, &bytes);
            let _ = decode(&bytes);
        }

        #[test]
        fn loader_reports_any_single_bit_flip(
            entries in proptest::collection::btree_map("[a-z]{1,12}", any::<u64>(), 0..8),
            flip in any::<prop::sample::Index>(),
        ) {
            let marks: BTreeMap<_, _> = entries
                .into_iter()
                .map(|(k, v)| (ResourceName::new(k).unwrap(), FencingToken::new(v)))
                .collect();
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&encode(&marks));
            framed.extend_from_slice(&crc32fast::hash(&framed).to_le_bytes());
            let payload = durable::unframe(Path::new("x"), MAGIC, &framed).unwrap();
            prop_assert_eq!(decode(&payload).unwrap(), marks);
            let bit = flip.index(framed.len() * 8);
            framed[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(durable::unframe(Path::new("x"), MAGIC, &framed).is_err());
        }
    }
}
