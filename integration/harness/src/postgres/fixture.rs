//! `PgSource` on a throwaway server: the schema created, clients straight
//! to the server or through a proxy the test cuts.

use std::time::Duration;

use async_trait::async_trait;
use fencing::postgres::{PgConfig, PgSource};
use fencing_testkit::{Client, Harness};

use crate::etcd::fixture::Partition;
use crate::postgres::server::PgServer;

/// The lease of the fixture's sources.
pub const TEST_TTL: Duration = Duration::from_secs(2);

/// A server with the lock table `fencing_locks`.
pub struct PgFixture {
    /// The server, to kill, pause and restart.
    pub server: PgServer,
}

impl PgFixture {
    /// A fresh server with the schema created.
    pub async fn start() -> PgFixture {
        let server = PgServer::start()
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL did not start: {e}"));
        let fixture = PgFixture { server };
        PgSource::create_schema(&fixture.config(fixture.server.port()))
            .await
            .unwrap_or_else(|e| panic!("create the lock table: {e}"));
        fixture
    }

    /// The `postgres://` URL of the lock table through `port` (the
    /// server's, or a proxy's in front of it).
    pub fn url(&self, port: u16) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{port}/postgres?table=fencing_locks&ttl={}&request_timeout=1",
            TEST_TTL.as_secs_f64()
        )
    }

    /// [`url`](Self::url)'s configuration.
    pub fn config(&self, port: u16) -> PgConfig {
        PgConfig::from_url(&self.url(port)).expect("fixture URL")
    }

    /// A source connected straight to the server.
    pub async fn source(&self) -> PgSource {
        connect(self.config(self.server.port())).await
    }

    /// A source whose connection goes through a proxy the test cuts.
    pub async fn partitionable_source(&self) -> (PgSource, Partition) {
        let target = format!("127.0.0.1:{}", self.server.port());
        let (partition, through) = Partition::around(vec![target]).await;
        let port = through[0].rsplit_once(':').expect("host:port").1;
        let source = connect(self.config(port.parse().expect("port"))).await;
        (source, partition)
    }
}

async fn connect(config: PgConfig) -> PgSource {
    PgSource::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect PgSource: {e}"))
}

#[async_trait]
impl Harness for PgFixture {
    async fn client(&self) -> Client {
        Client::of(self.partitionable_source().await)
    }

    fn ttl(&self) -> Duration {
        TEST_TTL
    }
}
