//! Properties of the policy engine under the shipped ruleset (SPEC §6.1, §6.4, §16 #1, #3, #4):
//! evaluation is deterministic, independent of argument key order and of `risk`, total over
//! arbitrary JSON arguments nested up to depth 128, never lowered by an `external_untrusted`
//! label; `combine` is monotone; action JSON round-trips through `ProposedAction::from_json`.
//!
//! The proptest seed is fixed so that CI runs the same cases every time.

use std::collections::BTreeMap;

use airlock_policy::action::{JsonMap, MAX_ARGUMENT_DEPTH, ProposedAction, Target, value_depth};
use airlock_policy::advisory::{AdvisoryVerdict, combine};
use airlock_policy::canonical::arguments_hash;
use airlock_policy::shipped::SHIPPED_VERSION;
use airlock_policy::testing::shipped_ruleset;
use airlock_policy::time::Timestamp;
use airlock_policy::vocab::{
    ActionKind, IdempotencyClass, PolicyDecisionType, RiskLevel, SideEffectClass, TargetKind,
    TrustLevel,
};
use airlock_policy::{Ruleset, evaluate};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::RngSeed;
use serde_json::{Value, json};
use uuid::Uuid;

/// Fixed seed, no persistence: the same 256 cases on every run.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        rng_seed: RngSeed::Fixed(0x6169_726c_6f63_6b06),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ----- Strategies -----

/// Fragments that reach every hardline matcher and the workspace condition.
const FRAGMENTS: &[&str] = &[
    "rm -rf /",
    "/etc/passwd",
    "169.254.169.254",
    "http://[fe80::1]/x",
    "0xA9FEA9FE",
    "api_key=x",
    "Bearer abc12345",
    "Authorization: Basic x",
    "-----BEGIN RSA PRIVATE KEY-----",
    ".env",
    "notes/.env.local",
    "~/.ssh/id_rsa",
    "file:///etc/passwd",
    "cat /etc/passwd",
    "notes/result.txt",
    "../",
    "/",
    "\\",
    "ſecret=1",
    "İ",
    "ünïcødé ∑ 🦀",
    "\u{0}\u{1c}\u{1f}\t\n\r\u{7f}",
    "\u{3000}\u{2028}",
    "\"",
    ";|&",
    "",
];

/// Keys that mean something to a matcher or condition, besides arbitrary ones.
const KEYS: &[&str] = &[
    "path",
    "content",
    "url",
    "argv",
    "password",
    "api_key",
    "Client-Secret",
    "token_count",
    "max_tokens",
    "text",
];

fn arbitrary_text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..12).prop_map(|chars| chars.into_iter().collect())
}

fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        select(FRAGMENTS).prop_map(str::to_owned),
        arbitrary_text(),
        "[a-z ./:=-]{0,10}",
    ];
    prop::collection::vec(piece, 0..4).prop_map(|pieces| pieces.concat())
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![select(KEYS).prop_map(str::to_owned), text()]
}

/// Floats that survive a JSON text round trip exactly.
const FLOATS: &[f64] = &[0.5, -1.25, 3.0e10, 1.0e-7, 123_456.789, 1.0e300];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        select(FLOATS).prop_map(|f| json!(f)),
        text().prop_map(Value::String),
    ]
}

fn object(entries: Vec<(String, Value)>) -> Value {
    Value::Object(entries.into_iter().collect())
}

/// Arbitrary trees, at most 6 deep.
fn tree() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..5).prop_map(object),
        ]
    })
}

/// A tree wrapped in up to 120 arrays and objects, so arguments reach depth 127.
fn deep_tree() -> impl Strategy<Value = Value> {
    (
        tree(),
        prop::collection::vec((any::<bool>(), key()), 0..=120),
    )
        .prop_map(|(mut value, wrappers)| {
            for (as_array, key) in wrappers {
                value = if as_array {
                    Value::Array(vec![Value::String(key), value])
                } else {
                    object(vec![(key, value)])
                };
            }
            value
        })
}

