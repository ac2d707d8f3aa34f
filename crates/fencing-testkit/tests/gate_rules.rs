//! The gate rules on the gates of the core (the cluster and PostgreSQL
//! gates run them in the integration tests).

use fencing_core::{FencingToken, FileGate, MemoryGate, ResourceName, SourceId};
use fencing_testkit::{gate_keeps_the_rules, Binding};

fn names() -> (ResourceName, SourceId) {
    (
        ResourceName::new("orders").unwrap(),
        SourceId::new("etcd:a"),
    )
}

#[tokio::test]
async fn memory_gate_keeps_the_rules() {
    let (r, s) = names();
    let gate = MemoryGate::new();
    gate_keeps_the_rules(&gate, &r, &s, FencingToken::new(7), Binding::FirstAdmit).await;
}

#[tokio::test]
async fn file_gate_keeps_the_rules() {
    let (r, s) = names();
    let dir = tempfile::tempdir().unwrap();
    let gate = FileGate::open(dir.path().join("marks")).unwrap();
    gate_keeps_the_rules(&gate, &r, &s, FencingToken::new(7), Binding::FirstAdmit).await;
}
