//! KubeLeaseSource against a real kube-apiserver's authentication and RBAC,
//! and bad input: the least-privilege user of `deploy/kubernetes/rbac.yaml`
//! works; users without the verbs, and rejected credentials, get
//! `Error::PermissionDenied`; bad names, namespaces, servers and files get
//! typed errors naming the problem.

use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, ResourceName};
use fencing_harness::fixture::resource as r;
use fencing_harness::kubernetes::cluster::{KubeUser, OTHER_NAMESPACE};
use fencing_harness::kubernetes::fixture::{KubeFixture, TEST_LEASE, TEST_RETRY};
use fencing_harness::kubernetes::rbac::lease_user_rbac;
use fencing_kube::{KubeLeaseConfig, KubeLeaseSource};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(TEST_LEASE)
        .wait(Duration::from_secs(20))
}

fn denied(result: Result<impl std::fmt::Debug, Error>, needles: &[&str]) -> String {
    match result {
        Err(Error::PermissionDenied(msg)) => {
            for n in needles {
                assert!(msg.contains(n), "{msg:?} lacks {n:?}");
            }
            msg
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}

fn config_error(result: Result<impl std::fmt::Debug, Error>, needles: &[&str]) {
    match result {
        Err(Error::Config(msg)) => {
            for n in needles {
                assert!(msg.contains(n), "{msg:?} lacks {n:?}");
            }
        }
        other => panic!("expected Config, got {other:?}"),
    }
}

async fn lease(f: &KubeFixture, name: &str) -> Lease {
    let api: Api<Lease> = Api::namespaced(f.cluster(|c| c.admin_client()), f.namespace());
    tokio::time::timeout(Duration::from_secs(10), api.get(name))
        .await
        .expect("admin get in time")
        .expect("admin get")
}

/// get, create and update are enough: acquire (create), renew (update),
/// validate and holder (get), release (update), and a second grant
/// (update of a free Lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_privilege_user_acquires_renews_and_releases() {
    let f = KubeFixture::start().await;
    let s = f.source().await;
    let g = s.acquire(&r("least-privilege"), &opts()).await.unwrap();
    let rv_at_grant = lease(&f, "least-privilege").await.metadata.resource_version;
    tokio::time::sleep(TEST_RETRY * 4).await;
    assert!(g.is_live(), "renewals by lease-user failed");
    let renewed = lease(&f, "least-privilege").await;
    assert_ne!(
        renewed.metadata.resource_version, rv_at_grant,
        "no renewal reached the Lease"
    );
    assert!(s.validate(&g).await.unwrap());
    let seen = s.holder(&r("least-privilege")).await.unwrap().unwrap();
    assert_eq!(seen.token, g.token(), "renewals keep the token");
    let first = g.token();
    g.release().await.unwrap();
    assert_eq!(s.holder(&r("least-privilege")).await.unwrap(), None);
    let spec = lease(&f, "least-privilege").await.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    let g2 = s.try_acquire(&r("least-privilege"), &opts()).await.unwrap();
    let g2 = g2.expect("free after release");
    assert!(g2.token() > first);
    g2.release().await.unwrap();
}

/// lease-reader may only get: creating a Lease and updating one are both
/// refused with a permission error naming the verb, the namespace and the
/// user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_gets_permission_denied_on_acquire() {
    let f = KubeFixture::start().await;
    let reader = f.source_as(KubeUser::LeaseReader).await;
    denied(
        reader.acquire(&r("read-only"), &opts()).await,
        &["create", f.namespace(), "lease-reader", "403"],
    );
    // A free Lease made by someone else: taking it is an update.
    let user = f.source().await;
    user.acquire(&r("read-only"), &opts())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    denied(
        reader.try_acquire(&r("read-only"), &opts()).await,
        &["update", f.namespace(), "lease-reader"],
    );
    // Reading is what it may do.
    assert_eq!(reader.holder(&r("read-only")).await.unwrap(), None);
}

/// nobody is authenticated but bound to nothing: even the first read is
/// refused; and lease-user has no rights outside its namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_without_rights_get_permission_denied() {
    let f = KubeFixture::start().await;
    let nobody = f.source_as(KubeUser::Nobody).await;
    denied(
        nobody.acquire(&r("nobody"), &opts()).await,
        &["get", "nobody", f.namespace()],
    );
    denied(nobody.holder(&r("nobody")).await, &["get"]);
    let elsewhere = KubeLeaseSource::connect(
        KubeLeaseConfig::new(OTHER_NAMESPACE)
            .unwrap()
            .kubeconfig(f.kubeconfig(KubeUser::LeaseUser))
            .options(f.options()),
    )
    .await
    .unwrap();
    denied(
        elsewhere.acquire(&r("elsewhere"), &opts()).await,
        &[OTHER_NAMESPACE, "lease-user"],
    );
}

