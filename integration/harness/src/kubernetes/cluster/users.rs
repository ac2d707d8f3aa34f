//! The clients the tests connect as, each with its own credentials and RBAC.

use super::*;

/// The identities the harness makes client certificates for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KubeUser {
    /// `admin` in group `system:masters`: may do anything.
    Admin,
    /// `lease-user`: bound by `deploy/kubernetes/rbac.yaml` in
    /// [`TEST_NAMESPACE`] (get, create, update on leases there, nothing else).
    LeaseUser,
    /// `lease-reader`: may only get leases in [`TEST_NAMESPACE`].
    LeaseReader,
    /// `lease-candidate`: bound by `deploy/kubernetes/rbac-coordinated.yaml`
    /// in [`TEST_NAMESPACE`] (the Lease verbs, and get, create, update and
    /// delete on leasecandidates there).
    LeaseCandidate,
    /// `nobody`: authenticated, but bound to nothing.
    Nobody,
    /// A certificate for `admin` in `system:masters` signed by a CA the
    /// server does not trust: every request is 401 Unauthorized.
    Untrusted,
}

impl KubeUser {
    /// Every user, in declaration order.
    pub const ALL: [KubeUser; 6] = [
        KubeUser::Admin,
        KubeUser::LeaseUser,
        KubeUser::LeaseReader,
        KubeUser::LeaseCandidate,
        KubeUser::Nobody,
        KubeUser::Untrusted,
    ];

    /// The user name: the common name of its certificate.
    pub fn name(self) -> &'static str {
        match self {
            KubeUser::Admin => "admin",
            KubeUser::LeaseUser => "lease-user",
            KubeUser::LeaseReader => "lease-reader",
            KubeUser::LeaseCandidate => "lease-candidate",
            KubeUser::Nobody => "nobody",
            KubeUser::Untrusted => "untrusted-admin",
        }
    }

    /// The certificate's common name and organization (the user's group).
    pub(in crate::kubernetes) fn subject(self) -> (&'static str, Option<&'static str>) {
        match self {
            KubeUser::Admin | KubeUser::Untrusted => ("admin", Some("system:masters")),
            other => (other.name(), None),
        }
    }
}

impl fmt::Display for KubeUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
