//! The policy engine (SPEC §6.1): a pure, total function of a proposed action and a ruleset.
//! First applicable step wins; no I/O, clock or mutation, and nothing depends on key order.

use crate::action::PolicyDecision;
use crate::facts::ActionFacts;
use crate::vocab::{ActionKind, PolicyDecisionType, TrustLevel};

use super::hardline::{Passes, Prefilter, first_match_with};
use super::overlay::overlay_fires;
use super::ruleset::Ruleset;
use super::verdict::{Reason, Verdict};

/// Evaluates one action. Never panics.
pub fn evaluate(action: &(impl ActionFacts + ?Sized), ruleset: &Ruleset) -> PolicyDecision {
    decide(action, ruleset).to_decision()
}

/// [`evaluate`] with the hardline passes and the pre-filter chosen: the property tests compare
/// v2 with pass 1 alone (never more permissive, same codes) and the pre-filter on with it off
/// (never a different decision), SPEC §21.1, §21.5.
pub fn evaluate_with(
    action: &(impl ActionFacts + ?Sized),
    ruleset: &Ruleset,
    passes: Passes,
    prefilter: Prefilter,
) -> PolicyDecision {
    decide_with(action, ruleset, passes, prefilter).to_decision()
}

/// The decision and its reason, before any text is built: what [`evaluate`] renders, and
/// what a caller writing many decisions writes with [`Verdict::write_json`].
pub fn decide<'r>(action: &(impl ActionFacts + ?Sized), ruleset: &'r Ruleset) -> Verdict<'r> {
    decide_with(action, ruleset, Passes::Both, Prefilter::On)
}

/// [`decide`] with the hardline passes and the pre-filter chosen.
pub fn decide_with<'r>(
    action: &(impl ActionFacts + ?Sized),
    ruleset: &'r Ruleset,
    passes: Passes,
    prefilter: Prefilter,
) -> Verdict<'r> {
    let verdict = |decision, reason| Verdict {
        decision,
        reason,
        ruleset,
    };

    // Step 0: skills are authored only from a user-origin turn.
    if action.kind() == ActionKind::SkillAuthoring && action.origin_trust() != TrustLevel::User {
        return verdict(PolicyDecisionType::Deny, Reason::SkillOrigin);
    }

    // Step 1: hardline rules in file order, in SPEC §21.1's two passes.
    if let Some(rule) = first_match_with(
        &ruleset.hardline,
        action.side_effect(),
        action.arguments(),
        passes,
        prefilter,
    ) {
        return verdict(PolicyDecisionType::Deny, Reason::Hardline(rule));
    }

    // Step 2 cannot fire: a loaded matrix has exactly one row per class.
    let profile = &ruleset.profile;
    let matrix_decision = profile.matrix.decide(action, profile.default_effect); // step 3
    let untrusted = overlay_fires(
        profile.external_untrusted_requires_approval,
        matrix_decision,
        action,
    ); // step 4
    let decision = if untrusted {
        PolicyDecisionType::RequireApproval
    } else {
        matrix_decision
    };
    // Step 5.
    verdict(
        decision,
        Reason::Matrix {
            side_effect: action.side_effect(),
            untrusted,
        },
    )
}