/// Top-level `path` values on both sides of `path_inside_workspace`.
const PATHS: &[&str] = &[
    "notes/result.txt",
    "a",
    "",
    "a//b",
    "./a",
    "a/../b",
    "/tmp/x",
    "a\\b",
    "notes/.env.local",
];

fn arguments() -> impl Strategy<Value = JsonMap> {
    (
        prop::collection::vec((key(), prop_oneof![3 => tree(), 1 => deep_tree()]), 0..5),
        prop::option::of(select(PATHS)),
    )
        .prop_map(|(entries, path)| {
            let mut arguments: JsonMap = entries.into_iter().collect();
            if let Some(path) = path {
                arguments.insert("path".to_owned(), Value::String(path.to_owned()));
            }
            arguments
        })
}

fn target_kind() -> impl Strategy<Value = TargetKind> {
    prop_oneof![
        select(vec![
            TargetKind::InProcess,
            TargetKind::Sandbox,
            TargetKind::Device,
            TargetKind::McpServer,
            TargetKind::WebProvider,
            TargetKind::BrowserProvider,
        ]),
        // `parse` keeps known spellings known, so round trips stay exact.
        "[a-z_]{0,12}".prop_map(|s| TargetKind::parse(&s)),
    ]
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        // What the pipeline sets from a tool spec (SPEC §4.1) ...
        target_kind().prop_map(Target::for_kind),
        // ... and anything else a caller of `policy eval` may write.
        any_target(),
    ]
}

fn any_target() -> impl Strategy<Value = Target> {
    (
        target_kind(),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(text()),
        prop::option::of(text()),
    )
        .prop_map(
            |(kind, isolated, network_enabled, device_id, server_id)| Target {
                kind,
                isolated,
                network_enabled,
                device_id,
                server_id,
            },
        )
}

fn tool_name() -> impl Strategy<Value = String> {
    prop_oneof![
        select(
            &[
                "web.search",
                "web.fetch",
                "browser.navigate",
                "browser.observe",
                "workspace.write",
                "demo.echo",
            ][..]
        )
        .prop_map(str::to_owned),
        text(),
    ]
}

/// What the engine reads: kind, side effect, risk, idempotency, origin trust, argument trust,
/// target, tool name and arguments.
type DecisiveFields = (
    ActionKind,
    SideEffectClass,
    RiskLevel,
    IdempotencyClass,
    TrustLevel,
    BTreeMap<String, TrustLevel>,
    Target,
    String,
    JsonMap,
);

/// Ids, tenant, step, version, summary, scopes, hash and time: audit only.
type AuditFields = (
    u128,
    u128,
    u128,
    String,
    u64,
    Option<String>,
    String,
    Vec<String>,
    String,
    i64,
);

/// Everything the engine reads, over every value of every enum.
fn decisive_fields() -> impl Strategy<Value = DecisiveFields> {
    (
        // Mostly tool calls from user turns, the common case, but every value of every enum.
        prop_oneof![2 => Just(ActionKind::ToolCall), 1 => select(ActionKind::ALL)],
        select(SideEffectClass::ALL),
        select(RiskLevel::ALL),
        select(IdempotencyClass::ALL),
        prop_oneof![1 => Just(TrustLevel::User), 1 => select(TrustLevel::ALL)],
        prop::collection::btree_map(key(), select(TrustLevel::ALL), 0..4),
        target(),
        tool_name(),
        arguments(),
    )
}

/// Audit fields the engine must not depend on.
fn audit_fields() -> impl Strategy<Value = AuditFields> {
    (
        any::<u128>(),
        any::<u128>(),
        any::<u128>(),
        "[A-Za-z0-9 _-]{1,40}",
        any::<u64>(),
        prop::option::of("[0-9]{1,2}\\.[0-9]{1,2}\\.[0-9]{1,2}"),
        text(),
        prop::collection::vec("[a-z]{1,8}\\.[a-z]{1,8}", 0..3),
        "[0-9a-f]{64}",
        0i64..4_102_444_800_000_000,
    )
}

