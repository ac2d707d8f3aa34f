//! The users' kubeconfig files (kube's own `Kubeconfig` type, serialised as
//! YAML) and clients made from them.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};

use super::cluster::{HarnessError, KubeUser, REQUEST_TIMEOUT, TEST_NAMESPACE};
use super::pki::{ClientCert, Pki};

/// Where the kubeconfig of `user` lies in the cluster directory `dir`.
pub(super) fn kubeconfig_path(dir: &Path, user: KubeUser) -> PathBuf {
    dir.join(format!("kubeconfig-{}.yaml", user.name()))
}

/// Writes one kubeconfig per [`KubeUser`] for the server on `port`.
pub(super) fn write_kubeconfigs(dir: &Path, port: u16, pki: &Pki) -> Result<(), HarnessError> {
    let server = format!("https://127.0.0.1:{port}");
    for user in KubeUser::ALL {
        let yaml = serde_saphyr::to_string(&kubeconfig(&server, &pki.ca, user, pki.user(user)))
            .map_err(|e| HarnessError::Config(format!("serialising a kubeconfig: {e}")))?;
        let path = kubeconfig_path(dir, user);
        fs::write(&path, yaml)
            .map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))?;
    }
    Ok(())
}

/// A kubeconfig for `user` of the server at `server`, with file paths to
/// the PEM files; its default namespace is [`TEST_NAMESPACE`].
fn kubeconfig(server: &str, ca: &Path, user: KubeUser, cert: &ClientCert) -> Kubeconfig {
    let path = |p: &Path| Some(p.display().to_string());
    let (name, cluster) = (user.name().to_owned(), "fencing-test".to_owned());
    let context = format!("{name}@{cluster}");
    Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: cluster.clone(),
            cluster: Some(Cluster {
                server: Some(server.into()),
                certificate_authority: path(ca),
                ..Cluster::default()
            }),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: name.clone(),
            auth_info: Some(AuthInfo {
                client_certificate: path(&cert.cert),
                client_key: path(&cert.key),
                ..AuthInfo::default()
            }),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: context.clone(),
            context: Some(Context {
                cluster,
                user: Some(name),
                namespace: Some(TEST_NAMESPACE.into()),
                ..Context::default()
            }),
            other: Default::default(),
        }],
        current_context: Some(context),
        ..Kubeconfig::default()
    }
}

/// Client settings from a kubeconfig file, with the harness's connect
/// timeout.
pub(super) async fn config_from(kubeconfig: &Path) -> Result<kube::Config, HarnessError> {
    let context = |e: &dyn fmt::Display| {
        HarnessError::Config(format!("kubeconfig {}: {e}", kubeconfig.display()))
    };
    let file = Kubeconfig::read_from(kubeconfig).map_err(|e| context(&e))?;
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| context(&e))?;
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    Ok(config)
}

/// A client from a kubeconfig file.
pub(super) async fn client_from(kubeconfig: &Path) -> Result<kube::Client, HarnessError> {
    let config = config_from(kubeconfig).await?;
    kube::Client::try_from(config)
        .map_err(|e| HarnessError::kube(format!("a client from {}", kubeconfig.display()), e))
}
