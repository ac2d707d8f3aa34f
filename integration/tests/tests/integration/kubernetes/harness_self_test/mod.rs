//! Tests of the real kube-apiserver harness itself: the users' rights
//! (including the RBAC manifest `deploy/kubernetes/rbac.yaml`), Leases that
//! survive an apiserver restart and an etcd crash with resource versions
//! that keep growing, and the client-go elector program leading on it.
//!
//! The binaries come from `scripts/install/kube-apiserver.sh`,
//! `scripts/install/etcd.sh` and `scripts/install/client-go-interop.sh`;
//! without them these tests fail with a message naming the script.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencing_harness::fixture::started;
use fencing_harness::kubernetes::cluster::{
    client_go_elector_binary, KubeCluster, KubeUser, OTHER_NAMESPACE, TEST_NAMESPACE,
};
use fencing_harness::kubernetes::rbac::{lease_user_rbac, RBAC_MANIFEST};
use fencing_harness::Reaped;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};

mod client_go;
mod restarts;

/// A bound for any single request in these tests.
const CALL: Duration = Duration::from_secs(10);

async fn start() -> KubeCluster {
    started("etcd + kube-apiserver with RBAC", KubeCluster::start()).await
}

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        }),
    }
}

async fn leases(cluster: &KubeCluster, user: KubeUser, namespace: &str) -> Api<Lease> {
    let client = cluster
        .client(user)
        .await
        .unwrap_or_else(|e| panic!("client for {user}: {e}"));
    Api::namespaced(client, namespace)
}

async fn call<T>(
    what: &str,
    f: impl std::future::Future<Output = kube::Result<T>>,
) -> kube::Result<T> {
    tokio::time::timeout(CALL, f)
        .await
        .unwrap_or_else(|_| panic!("{what} took over {CALL:?}"))
}

/// The HTTP status of a refused request; panics if it was not refused.
fn refused<T: std::fmt::Debug>(what: &str, result: kube::Result<T>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("{what}: expected an API error status, got {other:?}"),
    }
}

fn rv(lease: &Lease) -> u64 {
    let rv = lease
        .metadata
        .resource_version
        .as_deref()
        .expect("a resourceVersion");
    rv.parse()
        .unwrap_or_else(|_| panic!("resourceVersion {rv:?} is not a number"))
}

fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

/// Replaces the Lease's holder with the given resourceVersion (an update
/// with optimistic concurrency, as client-go does).
async fn take(api: &Api<Lease>, current: &Lease, holder: &str) -> kube::Result<Lease> {
    let mut next = current.clone();
    next.spec
        .get_or_insert_with(LeaseSpec::default)
        .holder_identity = Some(holder.into());
    let name = current.metadata.name.clone().expect("a name");
    call("replace", api.replace(&name, &PostParams::default(), &next)).await
}

#[test]
fn the_rbac_manifest_grants_exactly_get_create_update_on_leases() {
    let (role, binding) =
        lease_user_rbac(RBAC_MANIFEST, "ns-x", "someone").expect("manifest parses");
    assert_eq!(role.metadata.namespace.as_deref(), Some("ns-x"));
    assert_eq!(binding.metadata.namespace.as_deref(), Some("ns-x"));
    let rules = role.rules.expect("rules");
    assert_eq!(rules.len(), 1, "one rule: {rules:?}");
    let rule = &rules[0];
    assert_eq!(
        rule.api_groups.as_deref(),
        Some(&["coordination.k8s.io".to_string()][..])
    );
    assert_eq!(rule.resources.as_deref(), Some(&["leases".to_string()][..]));
    let mut verbs = rule.verbs.clone();
    verbs.sort();
    assert_eq!(verbs, ["create", "get", "update"]);
    assert_eq!(binding.role_ref.kind, "Role");
    assert_eq!(
        Some(binding.role_ref.name.as_str()),
        role.metadata.name.as_deref()
    );
    let subjects = binding.subjects.expect("subjects");
    assert_eq!(subjects.len(), 1);
    assert_eq!(
        (subjects[0].kind.as_str(), subjects[0].name.as_str()),
        ("User", "someone")
    );
}

