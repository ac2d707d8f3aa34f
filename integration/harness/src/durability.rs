//! Checks, on a syscall trace (`strace -f`), that a process made its files
//! durable before it announced anything that depends on them.
//!
//! SIGKILL never loses the page cache, so a crash test with `kill -9`
//! passes even with every fsync removed. A power loss keeps only what was
//! made durable. With POSIX semantics (ext4, xfs), replace-by-rename is
//! durable when: the new file's data was fsynced before the rename, and the
//! directory was fsynced after it. This checker enforces exactly that
//! before every write to standard output (where the test program prints a
//! token once `acquire` returned it):
//!
//! - `rename(src, dst)` of a file written since its last fsync is a
//!   violation (after a power loss `dst` could be empty or partial);
//! - a write to fd 1 while a rename is not yet followed by an fsync of its
//!   directory is a violation (after a power loss the old file could be
//!   back, and the token announced would be handed out again);
//! - a write to fd 1 while a file written to is not yet fsynced is a
//!   violation (a file written in place, or not renamed yet: after a power
//!   loss what the announcement depends on could be gone).
//!
//! What it does not prove: that the filesystem honours fsync.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// One syscall that matters here, with its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `openat` returned `fd` for `path`.
    Open {
        /// The path as given.
        path: PathBuf,
        /// The descriptor returned.
        fd: i32,
    },
    /// A successful `write` to `fd`.
    Write {
        /// The descriptor written.
        fd: i32,
    },
    /// A successful `fsync` or `fdatasync` of `fd`.
    Sync {
        /// The descriptor synced.
        fd: i32,
    },
    /// A successful `rename` (any variant).
    Rename {
        /// The old name.
        from: PathBuf,
        /// The new name.
        to: PathBuf,
    },
    /// `close(fd)`.
    Close {
        /// The descriptor closed.
        fd: i32,
    },
}

/// Parses `strace -f` output (one syscall per line, `PID name(args) = ret`),
/// joining `<unfinished ...>` and `<... resumed>` halves; a call counts at
/// the line where it returned. Failed calls and other syscalls are skipped.
#[must_use]
pub fn parse(trace: &str) -> Vec<Call> {
    let mut pending: HashMap<String, String> = HashMap::new();
    let mut calls = Vec::new();
    for line in trace.lines() {
        let Some((pid, rest)) = line.trim().split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let full = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_owned(), head.to_owned());
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let Some((_, after)) = tail.split_once(" resumed>") else {
                continue;
            };
            match pending.remove(pid) {
                Some(head) => format!("{head}{after}"),
                None => continue,
            }
        } else {
            rest.to_owned()
        };
        if let Some(call) = parse_call(&full) {
            calls.push(call);
        }
    }
    calls
}

fn parse_call(text: &str) -> Option<Call> {
    let (name, rest) = text.split_once('(')?;
    // `args) = ret`, the `=` padded into a column; a failed call ends in
    // `(ERRNO text)` and does not parse as a return value.
    let (args, ret) = rest.rsplit_once(')')?;
    let ret: i64 = ret.trim().strip_prefix('=')?.trim().parse().ok()?;
    if ret < 0 {
        return None;
    }
    let fd_arg = || args.split(',').next()?.trim().parse::<i32>().ok();
    let paths = quoted(args);
    Some(match name {
        "openat" | "open" => Call::Open {
            path: paths.first()?.into(),
            fd: i32::try_from(ret).ok()?,
        },
        "write" | "pwrite64" | "writev" => Call::Write { fd: fd_arg()? },
        "fsync" | "fdatasync" => Call::Sync { fd: fd_arg()? },
        "rename" | "renameat" | "renameat2" => Call::Rename {
            from: paths.first()?.into(),
            to: paths.get(1)?.into(),
        },
        "close" => Call::Close { fd: fd_arg()? },
        _ => return None,
    })
}

/// The double-quoted strings of an argument list (paths; strace prints
/// them in full and escapes quotes inside).
fn quoted(args: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = args.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut s = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => s.extend(chars.next()),
                '"' => break,
                c => s.push(c),
            }
        }
        out.push(s);
    }
    out
}

