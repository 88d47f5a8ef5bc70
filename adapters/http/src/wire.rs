//! The JSON bodies of the `/v1` routes (SPEC §20): Appendix A's records with the §10.1/§14
//! field names, every field present (null if unset), times as §2.2 strings; the same shapes
//! `airlock … --json` prints. Each type derives its OpenAPI schema, so the published document
//! is generated from what is actually serialized.

use airlock_core::access::ApiToken;
use airlock_core::approval::Approval;
use airlock_core::connection::{Connection, ConnectionState};
use airlock_core::control::{CancelOutcome, Page, Resolved, Submitted};
use airlock_core::events::Event;
use airlock_core::invocation::Invocation;
use airlock_core::run::{Run, RunState};
use airlock_core::session::Settlement;
use airlock_core::time::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

fn time(t: Option<Timestamp>) -> Option<String> {
    t.map(|t| t.to_string())
}

/// An approval (SPEC §10.1). `arguments` is the redacted display copy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalRecord {
    #[schema(format = Uuid)]
    pub id: String,
    pub tenant_id: String,
    pub principal_id: String,
    #[schema(format = Uuid)]
    pub session_id: String,
    #[schema(format = Uuid)]
    pub run_id: String,
    pub action_kind: String,
    #[schema(format = Uuid)]
    pub action_id: String,
    #[schema(format = Uuid)]
    pub tool_invocation_id: String,
    pub tool_name: String,
    pub tool_version: String,
    pub action_summary: String,
    /// Redacted: credential-shaped values replaced, long values truncated (SPEC §10.1).
    pub arguments: Value,
    pub normalized_arguments_hash: String,
    pub effective_arguments_hash: String,
    pub required_scopes: Vec<String>,
    #[schema(example = "high")]
    pub risk: String,
    pub policy_reason: String,
    pub policy_decision: String,
    pub policy_version: String,
    pub revalidated_policy_version: Option<String>,
    #[schema(example = "pending")]
    pub status: String,
    pub resolution: Option<String>,
    pub resolution_reason: Option<String>,
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub requested_at: Option<String>,
    #[schema(format = DateTime)]
    pub resolved_at: Option<String>,
    pub resolved_by: Option<String>,
}

impl From<&Approval> for ApprovalRecord {
    fn from(a: &Approval) -> Self {
        ApprovalRecord {
            id: a.id.to_string(),
            tenant_id: a.tenant_id.clone(),
            principal_id: a.principal_id.clone(),
            session_id: a.session_id.to_string(),
            run_id: a.run_id.to_string(),
            action_kind: a.action_kind.as_str().to_owned(),
            action_id: a.action_id.to_string(),
            tool_invocation_id: a.tool_invocation_id.to_string(),
            tool_name: a.tool_name.clone(),
            tool_version: a.tool_version.clone(),
            action_summary: a.action_summary.clone(),
            arguments: a.arguments.clone(),
            normalized_arguments_hash: a.normalized_arguments_hash.clone(),
            effective_arguments_hash: a.effective_arguments_hash.clone(),
            required_scopes: a.required_scopes.clone(),
            risk: a.risk.as_str().to_owned(),
            policy_reason: a.policy_reason.clone(),
            policy_decision: a.policy_decision.as_str().to_owned(),
            policy_version: a.policy_version.clone(),
            revalidated_policy_version: a.revalidated_policy_version.clone(),
            status: a.status.as_str().to_owned(),
            resolution: a.resolution.map(|r| r.as_str().to_owned()),
            resolution_reason: a.resolution_reason.clone(),
            expires_at: a.expires_at.to_string(),
            created_at: a.created_at.to_string(),
            requested_at: time(a.requested_at),
            resolved_at: time(a.resolved_at),
            resolved_by: a.resolved_by.clone(),
        }
    }
}

/// A page of pending approvals, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalPage {
    pub items: Vec<ApprovalRecord>,
    /// Pass back as `cursor` for the next page; null when there is none.
    pub next_cursor: Option<String>,
}

impl From<&Page<Approval>> for ApprovalPage {
    fn from(page: &Page<Approval>) -> Self {
        ApprovalPage {
            items: page.items.iter().map(ApprovalRecord::from).collect(),
            next_cursor: page.next_cursor.clone(),
        }
    }
}

