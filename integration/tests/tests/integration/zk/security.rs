//! ZkSource against ZooKeeper servers that serve TLS (with and without
//! client certificates) or require SASL DIGEST-MD5, on ZooKeeper 3.8 and
//! 3.9 (single servers). Refused clients must get an error, not hang:
//! each refusal has to arrive within 15 s.

use std::time::{Duration, Instant};

use fencing::{AcquireOptions, Error, FencingSource, ResourceName};
use fencing_harness::pki::make_tls;
use fencing_harness::zk::ensemble::{ZkEnsemble, ZkOptions, ZkVersion};
use fencing_zookeeper::{ZkConfig, ZkSource};

/// How long a refused client may take to get its error.
const REFUSAL: Duration = Duration::from_secs(15);

async fn start(options: ZkOptions) -> ZkEnsemble {
    let version = options.version;
    let t = Instant::now();
    let ensemble = ZkEnsemble::start_with(options)
        .await
        .unwrap_or_else(|e| panic!("{version} did not start: {e}"));
    eprintln!("{version}: secured server healthy after {:?}", t.elapsed());
    ensemble
}

fn config(ensemble: &ZkEnsemble, hosts: Vec<String>) -> ZkConfig {
    ZkConfig::new(hosts, "/fencing-test/locks")
        .expect("valid config")
        .ensemble(format!("test-{}", ensemble.dir().display()))
        .ttl(Duration::from_secs(4))
        .request_timeout(Duration::from_secs(5))
}

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(4))
        .wait(Duration::from_secs(10))
}

/// Connects, acquires, validates and releases one lock.
async fn round_trip(cfg: ZkConfig) -> Result<(), Error> {
    let source = ZkSource::connect(cfg).await?;
    let g = source
        .acquire(&ResourceName::new("secured").unwrap(), &opts())
        .await?;
    assert!(source.validate(&g).await?, "a fresh grant validates");
    g.release().await
}

/// A round trip that must fail, and within [`REFUSAL`]; returns its error.
async fn refused(what: &str, cfg: ZkConfig) -> Error {
    let t = Instant::now();
    let result = tokio::time::timeout(REFUSAL, round_trip(cfg))
        .await
        .unwrap_or_else(|_| panic!("{what}: neither refused nor admitted within {REFUSAL:?}"));
    let e = result.expect_err(what);
    eprintln!("{what}: refused after {:?}: {e:?}", t.elapsed());
    e
}

/// `ssl.clientAuth=need`: a client with a certificate signed by the CA
/// locks; one without a certificate and a plaintext one are refused.
async fn tls_with_client_auth(version: ZkVersion) {
    let certs = tempfile::tempdir().unwrap();
    let files = make_tls(certs.path()).unwrap();
    let ensemble = start(ZkOptions::new(version, 1).tls(files.clone(), true)).await;
    let secure = ensemble.secure_endpoints();
    assert_eq!(secure.len(), 1);

    round_trip(config(&ensemble, secure.clone()).tls(files.client_files(true)))
        .await
        .expect("a client with a certificate locks over TLS");

    refused(
        "TLS without a client certificate",
        config(&ensemble, secure.clone()).tls(files.client_files(false)),
    )
    .await;
    refused("plaintext to the TLS port", config(&ensemble, secure)).await;
}

/// `ssl.clientAuth=none`: a TLS client without a certificate locks, set
/// up through the `zk://` URL (`ca=`).
async fn tls_without_client_auth(version: ZkVersion) {
    let certs = tempfile::tempdir().unwrap();
    let files = make_tls(certs.path()).unwrap();
    let ensemble = start(ZkOptions::new(version, 1).tls(files.clone(), false)).await;
    let url = format!(
        "zk://{}/fencing-test/locks?ttl=4&request_timeout=5&ca={}",
        ensemble.secure_endpoints().join(","),
        files.ca_cert.display()
    );
    let cfg = ZkConfig::from_url(&url).expect("valid URL");
    assert_eq!(cfg.tls, Some(files.client_files(false)));
    round_trip(cfg)
        .await
        .expect("a client without a certificate locks over TLS");
}

/// SASL DIGEST-MD5, required of every session: the right password locks,
/// a wrong password and no SASL at all are refused.
async fn sasl_required(version: ZkVersion) {
    let ensemble = start(
        ZkOptions::new(version, 1)
            .sasl_user("fencer", "secret")
            .require_sasl(true),
    )
    .await;
    let hosts = ensemble.endpoints();

    round_trip(config(&ensemble, hosts.clone()).sasl("fencer", "secret"))
        .await
        .expect("the right SASL password locks");
    let url = format!(
        "zk://{}/fencing-test/locks?ttl=4&request_timeout=5&sasl_user=fencer&sasl_password=secret",
        hosts.join(",")
    );
    round_trip(ZkConfig::from_url(&url).expect("valid URL"))
        .await
        .expect("the right SASL password in the URL locks");

    let e = refused(
        "a wrong SASL password",
        config(&ensemble, hosts.clone()).sasl("fencer", "wrong"),
    )
    .await;
    assert!(matches!(e, Error::PermissionDenied(_)), "{e:?}");

    refused("no SASL", config(&ensemble, hosts)).await;
}

fencing_harness::on_both_zk_versions!(tls_with_client_auth, tls_without_client_auth, sasl_required);
