//! Why the harness could not start, check or drive a cluster.

use super::*;

/// Why the harness could not start, check or drive a cluster.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The etcd binary of `version` is not installed.
    #[error("{version} binary {path} is missing: run scripts/test.sh (or bash scripts/install/etcd.sh) to install it")]
    MissingBinary {
        /// The release whose binary is missing.
        version: EtcdVersion,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A member process exited while it should be serving.
    #[error("member {member} exited ({status}); last lines of its log:\n{log}")]
    MemberExited {
        /// Index of the member.
        member: usize,
        /// Its exit status.
        status: String,
        /// The tail of its log file.
        log: String,
    },
    /// A bounded wait ran out.
    #[error("{0}")]
    Timeout(String),
    /// A request to etcd failed.
    #[error("etcd request failed: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// Making certificates failed.
    #[error("{0}")]
    Pki(#[from] crate::pki::PkiError),
    /// The caller asked for something the cluster cannot do (e.g. a member
    /// index out of range).
    #[error("{0}")]
    Usage(String),
}

impl HarnessError {
    pub(super) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }

    pub(super) fn is_port_clash(&self) -> bool {
        matches!(self, HarnessError::MemberExited { log, .. } if log.contains("address already in use"))
    }
}