fn proposed_action() -> impl Strategy<Value = ProposedAction> {
    (decisive_fields(), audit_fields()).prop_map(
        |(
            (
                kind,
                side_effect,
                risk,
                idempotency,
                origin_trust,
                argument_trust,
                target,
                name,
                arguments,
            ),
            (
                action_id,
                session_id,
                run_id,
                tenant_id,
                step_number,
                version,
                summary,
                required_scopes,
                normalized_arguments_hash,
                evaluated_at,
            ),
        )| ProposedAction {
            kind,
            action_id: Uuid::from_u128(action_id),
            tenant_id,
            session_id: Uuid::from_u128(session_id),
            run_id: Uuid::from_u128(run_id),
            step_number,
            name,
            version,
            summary,
            side_effect,
            risk,
            idempotency,
            required_scopes,
            arguments,
            normalized_arguments_hash,
            argument_trust,
            origin_trust,
            target,
            evaluated_at: Timestamp::from_micros(evaluated_at),
        },
    )
}

// ----- Helpers -----

/// The same value rebuilt with every object's keys inserted in reverse order.
fn reversed(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        Value::Object(map) => Value::Object(reversed_map(map)),
        other => other.clone(),
    }
}

fn reversed_map(map: &JsonMap) -> JsonMap {
    let mut out = JsonMap::new();
    for (key, value) in map.iter().rev() {
        out.insert(key.clone(), reversed(value));
    }
    out
}

/// JSON text whose object members appear in reverse key order at every level.
fn reversed_text(value: &Value) -> String {
    match value {
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(reversed_text).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(map) => {
            let members: Vec<String> = map
                .iter()
                .rev()
                .map(|(key, value)| {
                    format!("{}:{}", Value::String(key.clone()), reversed_text(value))
                })
                .collect();
            format!("{{{}}}", members.join(","))
        }
        other => other.to_string(),
    }
}

fn rank(action: &ProposedAction) -> u8 {
    evaluate(action, shipped_ruleset()).decision.rank()
}

fn verdict_rank(verdict: AdvisoryVerdict) -> u8 {
    match verdict {
        AdvisoryVerdict::Abstain => 0,
        AdvisoryVerdict::RequireApproval => 1,
        AdvisoryVerdict::Deny => 2,
    }
}

const VERDICTS: [AdvisoryVerdict; 3] = [
    AdvisoryVerdict::Abstain,
    AdvisoryVerdict::RequireApproval,
    AdvisoryVerdict::Deny,
];

/// The decision must be one the engine can give for this action (SPEC §6.1, §16 #4).
fn assert_well_formed(action: &ProposedAction) {
    let decision = evaluate(action, shipped_ruleset());
    assert_eq!(decision.policy_version, SHIPPED_VERSION);
    assert_eq!(decision.modified_arguments, None);
    let matrix_reason = format!("policy.matrix.{}", action.side_effect);
    if decision.reason_code == "policy.skill.origin_untrusted" {
        assert_eq!(action.kind, ActionKind::SkillAuthoring);
        assert_ne!(action.origin_trust, TrustLevel::User);
        assert_eq!(decision.decision, PolicyDecisionType::Deny);
    } else if shipped_ruleset()
        .hardline
        .iter()
        .any(|r| r.message_code == decision.reason_code)
    {
        // Several rules share a message code since SPEC §21.4; the explanation names the one.
        let rule = shipped_ruleset()
            .hardline
            .iter()
            .find(|r| decision.explanation == format!("Hardline rule {} denied the action.", r.id))
            .unwrap_or_else(|| panic!("no rule explains {:?}", decision.explanation));
        assert_eq!(decision.reason_code, rule.message_code);
        assert_eq!(decision.decision, PolicyDecisionType::Deny);
        assert!(rule.applies_to.contains(action.side_effect));
    } else {
        assert_eq!(decision.reason_code, matrix_reason);
        assert_ne!(
            decision.decision,
            PolicyDecisionType::AllowWithModifications
        );
        assert!(
            decision.explanation
                == format!("The default profile evaluated {}.", action.side_effect)
                || decision.explanation
                    == format!(
                        "The default profile evaluated {}; untrusted content requires approval.",
                        action.side_effect
                    ),
            "{}",
            decision.explanation
        );
    }
}

