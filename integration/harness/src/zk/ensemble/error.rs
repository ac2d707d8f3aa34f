//! Why the harness could not start, check or drive an ensemble.

use super::*;

/// Why the harness could not start, check or drive an ensemble.
#[derive(Debug, thiserror::Error)]
pub enum ZkHarnessError {
    /// A jar of `version` (or `java` itself) is not installed.
    #[error("{version}: {path} is missing: run scripts/test.sh (or bash scripts/install/zookeeper.sh) to install it")]
    MissingInstall {
        /// The release that cannot run.
        version: ZkVersion,
        /// What was looked for.
        path: PathBuf,
    },
    /// A file, process or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A server process exited while it should be serving.
    #[error("server {server} exited ({status}); last lines of its log:\n{log}")]
    ServerExited {
        /// Index of the server.
        server: usize,
        /// Its exit status.
        status: String,
        /// The tail of its log file.
        log: String,
    },
    /// A bounded wait or a single four-letter word ran out of time.
    #[error("{0}")]
    Timeout(String),
    /// A server answered, but not as a healthy one does (e.g. "not
    /// currently serving requests").
    #[error("{0}")]
    Unhealthy(String),
    /// The caller asked for something the ensemble cannot do (e.g. a
    /// server index out of range).
    #[error("{0}")]
    Usage(String),
}

impl ZkHarnessError {
    pub(super) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        ZkHarnessError::Io {
            context: context.into(),
            source,
        }
    }

    pub(super) fn is_port_clash(&self) -> bool {
        match self {
            ZkHarnessError::ServerExited { log, .. } => log.contains("Address already in use"),
            ZkHarnessError::Timeout(msg) => msg.contains("Address already in use"),
            _ => false,
        }
    }
}
