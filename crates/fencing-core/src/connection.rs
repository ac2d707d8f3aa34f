//! What the backends' connection settings share: a user's name and
//! password, and the client's TLS files.

use std::fmt;
use std::path::PathBuf;

use crate::redact::REDACTED;

/// A user name and its password, for a cluster with authentication.
///
/// Its `Debug` shows the user and never the password, so a configuration
/// can be logged whole.
///
/// ```
/// use fencing_core::Credentials;
///
/// let app = Credentials::new("app", "hunter2");
/// assert_eq!(app.user, "app");
/// assert_eq!(format!("{app:?}"), r#"Credentials { user: "app", password: "***" }"#);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub user: String,
    /// The password.
    pub password: String,
}

impl Credentials {
    /// `user` with `password`.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials {
            user: user.into(),
            password: password.into(),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &REDACTED)
            .finish()
    }
}

/// The client's TLS files (PEM) for a cluster's secure port.
///
/// Which of them a backend needs is its own rule: etcd takes the system's
/// roots when `ca` is `None`; ZooKeeper needs `ca` and verifies no name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA bundle that signed the servers' certificates.
    pub ca: Option<PathBuf>,
    /// Client certificate, for clusters that authenticate clients by it.
    pub cert: Option<PathBuf>,
    /// Key of the client certificate.
    pub key: Option<PathBuf>,
    /// Name to verify in the server certificate, when it differs from the host.
    pub domain: Option<String>,
}