/// `POST /v1/approvals/{id}/approve` and `/deny`. The body may be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// Recorded as the approval's `resolution_reason`; at most 4096 characters.
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub reason: Option<String>,
}

/// What a resolve did: `applied`, or `already_resolved_identically` for a repeat of the same
/// answer. A different answer to a resolved approval is a 409 `already_resolved_differently`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResolvedRecord {
    #[schema(example = "applied")]
    pub state: String,
    pub approval: ApprovalRecord,
}

impl From<&Resolved> for ResolvedRecord {
    fn from(r: &Resolved) -> Self {
        ResolvedRecord {
            state: r.state.as_str().to_owned(),
            approval: ApprovalRecord::from(&r.approval),
        }
    }
}

/// A tool invocation (SPEC §9.1) with its settlement, if a human recorded one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InvocationRecord {
    #[schema(format = Uuid)]
    pub id: String,
    #[schema(format = Uuid)]
    pub run_id: String,
    #[schema(format = Uuid)]
    pub session_id: String,
    pub tenant_id: String,
    pub step_number: u32,
    pub call_id: String,
    pub tool_name: String,
    pub tool_version: String,
    pub side_effect: String,
    pub risk: String,
    pub idempotency_class: String,
    pub required_scopes: Vec<String>,
    pub raw_arguments: Value,
    pub arguments: Value,
    pub normalized_arguments_hash: String,
    pub effective_arguments_hash: String,
    pub idempotency_key: String,
    pub argument_trust: std::collections::BTreeMap<String, String>,
    pub origin_trust: String,
    pub parallel_group: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    pub status: String,
    pub policy_decision: Option<Value>,
    /// The watermark: when the effect was sent (SPEC §9.2 step 9).
    #[schema(format = DateTime)]
    pub effect_sent_at: Option<String>,
    pub suspended_kind: Option<String>,
    pub suspended_ref: Option<String>,
    pub structured_result: Option<Value>,
    pub output_bytes: Option<u64>,
    pub outcome: Option<Value>,
    pub result_item: Option<Value>,
    pub outcome_status: Option<String>,
    pub reason_code: Option<String>,
    #[schema(format = DateTime)]
    pub updated_at: String,
    pub settlement: Option<SettlementRecord>,
}

impl InvocationRecord {
    pub fn new(i: &Invocation, settlement: Option<&Settlement>) -> Self {
        InvocationRecord {
            id: i.id.to_string(),
            run_id: i.run_id.to_string(),
            session_id: i.session_id.to_string(),
            tenant_id: i.tenant_id.clone(),
            step_number: i.step_number,
            call_id: i.call_id.clone(),
            tool_name: i.tool_name.clone(),
            tool_version: i.tool_version.clone(),
            side_effect: i.side_effect.as_str().to_owned(),
            risk: i.risk.as_str().to_owned(),
            idempotency_class: i.idempotency_class.as_str().to_owned(),
            required_scopes: i.required_scopes.clone(),
            raw_arguments: i.raw_arguments.clone(),
            arguments: serde_json::from_str(&i.arguments).unwrap_or(Value::Null),
            normalized_arguments_hash: i.normalized_arguments_hash.clone(),
            effective_arguments_hash: i.effective_arguments_hash.clone(),
            idempotency_key: i.idempotency_key.clone(),
            argument_trust: i
                .argument_trust
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().to_owned()))
                .collect(),
            origin_trust: i.origin_trust.as_str().to_owned(),
            parallel_group: i.parallel_group.map(|g| g.to_string()),
            created_at: i.created_at.to_string(),
            status: i.status.as_str().to_owned(),
            policy_decision: i
                .policy_decision
                .as_ref()
                .and_then(|d| serde_json::to_value(d).ok()),
            effect_sent_at: time(i.effect_sent_at),
            suspended_kind: i.suspended_approval.map(|_| "approval".to_owned()),
            suspended_ref: i.suspended_approval.map(|a| a.to_string()),
            structured_result: i.structured_result.clone(),
            output_bytes: i.output_bytes,
            outcome: i.outcome.as_ref().map(|o| o.to_value()),
            result_item: i
                .result_item
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok()),
            outcome_status: i.outcome_status.map(|s| s.as_str().to_owned()),
            reason_code: i.reason_code.clone(),
            updated_at: i.updated_at.to_string(),
            settlement: settlement.map(SettlementRecord::from),
        }
    }
}

