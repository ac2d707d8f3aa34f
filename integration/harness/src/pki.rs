//! Certificates for the test clusters, made fresh for each cluster with
//! rcgen: a [`Ca`] that signs server and client certificates, and
//! [`make_tls`], the CA, server and client files the etcd and ZooKeeper
//! harnesses serve TLS with.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused the parameters or could not generate a key.
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
}

/// A self-signed certificate authority, kept in memory to sign with.
pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pem: String,
}

impl Ca {
    /// A fresh CA whose common name is `name`.
    pub fn new(name: &str) -> Result<Self, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key)?.pem();
        Ok(Ca { params, key, pem })
    }

    /// The CA's certificate (PEM), for clients and servers to trust.
    pub fn cert_pem(&self) -> &str {
        &self.pem
    }

    /// Signs a fresh key for common name `cn` (and organisation `org`, which
    /// Kubernetes reads as the user's group), valid for the names `sans` and
    /// the extended key usages `usages`.
    pub fn sign(
        &self,
        cn: &str,
        org: Option<&str>,
        sans: &[&str],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> Result<Signed, PkiError> {
        let issuer = Issuer::from_params(&self.params, &self.key);
        let key = KeyPair::generate()?;
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans)?;
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(org) = org {
            params
                .distinguished_name
                .push(DnType::OrganizationName, org);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = usages.to_vec();
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Signed {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// Writes `text` to `path`.
pub fn write_pem(path: &Path, text: &str) -> Result<(), PkiError> {
    fs::write(path, text).map_err(|source| PkiError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The PEM files of [`make_tls`].
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA certificate that signed both other certificates.
    pub ca_cert: PathBuf,
    /// The servers' certificate.
    pub server_cert: PathBuf,
    /// The servers' private key.
    pub server_key: PathBuf,
    /// The client certificate (CN `fencing-client`).
    pub client_cert: PathBuf,
    /// The client's private key.
    pub client_key: PathBuf,
}

impl TlsFiles {
    /// What a client of the library is given: the CA, and the client
    /// certificate and key when `with_cert`.
    pub fn client_files(&self, with_cert: bool) -> fencing::TlsFiles {
        fencing::TlsFiles {
            ca: Some(self.ca_cert.clone()),
            cert: with_cert.then(|| self.client_cert.clone()),
            key: with_cert.then(|| self.client_key.clone()),
            domain: None,
        }
    }
}

/// Writes a fresh CA, a server certificate (SANs `127.0.0.1`, `localhost`;
/// usable for server and client auth, because etcd also dials itself with
/// it) and a client certificate (CN `fencing-client`) as PEM files into
/// `dir`, and returns their paths.
pub fn make_tls(dir: &Path) -> Result<TlsFiles, PkiError> {
    use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    let ca = Ca::new("fencing test CA")?;
    let server = ca.sign(
        "fencing-server",
        None,
        &["127.0.0.1", "localhost"],
        &[ServerAuth, ClientAuth],
    )?;
    let client = ca.sign("fencing-client", None, &[], &[ClientAuth])?;
    let files = TlsFiles {
        ca_cert: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server-key.pem"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client-key.pem"),
    };
    write_pem(&files.ca_cert, ca.cert_pem())?;
    write_pem(&files.server_cert, &server.cert)?;
    write_pem(&files.server_key, &server.key)?;
    write_pem(&files.client_cert, &client.cert)?;
    write_pem(&files.client_key, &client.key)?;
    Ok(files)
}
