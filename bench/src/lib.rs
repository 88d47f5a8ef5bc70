//! Shared code of the policy-engine benchmark: the conformance mix, the Cedar rendering of the
//! shipped policy (`cedar/airlock.cedar`), the mapping from a [`ProposedAction`] to a Cedar
//! request and from a Cedar response back to airlock's three outcomes, and the agreement check.
//! The durable-transaction benchmark's shared code is in [`durable`] (store level) and
//! [`worker_calls`] (whole tool calls through the worker); CPU-time accounting in [`cpu`].

pub mod cpu;
pub mod durable;
pub mod worker_calls;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use airlock_policy::action::{PolicyDecision, ProposedAction};
use airlock_policy::hardline::{HardlineRule, Matcher};
use airlock_policy::{Ruleset, evaluate};
use airlock_policy::vocab::{ActionKind, PolicyDecisionType, SideEffectClass};
use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityId, EntityTypeName, EntityUid, PolicyId,
    PolicySet, Request, Response, RestrictedExpression, Schema, ValidationMode, Validator,
};
use serde_json::Value;

/// The Cedar policies, embedded so the bench always measures the file in the repository.
pub const CEDAR_POLICIES: &str = include_str!("../cedar/airlock.cedar");
/// The Cedar schema the policies are validated against at start-up.
pub const CEDAR_SCHEMA: &str = include_str!("../cedar/airlock.cedarschema");

/// `shared/conformance/policy-cases.jsonl`, beside the repository.
pub fn cases_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance/policy-cases.jsonl")
}

/// One conformance case: the action and the decision the spec expects.
#[derive(Debug, Clone)]
pub struct Case {
    pub id: String,
    pub action: ProposedAction,
    pub expected_decision: PolicyDecisionType,
    pub expected_reason: String,
}

/// `shared/conformance/policy-v2-cases.jsonl`: the hardline v2 payload sample (SPEC §21.5).
pub fn v2_cases_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance/policy-v2-cases.jsonl")
}

/// The hardline file as SPEC §7.3 lists it for v1, kept by core's tests.
pub const HARDLINE_V1: &[u8] = include_bytes!("../../core/policy/tests/data/hardline-v1.toml");

/// The compact action JSON of every line of a conformance file (as a client would send it to
/// `airlock policy eval`). Panics, naming the file, if it is missing or a line is not JSON.
pub fn action_lines(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e} (the bench needs shared/ beside the repository)",
            path.display()
        )
    });
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let case: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
            case["action"].to_string()
        })
        .collect()
}

/// Reads every case of the conformance file. Panics, naming the file, if it is missing or any
/// line does not parse: the benchmark must never run on a silently shrunken mix.
pub fn load_cases() -> Vec<Case> {
    load_cases_from(cases_path())
}

/// [`load_cases`] for any file of the same format.
pub fn load_cases_from(path: PathBuf) -> Vec<Case> {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the conformance mix {}: {e} (the bench needs shared/ beside the repository)",
            path.display()
        )
    });
    let cases: Vec<Case> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            parse_case(line).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect();
    assert!(!cases.is_empty(), "{} holds no cases", path.display());
    cases
}

fn parse_case(line: &str) -> Result<Case, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let id = value["case"].as_str().ok_or("no case id")?.to_owned();
    let action = ProposedAction::from_json(&value["action"].to_string())
        .map_err(|e| format!("case {id}: {e}"))?;
    let expected_decision = value["expected"]["decision"]
        .as_str()
        .ok_or("no expected decision")?
        .parse::<PolicyDecisionType>()
        .map_err(|e| e.to_string())?;
    let expected_reason = value["expected"]["reason_code"]
        .as_str()
        .ok_or("no expected reason_code")?
        .to_owned();
    Ok(Case {
        id,
        action,
        expected_decision,
        expected_reason,
    })
}

/// Results of the eight content-inspecting hardline matchers for one action, ignoring
/// `applies_to` (the Cedar policies check that). This is the work Cedar cannot be asked to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContentFlags {
    pub destructive_root_delete: bool,
    pub protected_host_path: bool,
    pub metadata_egress: bool,
    pub credential_to_egress: bool,
    pub protected_host_path_exec_net: bool,
    pub protected_url_path: bool,
    pub metadata_egress_exec: bool,
    pub credential_to_egress_more: bool,
}

/// The shipped content-inspecting hardline rules, widened to apply to every side effect so that
/// they report what the matcher sees in the arguments; Cedar then checks `applies_to`.
pub struct ContentMatchers {
    rules: Vec<(String, HardlineRule)>,
}

