//! A Kubernetes control plane in the namespaces: kube-apiserver in a
//! namespace of its own, storing into the campaign's three etcd members,
//! with a fresh CA, a serving certificate for its address and two client
//! certificates: `system:masters` for the controller's administration
//! (readiness, Lease deletion, RBAC), and the user [`CLIENT_USER`] for
//! every campaign client, ours and client-go, bound by
//! `deploy/kubernetes/rbac.yaml` (get, create and update on Leases) and,
//! for coordinated candidates, `deploy/kubernetes/rbac-coordinated.yaml`
//! (LeaseCandidates too), and nothing else, as a user of the library
//! would run.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};

use crate::net::netns::Host;
use crate::pki::{write_pem, Ca};

/// The apiserver's port on its own address.
pub const APISERVER_PORT: u16 = 6443;
/// Where the campaign's Leases live: it exists in every new cluster.
pub const NAMESPACE: &str = "default";
/// The certificate user of the campaign's clients.
pub const CLIENT_USER: &str = "campaign-client";

/// The files the controller and the clients need, and how to start the
/// apiserver.
pub struct ControlPlane {
    /// The administrator's (`system:masters`).
    pub kubeconfig: PathBuf,
    /// The clients' ([`CLIENT_USER`]).
    pub client_kubeconfig: PathBuf,
    pub command: Box<dyn Fn() -> Command + Send + Sync>,
}

/// Writes the certificates and the kubeconfig under `dir` for an apiserver
/// on `api` storing into the etcd members at `etcd`; with `coordinated`,
/// the apiserver also runs coordinated leader election (see
/// [`coordinated_election_flags`]).
pub fn control_plane(
    api: &Host,
    etcd: &[Host],
    dir: &Path,
    coordinated: bool,
) -> Result<ControlPlane, String> {
    let binary = crate::kubernetes::cluster::apiserver_binary().map_err(|e| e.to_string())?;
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).map_err(|e| e.to_string())?;
    let ca = Ca::new("fencing campaign CA").map_err(|e| e.to_string())?;
    let ip = api.ip.to_string();
    let server = ca
        .sign("kube-apiserver", None, &[ip.as_str()], &[ServerAuth])
        .map_err(|e| e.to_string())?;
    let admin = ca
        .sign("campaign-admin", Some("system:masters"), &[], &[ClientAuth])
        .map_err(|e| e.to_string())?;
    let client = ca
        .sign(CLIENT_USER, None, &[], &[ClientAuth])
        .map_err(|e| e.to_string())?;
    let sa = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let file = |name: &str| pki.join(name);
    for (name, pem) in [
        ("ca.pem", ca.cert_pem()),
        ("apiserver.pem", server.cert.as_str()),
        ("apiserver-key.pem", server.key.as_str()),
        ("admin.pem", admin.cert.as_str()),
        ("admin-key.pem", admin.key.as_str()),
        ("client.pem", client.cert.as_str()),
        ("client-key.pem", client.key.as_str()),
        ("sa-key.pem", &sa.serialize_pem()),
        ("sa.pub", &sa.public_key_pem()),
    ] {
        write_pem(&file(name), pem).map_err(|e| e.to_string())?;
    }
    let kubeconfig = dir.join("kubeconfig.yaml");
    let client_kubeconfig = dir.join("client-kubeconfig.yaml");
    for (path, user) in [(&kubeconfig, "admin"), (&client_kubeconfig, "client")] {
        std::fs::write(path, kubeconfig_yaml(api.ip, &pki, user)).map_err(|e| e.to_string())?;
    }
    let etcd_servers: Vec<String> = etcd
        .iter()
        .map(|h| format!("http://{}:2379", h.ip))
        .collect();
    let etcd_servers = etcd_servers.join(",");
    let host = api.clone();
    let cert_dir = dir.join("cert");
    let command = Box::new(move || {
        let file = |name: &str| pki.join(name);
        let mut cmd = host.command(&binary);
        cmd.arg(format!("--etcd-servers={etcd_servers}"))
            .arg(format!("--bind-address={ip}"))
            .arg(format!("--advertise-address={ip}"))
            .arg(format!("--secure-port={APISERVER_PORT}"))
            .arg("--endpoint-reconciler-type=none")
            .arg(format!("--cert-dir={}", cert_dir.display()))
            .arg(format!(
                "--tls-cert-file={}",
                file("apiserver.pem").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                file("apiserver-key.pem").display()
            ))
            .arg(format!("--client-ca-file={}", file("ca.pem").display()))
            .arg("--authorization-mode=RBAC")
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!(
                "--service-account-key-file={}",
                file("sa.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                file("sa-key.pem").display()
            ))
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--enable-priority-and-fairness=false")
            .arg("--profiling=false");
        if coordinated {
            cmd.args(coordinated_election_flags());
        }
        cmd
    });
    Ok(ControlPlane {
        kubeconfig,
        client_kubeconfig,
        command,
    })
}

/// The flags of an apiserver that runs coordinated leader election
/// (KEP-4355, beta and off by default in 1.36): the feature gate, without
/// which the apiserver drops a Lease's `strategy` and `preferredHolder`,
/// and the `v1beta1` API that serves LeaseCandidates. Only the campaigns
/// that need them set them, so that the other Kubernetes campaigns keep
/// the apiserver they always had (the election controller watches every
/// Lease in the cluster).
pub fn coordinated_election_flags() -> [&'static str; 2] {
    [
        "--feature-gates=CoordinatedLeaderElection=true",
        "--runtime-config=coordination.k8s.io/v1beta1=true",
    ]
}

/// The kubeconfig of `user` (`admin` or `client`, the stem of its PEM
/// files), naming the files by path.
fn kubeconfig_yaml(ip: Ipv4Addr, pki: &Path, user: &str) -> String {
    let p = |name: &str| pki.join(name).display().to_string();
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: campaign\n  cluster:\n    server: https://{ip}:{APISERVER_PORT}\n    certificate-authority: {ca}\n\
         users:\n- name: {user}\n  user:\n    client-certificate: {cert}\n    client-key: {key}\n\
         contexts:\n- name: {user}@campaign\n  context:\n    cluster: campaign\n    user: {user}\n    namespace: {NAMESPACE}\n\
         current-context: {user}@campaign\n",
        ca = p("ca.pem"),
        cert = p(&format!("{user}.pem")),
        key = p(&format!("{user}-key.pem")),
    )
}

/// The URL of a campaign client: leases of `ttl` (whole seconds), one
/// second per request.
pub fn source_url(kubeconfig: &Path, ttl: Duration) -> String {
    format!(
        "kube://{NAMESPACE}?kubeconfig={}&ttl={}&request_timeout=1",
        kubeconfig.display(),
        ttl.as_secs().max(1)
    )
}