// ----- Properties -----

proptest! {
    #![proptest_config(config())]

    /// (a) Evaluating the same action twice, or a clone of it, gives identical decision JSON.
    #[test]
    fn evaluation_is_deterministic(action in proposed_action()) {
        let first = evaluate(&action, shipped_ruleset()).to_json();
        prop_assert_eq!(&first, &evaluate(&action, shipped_ruleset()).to_json());
        prop_assert_eq!(&first, &evaluate(&action.clone(), shipped_ruleset()).to_json());
    }

    /// (b) Argument key order never matters, at any level, whether the map is rebuilt in reverse
    /// insertion order or parsed from text that lists members in reverse.
    #[test]
    fn evaluation_ignores_argument_key_order(action in proposed_action()) {
        let expected = evaluate(&action, shipped_ruleset()).to_json();

        let mut rebuilt = action.clone();
        rebuilt.arguments = reversed_map(&action.arguments);
        prop_assert_eq!(&expected, &evaluate(&rebuilt, shipped_ruleset()).to_json());

        let text = reversed_text(&Value::Object(action.arguments.clone()));
        let mut deserializer = serde_json::Deserializer::from_str(&text);
        deserializer.disable_recursion_limit();
        let parsed: Value = serde::Deserialize::deserialize(&mut deserializer)
            .expect("reversed argument text parses");
        let mut reparsed = action.clone();
        reparsed.arguments = match parsed {
            Value::Object(map) => map,
            other => panic!("arguments reparsed as {other}"),
        };
        prop_assert_eq!(&expected, &evaluate(&reparsed, shipped_ruleset()).to_json());
    }

    /// (c) `risk` selects approval expiry only, never a decision (SPEC §16 #3).
    #[test]
    fn risk_never_changes_the_decision(action in proposed_action()) {
        let expected = evaluate(&action, shipped_ruleset()).to_json();
        for risk in RiskLevel::ALL.iter().copied() {
            let mut other = action.clone();
            other.risk = risk;
            prop_assert_eq!(&expected, &evaluate(&other, shipped_ruleset()).to_json(), "risk {}", risk);
        }
    }

    /// (d) Total: any action, with arguments nested up to depth 127 here, evaluates without
    /// panicking to a decision of the shape SPEC §6.1 allows.
    #[test]
    fn evaluation_is_total_and_well_formed(action in proposed_action()) {
        let depth = 1 + action.arguments.values().map(value_depth).max().unwrap_or(0);
        prop_assert!(depth <= MAX_ARGUMENT_DEPTH, "generated depth {}", depth);
        assert_well_formed(&action);
    }

    /// (e) Marking the origin or any argument `external_untrusted` never lowers the rank.
    #[test]
    fn untrusted_labels_never_lower_the_rank(
        action in proposed_action(),
        fresh_key in key(),
        pick in any::<prop::sample::Index>(),
    ) {
        let before = rank(&action);

        let mut origin = action.clone();
        origin.origin_trust = TrustLevel::ExternalUntrusted;
        prop_assert!(rank(&origin) >= before, "origin_trust: {} < {}", rank(&origin), before);

        let mut fresh = action.clone();
        fresh.argument_trust.insert(fresh_key, TrustLevel::ExternalUntrusted);
        prop_assert!(rank(&fresh) >= before, "new argument_trust entry");

        if !action.arguments.is_empty() {
            let existing = pick.get(&action.arguments.keys().collect::<Vec<_>>()).to_string();
            let mut relabelled = action.clone();
            relabelled.argument_trust.insert(existing, TrustLevel::ExternalUntrusted);
            prop_assert!(rank(&relabelled) >= before, "existing argument relabelled");
        }

        let mut both = origin.clone();
        both.argument_trust = fresh_labels(&action.argument_trust);
        prop_assert!(rank(&both) >= before, "every label external_untrusted");
    }

    /// (f) `combine` is monotone in both arguments and never below the deterministic decision.
    #[test]
    fn combine_is_monotone(
        d1 in select(PolicyDecisionType::ALL),
        d2 in select(PolicyDecisionType::ALL),
        v1 in select(&VERDICTS[..]),
        v2 in select(&VERDICTS[..]),
    ) {
        let (low_d, high_d) = if d1.rank() <= d2.rank() { (d1, d2) } else { (d2, d1) };
        let (low_v, high_v) = if verdict_rank(v1) <= verdict_rank(v2) { (v1, v2) } else { (v2, v1) };
        prop_assert!(combine(low_d, low_v).rank() <= combine(high_d, high_v).rank());
        prop_assert!(combine(d1, v1).rank() >= d1.rank());
    }

    /// Action JSON written by serde is read back by the one parser as the same action.
    #[test]
    fn action_json_round_trips(action in proposed_action()) {
        let text = serde_json::to_string(&action).expect("an action serializes");
        let parsed = ProposedAction::from_json(&text);
        prop_assert_eq!(parsed.as_ref(), Ok(&action), "{}", text);
    }
}