/// The UNCERTAIN review queue, newest first (SPEC §9.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UncertainPage {
    pub items: Vec<InvocationRecord>,
}

/// `POST /v1/invocations/{id}/settle`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleBody {
    /// What a human found out about the call's effect.
    pub outcome: SettlementOutcomeWire,
    /// How it was found out; 1 to 4096 characters.
    #[schema(min_length = 1, max_length = 4096)]
    pub note: String,
}

/// `succeeded` or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SettlementOutcomeWire {
    Succeeded,
    Failed,
}

/// One `uncertain_settlements` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SettlementRecord {
    #[schema(format = Uuid)]
    pub id: String,
    #[schema(format = Uuid)]
    pub invocation_id: String,
    #[schema(format = Uuid)]
    pub run_id: String,
    pub tenant_id: String,
    pub outcome: String,
    pub note: String,
    pub settled_by: String,
    #[schema(format = DateTime)]
    pub settled_at: String,
}

impl From<&Settlement> for SettlementRecord {
    fn from(s: &Settlement) -> Self {
        SettlementRecord {
            id: s.id.to_string(),
            invocation_id: s.invocation_id.to_string(),
            run_id: s.run_id.to_string(),
            tenant_id: s.tenant_id.clone(),
            outcome: s.outcome.as_str().to_owned(),
            note: s.note.clone(),
            settled_by: s.settled_by.clone(),
            settled_at: s.settled_at.to_string(),
        }
    }
}

/// `POST /v1/runs`' answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SubmittedRecord {
    #[schema(format = Uuid)]
    pub run_id: String,
    #[schema(format = Uuid)]
    pub session_id: String,
    #[schema(example = "QUEUED")]
    pub status: String,
}

impl From<&Submitted> for SubmittedRecord {
    fn from(s: &Submitted) -> Self {
        SubmittedRecord {
            run_id: s.run_id.to_string(),
            session_id: s.session_id.to_string(),
            status: s.status.as_str().to_owned(),
        }
    }
}

/// The budgets of SPEC §8.4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LimitsRecord {
    pub max_steps: u32,
    pub max_tool_calls: u32,
    pub deadline_seconds: Option<u32>,
}

/// Why and when a run failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FailureRecord {
    pub reason: String,
    pub message: String,
    pub step_number: u32,
    #[schema(format = DateTime)]
    pub occurred_at: String,
}

/// A run (SPEC §14) without `planner_input`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunRecord {
    #[schema(format = Uuid)]
    pub id: String,
    #[schema(format = Uuid)]
    pub session_id: String,
    pub tenant_id: String,
    pub principal_id: String,
    pub principal_scopes: Vec<String>,
    pub origin_trust: String,
    pub planner_kind: String,
    #[schema(example = "WAITING_FOR_APPROVAL")]
    pub status: String,
    pub step_count: u32,
    pub tool_call_count: u32,
    pub limits: LimitsRecord,
    #[schema(format = DateTime)]
    pub deadline_at: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_epoch: u64,
    #[schema(format = DateTime)]
    pub lease_expires_at: Option<String>,
    pub attempts: u32,
    #[schema(format = DateTime)]
    pub scheduled_for: Option<String>,
    #[schema(format = DateTime)]
    pub cancel_requested_at: Option<String>,
    pub failure: Option<FailureRecord>,
    pub final_message: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

