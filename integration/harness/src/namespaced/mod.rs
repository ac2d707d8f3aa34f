//! Clusters whose members live in network namespaces of their own (a
//! ZooKeeper ensemble, an etcd cluster, kube-apiserver on three etcd
//! members), so that a test or the fault campaign can cut the links between
//! them as well as kill, restart, pause and resume each member. Each member
//! is a [`MemberProcess`], the process control the loopback clusters use.

pub mod kube;
pub mod pg;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rustix::process::Signal;

use crate::member::MemberProcess;
use crate::net::netns::Host;
use crate::zk::ensemble::{jvm, ZkVersion, INIT_LIMIT};

/// Members do not fsync (`forceSync=no`, etcd 3.6's `--unsafe-no-fsync`):
/// the campaign kills processes,
/// which never loses the page cache, and an fsync per write on these shared
/// disks would cut the grants per minute several times.
///
/// ZooKeeper's tick here: a follower cut off from its leader notices after
/// `SYNC_LIMIT` ticks (2 s), longer than the clients' 1 s sessions, which
/// is exactly the window in which a cut-off follower still answers.
const TICK_MS: u64 = 200;
const SYNC_LIMIT: u64 = 10;

/// One member process in its namespace, and how to start it again.
pub struct Member {
    pub host: Host,
    command: MemberCommand,
    process: MemberProcess,
    /// A PostgreSQL postmaster: kills and pauses reach every server
    /// process it forked (each in a session of its own), not only it.
    tree: bool,
}

impl Member {
    /// Starts it (again, after a kill); it dies with this process, even
    /// one killed outright, so a member never outlives its campaign.
    pub fn restart(&mut self) -> std::io::Result<()> {
        let mut cmd = (self.command)();
        crate::process::die_with_parent(&mut cmd, Signal::KILL);
        self.process.start(&mut cmd)
    }

    /// SIGKILL and reap; the data stays for [`Member::restart`].
    pub fn kill(&mut self) {
        match self.process.pid().filter(|_| self.tree) {
            Some(pid) => crate::postgres::server::kill_tree(pid, || self.process.kill()),
            None => self.process.kill(),
        }
    }

    /// SIGSTOP: it answers nothing and keeps its sockets open.
    pub fn pause(&mut self) {
        // The postmaster first: stopped, it forks nothing new.
        self.process.pause();
        if let Some(pid) = self.process.pid().filter(|_| self.tree) {
            crate::postgres::server::signal_children(pid, Signal::STOP);
        }
    }

    /// SIGCONT after [`Member::pause`].
    pub fn resume(&mut self) {
        if let Some(pid) = self.process.pid().filter(|_| self.tree) {
            crate::postgres::server::signal_children(pid, Signal::CONT);
        }
        self.process.resume();
    }

    /// Whether there is a process (running or paused).
    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// The last lines of the member's log, for failure reports.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// The exit status when the process ended by itself since it was
    /// started (a member refusing its own data, say); from then on it no
    /// longer counts as running.
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        self.process.exited()
    }
}

/// Which cluster runs in the namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `LocalSource` on a directory the clients share: no members, no
    /// network (faults are on the clients and their clocks only).
    Local,
    Zk(ZkVersion),
    Etcd(crate::etcd::cluster::EtcdVersion),
    /// kube-apiserver (the last member) on three etcd 3.6 members.
    Kube,
    /// A PostgreSQL primary (first) and its synchronous standby.
    Pg,
}

impl Kind {
    /// How many member processes (each in its own namespace) it runs.
    pub fn members(self) -> usize {
        match self {
            Kind::Local => 0,
            Kind::Zk(_) | Kind::Etcd(_) => VOTERS,
            Kind::Kube => VOTERS + 1,
            Kind::Pg => 2,
        }
    }
}

/// The members that hold the quorum (ZooKeeper or etcd servers); the
/// apiserver of a Kubernetes cluster comes after them.
pub const VOTERS: usize = 3;

/// The etcd campaign's distant member: its election timeout is
/// [`DISTANT_ELECTION_MS`], the others' 1000 ms, as operators set it for a
/// member far from the rest. Once it leads and is cut off, it leads on
/// until CheckQuorum counts its own timeout, while the others elect a new
/// leader within about a second (`Fault::DeposeDistantLeader`).
pub const DISTANT: usize = 0;
pub const DISTANT_ELECTION_MS: u64 = 5000;
/// etcd's `--election-timeout` of every other member, in ms.
const ELECTION_MS: u64 = 1000;

