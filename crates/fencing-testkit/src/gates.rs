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

/// One admit of [`gate_survives_racing_admits`]: when it began and ended,
/// its token, and whether it was admitted.
#[derive(Clone, Copy, Debug)]
struct Admit {
    began: tokio::time::Instant,
    ended: tokio::time::Instant,
    token: u64,
    admitted: bool,
}

/// Four writers admit interleaved, rising tokens (`base + 1` upwards)
/// concurrently on `resource`, which the gates must never have seen, each
/// through `gates[writer % gates.len()]` (several instances of one gate on
/// separate connections race harder), `rounds` times each. The history
/// of admits must show what a gate promises under races:
///
/// - once a token was admitted, no lower token that began later is
///   admitted (a mark never goes back, which a raise that is not
///   conditional on the mark it read would do);
/// - the final mark is the highest admitted token.
///
/// Panics naming the offending pair of admits.
pub async fn gate_survives_racing_admits(
    gates: &[&dyn Gate],
    resource: &ResourceName,
    source: &SourceId,
    base: FencingToken,
    rounds: u64,
) {
    const WRITERS: u64 = 4;
    assert!(!gates.is_empty(), "no gate to race on");
    let writer = |w: u64| async move {
        let gate = gates[usize::try_from(w).unwrap_or(0) % gates.len()];
        let mut seen = Vec::new();
        for round in 0..rounds {
            let token = base.get() + 1 + w + WRITERS * round;
            let began = tokio::time::Instant::now();
            let result = gate
                .admit_from(resource, source, FencingToken::new(token))
                .await;
            let admitted = match result {
                Ok(()) => true,
                Err(Error::Stale { .. }) => false,
                Err(other) => panic!("admit {token}: {other:?}"),
            };
            seen.push(Admit {
                began,
                ended: tokio::time::Instant::now(),
                token,
                admitted,
            });
        }
        seen
    };
    let (a, b, c, d) = tokio::join!(writer(0), writer(1), writer(2), writer(3));
    let history: Vec<Admit> = [a, b, c, d].concat();
    let admitted: Vec<&Admit> = history.iter().filter(|x| x.admitted).collect();
    for earlier in &admitted {
        for later in &admitted {
            assert!(
                !(later.began > earlier.ended && later.token < earlier.token),
                "token {} was admitted after token {} had been: the mark went back \
                 ({earlier:?}, then {later:?})",
                later.token,
                earlier.token
            );
        }
    }
    let highest = admitted.iter().map(|x| x.token).max();
    let mark = gates[0].high_water(resource).await.expect("high_water");
    assert_eq!(
        mark.map(FencingToken::get),
        highest,
        "the final mark is not the highest admitted token"
    );
}
