//! Conformance: every case of `../shared/conformance/policy-cases.jsonl` (SPEC §6–§7) and of
//! `../shared/conformance/policy-v2-cases.jsonl` (the hardline v2 payload sample, SPEC §21.5)
//! must produce exactly its expected decision and reason code under the shipped policy, except the
//! cases listed in [`TIGHTENED`]. A missing file is a failure.

use std::path::PathBuf;

use airlock_policy::action::ProposedAction;
use airlock_policy::{Ruleset, evaluate};
use serde_json::Value;

/// Cases whose recorded allow a later tightening turned into a deny, with the decision they get
/// now: (file, case, reason code). Each must still be recorded as an allow, must not be a
/// benign case (`v2-benign-…`: those may never change), and must be met, so the list cannot
/// outlive its cases.
/// - `v2-cmd-2351`, `/bin/r? -rf /`: issue 30 item 4 (SPEC §21.3), a glob command word is read
///   as each protected program it could match (`r?` matches `rm`).
const TIGHTENED: [(&str, &str, &str); 1] = [(
    "policy-v2-cases.jsonl",
    "v2-cmd-2351",
    "policy.hardline.destructive_command",
)];

fn cases_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance")
        .join(file)
}

#[test]
fn shipped_policy_matches_every_conformance_case() {
    run_cases("policy-cases.jsonl", 789);
}

#[test]
fn shipped_policy_matches_every_v2_conformance_case() {
    run_cases("policy-v2-cases.jsonl", 1163);
}

/// A hardline file written for v1 (the file as SPEC §7.3 lists it, kept in `tests/data/`) still
/// loads with the v2 loader, as its own version, and still decides every v1 case as before: the
/// appended rules are additions to the shipped file, not requirements of the loader.
#[test]
fn a_v1_hardline_file_loads_and_keeps_every_v1_result() {
    let v1 = include_bytes!("data/hardline-v1.toml");
    let ruleset = Ruleset::load(airlock_policy::shipped::DEFAULT_PROFILE, v1)
        .expect("the v1 hardline file loads");
    assert_eq!(ruleset.version.as_str(), "default@9f2e26918d43+hce0d2844");
    assert_eq!(ruleset.rule_count(), 22);
    run_cases_with(&ruleset, "policy-cases.jsonl", 789);
}

/// Runs every case of one file under the shipped policy.
fn run_cases(file: &str, expected_count: usize) {
    let ruleset = Ruleset::shipped().expect("shipped policy loads");
    run_cases_with(&ruleset, file, expected_count);
}

/// Runs every case of one file and fails with the list of differing cases.
fn run_cases_with(ruleset: &Ruleset, file: &str, expected_count: usize) {
    let path = cases_path(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("conformance data missing at {}: {e}", path.display()));
    let mut failures = Vec::new();
    let mut count = 0;
    let mut met = 0;
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
        let decision = evaluate(&action, ruleset);
        let expected = (
            case["expected"]["decision"].as_str().unwrap(),
            case["expected"]["reason_code"].as_str().unwrap(),
        );
        let tightened = TIGHTENED
            .iter()
            .find(|(f, c, _)| *f == file && *c == name)
            .map(|(_, _, code)| *code);
        if let Some(code) = tightened {
            met += 1;
            if expected.0 != "allow" || name.starts_with("v2-benign-") {
                failures.push(format!(
                    "{name}: listed as tightened, but recorded {expected:?}"
                ));
            }
            if (decision.decision.as_str(), decision.reason_code.as_str()) != ("deny", code) {
                failures.push(format!(
                    "{name}: tightened to deny {code}, got ({}, {})",
                    decision.decision, decision.reason_code
                ));
            }
            continue;
        }
        if (decision.decision.as_str(), decision.reason_code.as_str()) != expected {
            failures.push(format!(
                "{name}: expected {expected:?}, got ({}, {}) for {}",
                decision.decision, decision.reason_code, case["action"]["arguments"]
            ));
        }
    }
    assert_eq!(
        count, expected_count,
        "{file} must hold all {expected_count} cases"
    );
    assert_eq!(
        met,
        TIGHTENED.iter().filter(|(f, _, _)| *f == file).count(),
        "every tightened case of {file} is in it"
    );
    assert!(
        failures.is_empty(),
        "{} of {count} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