impl Tuning {
    /// The campaign's settings for `kind`.
    pub fn campaign(kind: Kind) -> Tuning {
        let mut tuning = Tuning::default();
        if let Kind::Etcd(_) = kind {
            tuning.election_timeouts_ms = vec![ELECTION_MS; VOTERS];
            tuning.election_timeouts_ms[DISTANT] = DISTANT_ELECTION_MS;
        }
        tuning
    }
}

/// Settings of the members that a test may change.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// ZooKeeper's syncLimit in ticks of 200 ms: how long a follower cut
    /// off from its leader goes on answering.
    pub sync_limit: u64,
    /// etcd's `--election-timeout` of each member, in ms (the heartbeat
    /// interval stays 100 ms); members past the end of the list take
    /// [`ELECTION_MS`].
    /// A member with a longer one leads on longer once cut off (CheckQuorum
    /// counts its own election timeout), as operators set it for a distant
    /// member.
    pub election_timeouts_ms: Vec<u64>,
    /// Kubernetes: the apiserver runs with the CoordinatedLeaderElection
    /// feature gate and serves `coordination.k8s.io/v1beta1`
    /// (LeaseCandidates), so that its election controller picks the
    /// holders of Leases that coordinated candidates stand for.
    pub coordinated_election: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            sync_limit: SYNC_LIMIT,
            election_timeouts_ms: Vec::new(),
            coordinated_election: false,
        }
    }
}

/// The members of one cluster.
pub struct Cluster {
    pub kind: Kind,
    pub members: Vec<Member>,
    /// The admin's kubeconfig of a Kubernetes cluster.
    pub kubeconfig: Option<PathBuf>,
    /// Its clients' kubeconfig (RBAC-limited to Leases).
    pub client_kubeconfig: Option<PathBuf>,
    /// The PostgreSQL server programs, for a promotion and a rebuild.
    pg: Option<pg::PgBin>,
}

impl Cluster {
    /// Writes the members' configuration under `dir` and starts them.
    pub fn start(kind: Kind, hosts: &[Host], dir: &Path) -> Result<Cluster, String> {
        Self::start_tuned(kind, hosts, dir, &Tuning::default())
    }

    /// Like [`Cluster::start`], with the members' timing settings of `tuning`.
    pub fn start_tuned(
        kind: Kind,
        hosts: &[Host],
        dir: &Path,
        tuning: &Tuning,
    ) -> Result<Cluster, String> {
        if kind == Kind::Pg {
            return Self::start_pg(hosts, dir);
        }
        let mut members = Vec::new();
        let (mut kubeconfig, mut client_kubeconfig) = (None, None);
        let voters = &hosts[..VOTERS.min(hosts.len())];
        for (i, host) in hosts.iter().enumerate() {
            let member_dir = dir.join(format!("m{}", i + 1));
            std::fs::create_dir_all(&member_dir).map_err(|e| e.to_string())?;
            let etcd36 = crate::etcd::cluster::EtcdVersion::V3_6;
            let command = match kind {
                Kind::Local => return Err("a local campaign has no members".into()),
                Kind::Pg => return Err("PostgreSQL members start in order".into()),
                Kind::Zk(version) => zk_member(version, hosts, i, &member_dir, tuning.sync_limit)?,
                Kind::Etcd(version) => etcd_member(version, hosts, i, &member_dir, tuning)?,
                Kind::Kube if i < VOTERS => etcd_member(etcd36, voters, i, &member_dir, tuning)?,
                Kind::Kube => {
                    let plane = kube::control_plane(
                        host,
                        voters,
                        &member_dir,
                        tuning.coordinated_election,
                    )?;
                    kubeconfig = Some(plane.kubeconfig);
                    client_kubeconfig = Some(plane.client_kubeconfig);
                    plane.command
                }
            };
            let name = format!("m{}", i + 1);
            members.push(Member {
                host: host.clone(),
                command,
                process: MemberProcess::new(name, member_dir.join("member.log")),
                tree: false,
            });
        }
        for m in &mut members {
            m.restart()
                .map_err(|e| format!("starting member in {}: {e}", m.host.ns))?;
        }
        Ok(Cluster {
            kind,
            members,
            kubeconfig,
            client_kubeconfig,
            pg: None,
        })
    }