impl From<&Run> for RunRecord {
    fn from(run: &Run) -> Self {
        let (lease_owner, lease_expires_at, scheduled_for, failure, final_message) = match &run
            .state
        {
            RunState::Queued { scheduled_for } => (None, None, *scheduled_for, None, None),
            RunState::Running {
                lease_owner,
                lease_expires_at,
            } => (
                Some(lease_owner.clone()),
                Some(*lease_expires_at),
                None,
                None,
                None,
            ),
            RunState::WaitingForApproval | RunState::Cancelled => (None, None, None, None, None),
            RunState::Completed { final_message } => {
                (None, None, None, None, Some(final_message.clone()))
            }
            RunState::Failed { failure } => (None, None, None, Some(failure.clone()), None),
        };
        RunRecord {
            id: run.id.to_string(),
            session_id: run.session_id.to_string(),
            tenant_id: run.tenant_id.clone(),
            principal_id: run.principal_id.clone(),
            principal_scopes: run
                .principal_scopes
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
            origin_trust: run.origin_trust.as_str().to_owned(),
            planner_kind: run.planner_kind.clone(),
            status: run.status().as_str().to_owned(),
            step_count: run.step_count,
            tool_call_count: run.tool_call_count,
            limits: LimitsRecord {
                max_steps: run.limits.max_steps,
                max_tool_calls: run.limits.max_tool_calls,
                deadline_seconds: run.limits.deadline_seconds,
            },
            deadline_at: time(run.deadline_at),
            lease_owner,
            lease_epoch: run.lease_epoch,
            lease_expires_at: time(lease_expires_at),
            attempts: run.attempts,
            scheduled_for: time(scheduled_for),
            cancel_requested_at: time(run.cancel_requested_at),
            failure: failure.map(|f| FailureRecord {
                reason: f.reason.as_str().to_owned(),
                message: f.message,
                step_number: f.step_number,
                occurred_at: f.occurred_at.to_string(),
            }),
            final_message,
            created_at: run.created_at.to_string(),
            updated_at: run.updated_at.to_string(),
        }
    }
}

/// One event envelope (SPEC §13.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventRecord {
    /// The store's event id: increases in commit order; the SSE `id`.
    pub id: i64,
    #[schema(format = Uuid)]
    pub session_id: String,
    #[schema(format = Uuid)]
    pub run_id: Option<String>,
    pub sequence: u64,
    #[schema(example = "approval.requested")]
    pub event_type: String,
    pub payload_schema_version: u32,
    pub actor_type: String,
    pub actor_id: Option<String>,
    pub payload: Value,
    pub derivation_key: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<&Event> for EventRecord {
    fn from(e: &Event) -> Self {
        EventRecord {
            id: e.id,
            session_id: e.session_id.to_string(),
            run_id: e.run_id.map(|r| r.to_string()),
            sequence: e.sequence,
            event_type: e.event_type.as_str().to_owned(),
            payload_schema_version: e.payload_schema_version,
            actor_type: e.actor.actor_type.as_str().to_owned(),
            actor_id: e.actor.actor_id.clone(),
            payload: e.payload.clone(),
            derivation_key: e.derivation_key.clone(),
            created_at: e.created_at.to_string(),
        }
    }
}

/// A page of a run's events by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    pub items: Vec<EventRecord>,
    /// The last item's id, to pass back as `after_id`; null when no further event exists.
    pub next_cursor: Option<String>,
}

impl From<&Page<Event>> for EventPage {
    fn from(page: &Page<Event>) -> Self {
        EventPage {
            items: page.items.iter().map(EventRecord::from).collect(),
            next_cursor: page.next_cursor.clone(),
        }
    }
}

/// `POST /v1/runs/{id}/cancel`'s answer (SPEC §8.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CancelRecord {
    pub accepted: bool,
    pub status: String,
}

impl From<&CancelOutcome> for CancelRecord {
    fn from(c: &CancelOutcome) -> Self {
        CancelRecord {
            accepted: c.accepted,
            status: c.status.as_str().to_owned(),
        }
    }
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: String,
    pub policy_version: String,
}

/// What `airlock tokens create` prints once, and `tokens list` without the `token` field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub tenant_id: String,
    pub principal_id: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<String>,
    pub label: Option<String>,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// `tokens list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenList {
    pub items: Vec<TokenRecord>,
}

impl TokenRecord {
    /// The record; `token` is the plain text, given only when the token was just minted.
    pub fn new(t: &ApiToken, token: Option<&str>) -> Self {
        TokenRecord {
            id: t.id.to_string(),
            token: token.map(str::to_owned),
            tenant_id: t.tenant_id.clone(),
            principal_id: t.principal_id.clone(),
            scopes: t.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
            expires_at: time(t.expires_at),
            label: t.label.clone(),
            created_at: t.created_at.to_string(),
            revoked_at: time(t.revoked_at),
        }
    }
}

