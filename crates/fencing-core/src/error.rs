//! The one error type every source and gate returns.

use std::path::PathBuf;
use std::time::Duration;

use crate::grant::SourceId;
use crate::resource::ResourceName;
use crate::token::FencingToken;

/// Shorthand for results in this workspace.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error kept as the source of [`Error::Backend`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong when acquiring, holding or checking a grant.
///
/// Variants are stable in meaning: match on them to decide what to do. The
/// usual reaction to [`Error::Stale`] and [`Error::Lost`] is to re-acquire,
/// re-read and redo the work; never to log and continue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A gate refused a token lower than the highest it already accepted:
    /// the writer's grant was superseded by a newer one.
    #[error("stale fencing token {presented}: the gate already accepted {highest}")]
    Stale {
        /// The token that came with the refused write.
        presented: FencingToken,
        /// The resource's high-water mark at the gate.
        highest: FencingToken,
    },

    /// The grant is gone or may be gone (server-side loss or local deadline).
    #[error("grant on {resource:?} lost: {reason}")]
    Lost {
        /// The resource the grant was for.
        resource: ResourceName,
        /// Why the grant counts as lost.
        reason: String,
    },

    /// The operation did not finish within the caller's time limit: the
    /// cluster did not answer in time (an acquire's wait that ran out this
    /// way names its last error in `operation`). A wait that ran out while
    /// the cluster answered that another holder kept the resource is
    /// [`Error::Contended`] instead.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// What was being attempted, including the endpoints involved.
        operation: String,
        /// The limit that ran out.
        after: Duration,
    },

    /// An acquire's wait bound ([`AcquireOptions::wait`](crate::AcquireOptions::wait))
    /// ran out while another holder kept the resource: the coordinator
    /// answered, the lock was not free (Curator's `acquire(time)` returning
    /// false). Nothing is wrong; try again later.
    #[error(
        "{resource:?} not granted within {waited:?}: held by {}",
        holder.as_deref().map_or_else(|| "another holder".to_owned(), |h| format!("{h:?}"))
    )]
    Contended {
        /// The resource waited for.
        resource: ResourceName,
        /// Its holder when the wait ended, if the coordinator names one.
        holder: Option<String>,
        /// How long the acquire waited.
        waited: Duration,
    },

    /// A resource name the source or gate cannot use.
    #[error("invalid resource name {name:?}: {reason}")]
    InvalidResource {
        /// The rejected name (lossy UTF-8, truncated for display).
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A token that is not canonical decimal or does not fit the target type.
    #[error("invalid fencing token {input:?}: {reason}")]
    InvalidToken {
        /// The rejected input (truncated for display).
        input: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A source id that cannot be read from its text form (an HTTP
    /// `Fencing-Source` header that is not canonical, say).
    #[error("invalid fencing source {input:?}: {reason}")]
    InvalidSource {
        /// The rejected input (truncated for display).
        input: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A token or grant minted by a different source than the one asked: a
    /// source's `validate`, or a gate whose mark for the resource is bound
    /// to another source. Tokens of different sources are not comparable.
    #[error("token from source {presented:?} where source {expected:?} is required (tokens of different sources are not comparable)")]
    ForeignSource {
        /// The source this call went to.
        expected: SourceId,
        /// The source that minted the grant.
        presented: SourceId,
    },

    /// A gate refused a token that names no source, for a resource whose
    /// mark is bound to a source (a bound admit set it). Present the token
    /// with its source ([`Gate::admit_from`](crate::Gate::admit_from)).
    #[error("the mark of {resource:?} is bound to source {expected:?}; a token that names no source is refused")]
    UnnamedSource {
        /// The resource whose mark refused the token.
        resource: ResourceName,
        /// The source the mark is bound to.
        expected: SourceId,
    },

    /// A [`ValidatingGate`](crate::ValidatingGate) refused to raise a mark
    /// to a token that no live grant of its source carries: a forged or
    /// mistyped token, or one whose grant ended before its first write.
    #[error("fencing token {token} for {resource:?} is carried by no live grant of the source")]
    UnknownToken {
        /// The resource the write was for.
        resource: ResourceName,
        /// The refused token.
        token: FencingToken,
    },

    /// The lock is run by a manager that must not be fought: a Kubernetes
    /// Lease whose `strategy` says kube-apiserver's coordinated leader
    /// election picks its holder. Taking it over would undo the manager's
    /// choice at every turn; join through the manager instead. Returned at
    /// once, also to a waiting acquire.
    #[error("{resource:?} is managed by {manager}; it is not taken over")]
    ManagedElsewhere {
        /// The lock.
        resource: ResourceName,
        /// Who manages it, and how to join.
        manager: String,
    },

    /// Invalid configuration: options, URLs, missing backends.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// The coordinator refused the credentials or the permission for an
    /// operation (bad password, missing role or RBAC verb).
    #[error("permission denied: {0}")]
    PermissionDenied(String),

    /// Durable state on disk is damaged. It is never silently reset: a reset
    /// could lower a high-water mark or repeat a token.
    #[error("corrupt fencing state in {path}: {reason}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// What the loader found.
        reason: String,
    },

    /// A filesystem operation on durable state failed.
    #[error("I/O on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// No endpoint of the coordinator could be reached: connection refused
    /// or timed out, host name not resolved, TLS handshake failed. The
    /// reason says what happened and what to check.
    #[error("cannot reach {backend} at [{endpoints}]: {reason}")]
    Unreachable {
        /// The kind of coordinator ("etcd", "ZooKeeper", "the Kubernetes apiserver").
        backend: String,
        /// The endpoints that were tried.
        endpoints: String,
        /// What happened, and what to check.
        reason: String,
    },

    /// A write was sent, the connection failed before its answer came, and
    /// re-sending it could apply it twice. It may or may not have applied:
    /// read the data back before deciding what to do.
    #[error("outcome of {operation} unknown: {reason}")]
    OutcomeUnknown {
        /// What was sent.
        operation: String,
        /// Why no answer came.
        reason: String,
    },

    /// The coordinator or its client library failed; the original error is kept.
    #[error("{context}: {source}")]
    Backend {
        /// What was being done.
        context: String,
        /// The backend's own error.
        #[source]
        source: BoxError,
    },
}

/// Longest input echoed back in an error message.
const ECHO_LIMIT: usize = 64;

fn echo(input: &str) -> String {
    match input.char_indices().nth(ECHO_LIMIT) {
        Some((cut, _)) => format!("{}...", &input[..cut]),
        None => input.to_owned(),
    }
}

impl Error {
    pub(crate) fn invalid_token(input: impl AsRef<str>, reason: impl Into<String>) -> Self {
        Error::InvalidToken {
            input: echo(input.as_ref()),
            reason: reason.into(),
        }
    }

    /// Builds [`Error::InvalidSource`], truncating a long input for display.
    pub fn invalid_source(input: impl AsRef<str>, reason: impl Into<String>) -> Self {
        Error::InvalidSource {
            input: echo(input.as_ref()),
            reason: reason.into(),
        }
    }

    /// Builds [`Error::InvalidResource`], truncating a long name for display.
    pub fn invalid_resource(name: impl AsRef<str>, reason: impl Into<String>) -> Self {
        Error::InvalidResource {
            name: echo(name.as_ref()),
            reason: reason.into(),
        }
    }

    /// Builds [`Error::Lost`].
    pub fn lost(resource: &ResourceName, reason: impl std::fmt::Display) -> Self {
        Error::Lost {
            resource: resource.clone(),
            reason: reason.to_string(),
        }
    }

    /// Wraps a backend's error with what was being done.
    pub fn backend(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            context: context.into(),
            source: source.into(),
        }
    }

    /// Builds [`Error::Unreachable`].
    pub fn unreachable(
        backend: impl Into<String>,
        endpoints: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Unreachable {
            backend: backend.into(),
            endpoints: endpoints.into(),
            reason: reason.into(),
        }
    }

    #[cfg(feature = "local")]
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    #[cfg(feature = "local")]
    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// True for the errors a writer answers by re-acquiring and redoing its
    /// work: [`Error::Stale`], [`Error::Lost`] and [`Error::UnknownToken`]
    /// (the grant ended before a validating gate saw its token).
    #[must_use]
    pub fn needs_reacquire(&self) -> bool {
        matches!(
            self,
            Error::Stale { .. } | Error::Lost { .. } | Error::UnknownToken { .. }
        )
    }
}

/// Describes a failure to connect, found anywhere in `err`'s chain of
/// sources, in words a person can act on; `None` when the chain shows no
/// connection-level failure (the server answered and refused, say).
///
/// Client libraries bury the cause several sources deep (a gRPC status
/// around a transport error around an I/O error); this finds it.
#[must_use]
pub fn connect_failure(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(err);
    let mut texts = Vec::new();
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(words) = io_failure(io.kind()) {
                return Some(words.to_owned());
            }
        }
        texts.push(e.to_string());
        next = e.source();
    }
    let all = texts.join(" / ").to_ascii_lowercase();
    let innermost = texts.last().cloned().unwrap_or_default();
    if all.contains("certificate") || all.contains("tls") || all.contains("handshake") {
        Some(format!(
            "TLS handshake failed ({innermost}): check the CA certificate, the client \
             certificate and key, the server name, and that the endpoint speaks TLS"
        ))
    } else if all.contains("dns error") || all.contains("failed to lookup address") {
        Some(format!(
            "host name not resolved ({innermost}): check the host name"
        ))
    } else if all.contains("connection refused") {
        Some(io_failure(std::io::ErrorKind::ConnectionRefused)?.to_owned())
    } else if all.contains("tcp connect error") {
        Some(format!(
            "TCP connection failed ({innermost}): check the address and the network"
        ))
    } else {
        None
    }
}

