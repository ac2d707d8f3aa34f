//! ZkSource passes the conformance suite on real 3-server ensembles of
//! ZooKeeper 3.8 and 3.9. Each client runs through proxies so "stall" is a
//! real network partition.

mod v3_8 {
    use fencing_harness::fixture::Fixture;
    use fencing_harness::zk::ensemble::ZkVersion;
    use fencing_harness::zk::fixture::ZkFixture;

    async fn harness() -> ZkFixture {
        ZkFixture::start(ZkVersion::V3_8).await
    }

    fencing_testkit::conformance_suite!(harness);
}

mod v3_9 {
    use fencing_harness::fixture::Fixture;
    use fencing_harness::zk::ensemble::ZkVersion;
    use fencing_harness::zk::fixture::ZkFixture;

    async fn harness() -> ZkFixture {
        ZkFixture::start(ZkVersion::V3_9).await
    }

    fencing_testkit::conformance_suite!(harness);
}