/// A run script (SPEC §15), as `POST /v1/runs` takes it. Documentation of the shape only: the
/// server parses the body with core's own strict parser, which also checks what a schema
/// cannot say (the script's tenant and principal are the caller's, its scopes a subset of the
/// caller's, fewer steps than `limits.max_steps`, call ids unique in their step).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunScriptDoc {
    /// Always 1.
    #[schema(minimum = 1, maximum = 1)]
    pub schema_version: u32,
    /// The caller's tenant.
    #[schema(min_length = 1, max_length = 128)]
    pub tenant_id: String,
    /// The caller's principal.
    #[schema(min_length = 1, max_length = 128)]
    pub principal_id: String,
    /// A subset of the caller's scopes.
    pub principal_scopes: Vec<ScopeDoc>,
    /// An existing session of the caller without an active run, or null for a new one.
    #[serde(default)]
    #[schema(format = Uuid)]
    pub session_id: Option<String>,
    /// Default `external_untrusted`.
    #[serde(default)]
    pub origin_trust: TrustDoc,
    /// Default: 16 steps, 32 tool calls, no deadline.
    #[serde(default)]
    pub limits: LimitsDoc,
    /// At most 999 steps, each with at least one call.
    #[schema(max_items = 999)]
    pub steps: Vec<StepDoc>,
    /// At most 4096 characters; default `done`.
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub final_message: String,
}

/// A scope: lowercase segments joined by dots (SPEC §5).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(value_type = String, pattern = "^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$")]
pub struct ScopeDoc(pub String);

/// A trust label a script may declare (SPEC §3; not `platform` or `trusted_configuration`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TrustDoc {
    User,
    InternalTool,
    Memory,
    Knowledge,
    #[default]
    ExternalUntrusted,
}

/// Budgets (SPEC §8.4).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsDoc {
    /// Default 16.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_steps: u32,
    /// Default 32.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000)]
    pub max_tool_calls: u32,
    /// Default: no deadline.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub deadline_seconds: Option<u32>,
}

/// One planner turn.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepDoc {
    #[schema(min_items = 1)]
    pub calls: Vec<CallDoc>,
}

/// One proposed tool call.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallDoc {
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,128}$")]
    pub call_id: String,
    pub tool: String,
    /// A pinned version, or null for the latest registered.
    #[serde(default)]
    pub version: Option<String>,
    /// Any JSON; the tool's schema validates it.
    pub arguments: Value,
    /// Trust label per top-level argument; unlisted ones are `external_untrusted`.
    #[serde(default)]
    pub argument_trust: std::collections::BTreeMap<String, TrustDoc>,
}

/// One message of the event stream, as `text/event-stream` frames it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SseMessageDoc {
    /// The event id (decimal): send it back as `Last-Event-ID` to resume after it.
    pub id: String,
    /// The event type, e.g. `approval.requested`.
    pub event: String,
    /// The event envelope (an `EventRecord`) as one line of JSON.
    pub data: String,
}

/// A conversation (SPEC §22.1): the connection's identity and liveness, its taint (when, and
/// by which result) and its call count. `airlock conversations list|show|clear-taint` prints
/// this same record, so the CLI and the API cannot drift apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConversationRecord {
    #[schema(format = Uuid)]
    pub id: String,
    #[schema(format = Uuid)]
    pub session_id: String,
    pub tenant_id: String,
    pub principal_id: String,
    /// The gateway process that serves (or served) it.
    pub gateway_id: String,
    #[schema(example = "open")]
    pub status: String,
    #[schema(format = DateTime)]
    pub opened_at: String,
    /// The last request that started a call (`opened_at` until then).
    #[schema(format = DateTime)]
    pub last_seen_at: String,
    /// Open only: until when its gateway has promised to be alive.
    #[schema(format = DateTime)]
    pub alive_until: Option<String>,
    #[schema(format = DateTime)]
    pub closed_at: Option<String>,
    /// `disconnected` or `expired`.
    pub close_reason: Option<String>,
    /// When an untrusted result or read tainted it; null when it is not tainted.
    #[schema(format = DateTime)]
    pub tainted_at: Option<String>,
    /// What tainted it: the tool result (tool, call and run) or the read. Text from the
    /// upstream server's names: display it as untrusted text.
    pub tainted_by: Option<String>,
    /// `tools/call` requests it started as runs.
    pub call_count: u32,
}

