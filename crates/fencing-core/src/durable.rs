//! Crash-safe files: checksummed framing and replace-by-rename.
//!
//! Every state file is `MAGIC (8 bytes) | payload | crc32 (4 bytes LE)`,
//! written to a temporary sibling, fsynced, renamed over the old file, and
//! the directory fsynced. A crash leaves the old file or the new one, never
//! a mix, so any file that fails its checks was damaged after the fact and
//! is reported as [`Error::Corrupt`].

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const CRC_LEN: usize = 4;

/// Writes `magic | payload | crc` to `path` atomically and durably.
pub(crate) fn write_framed(path: &Path, magic: &[u8; 8], payload: &[u8]) -> Result<()> {
    let mut bytes = Vec::with_capacity(magic.len() + payload.len() + CRC_LEN);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(payload);
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());

    let tmp = sibling(path, ".tmp");
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        sync_dir(path)
    };
    write().map_err(|e| Error::io(path, e))
}

/// Reads a framed file. `Ok(None)` when it does not exist.
pub(crate) fn read_framed(path: &Path, magic: &[u8; 8]) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => unframe(path, magic, &bytes).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Checks magic and checksum, returning the payload.
pub(crate) fn unframe(path: &Path, magic: &[u8; 8], bytes: &[u8]) -> Result<Vec<u8>> {
    if bytes.len() < magic.len() + CRC_LEN {
        return Err(Error::corrupt(
            path,
            format!("truncated: {} bytes", bytes.len()),
        ));
    }
    if &bytes[..magic.len()] != magic {
        return Err(Error::corrupt(path, "unknown file format (bad magic)"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - CRC_LEN);
    let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32fast::hash(body) != stored {
        return Err(Error::corrupt(
            path,
            "checksum mismatch (truncated or modified)",
        ));
    }
    Ok(body[magic.len()..].to_vec())
}

/// Removes a file and makes the removal durable.
pub(crate) fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(path).map_err(|e| Error::io(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// `path` with `suffix` appended to its file name.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// Opens (creating) a file used only for `flock(2)`. The lock is released
/// when the file is closed, also when the process dies.
pub(crate) fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io(path, e))
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// A cursor over a payload that reports malformed input instead of panicking.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!(
                "record cut short: wanted {n} bytes, {} left",
                self.bytes.len()
            ));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub(crate) fn u64(&mut self) -> std::result::Result<u64, String> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("took 8 bytes")))
    }

    pub(crate) fn u32(&mut self) -> std::result::Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("took 4 bytes")))
    }

    pub(crate) fn string(&mut self) -> std::result::Result<String, String> {
        let b = self.take(2)?;
        let len = u16::from_le_bytes([b[0], b[1]]) as usize;
        let raw = self.take(len)?;
        String::from_utf8(raw.to_vec()).map_err(|_| "string is not UTF-8".to_owned())
    }

    pub(crate) fn finish(self) -> std::result::Result<(), String> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected trailing bytes", self.bytes.len()))
        }
    }
}

/// Appends a u16-length-prefixed string. Callers keep strings short.
pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) {
    let len = u16::try_from(s.len()).expect("state strings are validated to be short");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}
