//! Why the harness could not start, check or drive the control plane.

use super::*;

/// Why the harness could not start, check or drive the cluster.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A binary is not installed.
    #[error("{path} is missing: run scripts/test.sh (or bash {install}) to install it")]
    MissingBinary {
        /// Where it was looked for.
        path: PathBuf,
        /// The script that installs it.
        install: &'static str,
    },
    /// The etcd under the apiserver failed.
    #[error("etcd under the apiserver: {0}")]
    Etcd(#[from] crate::etcd::cluster::HarnessError),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Making certificates failed.
    #[error("{0}")]
    Pki(#[from] crate::pki::PkiError),
    /// The apiserver exited while it should be serving.
    #[error("kube-apiserver exited ({status}); last lines of its log:\n{log}")]
    ApiserverExited {
        /// Its exit status.
        status: String,
        /// The tail of its log file.
        log: String,
    },
    /// A bounded wait ran out.
    #[error("{0}")]
    Timeout(String),
    /// A request to the apiserver failed.
    #[error("{context}: {source}")]
    Kube {
        /// What the harness was doing.
        context: String,
        /// The client's error.
        source: kube::Error,
    },
    /// A kubeconfig or manifest could not be read or used.
    #[error("{0}")]
    Config(String),
    /// The caller asked for something the cluster cannot do now.
    #[error("{0}")]
    Usage(String),
}

impl HarnessError {
    pub(in crate::kubernetes) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }

    pub(in crate::kubernetes) fn kube(context: impl Into<String>, source: kube::Error) -> Self {
        HarnessError::Kube {
            context: context.into(),
            source,
        }
    }

    pub(super) fn is_port_clash(&self) -> bool {
        matches!(self, HarnessError::ApiserverExited { log, .. } if log.contains("address already in use"))
    }
}
