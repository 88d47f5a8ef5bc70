//! The Cedar rendering decides like airlock: on every conformance case, and on path and trust
//! variations that exercise the conditions written in Cedar itself.

use airlock_bench::{CedarEngine, ContentMatchers, agreement, load_cases};
use airlock_core::action::ProposedAction;
use airlock_core::policy::{Ruleset, evaluate};
use airlock_core::vocab::TrustLevel;
use serde_json::{Value, json};

fn cedar_decides(
    cedar: &CedarEngine,
    matchers: &ContentMatchers,
    action: &ProposedAction,
) -> (String, String) {
    let response = cedar.is_authorized(&cedar.request(action, matchers.flags(action)));
    assert_eq!(
        response.diagnostics().errors().count(),
        0,
        "Cedar evaluation errors"
    );
    (
        cedar.outcome(&response).to_string(),
        cedar.reason_code(action, &response),
    )
}

#[test]
fn cedar_agrees_with_airlock_on_every_conformance_case() {
    let cases = load_cases();
    let ruleset = Ruleset::shipped().unwrap();
    let cedar = CedarEngine::new();
    let agree = agreement(&cases, &ruleset, &cedar);
    println!("{agree}");
    assert!(agree.no_content > 0 && agree.content > 0);
    assert!(agree.all_agree(), "{agree}");
}

/// A conformance case's action with `side_effect`, `target` and `arguments` replaced.
fn variant(
    base: &ProposedAction,
    side_effect: &str,
    target_kind: &str,
    path: Value,
) -> ProposedAction {
    let mut v = serde_json::to_value(base).unwrap();
    v["side_effect"] = json!(side_effect);
    v["target"]["kind"] = json!(target_kind);
    v["arguments"] = json!({ "path": path, "content": "x" });
    ProposedAction::from_json(&v.to_string()).unwrap()
}

#[test]
fn cedar_path_condition_matches_airlock() {
    let cases = load_cases();
    let ruleset = Ruleset::shipped().unwrap();
    let cedar = CedarEngine::new();
    let matchers = ContentMatchers::new(&ruleset);
    let base = &cases[0].action;
    let paths = [
        json!(""),
        json!("a"),
        json!("a/b/c.txt"),
        json!("/a"),
        json!("a\\b"),
        json!("\\"),
        json!("a/"),
        json!("a//b"),
        json!("//"),
        json!("."),
        json!("./a"),
        json!("a/."),
        json!("a/./b"),
        json!(".."),
        json!("../a"),
        json!("a/.."),
        json!("a/../b"),
        json!("..."),
        json!(".a/..b/c.."),
        json!("a*b"),
        json!(7),
        json!(null),
        json!(["a"]),
    ];
    let mut checked = 0;
    for side_effect in ["workspace_read", "workspace_write"] {
        for kind in ["in_process", "sandbox", "device", "web_provider", "custom"] {
            for path in &paths {
                for origin in [TrustLevel::User, TrustLevel::ExternalUntrusted] {
                    let mut action = variant(base, side_effect, kind, path.clone());
                    action.origin_trust = origin;
                    let ours = evaluate(&action, &ruleset);
                    let theirs = cedar_decides(&cedar, &matchers, &action);
                    assert_eq!(
                        (ours.decision.to_string(), ours.reason_code),
                        theirs,
                        "{side_effect} {kind} path={path} origin={origin}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * 5 * paths.len() * 2);
}

#[test]
fn cedar_overlay_reads_argument_trust_values() {
    let cases = load_cases();
    let ruleset = Ruleset::shipped().unwrap();
    let cedar = CedarEngine::new();
    let matchers = ContentMatchers::new(&ruleset);
    let base = &cases[0].action;
    for (side_effect, kind) in [
        ("code_execution", "sandbox"),
        ("code_execution", "in_process"),
        ("workspace_write", "sandbox"),
        ("external_write", "mcp_server"),
        ("none", "in_process"),
    ] {
        for trust in [
            None,
            Some(TrustLevel::Knowledge),
            Some(TrustLevel::ExternalUntrusted),
        ] {
            let mut action = variant(base, side_effect, kind, json!("notes/a.txt"));
            if let Some(trust) = trust {
                action.argument_trust.insert("content".to_owned(), trust);
                action
                    .argument_trust
                    .insert("path".to_owned(), TrustLevel::User);
            }
            let ours = evaluate(&action, &ruleset);
            let theirs = cedar_decides(&cedar, &matchers, &action);
            assert_eq!(
                (ours.decision.to_string(), ours.reason_code),
                theirs,
                "{side_effect} {kind} trust={trust:?}"
            );
        }
    }
}
