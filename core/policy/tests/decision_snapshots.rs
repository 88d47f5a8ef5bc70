//! Reviewed decision JSON (SPEC §4.1, §6.1) for one action per kind of outcome under the shipped
//! ruleset: the compact key order, the reason codes and the explanation texts are pinned, so any
//! change to the wire shape shows up as a snapshot diff to review.

use std::collections::BTreeMap;

use airlock_policy::action::{ProposedAction, Target};
use airlock_policy::canonical::arguments_hash;
use airlock_policy::time::Timestamp;
use airlock_policy::vocab::{
    ActionKind, IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel,
};
use airlock_policy::{Ruleset, evaluate};
use serde_json::{Value, json};
use uuid::Uuid;

fn action(
    name: &str,
    side_effect: SideEffectClass,
    idempotency: IdempotencyClass,
    target: TargetKind,
    arguments: Value,
) -> ProposedAction {
    let Value::Object(arguments) = arguments else {
        panic!("test arguments must be an object")
    };
    ProposedAction {
        kind: ActionKind::ToolCall,
        action_id: Uuid::from_u128(0xe530_89b4_4d78_4691_8cb8_11b0_66b2_f2fd),
        tenant_id: "tenant-snapshots".to_owned(),
        session_id: Uuid::from_u128(0x501c_ce9d_3fdb_4258_9466_616f_ec7a_75ef),
        run_id: Uuid::from_u128(0x5dd2_90e9_2766_453c_8b7f_77e8_f8d2_b920),
        step_number: 3,
        name: name.to_owned(),
        version: Some("1.0.0".to_owned()),
        summary: format!("Run {name} with validated arguments."),
        side_effect,
        risk: RiskLevel::Low,
        idempotency,
        required_scopes: Vec::new(),
        normalized_arguments_hash: arguments_hash(&Value::Object(arguments.clone())),
        arguments,
        argument_trust: BTreeMap::new(),
        origin_trust: TrustLevel::User,
        target: Target::for_kind(target),
        evaluated_at: Timestamp::from_micros(1_768_478_408_000_000),
    }
}

fn decision_json(action: &ProposedAction) -> String {
    let ruleset = Ruleset::shipped().expect("the shipped policy loads");
    evaluate(action, &ruleset).to_json()
}

fn workspace_write(path: &str) -> ProposedAction {
    action(
        "workspace.write",
        SideEffectClass::WorkspaceWrite,
        IdempotencyClass::Idempotent,
        TargetKind::InProcess,
        json!({ "path": path, "content": "hello" }),
    )
}

#[test]
fn allow_for_no_side_effect() {
    let action = action(
        "demo.echo",
        SideEffectClass::None,
        IdempotencyClass::ReadOnly,
        TargetKind::InProcess,
        json!({ "text": "hello" }),
    );
    insta::assert_snapshot!(decision_json(&action));
}

#[test]
fn allow_for_a_workspace_write_inside_the_workspace() {
    insta::assert_snapshot!(decision_json(&workspace_write("notes/result.txt")));
}

#[test]
fn deny_for_a_workspace_write_outside_the_workspace() {
    insta::assert_snapshot!(decision_json(&workspace_write("../outside.txt")));
}

#[test]
fn require_approval_for_an_external_write() {
    let action = action(
        "crm.update",
        SideEffectClass::ExternalWrite,
        IdempotencyClass::NonIdempotent,
        TargetKind::McpServer,
        json!({ "record": "42", "status": "closed" }),
    );
    insta::assert_snapshot!(decision_json(&action));
}

#[test]
fn require_approval_when_untrusted_content_reaches_an_allowed_write() {
    let mut action = workspace_write("notes/result.txt");
    action
        .argument_trust
        .insert("content".to_owned(), TrustLevel::ExternalUntrusted);
    insta::assert_snapshot!(decision_json(&action));
}

#[test]
fn hardline_deny_for_metadata_egress() {
    let action = action(
        "web.fetch",
        SideEffectClass::NetworkRead,
        IdempotencyClass::ReadOnly,
        TargetKind::WebProvider,
        json!({ "url": "http://169.254.169.254/latest/meta-data/" }),
    );
    insta::assert_snapshot!(decision_json(&action));
}

#[test]
fn deny_for_skill_authoring_from_a_non_user_turn() {
    let mut action = action(
        "skill.author",
        SideEffectClass::WorkspaceWrite,
        IdempotencyClass::Idempotent,
        TargetKind::InProcess,
        json!({ "path": "skills/new.md", "content": "steps" }),
    );
    action.kind = ActionKind::SkillAuthoring;
    action.origin_trust = TrustLevel::InternalTool;
    insta::assert_snapshot!(decision_json(&action));
}
