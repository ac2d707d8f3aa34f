//! The seeded fault schedule. Each step runs one cluster fault and one
//! client fault at the same time, holds them, heals them, and waits a gap.

use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::history::{EventKind, NEMESIS};
use super::rng::Rng;
use super::run::World;

/// One fault. Members and clients are chosen when the fault starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A follower cut off from the other members; its clients still reach it.
    PartitionFollower,
    /// The leader cut off from the other members.
    PartitionLeader,
    /// Two members cut from each other; the third reaches both.
    PartitionBridge,
    /// One client cut off from every member.
    PartitionClient,
    PauseMember,
    KillMember,
    PauseClient,
    KillClient,
    /// A client restarted with its clocks (wall and monotonic) at half speed.
    ClockSlow,
    /// A client restarted with its clocks at double speed.
    ClockFast,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::PartitionFollower => "partition-follower",
            Fault::PartitionLeader => "partition-leader",
            Fault::PartitionBridge => "partition-bridge",
            Fault::PartitionClient => "partition-client",
            Fault::PauseMember => "pause-member",
            Fault::KillMember => "kill-member",
            Fault::PauseClient => "pause-client",
            Fault::KillClient => "kill-client",
            Fault::ClockSlow => "clock-slow",
            Fault::ClockFast => "clock-fast",
        }
    }
}

/// Partitions between members come up most often: they are what leases
/// get wrong.
const CLUSTER_FAULTS: [Fault; 7] = [
    Fault::PartitionFollower,
    Fault::PartitionFollower,
    Fault::PartitionFollower,
    Fault::PartitionLeader,
    Fault::PartitionBridge,
    Fault::PauseMember,
    Fault::KillMember,
];
const CLIENT_FAULTS: [Fault; 5] = [
    Fault::PartitionClient,
    Fault::PauseClient,
    Fault::KillClient,
    Fault::ClockSlow,
    Fault::ClockFast,
];

/// One step of the schedule.
#[derive(Clone, Debug)]
pub struct Step {
    pub cluster: Fault,
    pub client: Fault,
    pub duration: Duration,
    pub gap: Duration,
}

/// How to undo one started fault.
enum Undo {
    Heal,
    ResumeMember(usize),
    RestartMember(usize),
    ResumeClient(usize),
    RestartClient(usize),
    /// Kill the client running on a faked clock, start it on the real one.
    RealClock(usize),
}

/// The faults of one step, to be ended together.
pub struct Started(Vec<(u64, Undo)>);

pub struct Nemesis {
    rng: Rng,
    clients: usize,
    next_id: u64,
    /// A clock fault outlives its step (a restarted client needs time to
    /// connect and hold on its odd clock): its id, client and end.
    clock: Option<(u64, usize, Instant)>,
}

/// How long a client runs on a faked clock.
const CLOCK_FAULT: Duration = Duration::from_secs(6);

impl Nemesis {
    pub fn new(rng: Rng, clients: usize) -> Self {
        Nemesis {
            rng,
            clients,
            next_id: 0,
            clock: None,
        }
    }

    pub fn next_step(&mut self) -> Step {
        Step {
            cluster: *self.rng.pick(&CLUSTER_FAULTS),
            // One client on a faked clock at a time.
            client: *self.rng.pick(if self.clock.is_some() {
                &CLIENT_FAULTS[..3]
            } else {
                &CLIENT_FAULTS[..]
            }),
            duration: self
                .rng
                .duration(Duration::from_millis(800), Duration::from_millis(2500)),
            gap: self
                .rng
                .duration(Duration::from_millis(300), Duration::from_millis(800)),
        }
    }

