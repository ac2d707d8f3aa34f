//! A durable gate kept in one file.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{next_mark, Gate, Mark};
use crate::durable::{self, Reader};
use crate::error::{Error, Result};
use crate::grant::SourceId;
use crate::resource::ResourceName;
use crate::token::FencingToken;

/// The current format: each mark with the source it is bound to.
const MAGIC: &[u8; 8] = b"FNCGATE2";
/// The first format: tokens only. Still read, as unbound marks.
const MAGIC_V1: &[u8; 8] = b"FNCGATE1";
/// Longest source id a mark can store (a u16 length prefix).
const MAX_SOURCE_LEN: usize = u16::MAX as usize;

/// A gate whose high-water marks survive crashes and restarts.
///
/// Every change of a mark rewrites the file durably (write a temporary
/// file, fsync, rename over, fsync the directory) before `admit` returns, so
/// no crash at any point can lower a stored mark or drop its source. Retries
/// at the mark cost no I/O. The file is checksummed: one truncated or
/// modified by hand is reported as [`Error::Corrupt`] by [`FileGate::open`],
/// never read as empty.
///
/// Files written before marks were bound to sources (`FNCGATE1`) still
/// open; their marks are unbound until the first bound admit of each
/// resource, and the next change rewrites the file in the current format
/// (which older versions of this crate refuse to open as corrupt).
///
/// One process owns a gate file at a time: `open` takes an exclusive lock on
/// `<path>.lock` and a second `open` fails until the first gate is dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing_core::Result<()> {
/// use fencing_core::{Error, FencingToken, FileGate, Gate, ResourceName, SourceId};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("marks.gate");
/// let (r, etcd) = (ResourceName::new("orders")?, SourceId::new("etcd:6b2c"));
/// FileGate::open(&path)?.admit_from(&r, &etcd, FencingToken::new(7)).await?;
/// // Reopened (as after a restart) it still refuses older tokens, and
/// // tokens of any other source.
/// let gate = FileGate::open(&path)?;
/// assert!(gate.admit_from(&r, &etcd, FencingToken::new(6)).await.is_err());
/// let zk = SourceId::new("zk:prod");
/// let err = gate.admit_from(&r, &zk, FencingToken::new(8)).await.unwrap_err();
/// assert!(matches!(err, Error::ForeignSource { .. }));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FileGate {
    inner: Arc<Inner>,
}

type Marks = BTreeMap<ResourceName, Mark>;

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    marks: Mutex<Marks>,
    _owner: File,
}

impl FileGate {
    /// Opens (or creates on first admit) the gate file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let owner = lock_owner(&path)?;
        let marks = load(&path)?;
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

    /// The resource's mark and the source it is bound to.
    #[must_use]
    pub fn mark(&self, resource: &ResourceName) -> Option<Mark> {
        self.inner.lock().get(resource).cloned()
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn admit_blocking(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        let mut marks = self.lock();
        let Some(mark) = next_mark(resource, marks.get(resource), source, token)? else {
            return Ok(());
        };
        // Persist before publishing: a failed write leaves the old mark and
        // refuses this write, it never admits a write the file forgot.
        let mut next = marks.clone();
        next.insert(resource.clone(), mark);
        durable::write_framed(&self.path, MAGIC, &encode(&next))?;
        *marks = next;
        Ok(())
    }
}

#[async_trait]
impl Gate for FileGate {
    async fn admit_with(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        if let Some(s) = source.filter(|s| s.as_str().len() > MAX_SOURCE_LEN) {
            return Err(Error::Config(format!(
                "a file gate stores source ids of at most {MAX_SOURCE_LEN} bytes, not {}",
                s.as_str().len()
            )));
        }
        // A retry at the mark or a refusal changes nothing on disk: decide it
        // here, without a blocking thread (about 25 µs). The marks in memory
        // are the file's (published only once written, and no other process
        // writes the file); while a raise is being written the lock is busy,
        // and the decision waits for it on the blocking thread instead.
        if let Ok(marks) = self.inner.marks.try_lock() {
            if next_mark(resource, marks.get(resource), source, token)?.is_none() {
                return Ok(());
            }
        }
        let (inner, resource, source) = (self.inner.clone(), resource.clone(), source.cloned());
        tokio::task::spawn_blocking(move || inner.admit_blocking(&resource, source.as_ref(), token))
            .await
            .map_err(|e| Error::backend("file gate writer task", e))?
    }

    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(self.inner.lock().get(resource).map(|m| m.token))
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

/// Reads the marks in either format; a missing file has none.
fn load(path: &Path) -> Result<Marks> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Marks::new()),
        Err(e) => return Err(Error::io(path, e)),
    };
    parse(path, &bytes)
}