impl ContentMatchers {
    /// Panics if the ruleset has a content rule the Cedar policies do not mirror.
    pub fn new(ruleset: &Ruleset) -> ContentMatchers {
        let rules = ruleset
            .hardline
            .iter()
            .filter(|rule| !matches!(rule.matcher, Matcher::SideEffect))
            .map(|rule| {
                assert!(
                    matches!(
                        rule.id.as_str(),
                        "destructive_root_delete"
                            | "protected_host_path"
                            | "metadata_egress"
                            | "credential_to_egress"
                            | "protected_host_path_exec_net"
                            | "protected_url_path"
                            | "metadata_egress_exec"
                            | "credential_to_egress_more"
                    ),
                    "hardline rule {} has no Cedar counterpart in cedar/airlock.cedar",
                    rule.id
                );
                let mut widened = rule.clone();
                widened.applies_to = SideEffectClass::ALL.iter().copied().collect();
                (rule.id.clone(), widened)
            })
            .collect();
        ContentMatchers { rules }
    }

    pub fn flags(&self, action: &ProposedAction) -> ContentFlags {
        let mut flags = ContentFlags::default();
        for (id, rule) in &self.rules {
            let hit = rule.matches(action.side_effect, &action.arguments);
            match id.as_str() {
                "destructive_root_delete" => flags.destructive_root_delete = hit,
                "protected_host_path" => flags.protected_host_path = hit,
                "metadata_egress" => flags.metadata_egress = hit,
                "credential_to_egress" => flags.credential_to_egress = hit,
                "protected_host_path_exec_net" => flags.protected_host_path_exec_net = hit,
                "protected_url_path" => flags.protected_url_path = hit,
                "metadata_egress_exec" => flags.metadata_egress_exec = hit,
                _ => flags.credential_to_egress_more = hit,
            }
        }
        flags
    }

    /// Whether some content rule actually fires for this action (matcher hit and applicable),
    /// i.e. whether the outcome depends on work done outside Cedar.
    pub fn content_rule_fires(&self, ruleset: &Ruleset, action: &ProposedAction) -> bool {
        ruleset.hardline.iter().any(|rule| {
            !matches!(rule.matcher, Matcher::SideEffect)
                && rule.matches(action.side_effect, &action.arguments)
        })
    }
}

/// What a Cedar policy contributes to the mapped decision (from its annotations).
#[derive(Debug, Clone)]
struct PolicyMeta {
    /// Permits only: `require_approval` rather than `allow`.
    approval: bool,
    /// Forbids only: lower wins when several forbids are satisfied.
    order: u32,
    /// Forbids only: the reason code, `None` for `policy.matrix.{side_effect}`.
    reason: Option<String>,
}

/// The Cedar side: the policy set, an empty entity store and the authorizer.
pub struct CedarEngine {
    pub policies: PolicySet,
    pub entities: Entities,
    pub authorizer: Authorizer,
    meta: HashMap<PolicyId, PolicyMeta>,
    tenant_type: EntityTypeName,
    tool_type: EntityTypeName,
    /// Indexed like [`action_index`].
    actions: [EntityUid; 4],
}

fn action_index(kind: ActionKind) -> usize {
    match kind {
        ActionKind::ToolCall => 0,
        ActionKind::MemoryWrite => 1,
        ActionKind::SkillAuthoring => 2,
        ActionKind::ArtifactExport => 3,
    }
}

impl CedarEngine {
    /// Parses `cedar/airlock.cedar`, renames each policy to its `@id`, and validates the set
    /// against `cedar/airlock.cedarschema` in strict mode. Panics on any failure.
    pub fn new() -> CedarEngine {
        let parsed = PolicySet::from_str(CEDAR_POLICIES)
            .unwrap_or_else(|e| panic!("cedar/airlock.cedar does not parse: {e:?}"));
        let mut meta = HashMap::new();
        let mut renamed = Vec::new();
        for policy in parsed.policies() {
            let id = policy
                .annotation("id")
                .unwrap_or_else(|| panic!("policy without @id: {policy}"));
            let id = PolicyId::new(id);
            let order = policy
                .annotation("order")
                .map(|o| o.parse::<u32>().expect("@order is a number"))
                .unwrap_or(u32::MAX);
            let reason = match policy.annotation("reason") {
                None | Some("matrix") => None,
                Some(code) => Some(code.to_owned()),
            };
            let approval = match policy.annotation("outcome") {
                None | Some("allow") => false,
                Some("require_approval") => true,
                Some(other) => panic!("policy {id}: unknown @outcome {other}"),
            };
            meta.insert(
                id.clone(),
                PolicyMeta {
                    approval,
                    order,
                    reason,
                },
            );
            renamed.push(policy.new_id(id));
        }
        let policies = PolicySet::from_policies(renamed).expect("policy ids are unique");
        let (schema, warnings) = Schema::from_cedarschema_str(CEDAR_SCHEMA)
            .unwrap_or_else(|e| panic!("cedar/airlock.cedarschema does not parse: {e:?}"));
        for warning in warnings {
            eprintln!("cedar schema warning: {warning}");
        }
        let validation = Validator::new(schema).validate(&policies, ValidationMode::Strict);
        if !validation.validation_passed() {
            let errors: Vec<String> = validation
                .validation_errors()
                .map(|e| e.to_string())
                .collect();
            panic!("cedar/airlock.cedar fails strict validation: {errors:#?}");
        }
        let action = |id: &str| EntityUid::from_str(&format!("Action::\"{id}\"")).expect("uid");
        CedarEngine {
            policies,
            entities: Entities::empty(),
            authorizer: Authorizer::new(),
            meta,
            tenant_type: EntityTypeName::from_str("Tenant").expect("type name"),
            tool_type: EntityTypeName::from_str("Tool").expect("type name"),
            actions: [
                action("tool_call"),
                action("memory_write"),
                action("skill_authoring"),
                action("artifact_export"),
            ],
        }
    }

