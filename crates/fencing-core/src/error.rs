//! The one error type every source and gate returns.

use std::path::PathBuf;
use std::time::Duration;

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
        resource: String,
        /// Why the grant counts as lost.
        reason: String,
    },

    /// The operation did not finish within the caller's time limit.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// What was being attempted, including the endpoints involved.
        operation: String,
        /// The limit that ran out.
        after: Duration,
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
        reason: &'static str,
    },

    /// A token or grant minted by a different source than the one asked.
    #[error("grant from source {presented:?} presented to source {expected:?}")]
    ForeignSource {
        /// The source this call went to.
        expected: String,
        /// The source that minted the grant.
        presented: String,
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
    pub(crate) fn invalid_token(input: impl AsRef<str>, reason: &'static str) -> Self {
        Error::InvalidToken {
            input: echo(input.as_ref()),
            reason,
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
    pub fn lost(resource: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Lost {
            resource: resource.into(),
            reason: reason.into(),
        }
    }

    /// Wraps a backend's error with what was being done.
    pub fn backend(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            context: context.into(),
            source: source.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// True for the errors a writer answers by re-acquiring and redoing its
    /// work: [`Error::Stale`] and [`Error::Lost`].
    #[must_use]
    pub fn needs_reacquire(&self) -> bool {
        matches!(self, Error::Stale { .. } | Error::Lost { .. })
    }
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

    #[test]
    fn long_inputs_are_truncated_on_a_char_boundary() {
        let e = Error::invalid_resource("é".repeat(500), "too long");
        let Error::InvalidResource { name, .. } = e else {
            panic!()
        };
        assert!(name.ends_with("...") && name.chars().count() == ECHO_LIMIT + 3);
    }
}
