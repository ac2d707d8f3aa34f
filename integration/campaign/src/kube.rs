//! The campaign controller's administration of its Kubernetes cluster
//! (readiness, Lease deletion, the clients' RBAC), run inside a namespace
//! of the campaign network as the `system:masters` user of
//! [`fencing_harness::namespaced::kube`].

use std::path::Path;

use fencing_harness::namespaced::kube::{CLIENT_USER, NAMESPACE};

/// What `campaign kube-admin` does, run inside a namespace of the campaign
/// network (the controller is not on it).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum AdminAction {
    /// Wait until `/readyz` says ok.
    Ready,
    /// Delete the campaign's Leases (their holders must notice).
    DeleteLeases,
    /// Bind the clients' user by `deploy/kubernetes/rbac.yaml`.
    GrantClients,
}

/// Runs `action` as the admin of `kubeconfig`; says what happened.
pub async fn admin(
    kubeconfig: &Path,
    action: AdminAction,
    leases: &[String],
) -> Result<String, String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    match action {
        AdminAction::Ready => {
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| e.to_string())?;
            let body = client
                .request_text(request)
                .await
                .map_err(|e| e.to_string())?;
            if body.trim() == "ok" {
                Ok("ready".into())
            } else {
                Err(format!("/readyz said {body:?}"))
            }
        }
        AdminAction::DeleteLeases => {
            let api: kube::Api<Lease> = kube::Api::namespaced(client, NAMESPACE);
            let mut deleted = Vec::new();
            for name in leases {
                match api.delete(name, &Default::default()).await {
                    Ok(_) => deleted.push(name.as_str()),
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(format!("deleting Lease {name}: {e}")),
                }
            }
            Ok(format!("deleted {deleted:?}"))
        }
        AdminAction::GrantClients => grant_clients(client).await,
    }
}

/// Creates the Role and RoleBinding of `deploy/kubernetes/rbac.yaml` for
/// [`CLIENT_USER`]; those that exist already are kept.
async fn grant_clients(client: kube::Client) -> Result<String, String> {
    use fencing_harness::kubernetes::rbac::{lease_user_rbac, RBAC_MANIFEST};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let (role, binding) =
        lease_user_rbac(RBAC_MANIFEST, NAMESPACE, CLIENT_USER).map_err(|e| e.to_string())?;
    let roles: kube::Api<Role> = kube::Api::namespaced(client.clone(), NAMESPACE);
    let bindings: kube::Api<RoleBinding> = kube::Api::namespaced(client, NAMESPACE);
    let created = |r: Result<_, kube::Error>, what: &str| match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("creating the {what}: {e}")),
    };
    let pp = kube::api::PostParams::default();
    created(roles.create(&pp, &role).await.map(drop), "Role")?;
    created(
        bindings.create(&pp, &binding).await.map(drop),
        "RoleBinding",
    )?;
    Ok("granted".into())
}