    pub fn policy_count(&self) -> usize {
        self.policies.policies().count()
    }

    /// Builds the Cedar request for an action: principal = tenant, action = action kind,
    /// resource = tool, and the context the policies read (see the schema).
    pub fn request(&self, action: &ProposedAction, content: ContentFlags) -> Request {
        let string = |s: &str| RestrictedExpression::new_string(s.to_owned());
        let record = |fields: Vec<(String, RestrictedExpression)>| {
            RestrictedExpression::new_record(fields).expect("distinct record keys")
        };
        let mut pairs = vec![
            (
                "side_effect".to_owned(),
                string(action.side_effect.as_str()),
            ),
            (
                "idempotency".to_owned(),
                string(action.idempotency.as_str()),
            ),
            (
                "origin_trust".to_owned(),
                string(action.origin_trust.as_str()),
            ),
            (
                "argument_trust".to_owned(),
                RestrictedExpression::new_set(
                    action.argument_trust.values().map(|t| string(t.as_str())),
                ),
            ),
            (
                "target".to_owned(),
                record(vec![
                    ("kind".to_owned(), string(action.target.kind.as_str())),
                    (
                        "isolated".to_owned(),
                        RestrictedExpression::new_bool(action.target.isolated),
                    ),
                    (
                        "network_enabled".to_owned(),
                        RestrictedExpression::new_bool(action.target.network_enabled),
                    ),
                ]),
            ),
            (
                "content".to_owned(),
                record(vec![
                    (
                        "destructive_root_delete".to_owned(),
                        RestrictedExpression::new_bool(content.destructive_root_delete),
                    ),
                    (
                        "protected_host_path".to_owned(),
                        RestrictedExpression::new_bool(content.protected_host_path),
                    ),
                    (
                        "metadata_egress".to_owned(),
                        RestrictedExpression::new_bool(content.metadata_egress),
                    ),
                    (
                        "credential_to_egress".to_owned(),
                        RestrictedExpression::new_bool(content.credential_to_egress),
                    ),
                    (
                        "protected_host_path_exec_net".to_owned(),
                        RestrictedExpression::new_bool(content.protected_host_path_exec_net),
                    ),
                    (
                        "protected_url_path".to_owned(),
                        RestrictedExpression::new_bool(content.protected_url_path),
                    ),
                    (
                        "metadata_egress_exec".to_owned(),
                        RestrictedExpression::new_bool(content.metadata_egress_exec),
                    ),
                    (
                        "credential_to_egress_more".to_owned(),
                        RestrictedExpression::new_bool(content.credential_to_egress_more),
                    ),
                ]),
            ),
        ];
        if let Some(path) = action.arguments.get("path").and_then(Value::as_str) {
            pairs.push(("path".to_owned(), string(path)));
        }
        let context = Context::from_pairs(pairs).expect("valid context");
        let principal = EntityUid::from_type_name_and_id(
            self.tenant_type.clone(),
            EntityId::new(&action.tenant_id),
        );
        let resource =
            EntityUid::from_type_name_and_id(self.tool_type.clone(), EntityId::new(&action.name));
        Request::new(
            principal,
            self.actions[action_index(action.kind)].clone(),
            resource,
            context,
            None,
        )
        .expect("request without schema validation")
    }

    pub fn is_authorized(&self, request: &Request) -> Response {
        self.authorizer
            .is_authorized(request, &self.policies, &self.entities)
    }

