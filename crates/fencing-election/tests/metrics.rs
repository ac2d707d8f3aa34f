//! With feature `metrics`, the four metrics of `fencing_core::metrics`
//! appear with their labels. Run by scripts/check.sh:
//! `cargo test -p fencing-election --features metrics --test metrics`
#![cfg(feature = "metrics")]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::metrics::{ACQUIRE_SECONDS, GATE_REFUSALS, GRANTS_LOST, LEADER_STATUS};
use fencing_core::{
    AcquireOptions, FencingSource, FencingToken, Gate, LocalSource, MemoryGate, ResourceName,
};
use fencing_election::{ElectionConfig, LeaderElector};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What was recorded, summed over snapshots (a snapshot drains counters
/// and histograms): counter totals and histogram sample counts, and the
/// latest gauge values, keyed by `name{label=value}`.
#[derive(Default)]
struct Totals(HashMap<String, f64>);

impl Totals {
    fn add(&mut self, s: &Snapshotter) {
        for (key, _, _, value) in s.snapshot().into_vec() {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let slot = self
                .0
                .entry(format!("{}{{{}}}", key.name(), labels.join(",")))
                .or_default();
            match value {
                DebugValue::Counter(n) => *slot += n as f64,
                DebugValue::Histogram(samples) => *slot += samples.len() as f64,
                DebugValue::Gauge(g) => *slot = g.into_inner(),
            }
        }
    }

    /// The value of `name` whose labels include `label`, and a `source`
    /// label naming a local source (every metric but the gate refusals
    /// carries the source).
    fn get(&self, name: &str, label: &str) -> f64 {
        let found: Vec<(&String, &f64)> = self
            .0
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{name}{{")))
            .filter(|(k, _)| k.contains(label))
            .collect();
        let [(key, value)] = found.as_slice() else {
            panic!("not one {name} with {label} in {:?}", self.0)
        };
        if name != GATE_REFUSALS {
            assert!(key.contains("source=local:"), "{key} names no source");
        }
        **value
    }
}

#[tokio::test(flavor = "current_thread")]
async fn grants_losses_refusals_and_leadership_are_measured() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
    let mut totals = Totals::default();

    let dir = tempfile::tempdir().unwrap();
    let source = Arc::new(LocalSource::open(dir.path()).unwrap());
    let resource = ResourceName::new("r").unwrap();
    let grant = source
        .acquire(&resource, &AcquireOptions::new())
        .await
        .unwrap();
    grant.release().await.unwrap();

    let gate = MemoryGate::new();
    gate.admit_any_source(&resource, FencingToken::new(5))
        .await
        .unwrap();
    assert!(gate
        .admit_any_source(&resource, FencingToken::new(4))
        .await
        .is_err());

    let elector = LeaderElector::new(
        source.clone(),
        ResourceName::new("election").unwrap(),
        ElectionConfig::new("a"),
    )
    .unwrap();
    let leadership = elector.campaign().await.unwrap();
    totals.add(&snapshotter);
    assert_eq!(totals.get(LEADER_STATUS, "election=election"), 1.0);

    leadership.resign().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    totals.add(&snapshotter);
    assert_eq!(totals.get(LEADER_STATUS, "election=election"), 0.0);
    assert_eq!(
        totals.get(ACQUIRE_SECONDS, "outcome=granted"),
        2.0,
        "one plain acquire, one campaign"
    );
    assert_eq!(totals.get(GRANTS_LOST, "reason=released"), 2.0);
    assert_eq!(totals.get(GATE_REFUSALS, "kind=stale"), 1.0);
}
