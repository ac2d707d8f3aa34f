//! The executor: applies the faults of a step to the world, and undoes
//! them.

use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::{Fault, Nemesis};
use crate::history::{EventKind, NEMESIS};
use crate::kube::AdminAction;
use crate::run::{blocking, Clock, Workload, World};
use fencing_harness::namespaced::{Kind, DISTANT, VOTERS};

/// How to undo one started fault.
enum Undo {
    /// The fault was over when it returned (maintenance).
    Nothing,
    Heal,
    ResumeMember(usize),
    RestartMember(usize),
    /// The apiserver started again after a kill; in the coordinated
    /// workload, the dead one's election-controller Lease deleted too.
    RestartApiserver(usize),
    RestartCluster,
    ResumeClient(usize),
    RestartClient(usize),
    RestartStorage,
    ResumeStorage,
    RestartPostgres,
    ResumePostgres,
    /// Kill the client running on a faked clock, start it on the real one.
    RealClock(usize),
    /// Make the client's wall clock jump now (by this many seconds), then
    /// as `RealClock`.
    JumpThenRealClock(usize, i64),
}

/// The faults of one step, to be ended together.
pub struct Started(Vec<(u64, Undo)>);

/// A hold older than this is a long one (short holds last at most 150 ms).
const LONG_HOLD_NS: u64 = 300_000_000;

/// How long a client runs on a faked clock.
const CLOCK_FAULT: Duration = Duration::from_secs(6);

impl Nemesis {
    /// Starts `faults` together.
    pub async fn start(&mut self, world: &mut World, faults: &[Fault]) -> Result<Started, String> {
        let mut started = Vec::new();
        for &fault in faults {
            // Stamped when the action begins: a Lease deletion takes effect
            // before the helper that made it has said so.
            let at = world.recorder.now_ns();
            let (target, undo) = self.apply(world, fault).await?;
            self.next_id += 1;
            let id = self.next_id;
            world.recorder.record_at(
                at,
                NEMESIS,
                EventKind::FaultStart {
                    fault: fault.name().into(),
                    target,
                    id,
                },
            );
            started.push((id, undo));
        }
        Ok(Started(started))
    }

    pub async fn end(&mut self, world: &mut World, started: Started) -> Result<(), String> {
        if self.clock.is_some_and(|(_, _, left)| left.is_zero()) {
            self.finish(world).await?;
        }
        for (id, undo) in started.0 {
            if let Undo::JumpThenRealClock(c, secs) = undo {
                // The client has run a step on the faked clock (and likely
                // holds): now its wall clock jumps.
                world.clients[c].jump_wall_clock(secs)?;
            }
            if let Undo::RealClock(c) | Undo::JumpThenRealClock(c, _) = undo {
                self.clock = Some((id, c, CLOCK_FAULT));
                continue;
            }
            match undo {
                Undo::Nothing => {}
                Undo::Heal => {
                    if let Some(n) = &world.network {
                        n.heal().map_err(|e| e.to_string())?;
                    }
                }
                Undo::ResumeMember(i) => {
                    let member = &mut cluster(world)?.members[i];
                    blocking(|| member.resume())
                }
                Undo::RestartMember(i) => {
                    let member = &mut cluster(world)?.members[i];
                    blocking(|| member.restart()).map_err(|e| e.to_string())?
                }
                Undo::RestartApiserver(i) => {
                    let member = &mut cluster(world)?.members[i];
                    blocking(|| member.restart()).map_err(|e| e.to_string())?;
                    if world.workload() == Workload::Coordinated {
                        kube_admin(world, AdminAction::ReleaseDeadController).await;
                    }
                }
                Undo::RestartCluster => {
                    let cluster = cluster(world)?;
                    blocking(|| cluster.restart_dead()).map_err(|e| e.to_string())?
                }
                Undo::ResumeClient(c) => world.clients[c].signal(Signal::CONT),
                // Unless another fault (a clock fault ending) started it.
                Undo::RestartClient(c) if !world.clients[c].is_running() => {
                    world.start_client(c).await?
                }
                Undo::RestartClient(_) => {}
                Undo::RestartStorage => world.storage.restart().await?,
                Undo::ResumeStorage => world.storage.signal(Signal::CONT).await,
                Undo::RestartPostgres => postgres(world)?.restart().await?,
                Undo::ResumePostgres => postgres(world)?.signal(Signal::CONT).await,
                // Deferred above.
                Undo::RealClock(_) | Undo::JumpThenRealClock(..) => {}
            }
            world.recorder.record(NEMESIS, EventKind::FaultEnd { id });
        }
        Ok(())
    }

