//! The tool pipeline (SPEC §9.2): one call, from replay lookup to FINISH, with one short
//! transaction per persisted step and none open while a tool runs (§16 #12). Every worker
//! transaction starts with the lease guard, so a fenced worker commits nothing (§16 #28).

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::future::{Either, select};
use serde_json::{Value, json};

use crate::action::{JsonMap, PolicyDecision, ProposedAction, Target};
use crate::approval::revalidate::{ActionIdentity, Approved, Fresh, Revalidation, revalidate};
use crate::approval::{Approval, redact::redact};
use crate::canonical::{IdempotencyKeyInput, arguments_hash, idempotency_key, to_canonical_string};
use crate::conversation::MCP_PLANNER_KIND;
use crate::env::Env;
use crate::events::{Actor, EventType, NewEvent, ProcessEvent, keys};
use crate::ids::{ApprovalId, InvocationId, ParallelGroupId};
use crate::invocation::Invocation;
use crate::invocation::call_result::CallResult;
use crate::invocation::gate::{Authority, authorize};
use crate::invocation::outcome::{Outcome, ResultItem, codes, is_tool_reason_code, message_for};
use crate::invocation::recovery::recovery_action;
use crate::invocation::repeat::{self, Repeat};
use crate::live_policy::Rulesets;
use crate::policy::Ruleset;
use crate::policy::comparison::decide_beside;
use crate::ports::{Tool, ToolContext, ToolFailure, ToolSuccess};
use crate::run::cancel::CancelToken;
use crate::run::checkpoint::{PinnedCall, ResultRef};
use crate::run::state::{close_invocation, close_with_code, update_fields};
use crate::run::step_writes::{Folded, StepLedger};
use crate::run::{Lease, Run};
use crate::scope::{missing_scopes, missing_scopes_message};
use crate::store::{CallIdentity, Store, StoreTx, TxError};
use crate::time::Timestamp;
use crate::tool::spec::ToolSpec;
use crate::vocab::{
    ActionKind, ApprovalStatus, CancelReason, CrashPoint, FailureReason, InvocationStatus,
    OutcomeStatus, PolicyDecisionType, RecoveryAction, SideEffectClass, ToolFailureKind,
    TrustLevel,
};

/// Where one call runs: its run, lease, step and batch.
pub struct CallSite<'a> {
    /// The run as read when execution began (its immutable fields and scopes are what matter).
    pub run: &'a Run,
    pub lease: &'a Lease,
    pub step: u32,
    pub call: &'a PinnedCall,
    pub parallel_group: Option<ParallelGroupId>,
    /// `external_untrusted` once the run is tainted (SPEC §8.6).
    pub origin_trust: TrustLevel,
    /// Sequential calls observe cancellation and the deadline at step 8; a parallel batch checks
    /// both once before it starts (SPEC §11).
    pub sequential: bool,
    pub token: &'a CancelToken,
    pub worker_id: &'a str,
    /// The step's own writes that fold into this call's transactions (SPEC §17.1 F1, F4):
    /// PENDING into its first transaction while the step has not written it, BATCH into the
    /// transaction that closes it when it is the armed last call of a sequential batch. `None`
    /// for calls whose transactions carry neither.
    pub ledger: Option<&'a StepLedger<'a>>,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEnd {
    Done(CallResult),
    /// The call waits for its approval; the batch parks.
    Parked {
        approval_id: ApprovalId,
    },
}

/// Why execution stops in the middle of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halt {
    /// Fenced, or a transaction failed: write nothing more in this execution (SPEC §8.3).
    Abandon,
    /// The run must end now: FINAL with this status.
    Cancel,
    Fail(FailureReason),
}

impl From<TxError> for Halt {
    fn from(_: TxError) -> Halt {
        Halt::Abandon
    }
}

/// An observation point (SPEC §8.5): a requested cancel ends the run, a fenced lease ends the
/// execution.
pub(crate) fn observe(token: &CancelToken) -> Result<(), Halt> {
    match token.reason() {
        None => Ok(()),
        Some(CancelReason::Requested) => Err(Halt::Cancel),
        Some(CancelReason::Fenced) => Err(Halt::Abandon),
    }
}

/// `now ≥ deadline_at` ends the run FAILED `deadline_exceeded` (SPEC §8.4).
pub(crate) fn check_deadline(run: &Run, now: Timestamp) -> Result<(), Halt> {
    match run.deadline_at {
        Some(deadline) if now >= deadline => Err(Halt::Fail(FailureReason::DeadlineExceeded)),
        _ => Ok(()),
    }
}

/// The one pipeline both hosts run.
pub struct ToolPipeline<'e, S: Store> {
    env: &'e Env<S>,
}

/// A normalized, hashed and keyed call, ready to be evaluated.
struct Prepared {
    spec: ToolSpec,
    arguments: JsonMap,
    arguments_hash: String,
    idempotency_key: String,
}

/// Step 5 (SPEC §9.2, §19.3, §19.7), inside PROPOSE's transaction: whether an identical call
/// whose outcome is unknown refuses `row`'s. A gateway run compares with the whole tenant.
fn repeat_in_tx(
    tx: &mut dyn StoreTx,
    site: &CallSite<'_>,
    row: &Invocation,
) -> Result<Option<Repeat>, TxError> {
    let across_runs = site.run.planner_kind == MCP_PLANNER_KIND;
    let twins = tx.twins(
        &identity_of(row),
        repeat::scope_for(site.run.id, across_runs),
    )?;
    let repeat = repeat::repeat_of(&twins, site.run.id);
    #[cfg(feature = "mutants")]
    let repeat = repeat.filter(|r| {
        !(crate::testing::mutants::no_in_flight_check() && matches!(r, Repeat::InFlight(_)))
    });
    Ok(repeat)
}

fn identity_of(row: &Invocation) -> CallIdentity<'_> {
    CallIdentity {
        tenant_id: &row.tenant_id,
        tool_name: &row.tool_name,
        effective_arguments_hash: &row.effective_arguments_hash,
    }
}

/// REFUSE's writes, inside the caller's transaction after its lease guard and the step's
/// PENDING: the refusal event (no row) with its result item, and the step's BATCH when this is
/// its armed last call (SPEC §9.2, §17.1 F4).
fn refusal_writes(
    tx: &mut dyn StoreTx,
    site: &CallSite<'_>,
    status: OutcomeStatus,
    reason_code: &str,
    message: Option<String>,
    raw_hash: String,
    now: Timestamp,
) -> Result<CallResult, TxError> {
    let call = &site.call.call;
    let outcome = match message {
        Some(message) => Outcome::with_message(status, &call.tool, reason_code, message),
        None => Outcome::new(status, &call.tool, reason_code),
    };
    let item = ResultItem::from_outcome(&call.call_id, &outcome, TrustLevel::InternalTool);
    let key = keys::refused(site.run.id, site.step, &call.call_id);
    let event_type = if status == OutcomeStatus::Failed {
        EventType::ToolCallFailed
    } else {
        EventType::ToolCallDenied
    };
    tx.append_event(&NewEvent {
        session_id: site.run.session_id,
        run_id: Some(site.run.id),
        event_type,
        actor: worker_actor(site),
        payload: json!({
            "invocation_id": Value::Null,
            "name": call.tool,
            "call_id": call.call_id,
            "reason_code": reason_code,
            "result_item": item.to_canonical(),
        }),
        derivation_key: Some(key.clone()),
        created_at: now,
    })?;
    let result = CallResult {
        reference: ResultRef::Refusal {
            derivation_key: key,
        },
        item,
        status,
        reason_code: reason_code.to_owned(),
        arguments_hash: raw_hash,
    };
    if let Some(ledger) = site.ledger {
        ledger.stage_closing(tx, &result, now)?;
    }
    Ok(result)
}

