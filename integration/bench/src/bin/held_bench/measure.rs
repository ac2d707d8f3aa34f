//! Process and host figures from /proc and the clock: CPU time, resident
//! memory, the host's busy share, and the members' CPU time.

use std::path::Path;

use fencing_bench::BoxError;

/// This process's CPU time (all threads, user and system), in µs.
pub fn cpu_micros() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
}

/// The host's CPU time from the first line of /proc/stat: all of it, and
/// the part spent neither idle nor waiting for I/O.
pub struct HostTicks {
    total: u64,
    busy: u64,
}

impl HostTicks {
    pub fn read() -> Self {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let fields = text.lines().next().unwrap_or("").split_whitespace();
        let mut t = HostTicks { total: 0, busy: 0 };
        // user nice system idle iowait irq softirq steal (guest time is
        // already counted in user and nice).
        for (i, v) in fields.skip(1).take(8).enumerate() {
            let v: u64 = v.parse().unwrap_or(0);
            t.total += v;
            if i != 3 && i != 4 {
                t.busy += v;
            }
        }
        t
    }

    /// Share of all the host's CPUs busy since `earlier`, in percent.
    pub fn busy_pct_since(&self, earlier: &HostTicks) -> f64 {
        if self.total <= earlier.total {
            return 0.0;
        }
        100.0 * (self.busy - earlier.busy) as f64 / (self.total - earlier.total) as f64
    }
}

/// The cluster's member processes, found by their directory in their
/// command lines, and their CPU time.
pub struct Members {
    pids: Vec<u32>,
}

impl Members {
    /// The `count` processes whose command lines name `dir`.
    pub fn find(dir: &Path, count: usize) -> Result<Self, BoxError> {
        let dir = dir.to_string_lossy().into_owned();
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc")?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&dir) {
                pids.push(pid);
            }
        }
        if pids.len() != count {
            return Err(format!(
                "found {} processes under {dir}, expected {count} members",
                pids.len()
            )
            .into());
        }
        Ok(Members { pids })
    }

    /// The members' CPU time (user and system) so far, in µs, at the
    /// resolution of /proc/PID/stat (10 ms: USER_HZ is 100 on Linux).
    pub fn cpu_us(&self) -> f64 {
        let ticks: u64 = self
            .pids
            .iter()
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // After "pid (comm) ": state is field 3, utime 14, stime 15.
                let rest = &stat[stat.rfind(')')? + 1..];
                let f: Vec<&str> = rest.split_whitespace().collect();
                Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
            })
            .sum();
        ticks as f64 * 10_000.0
    }
}

/// Resident memory of this process, in KiB.
pub fn rss_kb() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
