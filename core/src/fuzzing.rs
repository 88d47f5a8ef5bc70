//! Entry points shared by the cargo-fuzz targets and the corpus-replay tests, so CI exercises
//! exactly what the fuzzer ran.

use crate::action::ProposedAction;
use crate::policy::{Ruleset, evaluate, shipped};

/// `policy_load`: the first byte chooses which file the rest replaces (even: profile, odd:
/// hardline); the other file is the shipped one. Loading must return, never panic.
pub fn policy_load(data: &[u8]) {
    let Some((selector, bytes)) = data.split_first() else {
        return;
    };
    let result = if selector % 2 == 0 {
        Ruleset::load(bytes, shipped::HARDLINE)
    } else {
        Ruleset::load(shipped::DEFAULT_PROFILE, bytes)
    };
    if let Ok(ruleset) = result {
        assert!(
            ruleset.rule_count() > 15,
            "a loaded ruleset has at least one hardline rule"
        );
    }
}

/// `policy_eval`: arbitrary bytes as action JSON; a parsed action must evaluate to the same
/// decision twice.
pub fn policy_eval(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(action) = ProposedAction::from_json(text) else {
        return;
    };
    let Some(ruleset) = shipped_ruleset() else {
        return;
    };
    let first = evaluate(&action, ruleset);
    assert_eq!(
        first,
        evaluate(&action, ruleset),
        "evaluation must be deterministic"
    );
}

fn shipped_ruleset() -> Option<&'static Ruleset> {
    static SHIPPED: std::sync::OnceLock<Option<Ruleset>> = std::sync::OnceLock::new();
    SHIPPED.get_or_init(|| Ruleset::shipped().ok()).as_ref()
}
