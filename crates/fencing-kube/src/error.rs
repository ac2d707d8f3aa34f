//! kube client errors as `fencing_core::Error`, naming the verb, the Lease,
//! the namespace and the apiserver.

use fencing_core::Error;

/// The call an error came from, for its message.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call<'a> {
    pub(crate) verb: &'static str,
    /// `Lease` or `LeaseCandidate`.
    pub(crate) kind: &'static str,
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    pub(crate) server: &'a str,
}

impl std::fmt::Display for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name.is_empty() {
            write!(f, "{} on {}", self.verb, self.server)
        } else if self.namespace.is_empty() {
            write!(
                f,
                "{} {} {} on {}",
                self.verb, self.kind, self.name, self.server
            )
        } else {
            write!(
                f,
                "{} {} {}/{} on {}",
                self.verb, self.kind, self.namespace, self.name, self.server
            )
        }
    }
}

/// How a failed call ended: the two answers the algorithms branch on, or
/// an error for the caller.
#[derive(Debug)]
pub(crate) enum Failure {
    /// 409: the resourceVersion precondition failed, or the Lease already
    /// exists. Someone else wrote first.
    Conflict,
    /// 404: the Lease (or, on create, its namespace) does not exist.
    NotFound,
    /// Anything else, already mapped.
    Other(Error),
}

impl Failure {
    /// The error for a caller that has no special use for 409 or 404.
    pub(crate) fn into_error(self, call: Call<'_>) -> Error {
        match self {
            Failure::Other(e) => e,
            Failure::Conflict => Error::backend(
                call.to_string(),
                "conflict (409): another client wrote the Lease first",
            ),
            Failure::NotFound => Error::backend(call.to_string(), "not found (404)"),
        }
    }
}

/// Sorts a kube error into the cases above. `limit` is the request's time
/// limit, reported when the connection itself timed out.
pub(crate) fn classify(call: Call<'_>, err: kube::Error, limit: std::time::Duration) -> Failure {
    match err {
        kube::Error::Api(status) => match status.code {
            409 => Failure::Conflict,
            404 => Failure::NotFound,
            401 => Failure::Other(Error::PermissionDenied(format!(
                "{call}: credentials rejected (401 Unauthorized): {}",
                status.message
            ))),
            403 => Failure::Other(Error::PermissionDenied(format!(
                "{call}: forbidden (403); the user needs RBAC verb {:?} on {}.coordination.k8s.io in namespace {:?}: {}",
                rbac_verb(call.verb),
                if call.kind == "LeaseCandidate" { "leasecandidates" } else { "leases" },
                call.namespace,
                status.message
            ))),
            code => Failure::Other(Error::backend(
                call.to_string(),
                format!("apiserver answered {code} {}: {}", status.reason, status.message),
            )),
        },
        kube::Error::Auth(e) => Failure::Other(Error::PermissionDenied(format!(
            "{call}: could not load the client credentials: {e}"
        ))),
        other if timed_out_inside(&other) => Failure::Other(timed_out(call, limit)),
        other => {
            tracing::debug!(%call, error = ?other, "apiserver request failed");
            match fencing_core::__private::connect_failure(&other) {
                Some(reason) => Failure::Other(Error::unreachable(
                    "the Kubernetes apiserver",
                    call.server,
                    reason,
                )),
                None => Failure::Other(Error::backend(
                    format!("{call}: could not reach the apiserver"),
                    other,
                )),
            }
        }
    }
}

/// True when the client gave up connecting (TCP or TLS handshake) on its
/// connect timeout: a silent server, reported like our own timeouts.
fn timed_out_inside(err: &kube::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// The RBAC verb behind one of our calls.
fn rbac_verb(verb: &str) -> &'static str {
    match verb {
        "create" => "create",
        "get" => "get",
        "delete" => "delete",
        _ => "update",
    }
}

/// The error for a call that ran out of time.
pub(crate) fn timed_out(call: Call<'_>, after: std::time::Duration) -> Error {
    Error::Timeout {
        operation: call.to_string(),
        after,
    }
}