    /// A PostgreSQL primary on `hosts[0]` and its standby on `hosts[1]`,
    /// each started once the one before answers.
    fn start_pg(hosts: &[Host], dir: &Path) -> Result<Cluster, String> {
        let bin = pg::PgBin::find()?;
        let mut cluster = Cluster {
            kind: Kind::Pg,
            members: Vec::new(),
            kubeconfig: None,
            client_kubeconfig: None,
            pg: Some(bin.clone()),
        };
        pg::start(&bin, hosts, dir, |i, command| {
            let log = dir.join(format!("m{}", i + 1)).join("member.log");
            cluster.members.push(Member {
                host: hosts[i].clone(),
                command,
                process: MemberProcess::new(format!("m{}", i + 1), log),
                tree: true,
            });
            let m = &mut cluster.members[i];
            m.restart()
                .map_err(|e| format!("starting member in {}: {e}", m.host.ns))
        })?;
        Ok(cluster)
    }

    /// PostgreSQL: promotes the standby `standby` (member `old`, the
    /// primary, SIGKILLed first), then makes `old` the new primary's
    /// standby again from a fresh copy, as an operator rebuilds a failed
    /// primary: started on its own data it would be a second primary.
    pub fn fail_over(&mut self, old: usize, standby: usize) -> Result<String, String> {
        let bin = self.pg.clone().ok_or("not a PostgreSQL cluster")?;
        self.members[old].kill();
        let started = std::time::Instant::now();
        pg::promote(&bin, &self.members[standby].host)?;
        let promoted = started.elapsed();
        let dir = self.members[old].process.log().parent().map(Path::to_owned);
        let dir = dir.ok_or("member without a directory")?;
        let new_primary = self.members[standby].host.clone();
        pg::basebackup(&bin, &self.members[old].host, &new_primary, &dir)?;
        let m = &mut self.members[old];
        m.restart()
            .map_err(|e| format!("starting m{}: {e}", old + 1))?;
        bin.wait_ready(&m.host)?;
        Ok(format!(
            "m{} promoted in {} ms; m{} rebuilt as its standby in {} ms",
            standby + 1,
            promoted.as_millis(),
            old + 1,
            (started.elapsed() - promoted).as_millis()
        ))
    }

    /// Client port of every voter.
    pub fn port(&self) -> u16 {
        match self.kind {
            Kind::Zk(_) => 2181,
            Kind::Pg => pg::PORT,
            _ => 2379,
        }
    }

    /// `ip:port` of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("{}:{}", self.members[i].host.ip, self.port())
    }

    /// The URL of client `client`'s source. Client `i` of the first
    /// [`VOTERS`] talks to member `i` only (so a cut-off member's clients
    /// still reach it, as in the partitions that break leases); the rest
    /// talk to every member. Kubernetes clients all talk to the apiserver,
    /// PostgreSQL clients to both members (the one that takes writes
    /// serves them).
    pub fn client_url(&self, client: usize, session: Duration) -> String {
        if self.kind == Kind::Pg {
            self.url(&[0, 1], session)
        } else if client < VOTERS {
            self.url(&[client], session)
        } else {
            self.url(&(0..VOTERS).collect::<Vec<_>>(), session)
        }
    }

    /// The URL of a source that talks only to the members in `which`.
    pub fn url(&self, which: &[usize], session: Duration) -> String {
        let hosts: Vec<String> = which.iter().map(|&i| self.endpoint(i)).collect();
        let hosts = hosts.join(",");
        let secs = session.as_secs_f64();
        match (self.kind, &self.client_kubeconfig) {
            (Kind::Zk(_), _) => format!("zk://{hosts}/campaign?ttl={secs}&request_timeout=1"),
            (Kind::Kube, Some(kubeconfig)) => kube::source_url(kubeconfig, session),
            (Kind::Pg, _) => format!(
                "postgres://{}@{hosts}/postgres?table={}&ttl={secs}&request_timeout=1\
                 &target_session_attrs=read-write&connect_timeout=1",
                crate::postgres::server::PG_SUPERUSER,
                pg::TABLE
            ),
            _ => format!("etcd://{hosts}/campaign?ttl={secs}&request_timeout=1"),
        }
    }

    /// Asks member `i`, from inside its own namespace (which no partition
    /// cuts it off from), whether it leads.
    pub fn is_leader(&self, i: usize) -> bool {
        let via = &self.members[i].host;
        if let Some(bin) = &self.pg {
            return pg::is_primary(bin, via);
        }
        let ip = via.ip;
        let probe = match self.kind {
            // A four-letter word over bash's /dev/tcp: no extra tools.
            Kind::Zk(_) => format!(
                "exec 3<>/dev/tcp/{ip}/2181 && printf srvr >&3 && timeout 2 cat <&3"
            ),
            _ => format!(
                "exec 3<>/dev/tcp/{ip}/2379 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && timeout 2 cat <&3"
            ),
        };
        let Ok(out) = via
            .command("timeout")
            .args(["3", "bash", "-c", &probe])
            .output()
        else {
            return false;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        match self.kind {
            Kind::Zk(_) => text.contains("Mode: leader") || text.contains("Mode: standalone"),
            _ => text.lines().any(|l| l.trim() == "etcd_server_is_leader 1"),
        }
    }

    /// The member that says it leads now (a paused one answers nothing).
    pub fn leader(&self) -> Option<usize> {
        (0..VOTERS.min(self.members.len())).find(|&i| {
            let m = &self.members[i];
            m.process.is_live() && self.is_leader(i)
        })
    }

    /// Ends every pause (faults must not outlive the run).
    pub fn resume_all(&mut self) {
        for m in &mut self.members {
            if m.process.is_paused() {
                m.resume();
            }
        }
    }

    /// Starts members that a fault left dead.
    pub fn restart_dead(&mut self) -> std::io::Result<()> {
        for m in &mut self.members {
            if !m.is_running() {
                m.restart()?;
            }
        }
        Ok(())
    }
}

