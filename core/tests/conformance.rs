//! Conformance: every case of `../shared/conformance/policy-cases.jsonl` must produce exactly its
//! expected decision and reason code under the shipped policy. A missing file is a failure.

use std::path::PathBuf;

use airlock_core::action::ProposedAction;
use airlock_core::policy::{Ruleset, evaluate};
use serde_json::Value;

fn cases_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance/policy-cases.jsonl")
}

#[test]
fn shipped_policy_matches_every_conformance_case() {
    let path = cases_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("conformance data missing at {}: {e}", path.display()));
    let ruleset = Ruleset::shipped().expect("shipped policy loads");
    let mut failures = Vec::new();
    let mut count = 0;
    for (line_number, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        count += 1;
        let case: Value = serde_json::from_str(line).expect("case line is JSON");
        let name = case["case"].as_str().unwrap_or("?").to_owned();
        let action = ProposedAction::from_json(&case["action"].to_string()).unwrap_or_else(|e| {
            panic!(
                "line {}: case {name}: action does not parse: {e}",
                line_number + 1
            )
        });
        let decision = evaluate(&action, &ruleset);
        let expected = (
            case["expected"]["decision"].as_str().unwrap(),
            case["expected"]["reason_code"].as_str().unwrap(),
        );
        if (decision.decision.as_str(), decision.reason_code.as_str()) != expected {
            failures.push(format!(
                "{name}: expected {expected:?}, got ({}, {}) for {}",
                decision.decision, decision.reason_code, case["action"]["arguments"]
            ));
        }
    }
    assert_eq!(count, 789, "the conformance file must hold all 789 cases");
    assert!(
        failures.is_empty(),
        "{} of {count} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
