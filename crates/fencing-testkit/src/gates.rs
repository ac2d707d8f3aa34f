//! The rules every [`Gate`] keeps, as one check that each gate's tests
//! call on a real instance (memory, file, etcd, ZooKeeper, PostgreSQL).

use fencing_core::{Error, FencingToken, Gate, ResourceName, SourceId};

/// How a gate treats a token that names no source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// A mark is bound to the source of its first bound admit; once bound,
    /// a token naming no source is refused ([`Error::UnnamedSource`]).
    /// `MemoryGate`, `FileGate`, `PgGate`, `FenceTable`.
    FirstAdmit,
    /// The gate belongs to one source, and a token naming none is taken as
    /// that source's. `EtcdGate`, `ZkGate`.
    Fixed,
}

/// Checks the gate rules on `resource`, which the gate must never have
/// seen, with tokens from `base` upwards named as `source`'s:
///
/// - the first token passes and becomes the mark;
/// - the same token again passes (a retry), a higher one raises the mark;
/// - a lower one is [`Error::Stale`] naming both tokens;
/// - a far higher token of another source is [`Error::ForeignSource`]
///   naming both sources;
/// - a token naming no source follows `binding`;
///
/// and no refusal moves the mark. Panics with what broke.
pub async fn gate_keeps_the_rules(
    gate: &dyn Gate,
    resource: &ResourceName,
    source: &SourceId,
    base: FencingToken,
    binding: Binding,
) {
    let at = |n: u64| FencingToken::new(base.get() + n);
    let mark = || async { gate.high_water(resource).await.expect("high_water") };
    assert_eq!(mark().await, None, "{resource:?} must be new to the gate");

    gate.admit_from(resource, source, at(0))
        .await
        .expect("a first token");
    gate.admit_from(resource, source, at(0))
        .await
        .expect("a retry of the same token");
    gate.admit_from(resource, source, at(5))
        .await
        .expect("a higher token");
    assert_eq!(mark().await, Some(at(5)));

    match gate.admit_from(resource, source, at(1)).await {
        Err(Error::Stale { presented, highest }) => {
            assert_eq!(
                (presented, highest),
                (at(1), at(5)),
                "the Stale error's tokens"
            );
        }
        other => panic!("a lower token: {other:?}"),
    }
    let foreign = SourceId::new(format!("{source}-elsewhere"));
    match gate.admit_from(resource, &foreign, at(1_000_000)).await {
        Err(Error::ForeignSource {
            expected,
            presented,
        }) => {
            assert_eq!(
                (&expected, &presented),
                (source, &foreign),
                "the sources named"
            );
        }
        other => panic!("a higher token of another source: {other:?}"),
    }
    assert_eq!(mark().await, Some(at(5)), "a refusal moved the mark");

    let unnamed = gate.admit_any_source(resource, at(6)).await;
    match binding {
        Binding::FirstAdmit => {
            assert!(
                matches!(unnamed, Err(Error::UnnamedSource { .. })),
                "a token naming no source on a bound mark: {unnamed:?}"
            );
            assert_eq!(mark().await, Some(at(5)));
        }
        Binding::Fixed => {
            unnamed.expect("a token naming no source counts as the gate's own");
            assert_eq!(mark().await, Some(at(6)));
        }
    }
}
