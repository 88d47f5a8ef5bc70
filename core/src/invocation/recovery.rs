//! The recovery table (SPEC §9.4): one `match`, total over status × idempotency class ×
//! watermark, shaped like the table. It uses the row's class snapshot, never the registry's
//! current classification.

use crate::vocab::{IdempotencyClass, InvocationStatus, RecoveryAction};

/// What to do with an existing row found at replay.
pub fn recovery_action(
    status: InvocationStatus,
    class: IdempotencyClass,
    watermarked: bool,
) -> RecoveryAction {
    use IdempotencyClass::*;
    use InvocationStatus::*;
    use RecoveryAction::*;
    #[cfg(feature = "mutants")]
    if crate::testing::mutants::replay_uncertain() && (status, class) == (Running, NonIdempotent) {
        return Reexecute;
    }
    match (status, class, watermarked) {
        (Succeeded | Failed | Denied | Uncertain, _, _) => ReturnOutcome,
        // Kept so the table is total; v1 never stores PROPOSED, so meeting one is an internal error.
        (Proposed, _, _) => ResumeAuthorization,
        (Authorized, _, _) => ResumeAuthorization,
        (WaitingForApproval, _, _) => ResumeApproval,
        (Running, ReadOnly | Idempotent, _) => Reexecute,
        (Running, ConditionallyIdempotent, false) => Reexecute,
        (Running, ConditionallyIdempotent, true) => ReplayIdempotencyKey,
        (Running, NonIdempotent, false) => Reexecute,
        (Running, NonIdempotent, true) => MarkUncertain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use IdempotencyClass::*;
    use InvocationStatus::*;
    use RecoveryAction::*;

    /// Every cell of §9.4, written out from the table.
    #[test]
    fn matches_the_spec_table_cell_by_cell() {
        for status in InvocationStatus::ALL {
            for class in IdempotencyClass::ALL {
                for watermarked in [false, true] {
                    let expected = match status {
                        Succeeded | Failed | Denied | Uncertain => ReturnOutcome,
                        Proposed | Authorized => ResumeAuthorization,
                        WaitingForApproval => ResumeApproval,
                        Running => match (class, watermarked) {
                            (ReadOnly | Idempotent, _) => Reexecute,
                            (ConditionallyIdempotent, true) => ReplayIdempotencyKey,
                            (NonIdempotent, true) => MarkUncertain,
                            (_, false) => Reexecute,
                        },
                    };
                    assert_eq!(
                        recovery_action(*status, *class, watermarked),
                        expected,
                        "{status} {class} {watermarked}"
                    );
                }
            }
        }
        assert_eq!(recovery_action(Running, NonIdempotent, true), MarkUncertain);
        assert_eq!(
            recovery_action(Running, ConditionallyIdempotent, true),
            ReplayIdempotencyKey
        );
        assert_eq!(recovery_action(Running, NonIdempotent, false), Reexecute);
    }
}