    /// The three-way outcome of a Cedar response (see the header of `cedar/airlock.cedar`).
    pub fn outcome(&self, response: &Response) -> PolicyDecisionType {
        match response.decision() {
            Decision::Deny => PolicyDecisionType::Deny,
            Decision::Allow => {
                let approval = response
                    .diagnostics()
                    .reason()
                    .any(|id| self.meta.get(id).is_some_and(|m| m.approval));
                if approval {
                    PolicyDecisionType::RequireApproval
                } else {
                    PolicyDecisionType::Allow
                }
            }
        }
    }

    /// The reason code the determining policies stand for.
    pub fn reason_code(&self, action: &ProposedAction, response: &Response) -> String {
        let matrix = || format!("policy.matrix.{}", action.side_effect);
        if response.decision() == Decision::Allow {
            return matrix();
        }
        response
            .diagnostics()
            .reason()
            .filter_map(|id| self.meta.get(id))
            .min_by_key(|m| m.order)
            .and_then(|m| m.reason.clone())
            .unwrap_or_else(matrix)
    }
}

impl Default for CedarEngine {
    fn default() -> Self {
        CedarEngine::new()
    }
}

/// How far the Cedar rendering agrees with airlock on the conformance cases.
#[derive(Debug, Default)]
pub struct Agreement {
    pub total: usize,
    /// airlock's own decision and reason code equal the expected ones.
    pub airlock_matches_expected: usize,
    /// Cases where no content-inspecting hardline rule fires (Cedar does all the deciding work).
    pub no_content: usize,
    pub no_content_decision_agree: usize,
    pub no_content_reason_agree: usize,
    /// Cases where a content rule fires (Cedar reads the precomputed flag).
    pub content: usize,
    pub content_decision_agree: usize,
    pub content_reason_agree: usize,
    /// Evaluation errors Cedar reported (a policy that errors is skipped; there should be none).
    pub cedar_errors: usize,
    pub mismatches: Vec<String>,
}

impl Agreement {
    pub fn all_agree(&self) -> bool {
        self.airlock_matches_expected == self.total
            && self.no_content_decision_agree == self.no_content
            && self.no_content_reason_agree == self.no_content
            && self.content_decision_agree == self.content
            && self.content_reason_agree == self.content
            && self.cedar_errors == 0
    }
}

impl fmt::Display for Agreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "airlock vs expected:           {}/{} cases (decision and reason code)",
            self.airlock_matches_expected, self.total
        )?;
        writeln!(
            f,
            "cedar vs airlock, no content hardline rule fires: decision {}/{}, reason code {}/{}",
            self.no_content_decision_agree,
            self.no_content,
            self.no_content_reason_agree,
            self.no_content
        )?;
        writeln!(
            f,
            "cedar vs airlock, a content rule fires (flag precomputed): decision {}/{}, reason code {}/{}",
            self.content_decision_agree, self.content, self.content_reason_agree, self.content
        )?;
        write!(f, "cedar evaluation errors:       {}", self.cedar_errors)?;
        for m in &self.mismatches {
            write!(f, "\n  mismatch: {m}")?;
        }
        Ok(())
    }
}

/// Decides every case both ways and compares.
pub fn agreement(cases: &[Case], ruleset: &Ruleset, cedar: &CedarEngine) -> Agreement {
    let matchers = ContentMatchers::new(ruleset);
    let mut a = Agreement {
        total: cases.len(),
        ..Agreement::default()
    };
    for case in cases {
        let ours: PolicyDecision = evaluate(&case.action, ruleset);
        if ours.decision == case.expected_decision && ours.reason_code == case.expected_reason {
            a.airlock_matches_expected += 1;
        } else {
            a.mismatches.push(format!(
                "{}: airlock {} {} expected {} {}",
                case.id,
                ours.decision,
                ours.reason_code,
                case.expected_decision,
                case.expected_reason
            ));
        }
        let request = cedar.request(&case.action, matchers.flags(&case.action));
        let response = cedar.is_authorized(&request);
        a.cedar_errors += response.diagnostics().errors().count();
        let decision = cedar.outcome(&response);
        let reason = cedar.reason_code(&case.action, &response);
        let decision_agrees = decision == ours.decision;
        let reason_agrees = reason == ours.reason_code;
        if !(decision_agrees && reason_agrees) {
            a.mismatches.push(format!(
                "{}: cedar {decision} {reason} airlock {} {}",
                case.id, ours.decision, ours.reason_code
            ));
        }
        if matchers.content_rule_fires(ruleset, &case.action) {
            a.content += 1;
            a.content_decision_agree += usize::from(decision_agrees);
            a.content_reason_agree += usize::from(reason_agrees);
        } else {
            a.no_content += 1;
            a.no_content_decision_agree += usize::from(decision_agrees);
            a.no_content_reason_agree += usize::from(reason_agrees);
        }
    }
    a
}
