//! Real network partitions: every host (cluster member or client process)
//! in its own Linux network namespace, joined by a veth pair to a bridge in
//! a namespace of its own, and links cut with iptables inside the hosts'
//! namespaces. Every address lives inside namespaces made here; nothing is
//! added to the machine's own namespace, and everything is removed on drop
//! (also after a panic) and on the next start (after a SIGKILL).
//!
//! Needs root, iproute2 and iptables.

use std::net::Ipv4Addr;
use std::process::{Command, Output, Stdio};

/// Errors of the namespace commands, with the command and its stderr.
#[derive(Debug, thiserror::Error)]
#[error("{command}: {message}")]
pub struct NetError {
    command: String,
    message: String,
}

pub type Result<T, E = NetError> = std::result::Result<T, E>;

/// One host of a [`Network`]: a namespace and its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The namespace's name (for `ip netns exec`).
    pub ns: String,
    /// Its address on the bridge.
    pub ip: Ipv4Addr,
}

impl Host {
    /// A command that runs `program` inside this host's namespace. `ip`
    /// execs the program, so the child's pid is the program's own and
    /// signals reach it directly.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns]).arg(program);
        cmd
    }
}

/// Runs the future `f` makes on a current-thread tokio runtime, on a new
/// thread that lives in `host`'s namespace: every socket it opens is on the
/// campaign network, while the calling process stays where it is.
pub fn spawn_in<F, Fut>(host: &Host, f: F) -> std::thread::JoinHandle<std::io::Result<Fut::Output>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future,
    Fut::Output: Send + 'static,
{
    let path = format!("/var/run/netns/{}", host.ns);
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&path)?;
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&ns),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(rt.block_on(f()))
    })
}

/// A bridge and the hosts attached to it.
pub struct Network {
    prefix: String,
    subnet: u8,
    bridge_ns: String,
    hosts: Vec<Host>,
}

/// Runs one command; a non-zero exit is an error naming it.
fn run(args: &[&str]) -> Result<Output> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| NetError {
            command: args.join(" "),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(NetError {
            command: args.join(" "),
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out)
}

fn in_ns(ns: &str, args: &[&str]) -> Result<Output> {
    let mut full = vec!["ip", "netns", "exec", ns];
    full.extend_from_slice(args);
    run(&full)
}

/// Namespaces whose names start with `prefix`.
fn namespaces_with(prefix: &str) -> Vec<String> {
    let Ok(out) = run(&["ip", "netns", "list"]) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// Deletes the namespaces that start with `prefix`: the leftovers of a run
/// that was killed before it could clean up.
pub fn remove_leftovers(prefix: &str) {
    for ns in namespaces_with(prefix) {
        let _ = run(&["ip", "netns", "delete", &ns]);
    }
}

impl Network {
    /// A bridge in namespace `{prefix}br` for hosts at `10.{subnet}.0.N`.
    /// Leftover namespaces of an earlier run with the same prefix go first.
    pub fn create(prefix: &str, subnet: u8) -> Result<Network> {
        remove_leftovers(prefix);
        let bridge_ns = format!("{prefix}br");
        run(&["ip", "netns", "add", &bridge_ns])?;
        let net = Network {
            prefix: prefix.to_owned(),
            subnet,
            bridge_ns,
            hosts: Vec::new(),
        };
        in_ns(
            &net.bridge_ns,
            &["ip", "link", "add", "br0", "type", "bridge"],
        )?;
        in_ns(&net.bridge_ns, &["ip", "link", "set", "br0", "up"])?;
        Ok(net)
    }

    /// Adds a host named `{prefix}{name}` with the next address.
    pub fn add_host(&mut self, name: &str) -> Result<Host> {
        let index = self.hosts.len() + 1;
        let ns = format!("{}{name}", self.prefix);
        let ip = Ipv4Addr::new(10, self.subnet, 0, index as u8);
        run(&["ip", "netns", "add", &ns])?;
        let port = format!("p{index}");
        // Both ends are made inside namespaces: the pair never exists in
        // the machine's own namespace.
        in_ns(
            &self.bridge_ns,
            &[
                "ip", "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ],
        )?;
        in_ns(
            &self.bridge_ns,
            &["ip", "link", "set", &port, "master", "br0"],
        )?;
        in_ns(&self.bridge_ns, &["ip", "link", "set", &port, "up"])?;
        let cidr = format!("{ip}/24");
        in_ns(&ns, &["ip", "addr", "add", &cidr, "dev", "eth0"])?;
        in_ns(&ns, &["ip", "link", "set", "eth0", "up"])?;
        in_ns(&ns, &["ip", "link", "set", "lo", "up"])?;
        let host = Host { ns, ip };
        self.hosts.push(host.clone());
        Ok(host)
    }

    /// Drops all traffic between `a` and `b`, both ways (rules in `a`'s
    /// namespace see every packet between the two).
    pub fn cut(&self, a: &Host, b: &Host) -> Result<()> {
        let peer = b.ip.to_string();
        in_ns(
            &a.ns,
            &["iptables", "-A", "INPUT", "-s", &peer, "-j", "DROP"],
        )?;
        in_ns(
            &a.ns,
            &["iptables", "-A", "OUTPUT", "-d", &peer, "-j", "DROP"],
        )?;
        Ok(())
    }

    /// Cuts every pair with one host in `side_a` and the other in `side_b`.
    pub fn split(&self, side_a: &[&Host], side_b: &[&Host]) -> Result<()> {
        for a in side_a {
            for b in side_b {
                self.cut(a, b)?;
            }
        }
        Ok(())
    }

    /// Cuts `hosts[victim]` off from every other host of `hosts`.
    pub fn isolate(&self, hosts: &[Host], victim: usize) -> Result<()> {
        let rest: Vec<&Host> = hosts
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != victim)
            .map(|(_, h)| h)
            .collect();
        self.split(&[&hosts[victim]], &rest)
    }

    /// Removes every cut.
    pub fn heal(&self) -> Result<()> {
        for host in &self.hosts {
            in_ns(&host.ns, &["iptables", "-F"])?;
        }
        Ok(())
    }

    /// The hosts, in the order they were added.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of each veth pair, and with
        // it the other end. Processes still inside keep only a dead link.
        for host in &self.hosts {
            let _ = run(&["ip", "netns", "delete", &host.ns]);
        }
        let _ = run(&["ip", "netns", "delete", &self.bridge_ns]);
    }
}