    pub async fn start(
        &mut self,
        world: &mut World,
        cluster_fault: &Fault,
        client_fault: &Fault,
    ) -> Result<Started, String> {
        let mut started = Vec::new();
        for fault in [*cluster_fault, *client_fault] {
            let (target, undo) = self.apply(world, fault).await?;
            self.next_id += 1;
            let id = self.next_id;
            world.recorder.record(
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
        if self
            .clock
            .is_some_and(|(_, _, until)| Instant::now() >= until)
        {
            self.finish(world).await?;
        }
        for (id, undo) in started.0 {
            if let Undo::RealClock(c) = undo {
                self.clock = Some((id, c, Instant::now() + CLOCK_FAULT));
                continue;
            }
            match undo {
                Undo::Heal => {
                    if let Some(n) = &world.network {
                        n.heal().map_err(|e| e.to_string())?;
                    }
                }
                Undo::ResumeMember(i) => cluster(world)?.members[i].resume(),
                Undo::RestartMember(i) => cluster(world)?.members[i]
                    .restart()
                    .map_err(|e| e.to_string())?,
                Undo::ResumeClient(c) => world.clients[c].signal(Signal::CONT),
                // Unless another fault (a clock fault ending) started it.
                Undo::RestartClient(c) if !world.clients[c].is_running() => {
                    world.start_client(c).await?
                }
                Undo::RestartClient(_) => {}
                // Deferred above.
                Undo::RealClock(_) => {}
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

    /// Starts one fault; returns its target's name and how to undo it.
    async fn apply(&mut self, world: &mut World, fault: Fault) -> Result<(String, Undo), String> {
        let members = cluster(world)?.members.len();
        let leader = cluster(world)?.leader();
        let member_hosts: Vec<_> = cluster(world)?
            .members
            .iter()
            .map(|m| m.host.clone())
            .collect();
        let net = || world.network.as_ref().ok_or("no network");
        match fault {
            Fault::PartitionFollower | Fault::PartitionLeader => {
                let victim = match (fault, leader) {
                    (Fault::PartitionLeader, Some(l)) => l,
                    // The follower the current holder talks to, if it is
                    // pinned to one: the case where a cut-off follower
                    // keeps a lease alive that the leader has expired.
                    (_, Some(l)) => match world.recorder.holder_member(members) {
                        Some(m) if m != l => m,
                        _ => (l + 1 + self.rng.below(members - 1)) % members,
                    },
                    (_, None) => self.rng.below(members),
                };
                let others: Vec<_> = (0..members).filter(|&i| i != victim).collect();
                let rest: Vec<_> = others.iter().map(|&i| &member_hosts[i]).collect();
                net()?
                    .split(&[&member_hosts[victim]], &rest)
                    .map_err(|e| e.to_string())?;
                Ok((format!("m{}", victim + 1), Undo::Heal))
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
            Fault::PauseMember | Fault::KillMember => {
                let i = self.rng.below(members);
                let member = &mut cluster(world)?.members[i];
                if fault == Fault::PauseMember {
                    member.pause();
                    Ok((format!("m{}", i + 1), Undo::ResumeMember(i)))
                } else {
                    member.kill();
                    Ok((format!("m{}", i + 1), Undo::RestartMember(i)))
                }
            }
            Fault::PartitionClient => {
                let c = self.rng.below(self.clients);
                let host = world.clients[c]
                    .host
                    .clone()
                    .ok_or("client without a host")?;
                let all: Vec<_> = member_hosts.iter().collect();
                net()?.split(&[&host], &all).map_err(|e| e.to_string())?;
                Ok((world.clients[c].name.clone(), Undo::Heal))
            }
            Fault::PauseClient => {
                let c = self.rng.below(self.clients);
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
                world.clients[c].clock = Some(if fault == Fault::ClockSlow {
                    "x0.5"
                } else {
                    "x2"
                });
                world.start_client(c).await?;
                Ok((world.clients[c].name.clone(), Undo::RealClock(c)))
            }
        }
    }
}

/// SIGKILLs client `c` and records that its holds ended there.
async fn crash(world: &mut World, c: usize) {
    world.clients[c].kill().await;
    let name = world.clients[c].name.clone();
    world.recorder.record(&name, EventKind::Crash {});
}

fn cluster(world: &mut World) -> Result<&mut super::members::Cluster, String> {
    world
        .cluster
        .as_mut()
        .ok_or_else(|| "no cluster".to_owned())
}