/// Whether step 1's replay lookup can be skipped because it would find nothing: the call
/// carries its step's ledger and the step's PENDING is still unwritten. Every transaction that
/// records a call of a step (PROPOSE, REFUSE) carries that PENDING while it is unwritten
/// (§17.1 F1), and a build before the folds committed PENDING before any call of the step; so
/// while a step is unrecorded no row and no refusal of it exists, in this execution or an
/// earlier one (an earlier one that got further recorded the step, and this execution would
/// have resumed it with its PENDING). Should the lease have been lost meanwhile, PROPOSE's and
/// REFUSE's lease guard fences the call, and the unique index on (run, step, call) answers a
/// `Conflict`, which reads the row after all. What the skip saves: a read transaction of three
/// statements on every new step's first call (three round trips on PostgreSQL, issue 33).
fn nothing_to_replay(site: &CallSite<'_>) -> bool {
    site.ledger.is_some_and(StepLedger::pending_unwritten)
}

fn worker_actor(site: &CallSite<'_>) -> Actor {
    Actor::worker(site.worker_id)
}

/// How a call's first phase ended (steps 1–7, with START folded in for an `allow`, F2).
pub enum Begun {
    /// The call ended (or parked, or halted) without invoking anything.
    Ended(Result<CallEnd, Halt>),
    /// START committed with PROPOSE: the body may run now ([`ToolPipeline::finish_started`]).
    Started {
        row: Box<Invocation>,
        tool: std::sync::Arc<dyn Tool>,
    },
}

/// What the observation point of step 8 sees inside a transaction (SPEC §17.1 F2).
enum Observed {
    Clear,
    Cancel,
    Deadline,
}

/// The row PROPOSE inserts, with its approval (WAITING_FOR_APPROVAL) or denial reason code.
struct Proposal {
    row: Invocation,
    approval: Option<Approval>,
    denial: Option<String>,
}

/// What the folded PROPOSE committed.
enum Proposed {
    /// The row as stored: AUTHORIZED never stays (it is STARTed or closed in the same
    /// transaction); WAITING_FOR_APPROVAL or DENIED otherwise.
    Row(Box<Invocation>),
    /// The observation point fired: the row was closed DENIED with the sweep's code.
    Halted(Halt),
}

/// What a call's first transaction committed: PROPOSE, or the REFUSE of step 5.
enum FirstCommit {
    Proposed(Proposed),
    /// Step 5 found an identical call whose outcome is unknown: REFUSE committed instead.
    Refused(CallResult),
    /// Nothing committed: the call's conversation is tainted and the action was decided as
    /// untainted (SPEC §22.2); decide again.
    Tainted,
}

/// `invoke` outcome, before classification.
enum Invoked {
    Returned(Result<ToolSuccess, ToolFailure>),
    TimedOut,
    Panicked,
}

impl<'e, S: Store> ToolPipeline<'e, S> {
    pub fn new(env: &'e Env<S>) -> Self {
        ToolPipeline { env }
    }

    /// The gate (step 6) inside a `policy decision` span that carries its verdict: the
    /// decision, the reason code and the policy version (exported as OpenTelemetry attributes
    /// when the binary exports, issue 31). The span observes; the decision is `evaluate`'s.
    ///
    /// With a shadow candidate (`shadow` of [`Rulesets`]) the candidate decides
    /// the same action too; what it decides never reaches the returned decision, only the
    /// `policy.shadow.diff` event PROPOSE appends when the two differ.
    fn decide(
        &self,
        action: &crate::action::ProposedAction,
        rulesets: &Rulesets,
    ) -> (crate::action::PolicyDecision, Option<ProcessEvent>) {
        let span = tracing::info_span!(
            "policy",
            "otel.name" = "policy decision",
            "airlock.policy.decision" = tracing::field::Empty,
            "airlock.policy.reason_code" = tracing::field::Empty,
            "airlock.policy.version" = tracing::field::Empty,
        );
        let (decision, difference) =
            span.in_scope(|| decide_beside(action, &rulesets.live, rulesets.shadow.as_deref()));
        span.record("airlock.policy.decision", decision.decision.as_str());
        span.record("airlock.policy.reason_code", decision.reason_code.as_str());
        span.record("airlock.policy.version", decision.policy_version.as_str());
        let shadow = difference.map(|difference| super::shadow::diff_event(action, difference));
        (decision, shadow)
    }

    /// Runs one call to its end (or its park), inside a `call` tracing span.
    pub async fn run_call(&self, site: &CallSite<'_>) -> Result<CallEnd, Halt> {
        let span = tracing::info_span!(
            "call",
            step = site.step,
            call_id = %site.call.call.call_id,
            tool = %site.call.call.tool,
            "airlock.invocation.status" = tracing::field::Empty,
            "airlock.policy.reason_code" = tracing::field::Empty,
            "airlock.approval.id" = tracing::field::Empty,
        );
        let end = tracing::Instrument::instrument(
            async {
                match self.begin_call(site).await {
                    Begun::Ended(end) => end,
                    Begun::Started { row, tool } => self.finish_started(site, *row, &tool).await,
                }
            },
            span.clone(),
        )
        .await;
        // What the call came to, on its span (as the gateway's request spans spell it).
        match &end {
            Ok(CallEnd::Done(result)) => {
                span.record(
                    "airlock.invocation.status",
                    result.status.as_str().to_ascii_uppercase().as_str(),
                );
                span.record("airlock.policy.reason_code", result.reason_code.as_str());
            }
            Ok(CallEnd::Parked { approval_id }) => {
                span.record("airlock.invocation.status", "WAITING_FOR_APPROVAL");
                span.record("airlock.approval.id", approval_id.to_string().as_str());
            }
            Err(_) => {}
        }
        end
    }

    /// Steps 1–7 of one call: up to and including its first commit (PROPOSE or REFUSE, with
    /// the step's PENDING folded in while unwritten, F1, and START folded in for an `allow`,
    /// F2), or through recovery when a row already exists. A parallel batch begins its first
    /// call alone, so no other call of the step can commit before the batch is recorded.
    pub async fn begin_call(&self, site: &CallSite<'_>) -> Begun {
        match self.begin_inner(site).await {
            Ok(begun) => begun,
            Err(halt) => Begun::Ended(Err(halt)),
        }
    }

    /// Steps 10–12 for a call whose START committed in [`ToolPipeline::begin_call`].
    pub async fn finish_started(
        &self,
        site: &CallSite<'_>,
        row: Invocation,
        tool: &std::sync::Arc<dyn Tool>,
    ) -> Result<CallEnd, Halt> {
        self.invoke_and_finish(site, row, tool, false).await
    }

