//! The gates kept in a coordinator bind their marks to that coordinator:
//! a token named as another source's is refused, however high, and the
//! mark is unchanged. One cluster per backend (run under the cluster lock).

use std::time::Duration;

use fencing::{AcquireOptions, Error, FencingSource, FencingToken, Gate, ResourceName, SourceId};
use fencing_integration::etcd::cluster::EtcdVersion;
use fencing_integration::etcd::fixture::EtcdFixture;
use fencing_integration::zk::ensemble::ZkVersion;
use fencing_integration::zk::fixture::ZkFixture;

/// Admits the own source's token, then a far higher token named as another
/// source's, and checks the refusal and the mark.
async fn refuses_a_foreign_token(gate: &dyn Gate, source: &dyn FencingSource) {
    let r = ResourceName::new("orders").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    let grant = source.acquire(&r, &opts).await.unwrap();
    gate.admit_grant(grant.info()).await.unwrap();
    let foreign = SourceId::new("etcd:0000000000000bad");
    let higher = FencingToken::new(grant.token().get() + 1_000_000);
    match gate.admit_from(&r, &foreign, higher).await {
        Err(Error::ForeignSource {
            expected,
            presented,
        }) => {
            assert_eq!(expected, *source.identity());
            assert_eq!(presented, foreign);
        }
        other => panic!("a higher token of another source: {other:?}"),
    }
    assert_eq!(gate.high_water(&r).await.unwrap(), Some(grant.token()));
    gate.admit_grant(grant.info())
        .await
        .expect("the holder's retry");
    grant.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_gate_refuses_another_sources_token() {
    let f = EtcdFixture::start(EtcdVersion::V3_4).await;
    let source = f.source().await;
    let gate = source.gate("/fencing-test-gate").unwrap();
    refuses_a_foreign_token(&gate, &source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_gate_refuses_another_sources_token() {
    let f = ZkFixture::start(ZkVersion::V3_8).await;
    let source = f.source().await;
    let gate = source.gate("/fencing-test-gate").unwrap();
    refuses_a_foreign_token(&gate, &source).await;
}
