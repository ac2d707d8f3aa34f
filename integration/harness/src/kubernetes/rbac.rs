//! The RBAC rules the harness binds: those of `deploy/kubernetes/rbac.yaml`
//! for `lease-user` (parsed from the committed file, so the manifest users
//! apply is the one the tests exercise), and a get-only Role for
//! `lease-reader`.

use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::cluster::{HarnessError, KubeUser, TEST_NAMESPACE};

/// The RBAC manifest for users of the library, as committed.
pub const RBAC_MANIFEST: &str = include_str!("../../../../deploy/kubernetes/rbac.yaml");
/// The RBAC manifest for coordinated leader election, as committed.
pub const RBAC_COORDINATED_MANIFEST: &str =
    include_str!("../../../../deploy/kubernetes/rbac-coordinated.yaml");

/// The Role and RoleBinding of the manifest `yaml` (the text of one of
/// `deploy/kubernetes/rbac*.yaml`), moved to `namespace` and bound to the
/// certificate user `user` instead of the manifest's example subject.
pub fn lease_user_rbac(
    yaml: &str,
    namespace: &str,
    user: &str,
) -> Result<(Role, RoleBinding), HarnessError> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml)
        .map_err(|e| HarnessError::Config(format!("parsing the RBAC manifest: {e}")))?;
    let mut role = None;
    let mut binding = None;
    for doc in docs {
        match doc.get("kind").and_then(|k| k.as_str()) {
            Some("Role") if role.is_none() => role = Some(parse_manifest::<Role>(doc)?),
            Some("RoleBinding") if binding.is_none() => {
                binding = Some(parse_manifest::<RoleBinding>(doc)?)
            }
            other => {
                return Err(HarnessError::Config(format!(
                    "the RBAC manifest should hold one Role and one RoleBinding, found kind {other:?} too"
                )))
            }
        }
    }
    let (Some(mut role), Some(mut binding)) = (role, binding) else {
        return Err(HarnessError::Config(
            "the RBAC manifest should hold one Role and one RoleBinding".into(),
        ));
    };
    role.metadata.namespace = Some(namespace.into());
    binding.metadata.namespace = Some(namespace.into());
    binding.subjects = Some(vec![user_subject(user)]);
    Ok((role, binding))
}

fn parse_manifest<T: k8s_openapi::serde::de::DeserializeOwned>(
    doc: serde_json::Value,
) -> Result<T, HarnessError> {
    serde_json::from_value(doc)
        .map_err(|e| HarnessError::Config(format!("an object of the RBAC manifest: {e}")))
}

fn user_subject(user: &str) -> Subject {
    Subject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "User".into(),
        name: user.into(),
        namespace: None,
    }
}

/// A Role that may only get leases, bound to `lease-reader`.
pub(super) fn lease_reader_rbac() -> (Role, RoleBinding) {
    let name = "fencing-lease-reader";
    let metadata = ObjectMeta {
        name: Some(name.into()),
        namespace: Some(TEST_NAMESPACE.into()),
        ..ObjectMeta::default()
    };
    let role = Role {
        metadata: metadata.clone(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leases".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
    };
    let binding = RoleBinding {
        metadata,
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![user_subject(KubeUser::LeaseReader.name())]),
    };
    (role, binding)
}
