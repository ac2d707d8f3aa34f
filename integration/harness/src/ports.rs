//! Loopback ports for the servers the harnesses start.
//!
//! Asking the kernel for port 0 and releasing it is racy in two ways that
//! both broke test runs here: the kernel hands the same numbers to outgoing
//! connections (its ephemeral range), so a client's local port can take a
//! member's port before the member binds it; and two clusters started by
//! concurrent tests of one binary can get the same number once the first
//! lets go of it (a killed member that is about to restart). So ports come
//! from below the ephemeral range, each is handed out at most once per
//! process, and each is checked free by binding it.

use std::collections::HashSet;
use std::io;
use std::net::TcpListener;
use std::sync::Mutex;

/// Lowest port handed out: above the ports of common local services.
const LOWEST: u16 = 20_000;
/// Used when the kernel's ephemeral range cannot be read.
const DEFAULT_EPHEMERAL_START: u16 = 32_768;

struct Pool {
    next: u16,
    end: u16,
    given: HashSet<u16>,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// `n` distinct loopback ports that were free a moment ago, none handed out
/// before by this process, none in the kernel's ephemeral range.
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let pool = pool.get_or_insert_with(Pool::new);
    (0..n).map(|_| pool.take()).collect()
}

/// One port, as [`free_ports`].
pub fn free_port() -> io::Result<u16> {
    free_ports(1).map(|ports| ports[0])
}

impl Pool {
    fn new() -> Self {
        let end = ephemeral_start().max(LOWEST + 1_000);
        // Start where another process (a campaign, another test binary) is
        // unlikely to be, so concurrent processes rarely probe the same ports.
        let span = u32::from(end - LOWEST);
        let next = LOWEST + (std::process::id().wrapping_mul(7_919) % span) as u16;
        Pool {
            next,
            end,
            given: HashSet::new(),
        }
    }

    fn take(&mut self) -> io::Result<u16> {
        let span = usize::from(self.end - LOWEST);
        for _ in 0..span {
            let port = self.next;
            self.next = if port + 1 >= self.end {
                LOWEST
            } else {
                port + 1
            };
            if self.given.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
                continue;
            }
            self.given.insert(port);
            return Ok(port);
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("no free loopback port left in {LOWEST}..{}", self.end),
        ))
    }
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(DEFAULT_EPHEMERAL_START)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_below_the_ephemeral_range() {
        let ports = free_ports(200).unwrap();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        let more = free_ports(50).unwrap();
        assert!(
            more.iter().all(|p| !distinct.contains(p)),
            "a port was handed out twice"
        );
        let start = ephemeral_start();
        for port in ports.iter().chain(&more) {
            assert!(
                (LOWEST..start).contains(port),
                "{port} outside {LOWEST}..{start}"
            );
            TcpListener::bind(("127.0.0.1", *port)).expect("handed-out port is bindable");
        }
    }
}
