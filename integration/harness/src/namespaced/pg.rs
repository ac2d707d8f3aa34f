//! A PostgreSQL primary and its synchronous streaming standby, each in a
//! namespace of its own: the campaign's PostgreSQL "cluster".
//!
//! The standby is synchronous (`synchronous_standby_names = '*'` on both,
//! which a standby ignores until it is promoted): a commit the primary
//! acknowledged is on the standby too, so a promotion loses no grant and
//! mutual exclusion holds across it, not only fencing. The price is that a
//! primary without its standby (cut off from it, or just promoted and not
//! yet joined by a rebuilt one) commits nothing: leases run out, and the
//! campaign checks that their holders notice.
//!
//! The server programs run as the `postgres` system user when the harness
//! is root (initdb and postgres refuse root), entering the member's
//! namespace before they drop root; [`Member`](super::Member)s of this kind
//! kill and pause every server process, not only the postmaster.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::MemberCommand;
use crate::net::netns::Host;
use crate::postgres::server::{find_bin_dir, server_ids, PG_SUPERUSER};

/// The port every member listens on (at its namespace's address).
pub const PORT: u16 = 5432;
/// The campaign's lock table (`?table=` of its source URLs).
pub const TABLE: &str = "campaign_locks";
/// How long a member may take to answer after a (re)start.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The server binaries, and whom they run as.
#[derive(Clone, Debug)]
pub struct PgBin {
    bin: PathBuf,
    ids: Option<(u32, u32)>,
}

impl PgBin {
    /// The newest installed server, run as the `postgres` user when root.
    pub fn find() -> Result<PgBin, String> {
        let (_, bin) = find_bin_dir().map_err(|e| e.to_string())?;
        let ids = server_ids().map_err(|e| e.to_string())?;
        Ok(PgBin { bin, ids })
    }

    /// `program` run inside the namespace `ns` (see [`netns`]) as the
    /// server user, in `dir`.
    fn command(&self, ns: &Arc<File>, program: impl AsRef<OsStr>, dir: &Path) -> Command {
        let ns = ns.clone();
        let mut cmd = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        cmd.current_dir(dir).env("LC_ALL", "C");
        let ids = self.ids;
        // `ip netns exec` would run as root; std's uid switch comes before
        // any pre_exec hook, and a process that dropped root cannot enter
        // a namespace: so both happen here, namespace first. Only system
        // calls, on a file opened before the fork.
        // SAFETY: async-signal-safe system calls only.
        unsafe {
            cmd.pre_exec(move || {
                use rustix::process::{Gid, Uid};
                use rustix::thread as t;
                t::move_into_link_name_space(ns.as_fd(), Some(t::LinkNameSpaceType::Network))?;
                if let Some((uid, gid)) = ids {
                    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
                    t::set_thread_groups(&[])?;
                    t::set_thread_res_gid(gid, gid, gid)?;
                    t::set_thread_res_uid(uid, uid, uid)?;
                }
                Ok(())
            });
        }
        cmd
    }

