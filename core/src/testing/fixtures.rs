//! Sample records (SPEC §9.1, §10.1, §13, §14) that satisfy every store rule, for tests to
//! insert as they are or tweak one field at a time.
//!
//! Everything is deterministic: ids are built from a small number `n` with a per-type tag (so
//! `run_id(1)` and `session_id(1)` differ, and ids of one type sort by `n`), and times are
//! offsets from [`T0`].

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use uuid::Uuid;

use crate::action::PolicyDecision;
use crate::approval::Approval;
use crate::canonical::{arguments_hash, to_canonical_string};
use crate::events::{Actor, EventType, NewEvent, ProcessEvent, keys};
use crate::ids::{
    ApprovalId, InvocationId, NotifyTargetId, ParallelGroupId, RunId, SessionId, SettlementId,
};
use crate::invocation::Invocation;
use crate::invocation::outcome::{Outcome, ResultItem, codes};
use crate::notify::target::{NotifyEvent, NotifyFormat, NotifyTarget, Progress, SecretSource};
use crate::ports::ProposedCall;
use crate::run::checkpoint::{Checkpoint, CheckpointState, ResultRef, StepRecord};
use crate::run::{Failure, Limits, Run, RunGuard, RunState};
use crate::scope::ScopeSet;
use crate::session::{PolicyProfileRecord, Session, Settlement};
use crate::store::{Store, StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{
    ActionKind, ApprovalResolution, ApprovalStatus, CheckpointTrigger, FailureReason,
    IdempotencyClass, InvocationStatus, OutcomeStatus, PolicyDecisionType, RiskLevel, RunStatus,
    SettlementOutcome, SideEffectClass, TargetKind, TrustLevel,
};

/// 2026-01-15T12:00:00Z, the epoch of every sample, and the tenant: the policy gate's test
/// actions use the same two.
pub use airlock_policy::testing::{T0, TENANT};
pub const PRINCIPAL: &str = "alice";
pub const WORKER: &str = "worker-1";
pub const TOOL: &str = "demo.external_write";
pub const POLICY_VERSION: &str = "sample-policy-v1";
/// The sample lease length: a sample RUNNING run's lease expires at `at(LEASE_SECONDS)`.
pub const LEASE_SECONDS: i64 = 30;

/// `T0` plus whole seconds (negative for earlier).
pub const fn at(seconds: i64) -> Timestamp {
    T0.saturating_add_seconds(seconds)
}

const fn tagged(tag: u128, n: u128) -> Uuid {
    Uuid::from_u128((tag << 96) | n)
}

pub const fn session_id(n: u128) -> SessionId {
    SessionId(tagged(0x5e55, n))
}
pub const fn run_id(n: u128) -> RunId {
    RunId(tagged(0x0a11, n))
}
pub const fn invocation_id(n: u128) -> InvocationId {
    InvocationId(tagged(0x1a7c, n))
}
pub const fn approval_id(n: u128) -> ApprovalId {
    ApprovalId(tagged(0xa991, n))
}
pub const fn settlement_id(n: u128) -> SettlementId {
    SettlementId(tagged(0x5e77, n))
}
pub const fn parallel_group_id(n: u128) -> ParallelGroupId {
    ParallelGroupId(tagged(0x9a11, n))
}

/// A session of [`TENANT`]/[`PRINCIPAL`] whose first event will take sequence 1.
pub fn sample_session(n: u128) -> Session {
    Session {
        id: session_id(n),
        tenant_id: TENANT.to_owned(),
        principal_id: PRINCIPAL.to_owned(),
        next_event_sequence: 1,
        created_at: T0,
    }
}

/// The state a sample run of `status` is in: RUNNING under [`WORKER`] until `at(LEASE_SECONDS)`,
/// COMPLETED with "done", FAILED with `internal_error`.
pub fn sample_state(status: RunStatus) -> RunState {
    match status {
        RunStatus::Queued => RunState::Queued {
            scheduled_for: None,
        },
        RunStatus::Running => RunState::Running {
            lease_owner: WORKER.to_owned(),
            lease_expires_at: at(LEASE_SECONDS),
        },
        RunStatus::WaitingForApproval => RunState::WaitingForApproval,
        RunStatus::Completed => RunState::Completed {
            final_message: "done".to_owned(),
        },
        RunStatus::Failed => RunState::Failed {
            failure: Failure::new(FailureReason::InternalError, 0, T0),
        },
        RunStatus::Cancelled => RunState::Cancelled,
    }
}

/// Run `n` of `session` in `status`, created at `T0`. A QUEUED run was never claimed (epoch
/// 0); any other was claimed once (epoch 1), so `run.lease()` of a RUNNING sample holds.
pub fn sample_run(n: u128, session: SessionId, status: RunStatus) -> Run {
    Run {
        id: run_id(n),
        session_id: session,
        tenant_id: TENANT.to_owned(),
        principal_id: PRINCIPAL.to_owned(),
        principal_scopes: ScopeSet::new(),
        origin_trust: TrustLevel::User,
        planner_kind: "scripted".to_owned(),
        planner_input: "{}".into(),
        state: sample_state(status),
        step_count: 0,
        tool_call_count: 0,
        limits: Limits::default(),
        deadline_at: None,
        lease_epoch: if status == RunStatus::Queued { 0 } else { 1 },
        attempts: 0,
        cancel_requested_at: None,
        created_at: T0,
        updated_at: T0,
    }
}

/// The outcome a sample terminal invocation of `status` closes with.
pub fn sample_outcome(status: InvocationStatus) -> Option<Outcome> {
    match status {
        InvocationStatus::Succeeded => Some(Outcome::succeeded(TOOL)),
        InvocationStatus::Failed => Some(Outcome::new(
            OutcomeStatus::Failed,
            TOOL,
            codes::INTERNAL_ERROR,
        )),
        InvocationStatus::Denied => Some(Outcome::new(
            OutcomeStatus::Denied,
            TOOL,
            codes::RUN_TERMINATED,
        )),
        InvocationStatus::Uncertain => Some(Outcome::new(
            OutcomeStatus::Uncertain,
            TOOL,
            codes::OUTCOME_UNKNOWN,
        )),
        _ => None,
    }
}

/// Invocation `n` of `run` at `step`/`call_id` in `status`, valid for every CHECK: watermarked
/// (`effect_sent_at = T0`) iff it reached RUNNING, closed with [`sample_outcome`] and a result
/// item if terminal, suspended on `approval_id(n)` if waiting. Its idempotency key is unique per
/// `(run, step, call_id)`.
pub fn sample_invocation(
    n: u128,
    run: &Run,
    step: u32,
    call_id: &str,
    status: InvocationStatus,
) -> Invocation {
    let raw_arguments = json!({"destination": "demo", "content": call_id});
    let hash = arguments_hash(&raw_arguments);
    let decision = match status {
        InvocationStatus::WaitingForApproval => PolicyDecisionType::RequireApproval,
        InvocationStatus::Denied => PolicyDecisionType::Deny,
        _ => PolicyDecisionType::Allow,
    };
    let watermarked = matches!(
        status,
        InvocationStatus::Running
            | InvocationStatus::Succeeded
            | InvocationStatus::Failed
            | InvocationStatus::Uncertain
    );
    let mut invocation = Invocation {
        id: invocation_id(n),
        run_id: run.id,
        session_id: run.session_id,
        tenant_id: run.tenant_id.clone(),
        step_number: step,
        call_id: call_id.to_owned(),
        tool_name: TOOL.to_owned(),
        tool_version: "1.0.0".to_owned(),
        side_effect: SideEffectClass::ExternalWrite,
        risk: RiskLevel::Medium,
        idempotency_class: IdempotencyClass::NonIdempotent,
        required_scopes: vec!["demo.write".to_owned()],
        arguments: to_canonical_string(&raw_arguments),
        raw_arguments,
        normalized_arguments_hash: hash.clone(),
        effective_arguments_hash: hash,
        idempotency_key: format!("sample:{}:{step}:{call_id}", run.id),
        argument_trust: BTreeMap::new(),
        origin_trust: run.origin_trust,
        target_kind: Some(TargetKind::InProcess),
        parallel_group: None,
        created_at: T0,
        status,
        policy_decision: Some(PolicyDecision {
            decision,
            reason_code: format!("policy.matrix.{}", SideEffectClass::ExternalWrite),
            explanation: "sample".to_owned(),
            policy_version: POLICY_VERSION.to_owned(),
            modified_arguments: None,
        }),
        effect_sent_at: watermarked.then_some(T0),
        suspended_approval: (status == InvocationStatus::WaitingForApproval)
            .then_some(approval_id(n)),
        structured_result: None,
        output_bytes: None,
        outcome: None,
        result_item: None,
        outcome_status: None,
        reason_code: None,
        updated_at: T0,
    };
    if let Some(outcome) = sample_outcome(status) {
        let item = if status == InvocationStatus::Succeeded {
            ResultItem::success(
                call_id,
                TOOL,
                TrustLevel::InternalTool,
                &json!({"ok": true}),
            )
        } else {
            ResultItem::from_outcome(call_id, &outcome, TrustLevel::InternalTool)
        };
        if status == InvocationStatus::Succeeded {
            invocation.structured_result = Some(json!({"ok": true}));
        }
        invocation.close(outcome, item.to_canonical(), T0);
    }
    invocation
}

/// Approval `n` for `invocation` in `status`, announced (`requested_at = T0`), expiring at
/// `at(3600)`; resolved ones carry a resolution (approved/denied) and `resolved_at = at(60)`.
pub fn sample_approval(n: u128, invocation: &Invocation, status: ApprovalStatus) -> Approval {
    let resolution = match status {
        ApprovalStatus::Approved => Some(ApprovalResolution::ApproveOnce),
        ApprovalStatus::Denied => Some(ApprovalResolution::Deny),
        _ => None,
    };
    let resolved = status != ApprovalStatus::Pending;
    Approval {
        id: approval_id(n),
        tenant_id: invocation.tenant_id.clone(),
        principal_id: PRINCIPAL.to_owned(),
        session_id: invocation.session_id,
        run_id: invocation.run_id,
        action_kind: ActionKind::ToolCall,
        action_id: invocation.id,
        tool_invocation_id: invocation.id,
        tool_name: invocation.tool_name.clone(),
        tool_version: invocation.tool_version.clone(),
        action_summary: format!("Run {} with validated arguments.", invocation.tool_name),
        arguments: invocation.raw_arguments.clone(),
        normalized_arguments_hash: invocation.normalized_arguments_hash.clone(),
        effective_arguments_hash: invocation.effective_arguments_hash.clone(),
        required_scopes: invocation.required_scopes.clone(),
        risk: invocation.risk,
        policy_reason: format!("policy.matrix.{}", invocation.side_effect),
        policy_decision: PolicyDecisionType::RequireApproval,
        policy_version: POLICY_VERSION.to_owned(),
        revalidated_policy_version: None,
        status,
        resolution,
        resolution_reason: None,
        expires_at: at(3600),
        created_at: T0,
        requested_at: Some(T0),
        resolved_at: resolved.then_some(at(60)),
        resolved_by: resolution.map(|_| PRINCIPAL.to_owned()),
    }
}

/// Checkpoint `version` of `run`: `seed` at version 1, `tool_pending` after.
pub fn sample_checkpoint(run: RunId, version: u32) -> Checkpoint {
    Checkpoint {
        run_id: run,
        version,
        trigger: if version <= 1 {
            CheckpointTrigger::Seed
        } else {
            CheckpointTrigger::ToolPending
        },
        state: CheckpointState {
            step: version.saturating_sub(1),
            ..CheckpointState::default()
        },
        created_at: T0,
    }
}

/// The record of `run`'s `step`: one call `c{step}` and its result, an invocation reference.
pub fn sample_step_record(run: RunId, step: u32) -> StepRecord {
    StepRecord {
        run_id: run,
        step,
        calls: vec![ProposedCall {
            call_id: format!("c{step}"),
            tool: TOOL.to_owned(),
            version: None,
            arguments: json!({"destination": "demo", "content": step}),
            argument_trust: BTreeMap::new(),
        }],
        results: vec![ResultRef::Invocation {
            invocation_id: invocation_id(u128::from(step)),
        }],
        created_at: T0,
    }
}

/// An event of `run` (in its session) with `payload`, appended by [`WORKER`] at `T0`.
pub fn sample_event(
    run: &Run,
    event_type: EventType,
    payload: Value,
    derivation_key: Option<&str>,
) -> NewEvent {
    NewEvent {
        session_id: run.session_id,
        run_id: Some(run.id),
        event_type,
        actor: Actor::worker(WORKER),
        payload,
        derivation_key: derivation_key.map(str::to_owned),
        created_at: T0,
    }
}

/// The `policy.profile.loaded` process event of `policy_version`, with id `n`.
pub fn sample_process_event(n: u128, policy_version: &str) -> ProcessEvent {
    ProcessEvent {
        id: tagged(0x9e0c, n),
        event_type: EventType::PolicyProfileLoaded,
        payload_schema_version: 1,
        actor: Actor::process(),
        payload: json!({"policy_version": policy_version}),
        derivation_key: keys::profile_loaded(policy_version),
        created_at: T0,
    }
}

/// Settlement `n` of an UNCERTAIN `invocation`, by [`PRINCIPAL`].
pub fn sample_settlement(n: u128, invocation: &Invocation) -> Settlement {
    Settlement {
        id: settlement_id(n),
        invocation_id: invocation.id,
        run_id: invocation.run_id,
        tenant_id: invocation.tenant_id.clone(),
        outcome: SettlementOutcome::Succeeded,
        note: "checked the destination by hand".to_owned(),
        settled_by: PRINCIPAL.to_owned(),
        settled_at: at(120),
    }
}

/// A policy profile record for `policy_version`, loaded at `T0` by [`WORKER`].
pub fn sample_policy_profile(policy_version: &str) -> PolicyProfileRecord {
    PolicyProfileRecord {
        policy_version: policy_version.to_owned(),
        profile_name: "default".to_owned(),
        profile_sha256: "a".repeat(64),
        hardline_sha256: "b".repeat(64),
        rule_count: 15,
        loaded_at: T0,
        loaded_by: WORKER.to_owned(),
    }
}

/// The id of notification target `n`.
pub fn notify_target_id(n: u128) -> NotifyTargetId {
    NotifyTargetId(Uuid::from_u128((0x7a26 << 96) | n))
}

/// Notification target `n` of `tenant`: a Slack target for approvals and UNCERTAIN calls,
/// its secret from the environment, its cursor after event 7.
pub fn sample_notify_target(n: u128, tenant: &str) -> NotifyTarget {
    NotifyTarget {
        id: notify_target_id(n),
        tenant_id: tenant.to_owned(),
        url: format!("https://hooks.example/{n}"),
        events: BTreeSet::from([NotifyEvent::ApprovalRequested, NotifyEvent::CallUncertain]),
        format: NotifyFormat::Slack,
        secret: SecretSource::Env("AIRLOCK_NOTIFY_HOOK".to_owned()),
        label: Some(format!("target {n}")),
        created_by: PRINCIPAL.to_owned(),
        created_at: at(i64::try_from(n).expect("small n")),
        removed_at: None,
        progress: Progress {
            after: 7,
            attempts: 0,
            retry_at: None,
        },
    }
}

/// Runs one transaction that must commit; the panic names `what` and the error.
pub fn commit<S: Store, R>(
    store: &S,
    what: &str,
    f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
) -> R {
    match store.transact(f) {
        Ok(value) => value,
        Err(error) => panic!("{what}: transaction failed: {error:?}"),
    }
}

/// Inserts session `n` and run `n` of it in `status`, and returns the run.
pub fn seed_run<S: Store>(store: &S, n: u128, status: RunStatus) -> Run {
    let session = sample_session(n);
    let run = sample_run(n, session.id, status);
    commit(store, "seed session and run", |tx| {
        tx.insert_session(&session)?;
        tx.insert_run(&run)
    });
    run
}

/// The guard an update of `run` as it is now names: its status, and its lease if it holds one.
pub fn guard_of(run: &Run) -> RunGuard {
    RunGuard {
        run_id: run.id,
        status: run.status(),
        lease: run.lease(),
    }
}

/// Inserts `invocation` (its run must exist) and returns it.
pub fn seed_invocation<S: Store>(store: &S, invocation: Invocation) -> Invocation {
    commit(store, "seed invocation", |tx| {
        tx.insert_invocation(&invocation)
    });
    invocation
}

/// One run-script call (SPEC §15) with every argument labelled `user`, so the trust overlay
/// stays out of the way of what a test is about.
pub fn user_call(call_id: &str, tool: &str, arguments: serde_json::Value) -> serde_json::Value {
    let trust: serde_json::Map<String, serde_json::Value> = arguments
        .as_object()
        .map(|object| {
            object
                .keys()
                .map(|k| (k.clone(), serde_json::Value::from("user")))
                .collect()
        })
        .unwrap_or_default();
    serde_json::json!({"call_id": call_id, "tool": tool, "arguments": arguments, "argument_trust": trust})
}

/// The store refused with `Conflict` (a uniqueness or compare-and-set rule), not any other error.
#[track_caller]
pub fn assert_conflict<R: std::fmt::Debug>(result: Result<R, TxError>, rule: &str) {
    assert!(
        matches!(result, Err(TxError::Conflict(_))),
        "{rule}: expected Conflict, got {result:?}"
    );
}
