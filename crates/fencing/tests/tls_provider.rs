//! With `ring` and `zookeeper` the build links two rustls crypto providers.
//! Nothing in this crate installs one: a TLS connection made before the
//! application chose is a configuration error naming the fix (not a panic
//! inside rustls), and the application's own choice is then free to land.
//!
//! Run by scripts/check.sh (with the crate's unit tests):
//! `cargo test -p fencing --no-default-features --features zookeeper,kube,ring --lib --test tls_provider`
#![cfg(all(feature = "zookeeper", feature = "kube", feature = "ring"))]

use std::io::Write;

use fencing::Error;

fn kubeconfig_to_a_closed_port() -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(
        file,
        "apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"
    )
    .unwrap();
    file
}

fn provider_error<T>(result: fencing::Result<T>) -> Option<String> {
    match result {
        Err(Error::Config(msg)) if msg.contains("install_default") => Some(msg),
        _ => None,
    }
}

#[tokio::test]
async fn tls_before_the_application_chose_a_provider_is_a_config_error() {
    assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    let kubeconfig = kubeconfig_to_a_closed_port();
    let kube_url = format!(
        "kube://default?kubeconfig={}&request_timeout=2",
        kubeconfig.path().display()
    );

    let msg = provider_error(fencing::connect(&kube_url).await).expect("kube:// with no provider");
    assert!(msg.contains("two rustls crypto providers"), "{msg}");
    let zk = fencing::connect("zk://127.0.0.1:1/x?ca=/nonexistent.pem&request_timeout=2").await;
    provider_error(zk).expect("zk:// with ca= and no provider");
    // Plain ZooKeeper needs no provider: the error is about the endpoint.
    let plain = fencing::connect("zk://127.0.0.1:1/x?request_timeout=2").await;
    assert!(provider_error(plain).is_none());

    // Nothing above installed a provider: the application's choice lands.
    assert!(rustls::crypto::ring::default_provider()
        .install_default()
        .is_ok());
    let after = fencing::connect(&kube_url).await;
    assert!(
        matches!(
            after,
            Err(Error::Unreachable { .. } | Error::Timeout { .. } | Error::Backend { .. })
        ),
        "with a provider installed, the closed port is the problem: {:?}",
        after.err()
    );
}