/// Checks the frame of either format and decodes its marks.
fn parse(path: &Path, bytes: &[u8]) -> Result<Marks> {
    let (payload, bound) = if bytes.starts_with(MAGIC_V1) {
        (durable::unframe(path, MAGIC_V1, bytes)?, false)
    } else {
        // Anything else must be the current format (a bad magic says so).
        (durable::unframe(path, MAGIC, bytes)?, true)
    };
    decode(&payload, bound).map_err(|reason| Error::corrupt(path, reason))
}

fn encode(marks: &Marks) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + marks.len() * 48);
    out.extend_from_slice(&(marks.len() as u32).to_le_bytes());
    for (resource, mark) in marks {
        durable::put_string(&mut out, resource.as_str());
        out.extend_from_slice(&mark.token.get().to_le_bytes());
        match &mark.source {
            None => out.extend_from_slice(&0u32.to_le_bytes()),
            Some(source) => {
                out.extend_from_slice(&1u32.to_le_bytes());
                // Admits refuse longer ids, so put_string's bound holds.
                durable::put_string(&mut out, source.as_str());
            }
        }
    }
    out
}

/// Parses a payload of the current format (`bound`) or the first one; any
/// inconsistency is an error, never a default.
fn decode(payload: &[u8], bound: bool) -> std::result::Result<Marks, String> {
    let mut r = Reader::new(payload);
    let count = r.u32()?;
    let mut marks = Marks::new();
    for _ in 0..count {
        let name = r.string()?;
        let resource = ResourceName::nonportable(name).map_err(|e| e.to_string())?;
        let token = FencingToken::new(r.u64()?);
        let source = if bound { read_source(&mut r)? } else { None };
        if marks.insert(resource, Mark { token, source }).is_some() {
            return Err("a resource is listed twice".into());
        }
    }
    r.finish()?;
    Ok(marks)
}

