//! Every form a source or a gate comes in goes where one is asked for:
//! a source by value where it is kept, borrowed where it is used for a
//! call; a gate behind any pointer (issue 55, item 1). A compile test
//! first: a form that stops being accepted fails the build.

use std::sync::Arc;

use fencing::election::{ElectionConfig, LeaderElector};
use fencing::{
    fenced, FencingSource, FencingToken, Gate, LocalSource, MemoryGate, ResourceName,
    ValidatingGate,
};

async fn write_once(source: &(impl FencingSource + ?Sized), gate: &impl Gate, r: &ResourceName) {
    let token = fenced(source, r)
        .run(|grant| async move {
            gate.admit_grant(&grant).await?;
            Ok::<_, fencing::Error>(grant.token)
        })
        .await
        .unwrap();
    assert_eq!(gate.high_water(r).await.unwrap(), Some(token));
}

#[tokio::test]
async fn every_form_of_a_source_and_a_gate_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalSource::open(dir.path()).unwrap();
    let shared: Arc<dyn FencingSource> = Arc::new(local.clone());
    let arc_local = Arc::new(local.clone());
    let boxed: Box<dyn FencingSource> = Box::new(local.clone());
    let r = ResourceName::new("forms").unwrap();

    let memory = Arc::new(MemoryGate::new());
    let arc_gate = memory.clone();
    let boxed_gate: Box<dyn Gate> = Box::new(memory.clone());
    let dyn_gate: &dyn Gate = &*memory;
    // Borrowed for a call: the source itself, an Arc of it, an
    // Arc<dyn FencingSource> (what `connect` returns), a Box's contents.
    write_once(&local, &*memory, &r).await;
    write_once(&shared, &arc_gate, &r).await;
    write_once(&arc_local, &boxed_gate, &r).await;
    write_once(&*boxed, &dyn_gate, &r).await;
    assert_eq!(
        boxed_gate.high_water(&r).await.unwrap(),
        arc_gate.high_water(&r).await.unwrap()
    );

    // Kept: any of them by value.
    let config = || ElectionConfig::new("me");
    let election = ResourceName::new("forms-election").unwrap();
    for elector in [
        LeaderElector::new(local.clone(), election.clone(), config()),
        LeaderElector::new(shared.clone(), election.clone(), config()),
        LeaderElector::new(arc_local.clone(), election.clone(), config()),
    ] {
        let leadership = elector.unwrap().campaign().await.unwrap();
        leadership.resign().await.unwrap();
    }
    let checked = ValidatingGate::new(MemoryGate::new(), shared.clone());
    let grant = local.lock("forms-validated").await.unwrap();
    checked.admit_grant(grant.info()).await.unwrap();
    assert!(checked
        .admit_from(
            grant.resource(),
            grant.source(),
            FencingToken::new(u64::MAX)
        )
        .await
        .is_err());
    grant.release().await.unwrap();
    let _ = ValidatingGate::new(MemoryGate::new(), local.clone());
}