/// Checks the rules in the module documentation; returns how many stdout
/// writes were checked, or the first violation.
pub fn check(calls: &[Call]) -> Result<usize, String> {
    let mut open: HashMap<i32, PathBuf> = HashMap::new();
    let mut dirty: HashSet<PathBuf> = HashSet::new();
    let mut unsynced_renames: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut announced = 0;
    for call in calls {
        match call {
            Call::Open { path, fd } => {
                open.insert(*fd, path.clone());
            }
            Call::Close { fd } => {
                open.remove(fd);
            }
            Call::Write { fd: 1 } => {
                if let Some(path) = dirty.iter().next() {
                    return Err(format!(
                        "announced on stdout while {} was written and not fsynced",
                        path.display()
                    ));
                }
                if let Some((from, to)) = unsynced_renames.first() {
                    return Err(format!(
                        "announced on stdout before the rename of {} to {} was made durable \
                         (no fsync of its directory since)",
                        from.display(),
                        to.display()
                    ));
                }
                announced += 1;
            }
            Call::Write { fd } => {
                if let Some(path) = open.get(fd) {
                    dirty.insert(path.clone());
                }
            }
            Call::Sync { fd } => {
                let Some(path) = open.get(fd) else { continue };
                dirty.remove(path);
                unsynced_renames.retain(|(_, to)| to.parent() != Some(path.as_path()));
            }
            Call::Rename { from, to } => {
                if dirty.contains(from) {
                    return Err(format!(
                        "{} renamed over {} before its data was fsynced",
                        from.display(),
                        to.display()
                    ));
                }
                unsynced_renames.push((from.clone(), to.clone()));
            }
        }
    }
    Ok(announced)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"100 openat(AT_FDCWD, "/d/state.tmp", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 5
100 write(5, ""..., 40) = 40
100 fsync(5 <unfinished ...>
101 write(7, ""..., 1) = 1
100 <... fsync resumed>) = 0
100 close(5) = 0
100 rename("/d/state.tmp", "/d/state") = 0
100 openat(AT_FDCWD, "/d", O_RDONLY|O_CLOEXEC) = 5
100 fsync(5) = 0
100 close(5) = 0
100 write(1, ""..., 2)          = 2
"#;

    #[test]
    fn a_durable_replace_before_the_announcement_passes() {
        let calls = parse(GOOD);
        assert_eq!(calls.len(), 10, "{calls:?}");
        assert_eq!(check(&calls), Ok(1));
    }

    #[test]
    fn a_missing_file_fsync_is_found() {
        let trace = GOOD.replace("100 fsync(5 <unfinished ...>\n", "");
        let trace = trace.replace("100 <... fsync resumed>) = 0\n", "");
        let err = check(&parse(&trace)).unwrap_err();
        assert!(err.contains("before its data was fsynced"), "{err}");
    }

    #[test]
    fn a_missing_directory_fsync_is_found() {
        let trace = GOOD.replace("100 fsync(5) = 0\n", "");
        let err = check(&parse(&trace)).unwrap_err();
        assert!(err.contains("no fsync of its directory"), "{err}");
    }

    /// A file written in place (no temporary, no rename) and never
    /// fsynced before the announcement.
    #[test]
    fn an_unsynced_write_in_place_is_found() {
        let trace = r#"100 openat(AT_FDCWD, "/d/marks", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 5
100 write(5, ""..., 40) = 40
100 close(5) = 0
100 write(1, ""..., 2) = 2
"#;
        let err = check(&parse(trace)).unwrap_err();
        assert!(
            err.contains("/d/marks was written and not fsynced"),
            "{err}"
        );
    }

    #[test]
    fn failed_calls_and_odd_lines_are_skipped() {
        let calls = parse(
            "100 fsync(5) = -1 EIO (Input/output error)\nnonsense\n100 <... x resumed>) = 0\n",
        );
        assert!(calls.is_empty(), "{calls:?}");
    }
}