#[test]
fn a_manifest_without_a_binding_is_a_typed_error() {
    let only_role = RBAC_MANIFEST.split("\n---").next().expect("first document");
    let err = lease_user_rbac(only_role, "ns", "u").expect_err("no RoleBinding");
    assert!(err.to_string().contains("RoleBinding"), "{err}");
    let err = lease_user_rbac("kind: [unclosed", "ns", "u").expect_err("bad YAML");
    assert!(err.to_string().contains("RBAC manifest"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_have_exactly_their_rights() {
    let cluster = start().await;
    assert_eq!(cluster.namespace(), TEST_NAMESPACE);
    assert!(cluster.server_url().starts_with("https://127.0.0.1:"));

    // admin: create and read in both namespaces.
    let admin = leases(&cluster, KubeUser::Admin, TEST_NAMESPACE).await;
    let made = call(
        "admin create",
        admin.create(&PostParams::default(), &lease("by-admin", "admin")),
    )
    .await
    .expect("admin creates a Lease");
    let read = call("admin get", admin.get("by-admin"))
        .await
        .expect("admin reads it");
    assert_eq!(holder(&read), Some("admin"));
    assert_eq!(rv(&read), rv(&made));
    let admin_other = leases(&cluster, KubeUser::Admin, OTHER_NAMESPACE).await;
    call(
        "admin create",
        admin_other.create(&PostParams::default(), &lease("elsewhere", "admin")),
    )
    .await
    .expect("admin creates in the other namespace");

    // lease-user: get, create, update in the test namespace; nothing else.
    let user = leases(&cluster, KubeUser::LeaseUser, TEST_NAMESPACE).await;
    let mine = call(
        "user create",
        user.create(&PostParams::default(), &lease("by-user", "a")),
    )
    .await
    .expect("lease-user creates a Lease");
    let got = call("user get", user.get("by-user"))
        .await
        .expect("lease-user reads it");
    let updated = take(&user, &got, "b").await.expect("lease-user updates it");
    assert!(
        rv(&updated) > rv(&mine),
        "an update raises the resourceVersion"
    );
    assert_eq!(holder(&updated), Some("b"));
    // A stale resourceVersion is a conflict, not a lost update.
    assert_eq!(refused("stale update", take(&user, &got, "c").await), 409);
    assert_eq!(
        refused(
            "user delete",
            call("delete", user.delete("by-user", &DeleteParams::default())).await
        ),
        403
    );
    assert_eq!(
        refused(
            "user list",
            call("list", user.list(&Default::default())).await
        ),
        403
    );
    let user_other = leases(&cluster, KubeUser::LeaseUser, OTHER_NAMESPACE).await;
    assert_eq!(
        refused(
            "user get elsewhere",
            call("get", user_other.get("elsewhere")).await
        ),
        403
    );
    assert_eq!(
        refused(
            "user create elsewhere",
            call(
                "create",
                user_other.create(&PostParams::default(), &lease("x", "a"))
            )
            .await
        ),
        403
    );

    // lease-reader: get only.
    let reader = leases(&cluster, KubeUser::LeaseReader, TEST_NAMESPACE).await;
    let seen = call("reader get", reader.get("by-user"))
        .await
        .expect("lease-reader reads");
    assert_eq!(
        refused("reader update", take(&reader, &seen, "reader").await),
        403
    );
    assert_eq!(
        refused(
            "reader create",
            call(
                "create",
                reader.create(&PostParams::default(), &lease("r", "r"))
            )
            .await
        ),
        403
    );

    // nobody: authenticated, no rights.
    let nobody = leases(&cluster, KubeUser::Nobody, TEST_NAMESPACE).await;
    assert_eq!(
        refused("nobody get", call("get", nobody.get("by-user")).await),
        403
    );

    // untrusted certificate: not authenticated at all.
    let untrusted = leases(&cluster, KubeUser::Untrusted, TEST_NAMESPACE).await;
    assert_eq!(
        refused("untrusted get", call("get", untrusted.get("by-user")).await),
        401
    );
}