/// Every entry of `labels` set to `external_untrusted` (an empty map stays empty).
fn fresh_labels(labels: &BTreeMap<String, TrustLevel>) -> BTreeMap<String, TrustLevel> {
    labels
        .keys()
        .map(|k| (k.clone(), TrustLevel::ExternalUntrusted))
        .collect()
}

// ----- Plain tests -----

/// One representative action of each side effect, with rich arguments.
fn representative(side_effect: SideEffectClass) -> ProposedAction {
    let arguments = json!({
        "path": "notes/result.txt",
        "content": "hello",
        "nested": {"list": [1, 2.5, null, true, "x"], "z": {}, "a": []},
    });
    let Value::Object(arguments) = arguments else {
        unreachable!("a json! object literal")
    };
    ProposedAction {
        kind: ActionKind::ToolCall,
        action_id: Uuid::from_u128(1),
        tenant_id: "tenant".to_owned(),
        session_id: Uuid::from_u128(2),
        run_id: Uuid::from_u128(3),
        step_number: 4,
        name: "workspace.write".to_owned(),
        version: Some("1.0.0".to_owned()),
        summary: "Run workspace.write with validated arguments.".to_owned(),
        side_effect,
        risk: RiskLevel::High,
        idempotency: IdempotencyClass::Idempotent,
        required_scopes: vec!["workspace.write".to_owned()],
        normalized_arguments_hash: arguments_hash(&Value::Object(arguments.clone())),
        arguments,
        argument_trust: BTreeMap::from([("content".to_owned(), TrustLevel::InternalTool)]),
        origin_trust: TrustLevel::User,
        target: Target::for_kind(TargetKind::InProcess),
        evaluated_at: Timestamp::from_micros(1_768_478_408_000_000),
    }
}

#[test]
fn a_thousand_evaluations_are_byte_identical() {
    // SPEC §16 #1, for every side effect.
    for side_effect in SideEffectClass::ALL.iter().copied() {
        let action = representative(side_effect);
        let first = evaluate(&action, shipped_ruleset()).to_json();
        for i in 1..1000 {
            let again = evaluate(&action, shipped_ruleset()).to_json();
            assert_eq!(
                again.as_bytes(),
                first.as_bytes(),
                "evaluation {i} of {side_effect} differs"
            );
        }
    }
}

#[test]
fn separately_loaded_rulesets_decide_identically() {
    let other = Ruleset::shipped().expect("the shipped policy loads");
    for side_effect in SideEffectClass::ALL.iter().copied() {
        let action = representative(side_effect);
        assert_eq!(
            evaluate(&action, shipped_ruleset()).to_json(),
            evaluate(&action, &other).to_json(),
            "{side_effect}"
        );
    }
}