    async fn begin_inner(&self, site: &CallSite<'_>) -> Result<Begun, Halt> {
        // Step 1: replay lookup, unless the call's step is unrecorded (see `nothing_to_replay`).
        if !nothing_to_replay(site)
            && let Some(found) = self.replay_lookup(site)?
        {
            return Ok(Begun::Ended(match found {
                Replay::Row(row) => self.recover(site, row).await,
                Replay::Refused(result) => Ok(CallEnd::Done(result)),
            }));
        }
        let call = &site.call.call;
        let raw_hash = arguments_hash(&call.arguments);
        // Step 2: resolve the pinned tool.
        let tool = site
            .call
            .pinned_version
            .as_deref()
            .and_then(|v| self.env.tools.resolve(&call.tool, Some(v)));
        let Some(tool) = tool else {
            return Ok(Begun::Ended(
                self.refuse(
                    site,
                    OutcomeStatus::Denied,
                    codes::UNKNOWN_TOOL,
                    None,
                    raw_hash,
                )
                .await,
            ));
        };
        let spec = tool.spec().clone();
        // Step 3: scopes.
        let missing = missing_scopes(&spec.required_scopes, &site.run.principal_scopes);
        if !missing.is_empty() {
            let message = missing_scopes_message(&missing);
            return Ok(Begun::Ended(
                self.refuse(
                    site,
                    OutcomeStatus::Denied,
                    codes::SCOPE_MISSING,
                    Some(message),
                    raw_hash,
                )
                .await,
            ));
        }
        // Step 4: normalize, validate, hash, key.
        let Ok(arguments) = spec.normalize_arguments(&call.arguments) else {
            return Ok(Begun::Ended(
                self.refuse(
                    site,
                    OutcomeStatus::Failed,
                    codes::ARGUMENTS_INVALID,
                    None,
                    raw_hash,
                )
                .await,
            ));
        };
        let hash = arguments_hash(&Value::Object(arguments.clone()));
        let key = idempotency_key(&IdempotencyKeyInput {
            run_id: site.run.id.as_uuid(),
            step_number: u64::from(site.step),
            call_id: &call.call_id,
            tool_name: &spec.name,
            tool_version: &spec.version.to_string(),
            effective_arguments_hash: &hash,
        });
        let prepared = Prepared {
            spec,
            arguments,
            arguments_hash: hash,
            idempotency_key: key,
        };
        // Step 5, never repeating an identical call whose outcome is unknown, is decided inside
        // PROPOSE's transaction (`propose`), so two processes cannot both pass it (§19.7).
        // Step 6: the pure gate.
        let invocation_id = InvocationId(self.env.new_uuid());
        let now = self.env.clock.now();
        let mut action = self.action(site, &prepared, invocation_id, now);
        // One reading of the policy in force serves the whole decision: the gate, the shadow
        // candidate and the approval's expiry (a reload may replace the policy meanwhile).
        let rulesets = self.env.policy.current();
        let (decision, shadow) = self.decide(&action, &rulesets);
        // Step 7: PROPOSE (with step 5 before it, and step 8 and START folded in for an
        // `allow`).
        let (mut proposed, mut folded) = self.propose(
            site,
            &prepared,
            &action,
            (decision, shadow, &rulesets.live),
            raw_hash.clone(),
            now,
        );
        if let Ok(FirstCommit::Tainted) = proposed {
            // The conversation was tainted after the gate ran (§22.2): decide again as a
            // tainted call; PROPOSE then does not look again.
            action.origin_trust = TrustLevel::ExternalUntrusted;
            action.argument_trust = argument_trust(&prepared.arguments, &BTreeMap::new());
            let (decision, shadow) = self.decide(&action, &rulesets);
            (proposed, folded) = self.propose(
                site,
                &prepared,
                &action,
                (decision, shadow, &rulesets.live),
                raw_hash,
                now,
            );
        }
        let proposed = match proposed {
            Ok(proposed) => proposed,
            Err(TxError::Conflict(_)) => {
                // A unique index rejected the insert: someone proposed this call first. Re-read.
                return Ok(Begun::Ended(match self.replay_lookup(site)? {
                    Some(Replay::Row(row)) => self.recover(site, row).await,
                    Some(Replay::Refused(result)) => Ok(CallEnd::Done(result)),
                    None => Err(Halt::Abandon),
                }));
            }
            Err(_) => return Err(Halt::Abandon),
        };
        let proposed = match proposed {
            FirstCommit::Refused(result) => {
                self.reached_folded(folded, &[CrashPoint::AfterRefuse])
                    .await;
                return Ok(Begun::Ended(Ok(CallEnd::Done(result))));
            }
            FirstCommit::Proposed(proposed) => proposed,
            FirstCommit::Tainted => return Err(Halt::Abandon),
        };
        match proposed {
            Proposed::Halted(halt) => {
                self.reached_folded(folded, &[CrashPoint::AfterPropose])
                    .await;
                Err(halt)
            }
            Proposed::Row(row) if row.status == InvocationStatus::Running => {
                self.reached_folded(folded, &[CrashPoint::AfterPropose, CrashPoint::AfterStart])
                    .await;
                Ok(Begun::Started { row, tool })
            }
            Proposed::Row(row) => {
                self.reached_folded(folded, &[CrashPoint::AfterPropose])
                    .await;
                Ok(Begun::Ended(self.after_decision(site, *row, &tool).await))
            }
        }
    }

    /// Test support: what an earlier build's PROPOSE committed for this call, without the
    /// folds of §17.1 (no PENDING, no START): the row with its decision and its events. The
    /// recovery tests seed the states only older data can hold (an AUTHORIZED row, a PENDING
    /// without rows) with it. Panics on a call steps 2–4 would refuse.
    #[cfg(any(test, feature = "testing"))]
    pub fn propose_as_earlier_build(&self, site: &CallSite<'_>) -> Invocation {
        let call = &site.call.call;
        let tool = site
            .call
            .pinned_version
            .as_deref()
            .and_then(|v| self.env.tools.resolve(&call.tool, Some(v)))
            .expect("the pinned tool resolves");
        let spec = tool.spec().clone();
        let arguments = spec
            .normalize_arguments(&call.arguments)
            .expect("valid arguments");
        let hash = arguments_hash(&Value::Object(arguments.clone()));
        let key = idempotency_key(&IdempotencyKeyInput {
            run_id: site.run.id.as_uuid(),
            step_number: u64::from(site.step),
            call_id: &call.call_id,
            tool_name: &spec.name,
            tool_version: &spec.version.to_string(),
            effective_arguments_hash: &hash,
        });
        let prepared = Prepared {
            spec,
            arguments,
            arguments_hash: hash,
            idempotency_key: key,
        };
        let now = self.env.clock.now();
        let action = self.action(site, &prepared, InvocationId(self.env.new_uuid()), now);
        let rulesets = self.env.policy.current();
        let (decision, _) = self.decide(&action, &rulesets);
        let Proposal { row, approval, .. } =
            self.proposal(site, &prepared, &action, (decision, &rulesets.live), now);
        let actor = worker_actor(site);
        self.env
            .transact(|tx| {
                tx.guard_lease(site.lease)?;
                tx.insert_invocation(&row)?;
                if let Some(approval) = &approval {
                    tx.insert_approval(approval)?;
                }
                let mut events = vec![(
                    EventType::ToolCallProposed,
                    json!({"invocation_id": row.id.to_string(), "name": row.tool_name, "call_id": row.call_id, "step_number": row.step_number}),
                    keys::proposed(row.id),
                )];
                if row.status == InvocationStatus::Authorized {
                    events.push((
                        EventType::ToolCallAuthorized,
                        json!({"invocation_id": row.id.to_string(), "name": row.tool_name, "call_id": row.call_id}),
                        keys::authorized(row.id),
                    ));
                }
                for (event_type, payload, key) in events {
                    tx.append_event(&NewEvent {
                        session_id: row.session_id,
                        run_id: Some(row.run_id),
                        event_type,
                        actor: actor.clone(),
                        payload,
                        derivation_key: Some(key),
                        created_at: now,
                    })?;
                }
                Ok(())
            })
            .expect("the earlier build's PROPOSE commits");
        row
    }

    /// Runs one of the call's transactions and settles the step's staged writes (§17.1): a
    /// commit promotes them, a rollback forgets them.
    fn transact_call<R>(
        &self,
        site: &CallSite<'_>,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> (Result<R, TxError>, Folded) {
        let result = self.env.transact(f);
        let folded = site
            .ledger
            .map_or_else(Folded::default, |ledger| ledger.settle(result.is_ok()));
        (result, folded)
    }

    /// Reaches the crash points of everything one commit carried, in transaction order: the
    /// step's PENDING, the call's own points, then the step's BATCH (§2.2: a point follows its
    /// commit; a folded commit is all of them at once).
    async fn reached_folded(&self, folded: Folded, own: &[CrashPoint]) {
        if folded.pending {
            self.env.reached(CrashPoint::AfterPending).await;
        }
        for point in own {
            self.env.reached(*point).await;
        }
        if folded.batch {
            self.env.reached(CrashPoint::AfterBatch).await;
        }
        if folded.run_final {
            self.env.reached(CrashPoint::AfterFinal).await;
        }
    }

    /// Continues from a freshly proposed or revalidated row.
    async fn after_decision(
        &self,
        site: &CallSite<'_>,
        row: Invocation,
        tool: &std::sync::Arc<dyn Tool>,
    ) -> Result<CallEnd, Halt> {
        match row.status {
            InvocationStatus::Authorized => self.start_and_invoke(site, row, tool).await,
            InvocationStatus::WaitingForApproval => match row.suspended_approval {
                Some(approval_id) => Ok(CallEnd::Parked { approval_id }),
                None => Err(Halt::Fail(FailureReason::InternalError)),
            },
            _ => Ok(CallEnd::Done(result_of_row(&row)?)),
        }
    }

