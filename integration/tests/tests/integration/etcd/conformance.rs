//! EtcdSource passes the conformance suite on real 3-member clusters of
//! etcd 3.4 and 3.6. Each client runs through proxies so "stall" is a real
//! network partition.

mod v3_4 {
    use fencing_harness::etcd::cluster::EtcdVersion;
    use fencing_harness::etcd::fixture::EtcdFixture;
    use fencing_harness::fixture::Fixture;

    async fn harness() -> EtcdFixture {
        EtcdFixture::start(EtcdVersion::V3_4).await
    }

    fencing_testkit::conformance_suite!(harness);
}

mod v3_6 {
    use fencing_harness::etcd::cluster::EtcdVersion;
    use fencing_harness::etcd::fixture::EtcdFixture;
    use fencing_harness::fixture::Fixture;

    async fn harness() -> EtcdFixture {
        EtcdFixture::start(EtcdVersion::V3_6).await
    }

    fencing_testkit::conformance_suite!(harness);
}
