//! The `fence` container image on a real kube-apiserver, connected the way a
//! pod connects: kube's in-cluster configuration (a service-account token
//! and CA at the standard path, KUBERNETES_SERVICE_HOST/PORT), no
//! kubeconfig. Two replicas run the exact arguments of
//! `deploy/kubernetes/deployment.yaml`, bound by `deploy/kubernetes/rbac.yaml`
//! to the manifest's ServiceAccount: one leads, the other waits, and after
//! the leader's pod is stopped the other leads with a higher token.
//!
//! Needs Docker and the image `fencing/fence:local` that
//! `scripts/install/fence-image.sh` builds: the runtime stage of the
//! repository's Dockerfile around a `fence` binary built on this machine.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use fencing_harness::kubernetes::cluster::KubeCluster;
use fencing_harness::kubernetes::rbac::lease_user_rbac;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding, Subject};
use kube::api::{Api, ObjectMeta, PostParams};

const IMAGE: &str = "fencing/fence:local";
const SECRETS: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Containers of this test, removed when it ends (also on failure).
struct Containers(Vec<String>);

impl Drop for Containers {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f", name])
                .output();
        }
    }
}

async fn docker(args: &[&str]) -> Output {
    let run = tokio::process::Command::new("docker")
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| panic!("docker {args:?} took over 60 s"))
        .unwrap_or_else(|e| panic!("docker {args:?}: {e} (scripts/install/docker.sh installs it)"))
}

/// The manifest's ServiceAccount name and its container's command line.
fn deployment_command() -> (String, Vec<String>) {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&repo_file("deploy/kubernetes/deployment.yaml")).unwrap();
    let deployment = docs
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment in deployment.yaml");
    let deployment: Deployment = serde_json::from_value(deployment).unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let mut line = container.command.clone().unwrap_or_default();
    line.extend(container.args.clone().unwrap_or_default());
    (pod.service_account_name.unwrap(), line)
}

/// The ServiceAccount, rbac.yaml bound to it, and a token for it, written
/// with the CA and namespace as the kubelet mounts them.
async fn service_account_files(cluster: &KubeCluster, account: &str, dir: &Path) {
    let client = cluster.admin_client();
    let ns = cluster.namespace();
    let meta = ObjectMeta {
        name: Some(account.into()),
        namespace: Some(ns.into()),
        ..ObjectMeta::default()
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    accounts
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: meta,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (mut role, mut binding) =
        lease_user_rbac(&repo_file("deploy/kubernetes/rbac.yaml"), ns, "unused").unwrap();
    let suffix = "-in-cluster";
    role.metadata.name = Some(format!("{}{suffix}", role.metadata.name.unwrap()));
    binding.role_ref.name = role.metadata.name.clone().unwrap();
    binding.metadata.name = role.metadata.name.clone();
    binding.subjects = Some(vec![Subject {
        kind: "ServiceAccount".into(),
        name: account.into(),
        namespace: Some(ns.into()),
        api_group: None,
    }]);
    let pp = PostParams::default();
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&pp, &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&pp, &binding)
        .await
        .unwrap();
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request(account, &pp, &request)
        .await
        .unwrap()
        .status
        .expect("token status")
        .token;
    std::fs::write(dir.join("token"), token).unwrap();
    std::fs::copy(cluster.ca_cert(), dir.join("ca.crt")).unwrap();
    std::fs::write(dir.join("namespace"), ns).unwrap();
    // The image runs as uid 65532.
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Starts one replica: the manifest's command line with the fields the
/// kubelet fills in, and nothing else from the host.
async fn start_pod(name: &str, line: &[String], ns: &str, port: u16, secrets: &Path) {
    let fill = |a: &String| {
        a.replace("$(POD_NAMESPACE)", ns)
            .replace("$(POD_NAME)", name)
    };
    let line: Vec<String> = line.iter().map(fill).collect();
    let mount = format!("{}:{SECRETS}:ro", secrets.display());
    let port = format!("KUBERNETES_SERVICE_PORT={port}");
    let pod_name = format!("POD_NAME={name}");
    let pod_ns = format!("POD_NAMESPACE={ns}");
    let mut args = vec![
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        "--read-only",
        "--user",
        "65532:65532",
        "--cap-drop",
        "ALL",
        "-v",
        &mount,
        "-e",
        "KUBERNETES_SERVICE_HOST=127.0.0.1",
        "-e",
        &port,
        "-e",
        &pod_name,
        "-e",
        &pod_ns,
        "--entrypoint",
        &line[0],
        IMAGE,
    ];
    args.extend(line[1..].iter().map(String::as_str));
    let out = docker(&args).await;
    assert!(
        out.status.success(),
        "docker run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn logs(name: &str) -> String {
    let out = docker(&["logs", name]).await;
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The token `name` printed as leader, waiting up to `within`.
async fn leader_token(name: &str, within: Duration) -> u64 {
    let started = Instant::now();
    let marker = format!("{name} leads with fencing token ");
    loop {
        let text = logs(name).await;
        if let Some(line) = text.lines().find(|l| l.starts_with(&marker)) {
            return line[marker.len()..].trim().parse().unwrap_or_else(|e| {
                panic!("bad token in {line:?}: {e}");
            });
        }
        assert!(
            started.elapsed() < within,
            "{name} did not lead within {within:?}; its output:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_leads_in_cluster_with_the_manifests_arguments() {
    let image = docker(&["image", "inspect", IMAGE]).await;
    assert!(
        image.status.success(),
        "image {IMAGE} missing: scripts/install/fence-image.sh target/debug/fence builds it"
    );
    let cluster = KubeCluster::start().await.expect("kube-apiserver");
    let (account, line) = deployment_command();
    let secrets = tempfile::tempdir().unwrap();
    service_account_files(&cluster, &account, secrets.path()).await;
    let port: u16 = cluster
        .server_url()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let ns = cluster.namespace();
    let tag = std::process::id();
    let (a, b) = (format!("fence-pod-a-{tag}"), format!("fence-pod-b-{tag}"));
    let _cleanup = Containers(vec![a.clone(), b.clone()]);
    let dir = secrets.path();

    start_pod(&a, &line, ns, port, dir).await;
    let first = leader_token(&a, Duration::from_secs(60)).await;
    start_pod(&b, &line, ns, port, dir).await;
    // While a holds the lock, b waits: it must not lead.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = logs(&b).await;
    assert!(!waiting.contains("leads with"), "two leaders:\n{waiting}");
    assert!(
        docker(&["inspect", "-f", "{{.State.Running}}", &b])
            .await
            .stdout
            .starts_with(b"true"),
        "b should be waiting: {waiting}"
    );

    // Stopping a's pod (SIGTERM, as the kubelet does) stops its work and
    // releases the Lease: b leads at once, with a higher token.
    let stopped = docker(&["stop", "-t", "20", &a]).await;
    assert!(stopped.status.success());
    let code = docker(&["inspect", "-f", "{{.State.ExitCode}}", &a]).await;
    let code = String::from_utf8_lossy(&code.stdout).trim().to_owned();
    assert_ne!(
        code,
        "137",
        "fence was killed, not stopped:\n{}",
        logs(&a).await
    );
    let second = leader_token(&b, Duration::from_secs(15)).await;
    assert!(second > first, "token {second} after {first}");
    let errors = logs(&a).await;
    assert!(
        !errors.contains("ERROR") && !errors.contains("permission denied"),
        "{errors}"
    );
}