impl From<&Connection> for ConversationRecord {
    fn from(c: &Connection) -> Self {
        let (alive_until, closed_at, close_reason) = match &c.state {
            ConnectionState::Open { alive_until } => (Some(alive_until.to_string()), None, None),
            ConnectionState::Closed { closed_at, reason } => (
                None,
                Some(closed_at.to_string()),
                Some(reason.as_str().to_owned()),
            ),
        };
        ConversationRecord {
            id: c.id.to_string(),
            session_id: c.session_id.to_string(),
            tenant_id: c.tenant_id.clone(),
            principal_id: c.principal_id.clone(),
            gateway_id: c.gateway_id.clone(),
            status: c.status().as_str().to_owned(),
            opened_at: c.opened_at.to_string(),
            last_seen_at: c.last_seen_at.to_string(),
            alive_until,
            closed_at,
            close_reason,
            tainted_at: c.taint.as_ref().map(|t| t.at.to_string()),
            tainted_by: c.taint.as_ref().map(|t| t.by.clone()),
            call_count: c.call_count,
        }
    }
}

/// The tenant's conversations, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConversationPage {
    pub items: Vec<ConversationRecord>,
}

/// One call of a conversation: an invocation of its session (SPEC §22.2: each `tools/call`
/// is its own run of one call). Arguments and results are left out; the run's events have
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConversationCallRecord {
    #[schema(format = Uuid)]
    pub invocation_id: String,
    #[schema(format = Uuid)]
    pub run_id: String,
    pub step_number: u32,
    pub call_id: String,
    pub tool_name: String,
    pub tool_version: String,
    #[schema(example = "SUCCEEDED")]
    pub status: String,
    pub side_effect: String,
    pub risk: String,
    /// `external_untrusted` for a call proposed while the conversation was tainted.
    pub origin_trust: String,
    pub reason_code: Option<String>,
    /// The approval it asked for, if it needed one.
    #[schema(format = Uuid)]
    pub approval_id: Option<String>,
    /// That approval's status (`pending`, `approved`, `denied`, `expired`, `cancelled`).
    pub approval_status: Option<String>,
    /// The watermark: when the effect was sent.
    #[schema(format = DateTime)]
    pub effect_sent_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

impl ConversationCallRecord {
    /// The record of invocation `i` and the approval it asked for.
    pub fn new(i: &Invocation, approval: Option<&Approval>) -> Self {
        ConversationCallRecord {
            invocation_id: i.id.to_string(),
            run_id: i.run_id.to_string(),
            step_number: i.step_number,
            call_id: i.call_id.clone(),
            tool_name: i.tool_name.clone(),
            tool_version: i.tool_version.clone(),
            status: i.status.as_str().to_owned(),
            side_effect: i.side_effect.as_str().to_owned(),
            risk: i.risk.as_str().to_owned(),
            origin_trust: i.origin_trust.as_str().to_owned(),
            reason_code: i.reason_code.clone(),
            approval_id: approval
                .map(|a| a.id)
                .or(i.suspended_approval)
                .map(|a| a.to_string()),
            approval_status: approval.map(|a| a.status.as_str().to_owned()),
            effect_sent_at: time(i.effect_sent_at),
            created_at: i.created_at.to_string(),
            updated_at: i.updated_at.to_string(),
        }
    }
}

/// `GET /v1/conversations/{id}`: the conversation's record and its newest calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConversationDetail {
    #[serde(flatten)]
    pub conversation: ConversationRecord,
    /// Newest first (`created_at`, then id), at most 100.
    pub calls: Vec<ConversationCallRecord>,
    /// Whether older calls exist that `calls` leaves out.
    pub calls_truncated: bool,
}

/// `POST /v1/conversations/{id}/clear-taint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClearTaintBody {
    /// Why the content that tainted it is trusted now; recorded with the clear. 1 to 4096
    /// characters, not only spaces.
    #[schema(min_length = 1, max_length = 4096)]
    pub reason: String,
    /// The `tainted_at` of the taint you looked at (as the conversation's record gives it):
    /// when given, a conversation tainted again since is a 409 instead of being cleared unseen.
    #[serde(default)]
    pub tainted_at: Option<String>,
}
