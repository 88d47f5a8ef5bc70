//! The trace hash: SHA-256 over a canonical text of everything a seed left behind — every
//! committed row and event (the snapshot's `BTreeMap`s print in key order, events as their
//! §13.1 JSON envelope) and the ground-truth effect ledger. Two runs of one seed must give
//! byte-identical text, so equal hashes.

use std::fmt::Write as _;

use airlock_core::mem_store::MemSnapshot;
use airlock_core::testing::invariants::Effect;
use sha2::{Digest, Sha256};

/// The canonical text of a seed's outcome.
pub fn canonical(snapshot: &MemSnapshot, effects: &[Effect]) -> String {
    let mut text = String::new();
    for event in &snapshot.events {
        text.push_str(&airlock_core::canonical::to_canonical_string(
            &event.to_json(),
        ));
        text.push('\n');
    }
    let _ = writeln!(text, "{:?}", snapshot.sessions);
    let _ = writeln!(text, "{:?}", snapshot.runs);
    let _ = writeln!(text, "{:?}", snapshot.checkpoints);
    let _ = writeln!(text, "{:?}", snapshot.invocations);
    let _ = writeln!(text, "{:?}", snapshot.approvals);
    let _ = writeln!(text, "{:?}", snapshot.settlements);
    let _ = writeln!(text, "{:?}", snapshot.policy_profiles);
    let _ = writeln!(text, "{:?}", snapshot.process_events);
    for effect in effects {
        let _ = writeln!(text, "{effect:?}");
    }
    text
}

/// Lowercase hex SHA-256 of [`canonical`].
pub fn hash(snapshot: &MemSnapshot, effects: &[Effect]) -> String {
    let digest = Sha256::digest(canonical(snapshot, effects).as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_outcomes_hash_equal_and_differences_show() {
        let empty = MemSnapshot::default();
        assert_eq!(hash(&empty, &[]), hash(&empty.clone(), &[]));
        assert_eq!(hash(&empty, &[]).len(), 64);
        let effect = Effect {
            tool_name: "sim.note".into(),
            idempotency_key: "k".into(),
            idempotency: airlock_core::vocab::IdempotencyClass::NonIdempotent,
            replay: false,
            watermarked_at_entry: true,
            transaction_open_at_entry: false,
            started_at_entry: true,
        };
        assert_ne!(hash(&empty, &[]), hash(&empty, &[effect]));
    }
}
