//! What the clients do, the locks they contend for, and their names.

use super::Config;
use crate::checker;
use fencing_harness::namespaced::Kind;

/// The most locks a campaign spreads its clients over (one letter each).
pub const MAX_LOCKS: usize = 26;

/// The names of the `n` locks the clients contend for (`campaign-a`,
/// `campaign-b`, ...; at least one, at most [`MAX_LOCKS`]). Client `i`
/// takes lock `i % n`: with two, the default, each lock still changes hands
/// often and the grants per minute double; a soak spreads more clients over
/// more locks to make more grants per hour.
pub fn lock_names(n: usize) -> Vec<String> {
    (b'a'..=b'z')
        .take(n.clamp(1, MAX_LOCKS))
        .map(|letter| format!("campaign-{}", char::from(letter)))
        .collect()
}
/// In the lock workload, this client ignores its grant's loss and writes
/// through its whole hold (see [`checker::CARELESS_PREFIX`]); the others
/// stop at `lost()`, so only this one makes sure the gates see late writes.
const CARELESS_CLIENT: usize = 2;

/// What the clients do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Take the lock, write through the gates, release.
    Lock,
    /// Campaign as `LeaderElector` candidates (`LeaderElector::run` with
    /// gated work).
    Elect,
    /// Run `fence run`, whose command writes with `FENCING_TOKEN`
    /// ([`crate::fence_run`]).
    FenceRun,
    /// Kubernetes only: stand in two elections at once as candidates of
    /// kube-apiserver's coordinated leader election, then hold, write and
    /// release as the lock workload does ([`crate::coordinated`]).
    Coordinated,
}

impl Workload {
    /// Whether this workload can run on `kind` with `locks` locks and,
    /// with `anchor`, an anchor client; why not otherwise.
    pub fn fits(self, kind: Kind, locks: usize, anchor: bool) -> Result<(), String> {
        if self != Workload::Coordinated {
            return Ok(());
        }
        if kind != Kind::Kube {
            return Err("--workload coordinated runs on --backend kube only".into());
        }
        if locks < crate::coordinated::ELECTIONS {
            return Err(format!(
                "--workload coordinated needs --locks {} or more: each client stands in \
                 two elections, on two Leases",
                crate::coordinated::ELECTIONS
            ));
        }
        if anchor {
            return Err(
                "--workload coordinated has no anchor (client-go's elector would take the \
                 Leases the election controller manages)"
                    .into(),
            );
        }
        Ok(())
    }
}

impl Config {
    /// Client `i`'s name (also its namespace's): `c1`, `c2`, ..., the
    /// anchor `go<N>` (etcd), `curator<N>` (ZooKeeper) or `clientgo<N>`
    /// (Kubernetes).
    pub(super) fn client_name(&self, i: usize) -> String {
        if self.anchor && i + 1 == self.clients {
            let [go, curator, client_go] = checker::ANCHOR_PREFIXES;
            let prefix = match self.kind {
                Kind::Zk(_) => curator,
                Kind::Kube => client_go,
                Kind::Etcd(_) | Kind::Local | Kind::Pg => go,
            };
            format!("{prefix}{}", i + 1)
        } else if self.workload == Workload::Lock && i == CARELESS_CLIENT {
            format!("{}{}", checker::CARELESS_PREFIX, i + 1)
        } else {
            format!("c{}", i + 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_are_distinct_resource_names_within_bounds() {
        assert_eq!(lock_names(2), ["campaign-a", "campaign-b"]);
        assert_eq!(lock_names(0), ["campaign-a"]);
        let all = lock_names(MAX_LOCKS + 5);
        assert_eq!(all.len(), MAX_LOCKS);
        assert_eq!(all.last().map(String::as_str), Some("campaign-z"));
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), MAX_LOCKS);
        for name in &all {
            assert!(fencing::ResourceName::new(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn coordinated_runs_on_kubernetes_with_two_leases_and_no_anchor() {
        assert!(Workload::Coordinated.fits(Kind::Kube, 2, false).is_ok());
        let local = Workload::Coordinated.fits(Kind::Local, 2, false);
        assert!(local.unwrap_err().contains("kube only"));
        let one = Workload::Coordinated.fits(Kind::Kube, 1, false);
        assert!(one.unwrap_err().contains("--locks 2"));
        let anchor = Workload::Coordinated.fits(Kind::Kube, 2, true);
        assert!(anchor.unwrap_err().contains("no anchor"));
        // The other workloads keep what they accepted.
        assert!(Workload::Lock.fits(Kind::Local, 1, true).is_ok());
    }
}
