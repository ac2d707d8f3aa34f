//! The campaign controller's administration of its Kubernetes cluster
//! (readiness, Lease deletion, the clients' RBAC, the coordinated
//! election's set-up and what it left behind), run inside a namespace of
//! the campaign network as the `system:masters` user of
//! [`fencing_harness::namespaced::kube`].

use std::path::Path;

use crate::coordinated::{LeftCandidate, LeftLease, Leftovers};
use fencing_harness::kubernetes::rbac::{RBAC_COORDINATED_MANIFEST, RBAC_MANIFEST};
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
    /// Bind the clients' user by `deploy/kubernetes/rbac-coordinated.yaml`
    /// too (LeaseCandidates), as a user of coordinated election would.
    GrantCandidates,
    /// Create `kube-system`: the apiserver runs its election controller
    /// only once it has elected itself there, and a bare apiserver does
    /// not make that namespace.
    StartElectionController,
    /// Print the campaign's Leases and every LeaseCandidate as JSON
    /// ([`Leftovers`]).
    Leftovers,
    /// Once a killed apiserver's successor answers, delete the election
    /// controller's own Lease in `kube-system`, which names the dead one:
    /// see [`release_dead_controller`].
    ReleaseDeadController,
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
        AdminAction::GrantClients => grant_clients(client, RBAC_MANIFEST).await,
        AdminAction::GrantCandidates => grant_clients(client, RBAC_COORDINATED_MANIFEST).await,
        AdminAction::StartElectionController => create_kube_system(client).await,
        AdminAction::ReleaseDeadController => release_dead_controller(client).await,
        AdminAction::Leftovers => {
            let left = leftovers(client, leases).await?;
            serde_json::to_string(&left).map_err(|e| e.to_string())
        }
    }
}