    /// Runs a server tool to its end (`timeout` kills it after 60 s);
    /// fails with its output.
    fn run(&self, host: &Host, dir: &Path, program: &str, args: &[&str]) -> Result<(), String> {
        let mut cmd = self.command(&netns(host)?, "timeout", dir);
        cmd.arg("60")
            .arg(self.bin.join(program))
            .args(args)
            .stdin(Stdio::null());
        crate::process::die_with_parent(&mut cmd, rustix::process::Signal::KILL);
        let out = cmd
            .output()
            .map_err(|e| format!("{program} in {}: {e}", host.ns))?;
        if !out.status.success() {
            return Err(format!(
                "{program} in {}: {}\n{}{}",
                host.ns,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// Asks the member at `host` one SQL question, from inside its own
    /// namespace (no partition cuts it off from itself); `None` when it
    /// does not answer within 3 s.
    pub fn query(&self, host: &Host, sql: &str) -> Option<String> {
        let mut cmd = host.command("timeout");
        cmd.arg("3")
            .arg(self.bin.join("psql"))
            .args(["-X", "-A", "-t", "-h", &host.ip.to_string()])
            .args([
                "-p",
                &PORT.to_string(),
                "-U",
                PG_SUPERUSER,
                "-d",
                "postgres",
            ])
            .args(["-c", sql])
            .stdin(Stdio::null())
            .env_remove("PGPASSWORD");
        let out = cmd.output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Waits until the member answers, at most [`READY_TIMEOUT`].
    pub(super) fn wait_ready(&self, host: &Host) -> Result<(), String> {
        let started = Instant::now();
        while started.elapsed() < READY_TIMEOUT {
            if self.query(host, "SELECT 1").as_deref() == Some("1") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "PostgreSQL in {} not ready within {READY_TIMEOUT:?}",
            host.ns
        ))
    }
}

/// `host`'s network namespace, for [`PgBin::command`].
fn netns(host: &Host) -> Result<Arc<File>, String> {
    let path = format!("/var/run/netns/{}", host.ns);
    File::open(&path)
        .map(Arc::new)
        .map_err(|e| format!("{path}: {e}"))
}

/// A member's directory, owned by the server user, with no data yet in
/// `data/` (a leftover of an earlier run is removed).
fn prepare_dir(bin: &PgBin, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if let Some((uid, gid)) = bin.ids {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .map_err(|e| format!("chown {}: {e}", dir.display()))?;
    }
    let data = dir.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    }
    Ok(data)
}

/// Creates the primary's data in `dir/data`, open to the campaign network
/// (trust: the members and clients are in namespaces of this run alone).
pub(super) fn initdb(bin: &PgBin, host: &Host, dir: &Path) -> Result<(), String> {
    let data = prepare_dir(bin, dir)?;
    let data_arg = data.to_string_lossy();
    bin.run(
        host,
        dir,
        "initdb",
        &[
            "-D",
            &data_arg,
            "-U",
            PG_SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
        ],
    )?;
    let hba = data.join("pg_hba.conf");
    let mut text = std::fs::read_to_string(&hba).map_err(|e| e.to_string())?;
    text.push_str("host all all 0.0.0.0/0 trust\nhost replication all 0.0.0.0/0 trust\n");
    std::fs::write(&hba, text).map_err(|e| e.to_string())
}

/// Replaces `dir/data` with a copy of the primary at `primary`, set up as
/// its streaming standby (`pg_basebackup -R`).
pub(super) fn basebackup(
    bin: &PgBin,
    host: &Host,
    primary: &Host,
    dir: &Path,
) -> Result<(), String> {
    let data = prepare_dir(bin, dir)?;
    let (data_arg, ip) = (data.to_string_lossy(), primary.ip.to_string());
    let port = PORT.to_string();
    bin.run(
        host,
        dir,
        "pg_basebackup",
        &[
            "-h",
            &ip,
            "-p",
            &port,
            "-U",
            PG_SUPERUSER,
            "-D",
            &data_arg,
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
        ],
    )
}

/// How member `host` runs the server on `dir/data`; whether it is the
/// primary or a standby is in the data (`standby.signal`).
pub(super) fn member(bin: &PgBin, host: &Host, dir: &Path) -> Result<MemberCommand, String> {
    let (bin, ip, dir) = (bin.clone(), host.ip, dir.to_owned());
    let ns = netns(host)?;
    Ok(Box::new(move || {
        let mut cmd = bin.command(&ns, bin.bin.join("postgres"), &dir);
        cmd.arg("-D")
            .arg(dir.join("data"))
            .arg("-k")
            .arg(&dir)
            .args(["-p", &PORT.to_string()])
            .args(["-c", &format!("listen_addresses={ip}")])
            // As the other members (see TICK_MS in the parent module).
            .args(["-c", "fsync=off"])
            .args(["-c", "synchronous_standby_names=*"])
            // A standby reconnects within a fraction of a second of a
            // primary's restart; a link cut without a reset is noticed
            // within seconds, not the default minute.
            .args(["-c", "wal_retrieve_retry_interval=200ms"])
            .args([
                "-c",
                "wal_receiver_timeout=5s",
                "-c",
                "wal_sender_timeout=5s",
            ]);
        cmd
    }))
}

/// Starts the primary (member 0) and its standby (member 1) in `dir/m1`,
/// `dir/m2`; returns how to run each.
pub(super) fn start(
    bin: &PgBin,
    hosts: &[Host],
    dir: &Path,
    mut launch: impl FnMut(usize, MemberCommand) -> Result<(), String>,
) -> Result<(), String> {
    let [primary, standby] = hosts else {
        return Err(format!("PostgreSQL runs on 2 members, not {}", hosts.len()));
    };
    let (d1, d2) = (dir.join("m1"), dir.join("m2"));
    initdb(bin, primary, &d1)?;
    launch(0, member(bin, primary, &d1)?)?;
    bin.wait_ready(primary)?;
    basebackup(bin, standby, primary, &d2)?;
    launch(1, member(bin, standby, &d2)?)?;
    bin.wait_ready(standby)
}

/// Promotes the standby at `host` (waiting until it takes writes).
pub(super) fn promote(bin: &PgBin, host: &Host) -> Result<(), String> {
    match bin.query(host, "SELECT pg_promote(true, 2)").as_deref() {
        Some("t") => Ok(()),
        other => Err(format!("pg_promote() in {}: {other:?}", host.ns)),
    }
}

/// Whether the member at `host` answers as a primary.
pub(super) fn is_primary(bin: &PgBin, host: &Host) -> bool {
    bin.query(host, "SELECT pg_is_in_recovery()").as_deref() == Some("f")
}