    /// Ends a clock fault still running: the client goes back to the real
    /// clock (a new process).
    pub async fn finish(&mut self, world: &mut World) -> Result<(), String> {
        if let Some((id, c, _)) = self.clock.take() {
            crash(world, c).await;
            world.clients[c].clock = None;
            world.start_client(c).await?;
            world.recorder.record(NEMESIS, EventKind::FaultEnd { id });
        }
        Ok(())
    }

    /// The client to cut off or pause: mostly one in a long hold (held
    /// past the longest short hold, waiting up to 1.5 s for one to
    /// appear), the case that tests a lease; sometimes any.
    ///
    /// Both draws are made whatever happens next, so that the generator's
    /// sequence, and with it the rest of the schedule, does not depend on
    /// what the clients were doing: `--seed` replays every fault's kind,
    /// length and order, and only the target of a "long hold" choice
    /// depends on the run.
    async fn victim(&mut self, world: &World) -> usize {
        let wait_for_long = self.rng.below(4) != 0;
        let any = self.rng.below(self.clients);
        if wait_for_long {
            let waited = Instant::now();
            while waited.elapsed() < Duration::from_millis(1500) {
                let holders = world.recorder.holders();
                let long = holders.iter().find(|(_, held)| *held > LONG_HOLD_NS);
                if let Some(c) =
                    long.and_then(|(name, _)| world.clients.iter().position(|c| &c.name == name))
                {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        any
    }

    /// Starts one fault; returns its target's name and how to undo it.
    async fn apply(&mut self, world: &mut World, fault: Fault) -> Result<(String, Undo), String> {
        match fault {
            Fault::PauseClient
            | Fault::KillClient
            | Fault::ClockSlow
            | Fault::ClockFast
            | Fault::WallJumpForward
            | Fault::WallJumpBack => self.apply_to_client(world, fault).await,
            Fault::KillStorage => {
                world.storage.kill().await;
                Ok(("storage".into(), Undo::RestartStorage))
            }
            Fault::PauseStorage => {
                world.storage.signal(Signal::STOP).await;
                Ok(("storage".into(), Undo::ResumeStorage))
            }
            Fault::KillPostgres => {
                postgres(world)?.kill().await;
                Ok(("postgres".into(), Undo::RestartPostgres))
            }
            Fault::PausePostgres => {
                postgres(world)?.signal(Signal::STOP).await;
                Ok(("postgres".into(), Undo::ResumePostgres))
            }
            _ => self.apply_to_cluster(world, fault).await,
        }
    }

    /// A fault of the members, the links, or the apiserver.
    async fn apply_to_cluster(
        &mut self,
        world: &mut World,
        fault: Fault,
    ) -> Result<(String, Undo), String> {
        let all = cluster(world)?.members.len();
        let members = all.min(VOTERS);
        let leader = cluster(world)?.leader();
        let member_hosts: Vec<_> = cluster(world)?
            .members
            .iter()
            .map(|m| m.host.clone())
            .collect();
        let net = || world.network.as_ref().ok_or("no network");
        match fault {
            Fault::PartitionFollower | Fault::PartitionLeader => {
                // Drawn whether used or not (see `victim`).
                let follower = self.rng.below(members.saturating_sub(1).max(1));
                let any = self.rng.below(members);
                let victim = match (fault, leader) {
                    (Fault::PartitionLeader, Some(l)) => l,
                    // The follower the current holder talks to, if it is
                    // pinned to one: the case where a cut-off follower
                    // keeps a lease alive that the leader has expired.
                    (_, Some(l)) => match world.recorder.holder_member(members) {
                        Some(m) if m != l => m,
                        _ => (l + 1 + follower) % members,
                    },
                    (_, None) => any,
                };
                net()?
                    .isolate(&member_hosts, victim)
                    .map_err(|e| e.to_string())?;
                Ok((format!("m{}", victim + 1), Undo::Heal))
            }
            Fault::DeposeLeader => {
                let any = self.rng.below(members);
                let old = leader.unwrap_or(any);
                net()?
                    .isolate(&member_hosts, old)
                    .map_err(|e| e.to_string())?;
                for i in (0..members).filter(|&i| i != old) {
                    let member = &mut cluster(world)?.members[i];
                    blocking(|| member.restart()).map_err(|e| e.to_string())?;
                }
                Ok((format!("m{}", old + 1), Undo::Heal))
            }
            Fault::DeposeDistantLeader => {
                wait_for_holder(world, DISTANT).await;
                let moved = match leader {
                    Some(l) if l == DISTANT => "led already".to_owned(),
                    Some(l) => move_leader(world, l, DISTANT).await,
                    None => "no leader to move".to_owned(),
                };
                net()?
                    .isolate(&member_hosts, DISTANT)
                    .map_err(|e| e.to_string())?;
                Ok((format!("m{}: {moved}", DISTANT + 1), Undo::Heal))
            }
            Fault::PartitionBridge => {
                let bridge = self.rng.below(members);
                let (a, b) = ((bridge + 1) % members, (bridge + 2) % members);
                net()?
                    .cut(&member_hosts[a], &member_hosts[b])
                    .map_err(|e| e.to_string())?;
                Ok((
                    format!("m{}|m{} via m{}", a + 1, b + 1, bridge + 1),
                    Undo::Heal,
                ))
            }
            Fault::KillCluster => {
                for member in &mut cluster(world)?.members[..members] {
                    blocking(|| member.kill());
                }
                Ok(("every member".into(), Undo::RestartCluster))
            }
            Fault::CompactDefrag => {
                let i = self.rng.below(members);
                let done = maintain(world, i).await;
                Ok((format!("m{}: {done}", i + 1), Undo::Nothing))
            }
            Fault::DeleteHolders => {
                let i = self.rng.below(members);
                let done = delete_holders(world, i).await;
                Ok((format!("m{}: {done}", i + 1), Undo::Nothing))
            }
            Fault::KillLeader | Fault::PauseLeader | Fault::KillMember | Fault::PauseMember => {
                // One draw either way, so a seed replays the same members.
                let any = self.rng.below(members);
                let on_leader = matches!(fault, Fault::KillLeader | Fault::PauseLeader);
                let i = if on_leader {
                    leader.unwrap_or(any)
                } else {
                    any
                };
                let member = &mut cluster(world)?.members[i];
                let undo = if matches!(fault, Fault::PauseLeader | Fault::PauseMember) {
                    blocking(|| member.pause());
                    Undo::ResumeMember(i)
                } else {
                    blocking(|| member.kill());
                    Undo::RestartMember(i)
                };
                Ok((format!("m{}", i + 1), undo))
            }
            Fault::PartitionClient => {
                let c = self.victim(world).await;
                let host = world.clients[c]
                    .host
                    .clone()
                    .ok_or("client without a host")?;
                let all: Vec<_> = member_hosts.iter().collect();
                net()?.split(&[&host], &all).map_err(|e| e.to_string())?;
                Ok((world.clients[c].name.clone(), Undo::Heal))
            }
            Fault::KillApiserver | Fault::PauseApiserver => {
                let api = all - 1;
                let member = &mut cluster(world)?.members[api];
                if fault == Fault::PauseApiserver {
                    blocking(|| member.pause());
                    Ok(("apiserver".into(), Undo::ResumeMember(api)))
                } else {
                    blocking(|| member.kill());
                    Ok(("apiserver".into(), Undo::RestartApiserver(api)))
                }
            }
            Fault::DeleteLeases => {
                let done = kube_admin(world, AdminAction::DeleteLeases).await;
                Ok((done, Undo::Nothing))
            }
            Fault::PromoteStandby => {
                let old = leader.unwrap_or(0);
                let cluster = cluster(world)?;
                let done = blocking(|| cluster.fail_over(old, 1 - old))?;
                Ok((done, Undo::Nothing))
            }
            _ => Err(format!("{} is not a cluster fault", fault.name())),
        }
    }

    /// A fault of one client process or its clock.
    async fn apply_to_client(
        &mut self,
        world: &mut World,
        fault: Fault,
    ) -> Result<(String, Undo), String> {
        match fault {
            Fault::PauseClient => {
                let c = self.victim(world).await;
                world.clients[c].signal(Signal::STOP);
                Ok((world.clients[c].name.clone(), Undo::ResumeClient(c)))
            }
            Fault::KillClient => {
                let c = self.rng.below(self.clients);
                crash(world, c).await;
                Ok((world.clients[c].name.clone(), Undo::RestartClient(c)))
            }
            Fault::ClockSlow | Fault::ClockFast => {
                let c = self.rng.below(self.clients);
                crash(world, c).await;
                world.clients[c].clock = Some(Clock::Rate(if fault == Fault::ClockSlow {
                    "x0.5"
                } else {
                    "x2"
                }));
                world.start_client(c).await?;
                Ok((world.clients[c].name.clone(), Undo::RealClock(c)))
            }
            Fault::WallJumpForward | Fault::WallJumpBack => {
                let c = self.rng.below(self.clients);
                crash(world, c).await;
                world.clients[c].clock = Some(Clock::WallFile);
                world.start_client(c).await?;
                let secs = if fault == Fault::WallJumpForward {
                    600
                } else {
                    -600
                };
                Ok((
                    world.clients[c].name.clone(),
                    Undo::JumpThenRealClock(c, secs),
                ))
            }
            _ => Err(format!("{} is not a client fault", fault.name())),
        }
    }
}

/// SIGKILLs client `c` and records that its holds ended there.
async fn crash(world: &mut World, c: usize) {
    world.clients[c].kill().await;
    let name = world.clients[c].name.clone();
    world.recorder.record(&name, EventKind::Crash {});
}

fn postgres(world: &World) -> Result<&crate::pg_storage::PgStore, String> {
    world
        .postgres
        .as_deref()
        .ok_or_else(|| "no PostgreSQL server".to_string())
}

fn cluster(world: &mut World) -> Result<&mut fencing_harness::namespaced::Cluster, String> {
    world
        .cluster
        .as_mut()
        .ok_or_else(|| "no cluster".to_owned())
}

/// Compacts the history and defragments member `i` (etcd only); says what
/// happened, for the history.
async fn maintain(world: &World, i: usize) -> String {
    let Some(cluster) = world.cluster.as_ref() else {
        return "no cluster".into();
    };
    let member = &cluster.members[i];
    let mut cmd = member.host.command(world.exe());
    cmd.args(["maintain", "--endpoint", &cluster.endpoint(i)]);
    helper_output(cmd, Duration::from_secs(10)).await
}

/// Deletes each lock's holder key or node through member `i`.
async fn delete_holders(world: &World, i: usize) -> String {
    let Some(cluster) = world.cluster.as_ref() else {
        return "no cluster".into();
    };
    let mut cmd = cluster.members[i].host.command(world.exe());
    cmd.args(["delete-holders", "--endpoint", &cluster.endpoint(i)])
        .args(["--locks", &world.locks().len().to_string()]);
    if matches!(cluster.kind, Kind::Zk(_)) {
        cmd.arg("--zookeeper");
    }
    helper_output(cmd, Duration::from_secs(10)).await
}

/// Waits (at most 4 s) until the client pinned to member `m` holds a lock.
async fn wait_for_holder(world: &World, m: usize) {
    let name = &world.clients[m].name;
    let waited = Instant::now();
    while waited.elapsed() < Duration::from_secs(4) {
        if world.recorder.holders().iter().any(|(c, _)| c == name) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asks etcd member `leader` to hand leadership to member `to`.
async fn move_leader(world: &World, leader: usize, to: usize) -> String {
    let Some(cluster) = world.cluster.as_ref() else {
        return "no cluster".into();
    };
    let mut cmd = cluster.members[leader].host.command(world.exe());
    cmd.args(["move-leader", "--endpoint", &cluster.endpoint(leader)])
        .args(["--to", &format!("m{}", to + 1)]);
    helper_output(cmd, Duration::from_secs(10)).await
}

/// Runs a helper job of the campaign binary; its output, or why it failed.
async fn helper_output(cmd: std::process::Command, limit: Duration) -> String {
    let run = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(limit, run).await {
        Ok(Ok(out)) if out.status.success() => {
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
        Ok(Ok(out)) => format!("failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        Ok(Err(e)) => format!("failed: {e}"),
        Err(_) => format!("failed: no answer within {limit:?}"),
    }
}

/// Runs `campaign kube-admin` in the apiserver's namespace; says what
/// happened, for the history.
pub async fn kube_admin(world: &World, action: AdminAction) -> String {
    use clap::ValueEnum;
    let Some(cluster) = world.cluster.as_ref() else {
        return "no cluster".into();
    };
    let (Some(api), Some(kubeconfig)) = (cluster.members.last(), &cluster.kubeconfig) else {
        return "no apiserver".into();
    };
    let mut cmd = api.host.command(world.exe());
    cmd.arg("kube-admin")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--locks")
        .arg(world.locks().len().to_string())
        .arg("--action")
        .arg(
            action
                .to_possible_value()
                .map_or("?".into(), |v| v.get_name().to_owned()),
        );
    helper_output(cmd, Duration::from_secs(10)).await
}
