//! Members whose process ended by itself during a run. No fault does
//! that (a kill is the nemesis's, and recorded), so each one is a server
//! that crashed or refused to start, leaving the cluster a member short
//! until a fault restarts it: the summary names them, so that a run's
//! liveness figures are not read as the full cluster's.

use std::collections::BTreeMap;

use fencing_harness::namespaced::Cluster;

/// Every member that exited by itself, by index.
#[derive(Debug, Default)]
pub struct MemberExits(BTreeMap<usize, Exits>);

#[derive(Debug)]
struct Exits {
    count: u32,
    /// When the first was noticed, in UTC as the members' logs write it.
    first: String,
    /// The last one's status and reason, from its log.
    status: String,
    reason: String,
}

impl MemberExits {
    /// Notes the members whose process ended since the last look (a look
    /// reaps it, so a later restart of dead members starts it again).
    pub fn look(&mut self, cluster: &Cluster) {
        for (i, member) in cluster.members.iter().enumerate() {
            let Some(status) = member.exited() else {
                continue;
            };
            let exits = self.0.entry(i).or_insert_with(|| Exits {
                count: 0,
                first: k8s_openapi::jiff::Timestamp::now().to_string(),
                status: String::new(),
                reason: String::new(),
            });
            exits.count += 1;
            exits.status = status.to_string();
            exits.reason = exit_reason(&member.log_tail());
        }
    }

    /// One line per member, for the summary.
    pub fn lines(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|(i, e)| {
                format!(
                    "m{} exited by itself {} time(s), first noticed at {}; the last ({}): {}",
                    i + 1,
                    e.count,
                    e.first,
                    e.status,
                    e.reason
                )
            })
            .collect()
    }
}

/// The line of a log tail that says why the process ended: the last
/// exception's message (a JVM prints the cause last) or the last fatal
/// or error line, else the last line.
fn exit_reason(tail: &str) -> String {
    let lines: Vec<&str> = tail
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let last_with = |marks: &[&str]| {
        lines
            .iter()
            .rev()
            .find(|l| marks.iter().any(|m| l.contains(m)))
            .copied()
    };
    last_with(&["Exception: "])
        .or_else(|| {
            last_with(&[
                "\"level\":\"fatal\"",
                "\"level\":\"panic\"",
                "panic:",
                "ERROR",
            ])
        })
        .or_else(|| lines.last().copied())
        .unwrap_or("(empty log)")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::exit_reason;

    #[test]
    fn the_reason_is_the_last_exception_then_the_last_error_line() {
        let zookeeper = "INFO Snapshot loaded\n\
             ERROR QuorumPeer - Unable to load database on disk\n\
             java.io.IOException: The current epoch, a, is older than the last zxid, 1\n\
             \tat org.apache.zookeeper.server.quorum.QuorumPeer.loadDataBase\n\
             Caused by: java.io.IOException: The current epoch, a, is older than the last zxid, 2\n\
             \t... 4 more\n\
             ERROR ServiceUtils - Exiting JVM with code 1\n";
        assert_eq!(
            exit_reason(zookeeper),
            "Caused by: java.io.IOException: The current epoch, a, is older than the last zxid, 2"
        );
        let etcd = "{\"level\":\"info\",\"msg\":\"starting\"}\n\
             {\"level\":\"fatal\",\"msg\":\"failed to open WAL\"}\n\
             {\"level\":\"info\",\"msg\":\"closing\"}\n";
        assert_eq!(
            exit_reason(etcd),
            "{\"level\":\"fatal\",\"msg\":\"failed to open WAL\"}"
        );
        assert_eq!(exit_reason("first\nlast\n\n"), "last");
        assert_eq!(exit_reason(""), "(empty log)");
    }
}
