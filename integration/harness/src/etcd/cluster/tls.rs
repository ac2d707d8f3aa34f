//! The harness's TLS files as etcd-client options.

use super::*;

/// The files as etcd-client TLS options.
impl TlsFiles {
    /// Client TLS options that trust the CA and present the client
    /// certificate.
    pub fn client_options(&self) -> std::io::Result<TlsOptions> {
        let cert = fs::read(&self.client_cert)?;
        let key = fs::read(&self.client_key)?;
        Ok(self
            .client_options_without_identity()?
            .identity(Identity::from_pem(cert, key)))
    }

    /// Client TLS options that trust the CA but present no certificate (a
    /// client-cert-auth cluster refuses them).
    pub fn client_options_without_identity(&self) -> std::io::Result<TlsOptions> {
        let ca = fs::read(&self.ca_cert)?;
        Ok(TlsOptions::new()
            .ca_certificate(Certificate::from_pem(ca))
            .domain_name("localhost"))
    }
}
