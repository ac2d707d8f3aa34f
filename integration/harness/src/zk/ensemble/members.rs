//! The ensemble's servers as members the fault tests can kill, pause
//! and restart.

use super::*;

impl MemberCluster for ZkEnsemble {
    type Error = ZkHarnessError;

    fn member_count(&self) -> usize {
        self.servers.len()
    }

    fn member(&self, i: usize) -> Option<&MemberProcess> {
        self.servers.get(i).map(|m| &m.process)
    }

    fn start_member(&mut self, i: usize) -> Result<(), ZkHarnessError> {
        self.servers[i]
            .process
            .start(&mut self.command(i))
            .map_err(|e| {
                ZkHarnessError::io(format!("starting server {i} ({})", self.java.display()), e)
            })
    }

    /// Waits (at most 45 s) until every running, unpaused server answers
    /// `srvr` as a serving leader, follower or standalone server, with
    /// exactly one leader, and opens and closes a session (a quorum
    /// transaction) through each. Fails early, with the server's log tail, when a
    /// server process has exited.
    async fn wait_healthy(&self) -> Result<(), ZkHarnessError> {
        self.poll("becoming healthy", STARTUP_TIMEOUT)
            .await
            .map(|_| ())
    }

    /// The index of the current leader (of the standalone server for a
    /// single server): the one live server reporting `Mode: leader`, with
    /// every other live server serving as a follower and a session opening
    /// through each (the checks of [`ZkEnsemble::wait_healthy`]). Waits up
    /// to 20 s for an election to settle.
    async fn leader(&self) -> Result<usize, ZkHarnessError> {
        self.poll("electing a leader", LEADER_TIMEOUT).await
    }

    fn out_of_range(&self, i: usize) -> ZkHarnessError {
        ZkHarnessError::Usage(format!(
            "server {i} out of range: the ensemble has {}",
            self.servers.len()
        ))
    }

    fn member_exited(&self, i: usize, status: ExitStatus, log: String) -> ZkHarnessError {
        ZkHarnessError::ServerExited {
            server: i,
            status: status.to_string(),
            log,
        }
    }
}