/// `deploy/kubernetes/rbac-scoped.yaml`, applied as committed (namespace
/// and subject replaced): its user takes, renews and releases a listed
/// lock, and an unlisted lock is refused with a permission error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scoped_manifest_limits_the_lock_names() {
    let f = KubeFixture::start().await;
    let yaml = include_str!("../../../../../deploy/kubernetes/rbac-scoped.yaml");
    let (role, binding) =
        lease_user_rbac(yaml, OTHER_NAMESPACE, KubeUser::Nobody.name()).expect("manifest");
    let listed: Vec<Vec<String>> = role
        .rules
        .iter()
        .flatten()
        .filter_map(|rule| rule.resource_names.clone())
        .collect();
    assert_eq!(
        listed,
        [["nightly-report", "scheduler"]],
        "the example names"
    );
    let admin = f.cluster(|c| c.admin_client());
    let create = PostParams::default();
    Api::<Role>::namespaced(admin.clone(), OTHER_NAMESPACE)
        .create(&create, &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin, OTHER_NAMESPACE)
        .create(&create, &binding)
        .await
        .unwrap();
    let scoped = KubeLeaseSource::connect(
        KubeLeaseConfig::new(OTHER_NAMESPACE)
            .unwrap()
            .kubeconfig(f.kubeconfig(KubeUser::Nobody))
            .options(f.options()),
    )
    .await
    .unwrap();
    // The authorizer sees the new binding once the apiserver's cache has it.
    let patience = tokio::time::Instant::now() + Duration::from_secs(20);
    while let Err(e) = scoped.holder(&r("scheduler")).await {
        assert!(tokio::time::Instant::now() < patience, "never allowed: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let g = scoped.acquire(&r("scheduler"), &opts()).await.unwrap();
    tokio::time::sleep(TEST_RETRY * 4).await;
    assert!(g.is_live(), "renewals of a listed Lease failed");
    g.release().await.unwrap();
    denied(
        scoped.acquire(&r("unlisted"), &opts()).await,
        &["get", OTHER_NAMESPACE, "nobody"],
    );
}

/// A client certificate from a CA the apiserver does not trust is refused
/// at connect, as rejected credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_credentials_are_refused_at_connect() {
    let f = KubeFixture::start().await;
    let result = KubeLeaseSource::connect(f.config(KubeUser::Untrusted)).await;
    denied(result, &["credentials rejected", "401", f.server_url()]);
    // Through the facade too.
    let url = f.url(KubeUser::Untrusted);
    denied(fencing::connect(&url).await, &["credentials rejected"]);
}

/// Lease names must be DNS-1123 subdomains; every entry point says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_lease_names_are_refused_naming_the_rule() {
    let f = KubeFixture::start().await;
    let s = f.source().await;
    for bad in ["Upper", "under_score", "a/b", "-dash", "dot.", "ünï"] {
        let name = ResourceName::nonportable(bad).unwrap();
        let results = [
            s.acquire(&name, &opts()).await.map(drop),
            s.try_acquire(&name, &opts()).await.map(drop),
            s.holder(&name).await.map(drop),
        ];
        for result in results {
            match result {
                Err(Error::InvalidResource { name, reason }) => {
                    assert_eq!(name, bad);
                    assert!(reason.contains("DNS-1123 subdomain"), "{reason}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}

/// Missing or malformed namespaces, a namespace that does not exist, a
/// missing kubeconfig file and an unreachable or silent apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_gives_typed_errors_naming_the_problem() {
    let f = KubeFixture::start().await;
    let kubeconfig = f.kubeconfig(KubeUser::LeaseUser);
    let k = kubeconfig.display();
    config_error(
        fencing::connect(&format!("kube://?kubeconfig={k}")).await,
        &["namespace is missing"],
    );
    config_error(
        fencing::connect(&format!("kube://Not_A_Label?kubeconfig={k}")).await,
        &["Not_A_Label", "DNS-1123 label"],
    );
    config_error(
        fencing::connect("kube://team?kubeconfig=/nonexistent/fencing/kube.conf").await,
        &["/nonexistent/fencing/kube.conf"],
    );

    // A namespace that does not exist, as admin (who may create Leases
    // anywhere): the create answers 404 about the namespace.
    let missing = KubeLeaseSource::connect(
        KubeLeaseConfig::new("no-such-namespace")
            .unwrap()
            .kubeconfig(f.kubeconfig(KubeUser::Admin))
            .options(f.options()),
    )
    .await
    .unwrap();
    config_error(
        missing.try_acquire(&r("x"), &opts()).await,
        &["no-such-namespace", "does not exist"],
    );

    // Nothing listens: connection refused, naming the server.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let refused = f.kubeconfig_via(KubeUser::LeaseUser, &format!("127.0.0.1:{port}"));
    match KubeLeaseSource::connect(f.config_with(refused)).await {
        Err(e @ Error::Unreachable { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&port.to_string()), "{text}");
            assert!(text.contains("connection refused"), "{text}");
        }
        other => panic!("unreachable apiserver: {other:?}"),
    }

    // A server that accepts connections but never answers: a timeout
    // naming it, within the request timeout.
    let proxy = f.proxy().await;
    proxy.set_blackhole(true);
    let silent = f.kubeconfig_via(KubeUser::LeaseUser, &proxy.endpoint());
    let started = std::time::Instant::now();
    match KubeLeaseSource::connect(f.config_with(silent)).await {
        Err(e @ Error::Timeout { .. }) => {
            assert!(e.to_string().contains(&proxy.endpoint()), "{e}")
        }
        other => panic!("silent apiserver: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}