    /// Step 1: the row or refusal an earlier attempt of this call committed, read under the
    /// lease (skipped where [`nothing_to_replay`] holds).
    fn replay_lookup(&self, site: &CallSite<'_>) -> Result<Option<Replay>, Halt> {
        let call_id = &site.call.call.call_id;
        let found = self.env.read(|tx| {
            tx.guard_lease(site.lease)?;
            if let Some(row) = tx.invocation_by_call(site.run.id, site.step, call_id)? {
                return Ok(Some(Found::Row(Box::new(row))));
            }
            let key = keys::refused(site.run.id, site.step, call_id);
            Ok(tx
                .event_by_key(&key)?
                .map(|event| Found::RefusedEvent(event.payload, key)))
        })?;
        Ok(match found {
            None => None,
            Some(Found::Row(row)) => Some(Replay::Row(row)),
            Some(Found::RefusedEvent(payload, key)) => {
                let item = payload["result_item"]
                    .as_str()
                    .and_then(ResultItem::parse)
                    .ok_or(Halt::Fail(FailureReason::InternalError))?;
                let reason_code = payload["reason_code"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let status = if reason_code == codes::ARGUMENTS_INVALID {
                    OutcomeStatus::Failed
                } else {
                    OutcomeStatus::Denied
                };
                Some(Replay::Refused(CallResult {
                    reference: ResultRef::Refusal {
                        derivation_key: key,
                    },
                    item,
                    status,
                    reason_code,
                    arguments_hash: arguments_hash(&site.call.call.arguments),
                }))
            }
        })
    }

    /// REFUSE: no row; one event carrying the result item (SPEC §9.2).
    async fn refuse(
        &self,
        site: &CallSite<'_>,
        status: OutcomeStatus,
        reason_code: &str,
        message: Option<String>,
        raw_hash: String,
    ) -> Result<CallEnd, Halt> {
        let now = self.env.clock.now();
        let (committed, folded) = self.transact_call(site, |tx| {
            tx.guard_lease(site.lease)?;
            if let Some(ledger) = site.ledger {
                ledger.stage_opening(tx, now)?;
            }
            refusal_writes(tx, site, status, reason_code, message, raw_hash, now)
        });
        let result = committed?;
        self.reached_folded(folded, &[CrashPoint::AfterRefuse])
            .await;
        Ok(CallEnd::Done(result))
    }

    /// The engine's view of the call (SPEC §4.1).
    fn action(
        &self,
        site: &CallSite<'_>,
        prepared: &Prepared,
        id: InvocationId,
        now: Timestamp,
    ) -> ProposedAction {
        let spec = &prepared.spec;
        ProposedAction {
            kind: ActionKind::ToolCall,
            action_id: id.as_uuid(),
            tenant_id: site.run.tenant_id.clone(),
            session_id: site.run.session_id.as_uuid(),
            run_id: site.run.id.as_uuid(),
            step_number: u64::from(site.step),
            name: spec.name.clone(),
            version: Some(spec.version.to_string()),
            summary: format!("Run {} with validated arguments.", spec.name),
            side_effect: spec.side_effect,
            risk: spec.risk,
            idempotency: spec.idempotency,
            required_scopes: spec
                .required_scopes
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
            arguments: prepared.arguments.clone(),
            normalized_arguments_hash: prepared.arguments_hash.clone(),
            argument_trust: argument_trust(&prepared.arguments, &site.call.call.argument_trust),
            origin_trust: site.origin_trust,
            target: Target::for_kind(spec.target.clone()),
            evaluated_at: now,
        }
    }

    /// The row PROPOSE inserts, already carrying its decision (SPEC §9.1): AUTHORIZED for an
    /// `allow`, WAITING_FOR_APPROVAL with its approval, or DENIED with its outcome.
    fn proposal(
        &self,
        site: &CallSite<'_>,
        prepared: &Prepared,
        action: &ProposedAction,
        (decision, ruleset): (PolicyDecision, &Ruleset),
        now: Timestamp,
    ) -> Proposal {
        let spec = &prepared.spec;
        let call = &site.call.call;
        let id = InvocationId(action.action_id);
        let mut row = Invocation {
            id,
            run_id: site.run.id,
            session_id: site.run.session_id,
            tenant_id: site.run.tenant_id.clone(),
            step_number: site.step,
            call_id: call.call_id.clone(),
            tool_name: spec.name.clone(),
            tool_version: spec.version.to_string(),
            side_effect: spec.side_effect,
            risk: spec.risk,
            idempotency_class: spec.idempotency,
            required_scopes: action.required_scopes.clone(),
            raw_arguments: call.arguments.clone(),
            arguments: to_canonical_string(&Value::Object(prepared.arguments.clone())),
            normalized_arguments_hash: prepared.arguments_hash.clone(),
            effective_arguments_hash: prepared.arguments_hash.clone(),
            idempotency_key: prepared.idempotency_key.clone(),
            argument_trust: action.argument_trust.clone(),
            origin_trust: action.origin_trust,
            target_kind: Some(action.target.kind.clone()),
            parallel_group: site.parallel_group,
            created_at: now,
            status: InvocationStatus::Proposed,
            policy_decision: None,
            effect_sent_at: None,
            suspended_approval: None,
            structured_result: None,
            output_bytes: None,
            outcome: None,
            result_item: None,
            outcome_status: None,
            reason_code: None,
            updated_at: now,
        };
        let mut approval = None;
        let mut denial = None;
        match decision.decision {
            PolicyDecisionType::Allow => {
                authorize(&mut row, decision.clone(), Authority::PolicyAllowed, now)
            }
            PolicyDecisionType::RequireApproval => {
                let approval_id = ApprovalId(self.env.new_uuid());
                row.status = InvocationStatus::WaitingForApproval;
                row.policy_decision = Some(decision.clone());
                row.suspended_approval = Some(approval_id);
                approval = Some(self.new_approval(
                    ruleset,
                    site,
                    &row,
                    prepared,
                    action,
                    &decision,
                    approval_id,
                    now,
                ));
            }
            // `allow_with_modifications` cannot be loaded in v1; fail closed if it ever appears.
            PolicyDecisionType::Deny | PolicyDecisionType::AllowWithModifications => {
                let outcome =
                    Outcome::new(OutcomeStatus::Denied, &spec.name, &decision.reason_code);
                let item =
                    ResultItem::from_outcome(&call.call_id, &outcome, TrustLevel::InternalTool);
                row.policy_decision = Some(decision.clone());
                row.close(outcome, item.to_canonical(), now);
                denial = Some(decision.reason_code.clone());
            }
        }
        Proposal {
            row,
            approval,
            denial,
        }
    }

    /// PROPOSE: the row is inserted already carrying its decision (SPEC §9.1). First, in the
    /// same transaction, step 5: an identical call whose outcome is unknown (`repeat`) makes
    /// this a REFUSE instead, so no second transaction can pass the check between it and the
    /// START (§19.7). For an `allow` the same transaction reads observation point 3 and the
    /// deadline (step 8) and then STARTs the call (§17.1 F2); if the observation fires the row
    /// is closed DENIED with the code the terminal sweep would give it, and the caller halts. A
    /// denial closes the call here, so the step's BATCH folds in when it is the last call (F4).
    fn propose(
        &self,
        site: &CallSite<'_>,
        prepared: &Prepared,
        action: &ProposedAction,
        (decision, shadow, ruleset): (PolicyDecision, Option<ProcessEvent>, &Ruleset),
        raw_hash: String,
        now: Timestamp,
    ) -> (Result<FirstCommit, TxError>, Folded) {
        let Proposal {
            row,
            approval,
            denial,
        } = self.proposal(site, prepared, action, (decision, ruleset), now);
        let id = row.id;
        let actor = worker_actor(site);
        let ledger = site.ledger;
        #[cfg(feature = "mutants")]
        let ledger = crate::testing::mutants::ledger_at_propose(ledger, &row);
        let reads_conversation = action.origin_trust != TrustLevel::ExternalUntrusted
            && site.run.planner_kind == crate::conversation::MCP_PLANNER_KIND;
        self.transact_call(site, |tx| {
            tx.guard_lease(site.lease)?;
            // §22.2: a call run reads its conversation's taint in its first transaction.
            #[cfg(feature = "mutants")]
            let reads_conversation =
                reads_conversation && !crate::testing::mutants::stale_conversation_taint();
            if reads_conversation && crate::conversation::tainted_in_tx(tx, site.run.session_id)? {
                return Ok(FirstCommit::Tainted);
            }
            if let Some(ledger) = ledger {
                ledger.stage_opening(tx, now)?;
            }
            if let Some(repeat) = repeat_in_tx(tx, site, &row)? {
                return refusal_writes(
                    tx,
                    site,
                    OutcomeStatus::Denied,
                    repeat.reason_code(),
                    Some(repeat.message()),
                    raw_hash,
                    now,
                )
                .map(FirstCommit::Refused);
            }
            tx.insert_invocation(&row)?;
            if let Some(approval) = &approval {
                tx.insert_approval(approval)?;
            }
            // Shadow mode: the candidate's difference commits with the call it is about.
            if let Some(shadow) = &shadow {
                tx.append_process_event(shadow)?;
            }
            let event = |event_type, payload, key| NewEvent {
                session_id: row.session_id,
                run_id: Some(row.run_id),
                event_type,
                actor: actor.clone(),
                payload,
                derivation_key: Some(key),
                created_at: now,
            };
            tx.append_event(&event(
                EventType::ToolCallProposed,
                json!({"invocation_id": id.to_string(), "name": row.tool_name, "call_id": row.call_id, "step_number": row.step_number}),
                keys::proposed(id),
            ))?;
            match (&row.status, &denial) {
                (InvocationStatus::Authorized, _) => {
                    tx.append_event(&event(
                        EventType::ToolCallAuthorized,
                        json!({"invocation_id": id.to_string(), "name": row.tool_name, "call_id": row.call_id}),
                        keys::authorized(id),
                    ))?;
                    let current = tx.run(site.run.id)?.ok_or(TxError::NotFound)?;
                    let proposed = self.start_or_halt(tx, site, &current, &row, &actor, now)?;
                    #[cfg(feature = "mutants")]
                    if let (true, Some(ledger), Proposed::Row(started)) = (
                        crate::testing::mutants::batch_before_last_finish(),
                        site.ledger,
                        &proposed,
                    ) {
                        ledger.stage_closing(tx, &provisional_result(started), now)?;
                    }
                    Ok(FirstCommit::Proposed(proposed))
                }
                (InvocationStatus::Denied, Some(reason_code)) => {
                    tx.append_event(&event(
                        EventType::ToolCallDenied,
                        json!({
                            "invocation_id": id.to_string(),
                            "name": row.tool_name,
                            "call_id": row.call_id,
                            "reason_code": reason_code,
                            "result_item": row.result_item,
                        }),
                        keys::result(id),
                    ))?;
                    stage_closing_row(tx, site, &row, now)?;
                    Ok(FirstCommit::Proposed(Proposed::Row(Box::new(row.clone()))))
                }
                _ => Ok(FirstCommit::Proposed(Proposed::Row(Box::new(row.clone())))),
            }
        })
    }

    /// Inside a transaction that has just authorized `row`: step 8 (sequential calls only),
    /// then START, or the sweep's closure if the observation fires (§17.1 F2, F3).
    fn start_or_halt(
        &self,
        tx: &mut dyn StoreTx,
        site: &CallSite<'_>,
        current: &Run,
        row: &Invocation,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<Proposed, TxError> {
        let observed = observe_in_tx(site, current, now)?;
        #[cfg(feature = "mutants")]
        let observed = if crate::testing::mutants::start_before_observation() {
            Observed::Clear
        } else {
            observed
        };
        match observed {
            Observed::Clear => Ok(Proposed::Row(Box::new(start_writes(
                tx, current, row, actor, now,
            )?))),
            Observed::Cancel => {
                close_with_code(
                    tx,
                    row,
                    OutcomeStatus::Denied,
                    codes::RUN_CANCELLED,
                    actor,
                    now,
                )?;
                Ok(Proposed::Halted(Halt::Cancel))
            }
            Observed::Deadline => {
                close_with_code(
                    tx,
                    row,
                    OutcomeStatus::Denied,
                    codes::RUN_TERMINATED,
                    actor,
                    now,
                )?;
                Ok(Proposed::Halted(Halt::Fail(
                    FailureReason::DeadlineExceeded,
                )))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn new_approval(
        &self,
        ruleset: &Ruleset,
        site: &CallSite<'_>,
        row: &Invocation,
        prepared: &Prepared,
        action: &ProposedAction,
        decision: &PolicyDecision,
        id: ApprovalId,
        now: Timestamp,
    ) -> Approval {
        let seconds = ruleset.profile.approval_expiry.seconds(prepared.spec.risk);
        let mut expires_at = now.saturating_add_seconds(i64::try_from(seconds).unwrap_or(i64::MAX));
        if let Some(deadline) = site.run.deadline_at {
            expires_at = expires_at.min(deadline);
        }
        Approval {
            id,
            tenant_id: row.tenant_id.clone(),
            principal_id: site.run.principal_id.clone(),
            session_id: row.session_id,
            run_id: row.run_id,
            action_kind: ActionKind::ToolCall,
            action_id: row.id,
            tool_invocation_id: row.id,
            tool_name: row.tool_name.clone(),
            tool_version: row.tool_version.clone(),
            action_summary: action.summary.clone(),
            arguments: redact(&Value::Object(prepared.arguments.clone())),
            normalized_arguments_hash: row.normalized_arguments_hash.clone(),
            effective_arguments_hash: row.effective_arguments_hash.clone(),
            required_scopes: row.required_scopes.clone(),
            risk: row.risk,
            policy_reason: decision.reason_code.clone(),
            policy_decision: decision.decision,
            policy_version: decision.policy_version.clone(),
            revalidated_policy_version: None,
            status: ApprovalStatus::Pending,
            resolution: None,
            resolution_reason: None,
            expires_at,
            created_at: now,
            requested_at: None,
            resolved_at: None,
            resolved_by: None,
        }
    }

    /// Step 8: observation point 3 and the deadline, for sequential calls only (a parallel
    /// batch checked both once before it started, §11).
    fn observe_before_start(&self, site: &CallSite<'_>) -> Result<(), Halt> {
        if !site.sequential {
            return Ok(());
        }
        observe(site.token)?;
        check_deadline(site.run, self.env.clock.now())
    }

    /// Steps 8–12 for an AUTHORIZED row left by recovery (an earlier build, or a path that
    /// does not fold): START in its own transaction, which reads step 8 inside it as the folded
    /// one does.
    async fn start_and_invoke(
        &self,
        site: &CallSite<'_>,
        row: Invocation,
        tool: &std::sync::Arc<dyn Tool>,
    ) -> Result<CallEnd, Halt> {
        self.observe_before_start(site)?;
        // Step 9: START, the watermark before any effect (G4, §16 #11).
        let now = self.env.clock.now();
        let actor = worker_actor(site);
        let (started, _) = self.transact_call(site, |tx| {
            tx.guard_lease(site.lease)?;
            let current = tx.run(site.run.id)?.ok_or(TxError::NotFound)?;
            self.start_or_halt(tx, site, &current, &row, &actor, now)
        });
        let started = started?;
        self.env.reached(CrashPoint::AfterStart).await;
        match started {
            Proposed::Row(started) => self.invoke_and_finish(site, *started, tool, false).await,
            Proposed::Halted(halt) => Err(halt),
        }
    }

    /// Steps 10–12: invoke with the timeout, classify, FINISH.
    async fn invoke_and_finish(
        &self,
        site: &CallSite<'_>,
        row: Invocation,
        tool: &std::sync::Arc<dyn Tool>,
        replay: bool,
    ) -> Result<CallEnd, Halt> {
        let spec = tool.spec();
        let arguments: JsonMap = serde_json::from_str(&row.arguments)
            .map_err(|_| Halt::Fail(FailureReason::InternalError))?;
        self.lease_still_held(site)?;
        // No await between the check above and the body's first poll: `invoke` runs straight
        // into it.
        let invoked = self
            .invoke(site, &row, tool.as_ref(), &arguments, replay)
            .await;
        self.env.reached(CrashPoint::AfterInvoke).await;
        let (outcome, item, structured) = classify(&row, spec, invoked);
        let now = self.env.clock.now();
        let (closed, folded) = self.transact_call(site, |tx| {
            tx.guard_lease(site.lease)?;
            let mut with_result = row.clone();
            if let Some(structured) = &structured {
                with_result.output_bytes = Some(to_canonical_string(structured).len() as u64);
                with_result.structured_result = Some(structured.clone());
            }
            // FINISH: the structured result and the outcome in one guarded update (RUNNING →),
            // with the step's BATCH when this is its last sequential call (F4).
            let closed = close_invocation(
                tx,
                &with_result,
                outcome.clone(),
                &item,
                &worker_actor(site),
                now,
            )?;
            stage_closing_row(tx, site, &closed, now)?;
            Ok(closed)
        });
        let closed = closed?;
        self.reached_folded(folded, &[CrashPoint::AfterFinish])
            .await;
        Ok(CallEnd::Done(result_of_row(&closed)?))
    }

    /// Before a body is entered (SPEC §8.2, §16 #13): a worker paused for longer than its
    /// lease may wake here, after another worker reclaimed the run and replayed the call (a
    /// conditionally idempotent key sent twice without the replay flag) or settled it. While a
    /// commit of this execution holds the lease past now, nothing is read; otherwise the lease
    /// guard is read, and a lost lease fences the execution instead of sending anything.
    fn lease_still_held(&self, site: &CallSite<'_>) -> Result<(), Halt> {
        if !site.token.lease_may_have_run_out(self.env.clock.now()) {
            return Ok(());
        }
        match self.env.read(|tx| tx.guard_lease(site.lease)) {
            Ok(()) => Ok(()),
            Err(TxError::Fenced) => {
                site.token.cancel(CancelReason::Fenced);
                Err(Halt::Abandon)
            }
            Err(_) => Err(Halt::Abandon),
        }
    }

    async fn invoke(
        &self,
        site: &CallSite<'_>,
        row: &Invocation,
        tool: &dyn Tool,
        arguments: &JsonMap,
        replay: bool,
    ) -> Invoked {
        let workspace = if matches!(
            row.side_effect,
            SideEffectClass::WorkspaceRead | SideEffectClass::WorkspaceWrite
        ) {
            match self
                .env
                .workspaces
                .as_ref()
                .map(|f| f.for_run(&row.tenant_id, row.run_id))
            {
                Some(Ok(workspace)) => Some(workspace),
                // No workspace could be opened: nothing ran, so the call simply failed.
                _ => {
                    return Invoked::Returned(Err(ToolFailure::new(
                        ToolFailureKind::Internal,
                        codes::INTERNAL_ERROR,
                        "no workspace",
                    )));
                }
            }
        } else {
            None
        };
        let ctx = ToolContext {
            tenant_id: &row.tenant_id,
            run_id: row.run_id,
            session_id: row.session_id,
            invocation_id: row.id,
            call_id: &row.call_id,
            step_number: row.step_number,
            idempotency_key: &row.idempotency_key,
            replay,
            workspace,
            clock: self.env.clock.as_ref(),
        };
        let now = self.env.clock.now();
        let spec_timeout = now.saturating_add_micros(
            i64::try_from(tool.spec().timeout_ms)
                .unwrap_or(i64::MAX / 1000)
                .saturating_mul(1000),
        );
        let until = match site.run.deadline_at {
            Some(deadline) => spec_timeout.min(deadline),
            None => spec_timeout,
        };
        let body = AssertUnwindSafe(tool.invoke(&ctx, arguments)).catch_unwind();
        let timer = self.env.clock.sleep_until(until);
        match select(Box::pin(body), timer).await {
            Either::Left((Ok(result), _)) => Invoked::Returned(result),
            Either::Left((Err(_panic), _)) => Invoked::Panicked,
            Either::Right(((), _)) => Invoked::TimedOut,
        }
    }

    /// A row found at step 1: the recovery table (SPEC §9.4).
    async fn recover(&self, site: &CallSite<'_>, row: Box<Invocation>) -> Result<CallEnd, Halt> {
        let row = *row;
        let action = recovery_action(
            row.status,
            row.idempotency_class,
            row.effect_sent_at.is_some(),
        );
        #[cfg(feature = "mutants")]
        let action = crate::testing::mutants::task_replayed_after_crash(action, || {
            self.env
                .read(|tx| tx.call_task_of_run(site.run.id))
                .ok()
                .flatten()
                .is_some()
        });
        match action {
            RecoveryAction::ReturnOutcome => Ok(CallEnd::Done(result_of_row(&row)?)),
            RecoveryAction::ResumeAuthorization if row.status == InvocationStatus::Proposed => {
                Err(Halt::Fail(FailureReason::InternalError))
            }
            RecoveryAction::ResumeAuthorization => match self.pinned_tool(&row) {
                Some(tool) => self.start_and_invoke(site, row, &tool).await,
                // "go to step 8" (§9.4) holds for a row whose tool is gone too: a cancel or a
                // passed deadline ends the run before anything is written for the call.
                None => {
                    self.observe_before_start(site)?;
                    self.fail_unstartable(site, &row).await
                }
            },
            RecoveryAction::ResumeApproval => self.resume_approval(site, row).await,
            action @ (RecoveryAction::Reexecute | RecoveryAction::ReplayIdempotencyKey) => {
                match self.pinned_tool(&row) {
                    Some(tool) => {
                        self.invoke_and_finish(
                            site,
                            row,
                            &tool,
                            action == RecoveryAction::ReplayIdempotencyKey,
                        )
                        .await
                    }
                    None if row.effect_sent_at.is_some() => {
                        self.recover_close(
                            site,
                            &row,
                            OutcomeStatus::Uncertain,
                            codes::OUTCOME_UNKNOWN,
                        )
                        .await
                    }
                    None => {
                        self.recover_close(site, &row, OutcomeStatus::Failed, codes::INTERNAL_ERROR)
                            .await
                    }
                }
            }
            RecoveryAction::MarkUncertain => {
                self.recover_close(site, &row, OutcomeStatus::Uncertain, codes::OUTCOME_UNKNOWN)
                    .await
            }
        }
    }

    /// An AUTHORIZED row whose pinned tool is gone. §9.1 has no AUTHORIZED → FAILED edge, so
    /// one RECOVER transaction takes the row through RUNNING (START without a watermark: the body
    /// never runs) to FAILED `tool.internal_error`, counting the call like any START.
    async fn fail_unstartable(
        &self,
        site: &CallSite<'_>,
        row: &Invocation,
    ) -> Result<CallEnd, Halt> {
        let now = self.env.clock.now();
        let actor = worker_actor(site);
        let (closed, folded) = self.transact_call(site, |tx| {
            tx.guard_lease(site.lease)?;
            let current = tx.run(site.run.id)?.ok_or(TxError::NotFound)?;
            let mut next_run = current.clone();
            next_run.tool_call_count = next_run.tool_call_count.saturating_add(1);
            update_fields(tx, &current, next_run, now)?;
            let mut running = row.clone();
            running.status = InvocationStatus::Running;
            running.updated_at = now;
            tx.update_invocation(InvocationStatus::Authorized, &running)?;
            tx.append_event(&NewEvent {
                session_id: running.session_id,
                run_id: Some(running.run_id),
                event_type: EventType::ToolCallStarted,
                actor: actor.clone(),
                payload: json!({
                    "invocation_id": running.id.to_string(),
                    "name": running.tool_name,
                    "call_id": running.call_id,
                    "effect_sent_at": Value::Null,
                }),
                derivation_key: Some(keys::started(running.id)),
                created_at: now,
            })?;
            let closed = close_with_code(
                tx,
                &running,
                OutcomeStatus::Failed,
                codes::INTERNAL_ERROR,
                &actor,
                now,
            )?;
            stage_closing_row(tx, site, &closed, now)?;
            Ok(closed)
        });
        let closed = closed?;
        self.reached_folded(folded, &[CrashPoint::AfterRecover])
            .await;
        Ok(CallEnd::Done(result_of_row(&closed)?))
    }

    fn pinned_tool(&self, row: &Invocation) -> Option<std::sync::Arc<dyn Tool>> {
        self.env
            .tools
            .resolve(&row.tool_name, Some(&row.tool_version))
    }

    /// RECOVER: closes a row without invoking (never re-runs a watermarked non-idempotent call).
    async fn recover_close(
        &self,
        site: &CallSite<'_>,
        row: &Invocation,
        status: OutcomeStatus,
        code: &str,
    ) -> Result<CallEnd, Halt> {
        let now = self.env.clock.now();
        let (closed, folded) = self.transact_call(site, |tx| {
            tx.guard_lease(site.lease)?;
            let closed = close_with_code(tx, row, status, code, &worker_actor(site), now)?;
            stage_closing_row(tx, site, &closed, now)?;
            Ok(closed)
        });
        let closed = closed?;
        self.reached_folded(folded, &[CrashPoint::AfterRecover])
            .await;
        Ok(CallEnd::Done(result_of_row(&closed)?))
    }

    /// RESUME_APPROVAL with the existing approval (SPEC §10.3). When revalidation authorizes,
    /// the same REVALIDATE transaction reads step 8 and STARTs the call (§17.1 F3); a denial
    /// closes the call there, with the step's BATCH when it is the last call (F4).
    async fn resume_approval(&self, site: &CallSite<'_>, row: Invocation) -> Result<CallEnd, Halt> {
        let approval = self
            .env
            .read(|tx| {
                tx.guard_lease(site.lease)?;
                tx.approval_by_action(row.id)
            })?
            .ok_or(Halt::Fail(FailureReason::InternalError))?;
        let now = self.env.clock.now();
        let actor = worker_actor(site);
        let closing_code = match approval.status {
            ApprovalStatus::Pending => {
                return Ok(CallEnd::Parked {
                    approval_id: approval.id,
                });
            }
            ApprovalStatus::Denied => codes::APPROVAL_DENIED,
            ApprovalStatus::Expired => codes::APPROVAL_EXPIRED,
            ApprovalStatus::Cancelled => codes::APPROVAL_CANCELLED,
            ApprovalStatus::Approved => {
                // The version stamped is the one that revalidated: one reading of the policy.
                let rulesets = self.env.policy.current();
                let verdict = self.revalidation(site, &row, &approval, now, &rulesets);
                #[cfg(feature = "mutants")]
                let verdict = crate::testing::mutants::approve_without_revalidation(verdict, &row);
                let ruleset_version = rulesets.live.version.as_str().to_owned();
                // START folds in only when the pinned tool can run; otherwise the row stays
                // AUTHORIZED and recovery closes it as unstartable.
                let tool = self.pinned_tool(&row);
                let (next, folded) = self.transact_call(site, |tx| {
                    tx.guard_lease(site.lease)?;
                    let mut stamped = approval.clone();
                    stamped.revalidated_policy_version = Some(ruleset_version.clone());
                    tx.update_approval(ApprovalStatus::Approved, &stamped)?;
                    match &verdict {
                        Revalidation::Authorized(decision) => {
                            let mut next = row.clone();
                            authorize(&mut next, decision.clone(), Authority::ApprovedAndRevalidated, now);
                            tx.update_invocation(InvocationStatus::WaitingForApproval, &next)?;
                            tx.append_event(&NewEvent {
                                session_id: next.session_id,
                                run_id: Some(next.run_id),
                                event_type: EventType::ToolCallAuthorized,
                                actor: actor.clone(),
                                payload: json!({"invocation_id": next.id.to_string(), "name": next.tool_name, "call_id": next.call_id}),
                                derivation_key: Some(keys::authorized(next.id)),
                                created_at: now,
                            })?;
                            if tool.is_none() {
                                return Ok(Proposed::Row(Box::new(next)));
                            }
                            let current = tx.run(site.run.id)?.ok_or(TxError::NotFound)?;
                            let started = self.start_or_halt(tx, site, &current, &next, &actor, now)?;
                            #[cfg(feature = "mutants")]
                            if let Proposed::Row(_) = &started {
                                crate::testing::mutants::uncount_revalidated_start(tx, site.run.id, now)?;
                            }
                            Ok(started)
                        }
                        Revalidation::Denied { reason_code } => {
                            tx.append_event(&NewEvent {
                                session_id: row.session_id,
                                run_id: Some(row.run_id),
                                event_type: EventType::ApprovalInvalidated,
                                actor: actor.clone(),
                                payload: json!({
                                    "approval_id": approval.id.to_string(),
                                    "invocation_id": row.id.to_string(),
                                    "reason_code": reason_code,
                                }),
                                derivation_key: Some(keys::approval_invalidated(approval.id)),
                                created_at: now,
                            })?;
                            let closed = close_with_code(tx, &row, OutcomeStatus::Denied, reason_code, &actor, now)?;
                            stage_closing_row(tx, site, &closed, now)?;
                            Ok(Proposed::Row(Box::new(closed)))
                        }
                    }
                });
                return match next? {
                    Proposed::Halted(halt) => {
                        self.reached_folded(folded, &[CrashPoint::AfterRevalidate])
                            .await;
                        Err(halt)
                    }
                    Proposed::Row(next) => match (next.status, tool) {
                        (InvocationStatus::Running, Some(tool)) => {
                            self.reached_folded(
                                folded,
                                &[CrashPoint::AfterRevalidate, CrashPoint::AfterStart],
                            )
                            .await;
                            self.invoke_and_finish(site, *next, &tool, false).await
                        }
                        (InvocationStatus::Authorized, _) => {
                            self.reached_folded(folded, &[CrashPoint::AfterRevalidate])
                                .await;
                            // The pinned tool is gone: §9.4's unstartable path.
                            self.observe_before_start(site)?;
                            self.fail_unstartable(site, &next).await
                        }
                        _ => {
                            self.reached_folded(folded, &[CrashPoint::AfterRevalidate])
                                .await;
                            Ok(CallEnd::Done(result_of_row(&next)?))
                        }
                    },
                };
            }
        };
        // Denied, expired or cancelled: close the call; no approval event, no revalidation stamp.
        let (closed, folded) = self.transact_call(site, |tx| {
            tx.guard_lease(site.lease)?;
            let closed =
                close_with_code(tx, &row, OutcomeStatus::Denied, closing_code, &actor, now)?;
            stage_closing_row(tx, site, &closed, now)?;
            Ok(closed)
        });
        let closed = closed?;
        self.reached_folded(folded, &[CrashPoint::AfterRevalidate])
            .await;
        Ok(CallEnd::Done(result_of_row(&closed)?))
    }

    /// Rebuilds the approved action from the invocation row and decides per the §10.3 table.
    fn revalidation(
        &self,
        site: &CallSite<'_>,
        row: &Invocation,
        approval: &Approval,
        now: Timestamp,
        rulesets: &Rulesets,
    ) -> Revalidation {
        let tool = self.pinned_tool(row);
        let spec = tool.as_ref().map(|t| t.spec().clone());
        let normalized = spec
            .as_ref()
            .and_then(|s| s.normalize_arguments(&row.raw_arguments).ok());
        let fresh_hash = normalized
            .as_ref()
            .map(|args| arguments_hash(&Value::Object(args.clone())));
        let spec_scopes: Option<Vec<String>> = spec.as_ref().map(|s| {
            s.required_scopes
                .iter()
                .map(|x| x.as_str().to_owned())
                .collect()
        });
        let identity = ActionIdentity {
            tool_registered: spec.is_some(),
            arguments_hash_unchanged: fresh_hash.as_deref()
                == Some(approval.effective_arguments_hash.as_str()),
            required_scopes_unchanged: spec_scopes.as_ref() == Some(&approval.required_scopes),
            scopes_still_held: spec.as_ref().is_some_and(|s| {
                missing_scopes(&s.required_scopes, &site.run.principal_scopes).is_empty()
            }),
        };
        let fresh = match (spec, normalized, fresh_hash) {
            (Some(spec), Some(arguments), Some(hash)) => {
                let action = ProposedAction {
                    kind: ActionKind::ToolCall,
                    action_id: row.id.as_uuid(),
                    tenant_id: row.tenant_id.clone(),
                    session_id: row.session_id.as_uuid(),
                    run_id: row.run_id.as_uuid(),
                    step_number: u64::from(row.step_number),
                    name: spec.name.clone(),
                    version: Some(spec.version.to_string()),
                    summary: format!("Run {} with validated arguments.", spec.name),
                    side_effect: spec.side_effect,
                    risk: spec.risk,
                    idempotency: spec.idempotency,
                    required_scopes: spec
                        .required_scopes
                        .iter()
                        .map(|s| s.as_str().to_owned())
                        .collect(),
                    arguments,
                    normalized_arguments_hash: hash,
                    argument_trust: row.argument_trust.clone(),
                    origin_trust: row.origin_trust,
                    target: Target::for_kind(spec.target.clone()),
                    evaluated_at: now,
                };
                Some(Fresh {
                    decision: self.decide(&action, rulesets).0,
                    risk: spec.risk,
                })
            }
            _ => None,
        };
        revalidate(
            identity,
            fresh,
            &Approved {
                policy_version: &approval.policy_version,
                policy_reason: &approval.policy_reason,
                risk: approval.risk,
            },
        )
    }
}

/// Observation point 3 and the deadline (step 8), read inside the transaction that would
/// START a sequential call: the in-process token, the run row's `cancel_requested_at` (the
/// authority, §8.5) and `deadline_at`. A parallel batch checked both once before it began
/// (§11), so its calls see `Clear`. A fenced token rolls the transaction back.
fn observe_in_tx(site: &CallSite<'_>, current: &Run, now: Timestamp) -> Result<Observed, TxError> {
    if !site.sequential {
        return Ok(Observed::Clear);
    }
    match site.token.reason() {
        Some(CancelReason::Fenced) => return Err(TxError::Fenced),
        Some(CancelReason::Requested) => return Ok(Observed::Cancel),
        None => {}
    }
    if current.cancel_requested_at.is_some() {
        return Ok(Observed::Cancel);
    }
    Ok(match check_deadline(site.run, now) {
        Ok(()) => Observed::Clear,
        Err(_) => Observed::Deadline,
    })
}

/// START's writes (step 9) inside an open transaction: `AUTHORIZED → RUNNING`, the watermark
/// when the call has a side effect, `tool_call_count + 1` and `tool.call.started`.
fn start_writes(
    tx: &mut dyn StoreTx,
    current: &Run,
    row: &Invocation,
    actor: &Actor,
    now: Timestamp,
) -> Result<Invocation, TxError> {
    let mut next_run = current.clone();
    next_run.tool_call_count = next_run.tool_call_count.saturating_add(1);
    update_fields(tx, current, next_run, now)?;
    let mut next = row.clone();
    next.status = InvocationStatus::Running;
    if next.side_effect != SideEffectClass::None {
        next.effect_sent_at = Some(now);
    }
    #[cfg(feature = "mutants")]
    if crate::testing::mutants::skip_watermark() {
        next.effect_sent_at = None;
    }
    next.updated_at = now;
    tx.update_invocation(InvocationStatus::Authorized, &next)?;
    tx.append_event(&NewEvent {
        session_id: next.session_id,
        run_id: Some(next.run_id),
        event_type: EventType::ToolCallStarted,
        actor: actor.clone(),
        payload: json!({
            "invocation_id": next.id.to_string(),
            "name": next.tool_name,
            "call_id": next.call_id,
            "effect_sent_at": next.effect_sent_at.map(|t| t.to_string()),
        }),
        derivation_key: Some(keys::started(next.id)),
        created_at: now,
    })?;
    Ok(next)
}

/// Stages the step's BATCH in the transaction that closed `row` (§17.1 F4), when this call is
/// the armed last call of a sequential batch.
fn stage_closing_row(
    tx: &mut dyn StoreTx,
    site: &CallSite<'_>,
    row: &Invocation,
    now: Timestamp,
) -> Result<(), TxError> {
    let Some(ledger) = site.ledger else {
        return Ok(());
    };
    let result = result_of_row(row).map_err(|_| {
        TxError::Backend(format!("invocation {} closed without its result", row.id))
    })?;
    ledger.stage_closing(tx, &result, now)
}

/// What step 1 found: a row to recover, or a refusal to return.
enum Replay {
    Row(Box<Invocation>),
    Refused(CallResult),
}

/// The raw lookup, before the refusal event is read back.
enum Found {
    Row(Box<Invocation>),
    RefusedEvent(Value, String),
}

/// The result of a terminal row, read back exactly as stored (§16 #16).
fn result_of_row(row: &Invocation) -> Result<CallResult, Halt> {
    let item = row
        .result_item
        .as_deref()
        .and_then(ResultItem::parse)
        .ok_or(Halt::Fail(FailureReason::InternalError))?;
    let outcome = row
        .outcome
        .as_ref()
        .ok_or(Halt::Fail(FailureReason::InternalError))?;
    Ok(CallResult {
        reference: ResultRef::Invocation {
            invocation_id: row.id,
        },
        item,
        status: outcome.status,
        reason_code: outcome.reason_code.clone(),
        arguments_hash: row.effective_arguments_hash.clone(),
    })
}

/// Per-argument trust: declared labels for the normalized top-level keys; every other key is
/// `external_untrusted` (SPEC §15).
fn argument_trust(
    arguments: &JsonMap,
    declared: &BTreeMap<String, TrustLevel>,
) -> BTreeMap<String, TrustLevel> {
    arguments
        .keys()
        .map(|k| {
            (
                k.clone(),
                declared
                    .get(k)
                    .copied()
                    .unwrap_or(TrustLevel::ExternalUntrusted),
            )
        })
        .collect()
}

/// Step 11 (SPEC §9.3): the outcome, result item and structured result of what `invoke` saw.
fn classify(
    row: &Invocation,
    spec: &ToolSpec,
    invoked: Invoked,
) -> (Outcome, ResultItem, Option<Value>) {
    let in_doubt = row.effect_in_doubt();
    let fail = |status: OutcomeStatus, code: &str| {
        let outcome = Outcome::new(status, &row.tool_name, code);
        let item = ResultItem::from_outcome(&row.call_id, &outcome, TrustLevel::InternalTool);
        (outcome, item, None)
    };
    let unknown_or = |code: &str| {
        if in_doubt {
            fail(OutcomeStatus::Uncertain, codes::OUTCOME_UNKNOWN)
        } else {
            fail(OutcomeStatus::Failed, code)
        }
    };
    match invoked {
        Invoked::TimedOut => unknown_or(codes::TIMEOUT),
        Invoked::Panicked => unknown_or(codes::INTERNAL_ERROR),
        Invoked::Returned(Ok(success)) => {
            let bytes = to_canonical_string(&success.structured).len() as u64;
            if bytes > spec.max_output_bytes {
                return unknown_or(codes::OUTPUT_INVALID);
            }
            let trust = success.trust.map_or(spec.output_trust, |claimed| {
                claimed.lower(spec.output_trust)
            });
            let outcome = Outcome::succeeded(&row.tool_name);
            let item =
                ResultItem::success(&row.call_id, &row.tool_name, trust, &success.structured);
            (outcome, item, Some(success.structured))
        }
        Invoked::Returned(Err(failure)) => match failure.kind {
            ToolFailureKind::OutcomeUnknown => {
                fail(OutcomeStatus::Uncertain, codes::OUTCOME_UNKNOWN)
            }
            ToolFailureKind::Timeout => unknown_or(codes::TIMEOUT),
            _ => {
                let code = if is_tool_reason_code(&failure.reason_code) {
                    failure.reason_code.as_str()
                } else {
                    codes::INTERNAL_ERROR
                };
                // Only table messages reach the planner; the tool's detail stays with operators.
                debug_assert!(!message_for(code).is_empty());
                fail(OutcomeStatus::Failed, code)
            }
        },
    }
}

/// `batch_before_last_finish`: a success result for a row that has only started.
#[cfg(feature = "mutants")]
fn provisional_result(row: &Invocation) -> CallResult {
    use crate::invocation::outcome::{Outcome, ResultItem};
    let outcome = Outcome::succeeded(&row.tool_name);
    CallResult {
        reference: crate::run::checkpoint::ResultRef::Invocation {
            invocation_id: row.id,
        },
        item: ResultItem::from_outcome(
            &row.call_id,
            &outcome,
            crate::vocab::TrustLevel::InternalTool,
        ),
        status: outcome.status,
        reason_code: outcome.reason_code.clone(),
        arguments_hash: row.effective_arguments_hash.clone(),
    }
}