/// Creates the Role and RoleBinding of `manifest` (one of
/// `deploy/kubernetes/rbac*.yaml`) for [`CLIENT_USER`]; those that exist
/// already are kept.
async fn grant_clients(client: kube::Client, manifest: &str) -> Result<String, String> {
    use fencing_harness::kubernetes::rbac::lease_user_rbac;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let (role, binding) =
        lease_user_rbac(manifest, NAMESPACE, CLIENT_USER).map_err(|e| e.to_string())?;
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

/// Creates the `kube-system` namespace (kept if it exists).
async fn create_kube_system(client: kube::Client) -> Result<String, String> {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces: kube::Api<Namespace> = kube::Api::all(client);
    let system = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("kube-system".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match namespaces.create(&Default::default(), &system).await {
        Ok(_) => Ok("created kube-system".into()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok("kube-system exists".into()),
        Err(e) => Err(format!("creating kube-system: {e}")),
    }
}

/// The Leases named `leases` and every LeaseCandidate of the namespace.
async fn leftovers(client: kube::Client, leases: &[String]) -> Result<Leftovers, String> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
    let api: kube::Api<Lease> = kube::Api::namespaced(client.clone(), NAMESPACE);
    let mut left = Leftovers::default();
    for name in leases {
        let lease = api
            .get_opt(name)
            .await
            .map_err(|e| format!("Lease {name}: {e}"))?;
        left.leases.extend(lease.map(|l| left_lease(name, &l)));
    }
    let candidates: kube::Api<LeaseCandidate> = kube::Api::namespaced(client, NAMESPACE);
    let listed = candidates
        .list(&Default::default())
        .await
        .map_err(|e| format!("listing LeaseCandidates: {e}"))?;
    left.candidates = listed
        .items
        .into_iter()
        .map(|c| LeftCandidate {
            name: c.metadata.name.unwrap_or_default(),
            lease: c.spec.map(|s| s.lease_name).unwrap_or_default(),
        })
        .collect();
    Ok(left)
}

/// What hygiene needs of one Lease: its holder, whether a candidate took
/// it, and the holder's token as the library records it (the note of
/// [`TOKEN_ANNOTATION`](fencing::kube::TOKEN_ANNOTATION) when it is this
/// holder's, `RV;TRANSITIONS;HOLDER`, else the resourceVersion).
fn left_lease(name: &str, lease: &k8s_openapi::api::coordination::v1::Lease) -> LeftLease {
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    let transitions = spec.lease_transitions.unwrap_or(0).to_string();
    let note = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(fencing::kube::TOKEN_ANNOTATION));
    let recorded = note.and_then(|n| {
        let mut parts = n.splitn(3, ';');
        let (rv, t, h) = (parts.next()?, parts.next()?, parts.next()?);
        (t == transitions && h == holder).then_some(rv)
    });
    let rv = lease.metadata.resource_version.as_deref();
    LeftLease {
        name: name.to_owned(),
        token: recorded.or(rv).and_then(|t| t.parse().ok()),
        taken: spec.acquire_time.is_some(),
        holder,
    }
}

/// The election controller's own Lease, through which an apiserver
/// elects itself to run the controller.
const CONTROLLER_LEASE: (&str, &str) = ("kube-system", "leader-election-controller");

/// Deletes the election controller's Lease once the apiserver answers
/// (trying for up to 7 s, within the helper's 8): called right after a
/// killed apiserver was started again, when that Lease still names the
/// dead one. Each start of an apiserver elects itself under a new identity
/// with client-go's defaults, so without this the new one runs the
/// controller only after waiting out its dead predecessor's 15 s lease
/// (17-28 s after the restart in the first coordinated runs): an outage
/// of the apiserver's own failover, which no candidate can shorten, and
/// which with a few apiserver kills left a 2-minute run a few dozen
/// grants. The deletion is conditioned on the version read, so it never
/// removes a record the new apiserver wrote.
async fn release_dead_controller(client: kube::Client) -> Result<String, String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let (namespace, name) = CONTROLLER_LEASE;
    let api: kube::Api<Lease> = kube::Api::namespaced(client, namespace);
    let started = std::time::Instant::now();
    let lease = loop {
        match api.get_opt(name).await {
            Ok(lease) => break lease,
            Err(e) if started.elapsed() < std::time::Duration::from_secs(7) => {
                let _ = e;
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(e) => return Err(format!("reading {namespace}/{name}: {e}")),
        }
    };
    let Some(lease) = lease else {
        return Ok(format!("no {namespace}/{name} Lease"));
    };
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    let preconditions = kube::api::Preconditions {
        resource_version: lease.metadata.resource_version,
        uid: lease.metadata.uid,
    };
    let params = kube::api::DeleteParams {
        preconditions: Some(preconditions),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(format!("deleted {namespace}/{name} of {holder:?}")),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
            Ok(format!("{namespace}/{name} changed meanwhile; kept"))
        }
        Err(e) => Err(format!("deleting {namespace}/{name}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn lease(holder: &str, acquired: bool, note: Option<&str>) -> Lease {
        let annotations =
            note.map(|n| [(fencing::kube::TOKEN_ANNOTATION.to_owned(), n.to_owned())].into());
        Lease {
            metadata: ObjectMeta {
                resource_version: Some("90".into()),
                annotations,
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_transitions: Some(3),
                acquire_time: acquired.then(|| MicroTime(k8s_openapi::jiff::Timestamp::now())),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_left_lease_carries_its_holders_token_and_whether_it_was_taken() {
        // Renewed: the note of this holder and transitions count.
        let renewed = left_lease("campaign-a", &lease("c1-a", true, Some("77;3;c1-a")));
        assert_eq!((renewed.token, renewed.taken), (Some(77), true));
        assert_eq!(renewed.holder, "c1-a");
        // A note of an earlier term, or another holder's, is not its token:
        // the resourceVersion is (before the first renewal, the take's).
        let stale = left_lease("campaign-a", &lease("c1-a", true, Some("77;2;c1-a")));
        assert_eq!(stale.token, Some(90));
        let other = left_lease("campaign-a", &lease("c1-a", true, Some("77;3;c2-a")));
        assert_eq!(other.token, Some(90));
        // Named by the controller: no acquireTime.
        assert!(!left_lease("campaign-a", &lease("c2-a", false, None)).taken);
    }
}