/// What a connect-time I/O error kind means for the user.
fn io_failure(kind: std::io::ErrorKind) -> Option<&'static str> {
    use std::io::ErrorKind as K;
    Some(match kind {
        K::ConnectionRefused => {
            "connection refused: nothing listens there; check that the cluster is running \
             and that the host and port are right"
        }
        K::TimedOut => {
            "connection timed out: check the address and that no firewall drops the traffic"
        }
        K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof | K::BrokenPipe => {
            "the connection was closed by the other side: check that the endpoint is this \
             kind of server and whether it expects TLS"
        }
        K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => {
            "no route to the host: check the address and the network"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_names_both_numbers() {
        let e = Error::Stale {
            presented: FencingToken::new(3),
            highest: FencingToken::new(5),
        };
        let text = e.to_string();
        assert!(text.contains('3') && text.contains('5'), "{text}");
        assert!(e.needs_reacquire());
    }

    #[derive(Debug)]
    struct Wrapper(
        &'static str,
        Option<Box<dyn std::error::Error + Send + Sync>>,
    );
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn connect_failures_are_found_deep_in_the_chain() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let chain = Wrapper(
            "status: Unavailable",
            Some(Box::new(Wrapper(
                "transport error",
                Some(Box::new(refused)),
            ))),
        );
        assert!(connect_failure(&chain)
            .unwrap()
            .starts_with("connection refused"));
        let tls = Wrapper(
            "transport error",
            Some(Box::new(Wrapper(
                "invalid peer certificate: UnknownIssuer",
                None,
            ))),
        );
        let words = connect_failure(&tls).unwrap();
        assert!(
            words.contains("TLS") && words.contains("UnknownIssuer"),
            "{words}"
        );
        assert_eq!(connect_failure(&Wrapper("permission denied", None)), None);
        let e = Error::unreachable("etcd", "127.0.0.1:1", "connection refused: x");
        assert_eq!(
            e.to_string(),
            "cannot reach etcd at [127.0.0.1:1]: connection refused: x"
        );
    }

    #[test]
    fn long_inputs_are_truncated_on_a_char_boundary() {
        let e = Error::invalid_resource("é".repeat(500), "too long");
        let Error::InvalidResource { name, .. } = e else {
            panic!()
        };
        assert!(name.ends_with("...") && name.chars().count() == ECHO_LIMIT + 3);
    }
}
