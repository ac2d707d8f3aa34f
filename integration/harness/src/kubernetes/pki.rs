//! The cluster's certificates: one CA signs the serving certificate and
//! every user's client certificate; a second CA, which the server does not
//! trust, signs the [`KubeUser::Untrusted`] certificate. The service-account
//! key pair signs tokens.

use std::fs;
use std::path::{Path, PathBuf};

use super::cluster::{HarnessError, KubeUser};
use crate::pki::{write_pem, Ca, PkiError};

/// A client certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub(super) struct ClientCert {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
}

/// Every PEM file the cluster uses.
#[derive(Debug)]
pub(super) struct Pki {
    pub(super) ca: PathBuf,
    pub(super) server_cert: PathBuf,
    pub(super) server_key: PathBuf,
    /// The service-account signing key (ECDSA P-256, PKCS#8 PEM).
    pub(super) sa_key: PathBuf,
    /// Its public key (PEM `PUBLIC KEY`): the apiserver reads only public
    /// keys (or PKCS#1/SEC1 private keys) from `--service-account-key-file`.
    pub(super) sa_pub: PathBuf,
    users: Vec<(KubeUser, ClientCert)>,
}

impl Pki {
    pub(super) fn user(&self, user: KubeUser) -> &ClientCert {
        &self
            .users
            .iter()
            .find(|(u, _)| *u == user)
            .expect("make_pki writes every user")
            .1
    }
}

/// Writes the CA, the serving certificate (127.0.0.1, localhost), the
/// service-account key and one client certificate per [`KubeUser`] into
/// `dir`.
pub(super) fn make_pki(dir: &Path) -> Result<Pki, HarnessError> {
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    fs::create_dir_all(dir).map_err(|e| HarnessError::io("creating the pki directory", e))?;
    let ca = Ca::new("fencing kube test CA")?;
    let untrusted = Ca::new("fencing untrusted CA")?;
    let pki = Pki {
        ca: dir.join("ca.pem"),
        server_cert: dir.join("apiserver.pem"),
        server_key: dir.join("apiserver-key.pem"),
        sa_key: dir.join("sa-key.pem"),
        sa_pub: dir.join("sa.pub"),
        users: KubeUser::ALL
            .iter()
            .map(|&u| {
                let cert = ClientCert {
                    cert: dir.join(format!("{}.pem", u.name())),
                    key: dir.join(format!("{}-key.pem", u.name())),
                };
                (u, cert)
            })
            .collect(),
    };
    write_pem(&pki.ca, ca.cert_pem())?;
    let server = ca.sign(
        "kube-apiserver",
        None,
        &["127.0.0.1", "localhost"],
        &[ServerAuth],
    )?;
    write_pem(&pki.server_cert, &server.cert)?;
    write_pem(&pki.server_key, &server.key)?;
    let sa = rcgen::KeyPair::generate().map_err(PkiError::from)?;
    write_pem(&pki.sa_key, &sa.serialize_pem())?;
    write_pem(&pki.sa_pub, &sa.public_key_pem())?;
    for (user, files) in &pki.users {
        let signer = if *user == KubeUser::Untrusted {
            &untrusted
        } else {
            &ca
        };
        let (cn, org) = user.subject();
        let signed = signer.sign(cn, org, &[], &[ClientAuth])?;
        write_pem(&files.cert, &signed.cert)?;
        write_pem(&files.key, &signed.key)?;
    }
    Ok(pki)
}
