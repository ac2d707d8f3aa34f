use std::collections::BTreeMap;

use fencing::election::{ElectionConfig, LeaderElector};
use fencing::{FencingSource, Gate, GrantInfo, MemoryGate, ResourceName};
use tokio::sync::Mutex;

/// The storage's side. The token check and the write are one step: both
/// happen under the store's own lock, so no write of an older holder can
/// land between them. In a real system this is your database or service
/// (a `FencedUpdate` in PostgreSQL, the `fencing::http` layer in front of
/// an HTTP store), and the leader sends its `GrantInfo` with each request.
#[derive(Default)]
struct Store {
    gate: MemoryGate,
    data: Mutex<BTreeMap<String, String>>,
}

impl Store {
    async fn write(&self, from: &GrantInfo, key: &str, value: &str) -> fencing::Result<()> {
        let mut data = self.data.lock().await;
        // Err(Stale) when a newer leader already wrote here.
        self.gate.admit_grant(from).await?;
        data.insert(key.to_owned(), value.to_owned());
        Ok(())
    }
}

#[tokio::main]
async fn main() -> fencing::Result<()> {
    let store = Store::default();

    // With no URL, a LocalSource keeps the locks in a directory: no
    // cluster needed. On a cluster: etcd://..., zk://... or kube://...
    let url = std::env::args().nth(1).unwrap_or_else(|| {
        let dir = std::env::temp_dir().join("fencing-quickstart");
        format!("local://{}", dir.display())
    });
    let source = fencing::connect(&url).await?;
    let election = ResourceName::new("scheduler")?;
    let elector = LeaderElector::new(source.clone(), election, ElectionConfig::new("node-a"))?;

    // `run` campaigns, runs the work as leader, cancels it the moment
    // leadership may be lost, and resigns when it is done.
    let token = elector
        .run(|leader| async move {
            store.write(leader.info(), "schedule", "v1").await?;
            fencing::Result::Ok(leader.token())
        })
        .await??;
    println!("wrote schedule=v1 as leader with token {token}");
    source.close().await
}
