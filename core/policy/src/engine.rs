//! The policy engine (SPEC §6.1): a pure, total function of a proposed action and a ruleset.
//! First applicable step wins; no I/O, clock or mutation, and nothing depends on key order.

use crate::action::{PolicyDecision, ProposedAction};
use crate::vocab::{ActionKind, PolicyDecisionType, TrustLevel};

use super::hardline::{Passes, Prefilter, first_match_with};
use super::overlay::overlay_fires;
use super::ruleset::Ruleset;

/// Evaluates one action. Never panics.
pub fn evaluate(action: &ProposedAction, ruleset: &Ruleset) -> PolicyDecision {
    evaluate_with(action, ruleset, Passes::Both, Prefilter::On)
}

/// [`evaluate`] with the hardline passes and the pre-filter chosen: the property tests compare
/// v2 with pass 1 alone (never more permissive, same codes) and the pre-filter on with it off
/// (never a different decision), SPEC §21.1, §21.5.
pub fn evaluate_with(
    action: &ProposedAction,
    ruleset: &Ruleset,
    passes: Passes,
    prefilter: Prefilter,
) -> PolicyDecision {
    let decide = |decision, reason_code: String, explanation: String| PolicyDecision {
        decision,
        reason_code,
        explanation,
        policy_version: ruleset.version.as_str().to_owned(),
        modified_arguments: None,
    };

    // Step 0: skills are authored only from a user-origin turn.
    if action.kind == ActionKind::SkillAuthoring && action.origin_trust != TrustLevel::User {
        return decide(
            PolicyDecisionType::Deny,
            "policy.skill.origin_untrusted".to_owned(),
            "Skill authoring requires a user-origin turn.".to_owned(),
        );
    }

    // Step 1: hardline rules in file order, in SPEC §21.1's two passes.
    if let Some(rule) = first_match_with(
        &ruleset.hardline,
        action.side_effect,
        &action.arguments,
        passes,
        prefilter,
    ) {
        return decide(
            PolicyDecisionType::Deny,
            rule.message_code.clone(),
            format!("Hardline rule {} denied the action.", rule.id),
        );
    }

    // Step 2 cannot fire: a loaded matrix has exactly one row per class.
    let profile = &ruleset.profile;
    let matrix_decision = profile.matrix.decide(action, profile.default_effect); // step 3
    let untrusted = overlay_fires(
        profile.external_untrusted_requires_approval,
        matrix_decision,
        action,
    ); // step 4
    let (decision, suffix) = if untrusted {
        (
            PolicyDecisionType::RequireApproval,
            "; untrusted content requires approval.",
        )
    } else {
        (matrix_decision, ".")
    };
    // Step 5.
    decide(
        decision,
        format!("policy.matrix.{}", action.side_effect),
        format!(
            "The {} profile evaluated {}{suffix}",
            profile.name, action.side_effect
        ),
    )
}