fn read_source(r: &mut Reader<'_>) -> std::result::Result<Option<SourceId>, String> {
    match r.u32()? {
        0 => Ok(None),
        1 => Ok(Some(SourceId::new(r.string()?))),
        other => Err(format!("unknown source tag {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::SourceId;
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
            g.admit_any_source(&r("a"), FencingToken::new(3))
                .await
                .unwrap();
            g.admit_any_source(&r("b"), FencingToken::new(10))
                .await
                .unwrap();
            g.admit_any_source(&r("a"), FencingToken::new(4))
                .await
                .unwrap();
        }
        let g = FileGate::open(&path).unwrap();
        assert_eq!(
            g.high_water(&r("a")).await.unwrap(),
            Some(FencingToken::new(4))
        );
        assert!(matches!(
            g.admit_any_source(&r("b"), FencingToken::new(9)).await,
            Err(Error::Stale { .. })
        ));
        g.admit_any_source(&r("b"), FencingToken::new(10))
            .await
            .unwrap();
    }

    /// `mark` shows a resource's mark with its binding, as stored, and
    /// none before its first admit.
    #[tokio::test]
    async fn mark_shows_the_token_and_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let g = FileGate::open(dir.path().join("g")).unwrap();
        assert_eq!(g.mark(&r("a")), None);
        let etcd = SourceId::new("etcd:6b2c");
        g.admit_from(&r("a"), &etcd, FencingToken::new(7))
            .await
            .unwrap();
        assert_eq!(
            g.mark(&r("a")),
            Some(Mark {
                token: FencingToken::new(7),
                source: Some(etcd),
            })
        );
    }

    /// A source id of up to 65535 bytes (the length prefix's u16) is
    /// stored and read back; a longer one is refused before any write.
    #[tokio::test]
    async fn source_ids_longer_than_the_format_holds_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        let longest = SourceId::new("s".repeat(MAX_SOURCE_LEN));
        let too_long = SourceId::new("s".repeat(MAX_SOURCE_LEN + 1));
        {
            let g = FileGate::open(&path).unwrap();
            g.admit_from(&r("a"), &longest, FencingToken::new(3))
                .await
                .unwrap();
            assert!(matches!(
                g.admit_from(&r("b"), &too_long, FencingToken::new(3)).await,
                Err(Error::Config(_))
            ));
        }
        let g = FileGate::open(&path).unwrap();
        assert_eq!(g.mark(&r("a")).unwrap().source, Some(longest));
        assert_eq!(g.mark(&r("b")), None);
    }

    /// Only a missing file is an empty gate: one that cannot be read (here
    /// a directory in its place) is an error, never a gate without marks.
    #[tokio::test]
    async fn an_unreadable_gate_file_is_an_error_not_an_empty_gate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        std::fs::create_dir(&path).unwrap();
        assert!(matches!(FileGate::open(&path), Err(Error::Io { .. })));
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
            g.admit_any_source(&r("a"), FencingToken::new(3))
                .await
                .unwrap();
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

    #[tokio::test]
    async fn a_foreign_sources_token_is_refused_also_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        let (a, b) = (SourceId::new("etcd:a"), SourceId::new("zk:b"));
        {
            let g = FileGate::open(&path).unwrap();
            g.admit_from(&r("x"), &a, FencingToken::new(5))
                .await
                .unwrap();
            assert!(matches!(
                g.admit_from(&r("x"), &b, FencingToken::new(9)).await,
                Err(Error::ForeignSource { .. })
            ));
            assert_eq!(
                g.high_water(&r("x")).await.unwrap(),
                Some(FencingToken::new(5))
            );
        }
        let g = FileGate::open(&path).unwrap();
        match g.admit_from(&r("x"), &b, FencingToken::new(10)).await {
            Err(Error::ForeignSource {
                expected,
                presented,
            }) => {
                assert_eq!((expected.as_str(), presented.as_str()), ("etcd:a", "zk:b"));
            }
            other => panic!("after reopen: {other:?}"),
        }
        assert_eq!(
            g.high_water(&r("x")).await.unwrap(),
            Some(FencingToken::new(5))
        );
        g.admit_from(&r("x"), &a, FencingToken::new(6))
            .await
            .unwrap();
    }

    /// A file written by the first format (`FNCGATE1`: count, then name and
    /// token per resource), spelled out byte by byte rather than made by
    /// the current encoder.
    fn version_1_file(entries: &[(&str, u64)]) -> Vec<u8> {
        let mut bytes = b"FNCGATE1".to_vec();
        bytes.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (name, token) in entries {
            bytes.extend_from_slice(&(name.len() as u16).to_le_bytes());
            bytes.extend_from_slice(name.as_bytes());
            bytes.extend_from_slice(&token.to_le_bytes());
        }
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[tokio::test]
    async fn an_old_format_file_opens_with_unbound_marks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        std::fs::write(&path, version_1_file(&[("x", 7), ("y", 3)])).unwrap();
        let a = SourceId::new("etcd:a");
        {
            let g = FileGate::open(&path).unwrap();
            assert_eq!(
                g.high_water(&r("x")).await.unwrap(),
                Some(FencingToken::new(7))
            );
            assert!(matches!(
                g.admit_any_source(&r("x"), FencingToken::new(6)).await,
                Err(Error::Stale { .. })
            ));
            // The marks are unbound: the unbound form still works, and the
            // first bound admit binds the mark.
            g.admit_any_source(&r("y"), FencingToken::new(4))
                .await
                .unwrap();
            g.admit_from(&r("x"), &a, FencingToken::new(7))
                .await
                .unwrap();
        }
        assert_eq!(
            &std::fs::read(&path).unwrap()[..8],
            MAGIC,
            "rewritten in the current format"
        );
        let g = FileGate::open(&path).unwrap();
        assert!(matches!(
            g.admit_from(&r("x"), &SourceId::new("zk:b"), FencingToken::new(8))
                .await,
            Err(Error::ForeignSource { .. })
        ));
        assert_eq!(
            g.high_water(&r("y")).await.unwrap(),
            Some(FencingToken::new(4))
        );
    }

    fn framed(magic: &[u8; 8], payload: &[u8]) -> Vec<u8> {
        let mut bytes = magic.to_vec();
        bytes.extend_from_slice(payload);
        bytes.extend_from_slice(&crc32fast::hash(&bytes).to_le_bytes());
        bytes
    }

    fn marks_strategy() -> impl Strategy<Value = Marks> {
        let mark = (any::<u64>(), proptest::option::of("[a-z0-9:./-]{0,24}"));
        proptest::collection::btree_map("[a-z]{1,12}", mark, 0..8).prop_map(|entries| {
            entries
                .into_iter()
                .map(|(k, (token, source))| {
                    let mark = Mark {
                        token: FencingToken::new(token),
                        source: source.map(SourceId::new),
                    };
                    (ResourceName::new(k).unwrap(), mark)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn loader_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes, true);
            let _ = decode(&bytes, false);
            for magic in [MAGIC, MAGIC_V1] {
                let _ = parse(Path::new("x"), &framed(magic, &bytes));
            }
        }

        #[test]
        fn decoder_never_panics_on_damaged_payloads(
            marks in marks_strategy(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<prop::sample::Index>(),
        ) {
            // Damage behind a valid checksum: only the decoder stands guard.
            let mut payload = encode(&marks);
            let i = at.index(payload.len());
            payload[i] = byte;
            payload.truncate(cut.index(payload.len() + 1));
            let _ = parse(Path::new("x"), &framed(MAGIC, &payload));
            let _ = parse(Path::new("x"), &framed(MAGIC_V1, &payload));
        }

        #[test]
        fn loader_reports_any_single_bit_flip(
            marks in marks_strategy(),
            flip in any::<prop::sample::Index>(),
        ) {
            let mut bytes = framed(MAGIC, &encode(&marks));
            prop_assert_eq!(parse(Path::new("x"), &bytes).unwrap(), marks);
            let bit = flip.index(bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(parse(Path::new("x"), &bytes).is_err());
        }
    }
}