/// Nests `leaf` so that the arguments object holding it has exactly `depth` levels, alternating
/// arrays and objects on the way down.
fn nested_arguments(depth: usize, leaf: Value) -> JsonMap {
    assert!(
        depth >= 2,
        "the arguments object and one container at least"
    );
    let mut value = leaf;
    for level in 0..depth - 1 {
        value = if level % 2 == 0 {
            Value::Array(vec![Value::Null, value])
        } else {
            object(vec![(format!("k{level}"), value)])
        };
    }
    let mut arguments = JsonMap::new();
    arguments.insert("content".to_owned(), value);
    arguments
}

#[test]
fn arguments_nested_128_deep_evaluate_and_are_still_searched() {
    // The deepest arguments the parser admits (SPEC §4.1), with a hardline trigger at the bottom:
    // evaluation is total and collects strings at every depth.
    let mut action = representative(SideEffectClass::CodeExecution);
    action.target = Target::for_kind(TargetKind::Sandbox);
    action.arguments = nested_arguments(MAX_ARGUMENT_DEPTH, json!("rm -rf /"));
    action.normalized_arguments_hash = arguments_hash(&Value::Object(action.arguments.clone()));
    let depth = 1 + action
        .arguments
        .values()
        .map(value_depth)
        .max()
        .unwrap_or(0);
    assert_eq!(depth, MAX_ARGUMENT_DEPTH);
    assert_eq!(action.validate(), Ok(()), "depth 128 is admitted");

    let decision = evaluate(&action, shipped_ruleset());
    assert_eq!(decision.decision, PolicyDecisionType::Deny);
    assert_eq!(decision.reason_code, "policy.hardline.destructive_command");

    // The same through the parser, and with the leaf swapped for each kind of trigger.
    let text = serde_json::to_string(&action).expect("an action serializes");
    let parsed = ProposedAction::from_json(&text).expect("depth 128 parses");
    assert_eq!(evaluate(&parsed, shipped_ruleset()), decision);

    for (side_effect, leaf, reason_code) in [
        (
            SideEffectClass::WorkspaceWrite,
            json!("/etc/passwd"),
            "policy.hardline.host_path",
        ),
        (
            SideEffectClass::NetworkRead,
            json!("http://169.254.169.254/latest"),
            "policy.hardline.metadata_egress",
        ),
        (
            SideEffectClass::ExternalWrite,
            json!({"client_secret": "x"}),
            "policy.hardline.secret_exfiltration",
        ),
        (
            SideEffectClass::ExternalWrite,
            json!("hello"),
            "policy.matrix.external_write",
        ),
    ] {
        let mut deep = action.clone();
        deep.side_effect = side_effect;
        // An object leaf adds a level; keep the total at 128.
        let depth = MAX_ARGUMENT_DEPTH - value_depth(&leaf);
        deep.arguments = nested_arguments(depth, leaf);
        assert_eq!(deep.validate(), Ok(()), "{side_effect}");
        let decision = evaluate(&deep, shipped_ruleset());
        assert_eq!(decision.reason_code, reason_code, "{side_effect}");
    }
}

