//! The cluster's members as processes the fault tests can kill, pause
//! and restart.

use super::*;

impl MemberCluster for EtcdCluster {
    type Error = HarnessError;

    fn member_count(&self) -> usize {
        self.members.len()
    }

    fn member(&self, i: usize) -> Option<&MemberProcess> {
        self.members.get(i).map(|m| &m.process)
    }

    fn start_member(&mut self, i: usize) -> Result<(), HarnessError> {
        let m = &self.members[i];
        m.process.start(&mut self.command(i)).map_err(|e| {
            let what = format!("starting {} ({})", m.process.name(), self.binary.display());
            HarnessError::io(what, e)
        })
    }

    /// Waits (at most the startup timeout) until every running, unpaused
    /// member answers a linearizable read and knows a leader. Fails early,
    /// with the member's log tail, when a member process has exited.
    async fn wait_healthy(&self) -> Result<(), HarnessError> {
        let timeout = self.opts.startup_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            let last = match self.health_round().await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(self.timeout_error("becoming healthy", timeout, &last));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The index of the current raft leader: a live member that reports
    /// itself as leader and that a majority of the cluster's members
    /// confirm. Waits up to 15 s for an election to settle.
    async fn leader(&self) -> Result<usize, HarnessError> {
        let deadline = Instant::now() + LEADER_TIMEOUT;
        loop {
            let last = match self.leader_round().await {
                Ok(i) => return Ok(i),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(self.timeout_error("electing a leader", LEADER_TIMEOUT, &last));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn out_of_range(&self, i: usize) -> HarnessError {
        HarnessError::Usage(format!(
            "member {i} out of range: the cluster has {}",
            self.members.len()
        ))
    }

    fn member_exited(&self, i: usize, status: ExitStatus, log: String) -> HarnessError {
        HarnessError::MemberExited {
            member: i,
            status: status.to_string(),
            log,
        }
    }
}