type MemberCommand = Box<dyn Fn() -> Command + Send + Sync>;

fn zk_member(
    version: ZkVersion,
    hosts: &[Host],
    i: usize,
    dir: &Path,
    sync_limit: u64,
) -> Result<MemberCommand, String> {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    std::fs::write(data.join("myid"), format!("{}\n", i + 1)).map_err(|e| e.to_string())?;
    let mut cfg = format!(
        "tickTime={TICK_MS}\ninitLimit={INIT_LIMIT}\nsyncLimit={sync_limit}\ndataDir={}\n\
         clientPort=2181\nclientPortAddress={}\nadmin.enableServer=false\n\
         4lw.commands.whitelist=*\nminSessionTimeout=400\nmaxSessionTimeout=60000\n\
         forceSync=no\n",
        data.display(),
        hosts[i].ip,
    );
    for (j, h) in hosts.iter().enumerate() {
        cfg.push_str(&format!("server.{}={}:2888:3888\n", j + 1, h.ip));
    }
    let config = dir.join("zoo.cfg");
    std::fs::write(&config, cfg).map_err(|e| e.to_string())?;
    let classpath = version.classpath().map_err(|e| e.to_string())?;
    let java = crate::zk::ensemble::find_java().ok_or("no java on PATH or in $JAVA_HOME/bin")?;
    let host = hosts[i].clone();
    let dir = dir.to_owned();
    Ok(Box::new(move || {
        let mut cmd = host.command(&java);
        cmd.current_dir(&dir);
        jvm::server_command(&mut cmd, &classpath, &config, &[]);
        cmd
    }))
}

fn etcd_member(
    version: crate::etcd::cluster::EtcdVersion,
    hosts: &[Host],
    i: usize,
    dir: &Path,
    tuning: &Tuning,
) -> Result<MemberCommand, String> {
    let election_timeout = tuning
        .election_timeouts_ms
        .get(i)
        .copied()
        .unwrap_or(ELECTION_MS);
    let binary = version.binary().map_err(|e| e.to_string())?;
    let cluster: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(j, h)| format!("m{}=http://{}:2380", j + 1, h.ip))
        .collect();
    let cluster = cluster.join(",");
    let host = hosts[i].clone();
    let data = dir.join("data");
    Ok(Box::new(move || {
        let ip = host.ip;
        let mut cmd = host.command(&binary);
        cmd.arg(format!("--name=m{}", i + 1))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-peer-urls=http://{ip}:2380"))
            .arg(format!("--initial-advertise-peer-urls=http://{ip}:2380"))
            .arg(format!("--listen-client-urls=http://{ip}:2379"))
            .arg(format!("--advertise-client-urls=http://{ip}:2379"))
            .arg(format!("--initial-cluster={cluster}"))
            .arg("--initial-cluster-state=new")
            .arg("--initial-cluster-token=campaign")
            .arg("--heartbeat-interval=100")
            .arg(format!("--election-timeout={election_timeout}"));
        // As for ZooKeeper's forceSync=no (see TICK_MS); 3.4 has no such flag.
        if version == crate::etcd::cluster::EtcdVersion::V3_6 {
            cmd.arg("--unsafe-no-fsync");
        }
        cmd
    }))
}