#[test]
fn combine_is_monotone_exhaustively() {
    // The domain is 4 × 3, so every pair of pairs is checked.
    for d1 in PolicyDecisionType::ALL.iter().copied() {
        for v1 in VERDICTS {
            let combined = combine(d1, v1);
            assert!(
                combined.rank() >= d1.rank(),
                "combine({d1}, {v1:?}) lowered"
            );
            assert!(
                combined.rank() >= verdict_rank(v1) + u8::from(verdict_rank(v1) > 0),
                "combine({d1}, {v1:?}) ignores the verdict"
            );
            for d2 in PolicyDecisionType::ALL.iter().copied() {
                for v2 in VERDICTS {
                    if d1.rank() <= d2.rank() && verdict_rank(v1) <= verdict_rank(v2) {
                        assert!(
                            combine(d1, v1).rank() <= combine(d2, v2).rank(),
                            "combine({d1}, {v1:?}) > combine({d2}, {v2:?})"
                        );
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// The borrowed parse and the written decision of `policy eval --jsonl` (SPEC §24) are the
    /// owned path exactly, for generated actions written by serde (escapes included).
    #[test]
    fn the_borrowed_path_reads_and_decides_as_the_owned_one(action in proposed_action()) {
        use airlock_policy::action_ref::ActionRef;
        let text = serde_json::to_string(&action).expect("an action serializes");
        let borrowed = ActionRef::from_json(&text).expect("the borrowed parse accepts it");
        let ruleset = shipped_ruleset();
        let mut written = Vec::new();
        airlock_policy::decide(&borrowed, ruleset)
            .write_json(&mut written)
            .expect("a Vec takes every write");
        let serialized = serde_json::to_vec(&evaluate(&action, ruleset)).expect("serializes");
        prop_assert_eq!(written, serialized);
        prop_assert_eq!(borrowed.into_owned(), action.clone());
        // The direct reader, when it takes the text, reads the same action.
        if let Some(scanned) = airlock_policy::action_scan::scan(&text) {
            prop_assert_eq!(scanned.into_owned(), action);
        }
    }
}

// ----- Shadow mode (issue 32 item 2) -----

/// Candidates unlike the shipped profile: the shipped one itself, and the shipped profile with
/// every rule's decision made `allow`, `deny` or `require_approval`.
fn shadow_candidates() -> &'static [Ruleset] {
    static CANDIDATES: std::sync::OnceLock<Vec<Ruleset>> = std::sync::OnceLock::new();
    CANDIDATES.get_or_init(|| {
        let profile = std::str::from_utf8(airlock_policy::shipped::DEFAULT_PROFILE)
            .expect("the shipped profile is UTF-8");
        // Every rule's decision (the unknown tool's must stay `deny`).
        let every_rule = |decision: &str| {
            let mut section = "";
            profile
                .lines()
                .map(|line| {
                    if line.starts_with('[') {
                        section = line;
                    }
                    if line.starts_with("decision = ") && section != "[unknown_tool]" {
                        format!("decision = \"{decision}\"")
                    } else {
                        line.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let load = |text: String| {
            Ruleset::load(text.as_bytes(), airlock_policy::shipped::HARDLINE)
                .expect("the candidate loads")
        };
        vec![
            shipped_ruleset().clone(),
            load(every_rule("allow")),
            load(every_rule("deny")),
            load(every_rule("require_approval")),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    /// A shadow candidate never changes the decision in force: `decide_beside` gives exactly
    /// what the live ruleset gives alone, whatever the candidate, and reports a difference
    /// exactly when the candidate alone decides otherwise (decision or reason code).
    #[test]
    fn a_shadow_candidate_never_changes_the_live_decision(
        action in proposed_action(),
        which in 0..4usize,
    ) {
        let live = shipped_ruleset();
        let candidate = &shadow_candidates()[which];
        let (decision, difference) =
            airlock_policy::comparison::decide_beside(&action, live, Some(candidate));
        prop_assert_eq!(&decision, &evaluate(&action, live));
        let alone = evaluate(&action, candidate);
        let differs =
            alone.decision != decision.decision || alone.reason_code != decision.reason_code;
        prop_assert_eq!(difference.is_some(), differs);
        if let Some(difference) = difference {
            prop_assert_eq!(difference.live.decision, decision.decision);
            prop_assert_eq!(difference.candidate.decision, alone.decision);
            prop_assert_eq!(&difference.candidate.reason_code, &alone.reason_code);
            prop_assert_eq!(&difference.candidate.policy_version, &alone.policy_version);
        }
        let (without, none) = airlock_policy::comparison::decide_beside(&action, live, None);
        prop_assert_eq!(without, decision);
        prop_assert!(none.is_none());
    }
}
