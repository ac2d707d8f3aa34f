//! Which rustls crypto provider TLS connections use.
//!
//! This crate never installs a process-wide provider: that choice belongs
//! to the application (kube-rs follows the same rule). rustls picks one by
//! itself when exactly one is compiled in, which the default features
//! ensure (aws-lc-rs everywhere). With `ring` and `zookeeper` together two
//! are linked, and rustls would panic inside the TLS handshake set-up; this
//! module turns that into an [`Error::Config`] naming the fix.

use fencing_core::Result;

/// Refuses a TLS connection `what` describes when rustls could not pick a
/// provider by itself and the application installed none.
#[cfg(all(feature = "zookeeper", feature = "ring"))]
pub(crate) fn check_provider(what: &str) -> Result<()> {
    if rustls::crypto::CryptoProvider::get_default().is_some() {
        return Ok(());
    }
    Err(fencing_core::Error::Config(format!(
        "{what} uses TLS, and this build links two rustls crypto providers (feature `ring` \
         for etcd and Kubernetes, aws-lc-rs for ZooKeeper) with none installed: call \
         rustls::crypto::ring::default_provider().install_default() once at start-up"
    )))
}

/// One provider is linked: rustls picks it by itself.
#[cfg(not(all(feature = "zookeeper", feature = "ring")))]
pub(crate) fn check_provider(_what: &str) -> Result<()> {
    Ok(())
}
