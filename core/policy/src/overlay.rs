//! The trust overlay (SPEC §6.1 step 4): untrusted content may inform an action but never
//! authorize one with an effect, so a permitting decision becomes `require_approval`.

use crate::facts::ActionFacts;
use crate::vocab::{PolicyDecisionType, SideEffectClass};

/// Side effects that cannot carry content out or change anything; the overlay leaves them alone.
const OBSERVE_ONLY: [SideEffectClass; 3] = [
    SideEffectClass::None,
    SideEffectClass::WorkspaceRead,
    SideEffectClass::NetworkRead,
];

/// Whether the overlay fires. It can only raise a decision, never lower one.
pub fn overlay_fires(
    enabled: bool,
    decision: PolicyDecisionType,
    action: &(impl ActionFacts + ?Sized),
) -> bool {
    enabled
        && decision.permits()
        && action.carries_untrusted_content()
        && !OBSERVE_ONLY.contains(&action.side_effect())
}
