//! `durability`: acknowledged writes against what the storage held after
//! the run.

use std::collections::BTreeMap;

use super::{result, Ctx, PropertyResult, Stored, Violation, DURABILITY};
use crate::history::{EventKind, WriteOutcome};

/// Every write the storage acknowledged is in it afterwards, whatever was
/// killed in between; a storage that keeps marks only still holds a mark
/// at least as high as every token it acknowledged (writes of other gates
/// are not checked).
pub(super) fn durability(ctx: &Ctx, stored: Option<&Stored>) -> PropertyResult {
    let Some(stored) = stored else {
        return result(DURABILITY, Vec::new(), vec!["not checked".to_string()]);
    };
    let mut violations = Vec::new();
    let mut acknowledged = BTreeMap::<(&str, &str), usize>::new();
    for &i in &ctx.order {
        let EventKind::Write {
            resource,
            token,
            gate,
            outcome: WriteOutcome::Accepted,
            value,
            ..
        } = &ctx.events[i].kind
        else {
            continue;
        };
        let missing = if *gate == stored.gate {
            !stored.writes.contains(&(resource.clone(), *token, *value))
        } else if let Some(&mark) = stored.marks.get(&(gate.clone(), resource.clone())) {
            mark < *token
        } else {
            continue;
        };
        *acknowledged.entry((gate, resource)).or_default() += 1;
        if missing {
            violations.push(Violation {
                message: format!(
                    "{}'s write of {value} with token {token} to {gate}/{resource}, \
                     acknowledged at {}, is missing afterwards",
                    ctx.events[i].client,
                    ctx.at(i)
                ),
                events: vec![i],
            });
        }
    }
    let to_stored_gate: usize = acknowledged
        .iter()
        .filter(|((gate, _), _)| *gate == stored.gate)
        .map(|(_, n)| n)
        .sum();
    let mut notes = vec![format!(
        "{to_stored_gate} acknowledged writes to {}, {} stored",
        stored.gate,
        stored.writes.len()
    )];
    for ((gate, resource), mark) in &stored.marks {
        let n = acknowledged
            .get(&(gate.as_str(), resource.as_str()))
            .copied()
            .unwrap_or(0);
        notes.push(format!(
            "{gate}/{resource}: mark {mark} ({n} acknowledged writes)"
        ));
    }
    result(DURABILITY, violations, notes)
}
