//! The step loop (SPEC §8.3): asks the planner, checkpoints each batch before dispatching it,
//! runs the calls through the pipeline, parks for approvals and finalizes. A driver in the
//! quinn sense: it orders transactions and port calls; the decisions live in pure functions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::join_all;
use serde_json::json;

use crate::canonical::is_valid_call_id;
use crate::env::Env;
use crate::events::{Actor, EventType, NewEvent, keys};
use crate::ids::{ApprovalId, ParallelGroupId};
use crate::invocation::outcome::ResultItem;
use crate::invocation::pipeline::{
    CallEnd, CallResult, CallSite, Halt, ToolPipeline, check_deadline, observe,
};
use crate::ports::{Planner, PlannerInput, PlannerStep, PlannerTurn, ProposedCall};
use crate::run::cancel::CancelToken;
use crate::run::checkpoint::{
    Admission, Checkpoint, CheckpointState, HistoryStep, PendingBatch, PinnedCall, ResultRef,
};
use crate::run::state::{Change, transition, update_fields};
use crate::run::{Failure, Lease, Run};
use crate::store::{Store, StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{
    ApprovalStatus, CancelReason, CheckpointTrigger, CrashPoint, FailureReason, IdempotencyClass,
    InvocationStatus, OutcomeStatus, RunStatus, SideEffectClass, TrustLevel,
};

/// Identical denials that fail a run (SPEC §8.3).
const REPEATED_DENIAL_LIMIT: u32 = 3;
/// The largest batch that may run concurrently (SPEC §11).
const MAX_PARALLEL_BATCH: usize = 8;

/// Lets the executor pause the heartbeat around PARK and FINAL. The heartbeat runs in the same
/// task, so once paused no heartbeat transaction can be in flight.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatSwitch(Arc<AtomicBool>);

impl HeartbeatSwitch {
    pub fn pause(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn resume(&self) {
        self.0.store(false, Ordering::SeqCst);
    }
    pub fn is_paused(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionEnd {
    Parked,
    Finished(RunStatus),
    /// Fenced or a failed transaction: nothing more was written; reclaim recovers the run.
    Abandoned,
}

/// How the run ends when FINAL commits.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Final {
    Completed(String),
    Failed(FailureReason),
    Cancelled,
}

/// The result of dispatching one batch.
enum Dispatched {
    Results(Vec<CallResult>),
    Park,
}

pub struct RunExecutor<'e, S: Store> {
    env: &'e Env<S>,
    worker_id: &'e str,
    heartbeat: HeartbeatSwitch,
}

impl<'e, S: Store> RunExecutor<'e, S> {
    pub fn new(env: &'e Env<S>, worker_id: &'e str, heartbeat: HeartbeatSwitch) -> Self {
        RunExecutor {
            env,
            worker_id,
            heartbeat,
        }
    }

    fn actor(&self) -> Actor {
        Actor::worker(self.worker_id)
    }

    /// Executes a claimed run until it parks, ends, or must be abandoned.
    pub async fn execute(&self, lease: &Lease, token: &CancelToken) -> ExecutionEnd {
        let read = self.env.read(|tx| {
            tx.guard_lease(lease)?;
            let run = tx.run(lease.run_id)?.ok_or(TxError::NotFound)?;
            let checkpoint = tx
                .latest_checkpoint(lease.run_id)?
                .ok_or(TxError::NotFound)?;
            Ok((run, checkpoint))
        });
        let Ok((run, checkpoint)) = read else {
            return ExecutionEnd::Abandoned;
        };
        // A cancel accepted between CLAIM and registration reached only the row: the token is
        // registered by now, so applying the flag here leaves no window (SPEC §8.5, Tokens).
        if run.cancel_requested_at.is_some() {
            token.cancel(CancelReason::Requested);
        }
        let mut state = checkpoint.state;
        let mut version = checkpoint.version;
        match self
            .drive(&run, lease, token, &mut state, &mut version)
            .await
        {
            Ok(end) => end,
            Err(Halt::Abandon) => ExecutionEnd::Abandoned,
            Err(Halt::Cancel) => {
                self.finalize(&run, lease, &state, version, Final::Cancelled, None)
                    .await
            }
            Err(Halt::Fail(reason)) => {
                self.finalize(&run, lease, &state, version, Final::Failed(reason), None)
                    .await
            }
        }
    }

    async fn drive(
        &self,
        run: &Run,
        lease: &Lease,
        token: &CancelToken,
        state: &mut CheckpointState,
        version: &mut u32,
    ) -> Result<ExecutionEnd, Halt> {
        // Resuming an interrupted or parked step: finish in-flight calls, then the rest.
        let pending = state.pending.clone();
        #[cfg(feature = "mutants")]
        let pending = pending.filter(|_| !crate::testing::mutants::replan_pending_step());
        if let Some(batch) = pending {
            self.finish_in_flight(run, lease, token, state, &batch)
                .await?;
            observe(token)?;
            self.check_deadline(run)?;
            if let Some(end) = self
                .run_batch(run, lease, token, state, version, &batch)
                .await?
            {
                return Ok(end);
            }
        }
        // Built when first asked, after point 1, the deadline and the step limit (§8.3's
        // order): a planner that cannot be built must not hide a cancel or a passed deadline.
        let mut built_planner: Option<Arc<dyn Planner>> = None;
        // The planner's history, extended by each checkpointed step rather than reloaded whole.
        let mut history = Vec::new();
        loop {
            observe(token)?; // point 1
            self.check_deadline(run)?;
            // Saturating: a step count read back from a tampered store must fail the run below,
            // not overflow.
            let step = state.step.saturating_add(1);
            if step > run.limits.max_steps {
                return Err(Halt::Fail(FailureReason::MaxStepsExceeded));
            }
            let planner = match &built_planner {
                Some(built) => Arc::clone(built),
                None => {
                    let built = self
                        .env
                        .planners
                        .for_run(run)
                        .map_err(|_| Halt::Fail(FailureReason::PlannerError))?;
                    built_planner = Some(Arc::clone(&built));
                    built
                }
            };
            self.load_history(lease, state, &mut history)?;
            // No transaction is open while the planner runs.
            let turn = planner
                .next_turn(PlannerInput {
                    run,
                    step,
                    history: &history,
                })
                .await;
            let after_planner = Some(step);
            let calls = match turn {
                Err(_) => {
                    return Ok(self
                        .finalize(
                            run,
                            lease,
                            state,
                            *version,
                            Final::Failed(FailureReason::PlannerError),
                            after_planner,
                        )
                        .await);
                }
                Ok(turn) if !valid_turn(&turn) => {
                    return Ok(self
                        .finalize(
                            run,
                            lease,
                            state,
                            *version,
                            Final::Failed(FailureReason::PlannerError),
                            after_planner,
                        )
                        .await);
                }
                Ok(PlannerTurn::Final { message }) => {
                    if token.reason().is_some() {
                        return self
                            .end_for_token(run, lease, token, state, *version, after_planner)
                            .await;
                    }
                    return Ok(self
                        .finalize(
                            run,
                            lease,
                            state,
                            *version,
                            Final::Completed(message),
                            after_planner,
                        )
                        .await);
                }
                Ok(PlannerTurn::Calls(calls)) => calls,
            };
            if token.reason().is_some() {
                return self
                    .end_for_token(run, lease, token, state, *version, after_planner)
                    .await; // point 2
            }
            let used = self
                .env
                .read(|tx| {
                    tx.guard_lease(lease)?;
                    Ok(tx.run(run.id)?.ok_or(TxError::NotFound)?.tool_call_count)
                })
                .map_err(Halt::from)?;
            if u64::from(used) + calls.len() as u64 > u64::from(run.limits.max_tool_calls) {
                return Ok(self
                    .finalize(
                        run,
                        lease,
                        state,
                        *version,
                        Final::Failed(FailureReason::BudgetExceeded),
                        after_planner,
                    )
                    .await);
            }
            let batch = self.pin(run, step, calls);
            self.pending(run, lease, state, version, &batch).await?;
            if let Some(end) = self
                .run_batch(run, lease, token, state, version, &batch)
                .await?
            {
                return Ok(end);
            }
        }
    }

    /// Ends at a planner-side observation point: a requested cancel finalizes, a fence abandons.
    async fn end_for_token(
        &self,
        run: &Run,
        lease: &Lease,
        token: &CancelToken,
        state: &CheckpointState,
        version: u32,
        after_planner: Option<u32>,
    ) -> Result<ExecutionEnd, Halt> {
        match token.reason() {
            Some(CancelReason::Fenced) => Err(Halt::Abandon),
            _ => Ok(self
                .finalize(run, lease, state, version, Final::Cancelled, after_planner)
                .await),
        }
    }

    fn check_deadline(&self, run: &Run) -> Result<(), Halt> {
        check_deadline(run, self.env.clock.now())
    }

    /// Pins each call to a tool version and decides admission, once (SPEC §8.3, §11).
    fn pin(&self, run: &Run, step: u32, calls: Vec<ProposedCall>) -> PendingBatch {
        let mut parallel_ok = (2..=MAX_PARALLEL_BATCH).contains(&calls.len());
        let pinned: Vec<PinnedCall> = calls
            .into_iter()
            .map(|call| {
                let tool = self.env.tools.resolve(&call.tool, call.version.as_deref());
                match &tool {
                    Some(tool) => {
                        let spec = tool.spec();
                        parallel_ok &= spec.allow_parallel
                            && spec.idempotency == IdempotencyClass::ReadOnly
                            && matches!(
                                spec.side_effect,
                                SideEffectClass::None
                                    | SideEffectClass::WorkspaceRead
                                    | SideEffectClass::NetworkRead
                            )
                            && spec.required_scopes.is_subset(&run.principal_scopes)
                            && spec.normalize_arguments(&call.arguments).is_ok();
                    }
                    None => parallel_ok = false,
                }
                PinnedCall {
                    pinned_version: tool.map(|t| t.spec().version.to_string()),
                    call,
                }
            })
            .collect();
        #[cfg(feature = "mutants")]
        let parallel_ok =
            parallel_ok || crate::testing::mutants::parallel_mixed_batch(pinned.len());
        let admission = if parallel_ok {
            Admission::Parallel {
                parallel_group: ParallelGroupId(self.env.new_uuid()),
            }
        } else {
            Admission::Sequential
        };
        PendingBatch {
            step,
            calls: pinned,
            admission,
        }
    }

    /// PENDING: checkpoint the batch and set `step_count` before anything is dispatched.
    async fn pending(
        &self,
        run: &Run,
        lease: &Lease,
        state: &mut CheckpointState,
        version: &mut u32,
        batch: &PendingBatch,
    ) -> Result<(), Halt> {
        let mut next_state = state.clone();
        next_state.pending = Some(batch.clone());
        let now = self.env.clock.now();
        self.env.transact(|tx| {
            tx.guard_lease(lease)?;
            let current = tx.run(run.id)?.ok_or(TxError::NotFound)?;
            let mut next = current.clone();
            next.step_count = batch.step;
            update_fields(tx, &current, next, now)?;
            checkpoint(
                tx,
                run,
                *version + 1,
                CheckpointTrigger::ToolPending,
                &next_state,
                &self.actor(),
                now,
            )
        })?;
        *state = next_state;
        *version = version.saturating_add(1);
        self.env.reached(CrashPoint::AfterPending).await;
        Ok(())
    }

    /// Recovers calls left RUNNING by a crash before anything else of the batch (SPEC §8.3).
    async fn finish_in_flight(
        &self,
        run: &Run,
        lease: &Lease,
        token: &CancelToken,
        state: &CheckpointState,
        batch: &PendingBatch,
    ) -> Result<(), Halt> {
        let running: BTreeSet<String> = self
            .env
            .read(|tx| {
                tx.guard_lease(lease)?;
                Ok(tx
                    .invocations_of_run_in(run.id, InvocationStatus::Running)?
                    .into_iter()
                    .filter(|i| i.step_number == batch.step)
                    .map(|i| i.call_id)
                    .collect())
            })
            .map_err(Halt::from)?;
        for call in batch
            .calls
            .iter()
            .filter(|c| running.contains(&c.call.call_id))
        {
            let site = self.site(run, lease, batch, call, state, token, false);
            ToolPipeline::new(self.env).run_call(&site).await?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn site<'a>(
        &'a self,
        run: &'a Run,
        lease: &'a Lease,
        batch: &PendingBatch,
        call: &'a PinnedCall,
        state: &CheckpointState,
        token: &'a CancelToken,
        sequential: bool,
    ) -> CallSite<'a> {
        CallSite {
            run,
            lease,
            step: batch.step,
            call,
            parallel_group: match batch.admission {
                Admission::Parallel { parallel_group } => Some(parallel_group),
                Admission::Sequential => None,
            },
            origin_trust: if state.tainted {
                TrustLevel::ExternalUntrusted
            } else {
                run.origin_trust
            },
            sequential,
            token,
            worker_id: self.worker_id,
        }
    }

    /// Dispatches a batch, then parks or records it; returns `Some` when execution ends.
    async fn run_batch(
        &self,
        run: &Run,
        lease: &Lease,
        token: &CancelToken,
        state: &mut CheckpointState,
        version: &mut u32,
        batch: &PendingBatch,
    ) -> Result<Option<ExecutionEnd>, Halt> {
        let span = tracing::info_span!("step", step = batch.step, calls = batch.calls.len());
        tracing::Instrument::instrument(
            self.run_batch_inner(run, lease, token, state, version, batch),
            span,
        )
        .await
    }

    async fn run_batch_inner(
        &self,
        run: &Run,
        lease: &Lease,
        token: &CancelToken,
        state: &mut CheckpointState,
        version: &mut u32,
        batch: &PendingBatch,
    ) -> Result<Option<ExecutionEnd>, Halt> {
        loop {
            match self.dispatch(run, lease, token, state, batch).await? {
                Dispatched::Park => match self.park(run, lease, token, state, *version).await {
                    Parked::Done(end) => return Ok(Some(end)),
                    // Every approval was already resolved: re-dispatch at once under this lease.
                    Parked::Redispatch => continue,
                },
                Dispatched::Results(results) => {
                    self.batch(run, lease, state, version, batch, &results)
                        .await?;
                    if state
                        .denial_counts
                        .values()
                        .any(|count| *count >= REPEATED_DENIAL_LIMIT)
                    {
                        return Ok(Some(
                            self.finalize(
                                run,
                                lease,
                                state,
                                *version,
                                Final::Failed(FailureReason::RepeatedDenial),
                                None,
                            )
                            .await,
                        ));
                    }
                    return Ok(None);
                }
            }
        }
    }

    async fn dispatch(
        &self,
        run: &Run,
        lease: &Lease,
        token: &CancelToken,
        state: &CheckpointState,
        batch: &PendingBatch,
    ) -> Result<Dispatched, Halt> {
        let pipeline = ToolPipeline::new(self.env);
        match batch.admission {
            Admission::Sequential => {
                let mut results = Vec::with_capacity(batch.calls.len());
                for call in &batch.calls {
                    let site = self.site(run, lease, batch, call, state, token, true);
                    match pipeline.run_call(&site).await? {
                        CallEnd::Done(result) => results.push(result),
                        // A require_approval stops a sequential batch: later calls wait.
                        CallEnd::Parked { .. } => return Ok(Dispatched::Park),
                    }
                    observe(token)?; // point 4
                }
                Ok(Dispatched::Results(results))
            }
            Admission::Parallel { .. } => {
                observe(token)?; // point 3, once for the batch
                self.check_deadline(run)?;
                let sites: Vec<CallSite<'_>> = batch
                    .calls
                    .iter()
                    .map(|call| self.site(run, lease, batch, call, state, token, false))
                    .collect();
                let ends = join_all(sites.iter().map(|site| pipeline.run_call(site))).await;
                let (results, parked) = parallel_ends(ends)?;
                observe(token)?; // point 4, once after the batch
                Ok(if parked {
                    Dispatched::Park
                } else {
                    Dispatched::Results(results)
                })
            }
        }
    }

    /// BATCH: history, taint and denial counts, checkpointed with the finished step.
    async fn batch(
        &self,
        run: &Run,
        lease: &Lease,
        state: &mut CheckpointState,
        version: &mut u32,
        batch: &PendingBatch,
        results: &[CallResult],
    ) -> Result<(), Halt> {
        let mut next = state.clone();
        next.step = batch.step;
        next.pending = None;
        next.history.push(HistoryStep {
            step: batch.step,
            calls: batch.calls.iter().map(|c| c.call.clone()).collect(),
            results: results.iter().map(|r| r.reference.clone()).collect(),
        });
        next.tainted |= results.iter().any(|r| {
            matches!(
                r.item.trust,
                TrustLevel::ExternalUntrusted | TrustLevel::Knowledge
            )
        });
        for result in results.iter().filter(|r| r.status == OutcomeStatus::Denied) {
            let key = format!(
                "{}\u{0}{}\u{0}{}",
                result.item.name, result.arguments_hash, result.reason_code
            );
            let count = next.denial_counts.entry(key).or_insert(0);
            *count = count.saturating_add(1);
        }
        let now = self.env.clock.now();
        self.env.transact(|tx| {
            tx.guard_lease(lease)?;
            checkpoint(
                tx,
                run,
                *version + 1,
                CheckpointTrigger::ToolBatch,
                &next,
                &self.actor(),
                now,
            )
        })?;
        *state = next;
        *version = version.saturating_add(1);
        self.env.reached(CrashPoint::AfterBatch).await;
        Ok(())
    }

    /// Brings `loaded` up to the checkpointed history, loading the result items of the steps it
    /// lacks. A checkpointed step never changes (its invocations are closed, its refusals are
    /// events), so steps loaded earlier in this execution stay valid; a loaded prefix that does
    /// not match the checkpoint's step numbers is discarded and reloaded.
    fn load_history(
        &self,
        lease: &Lease,
        state: &CheckpointState,
        loaded: &mut Vec<PlannerStep>,
    ) -> Result<(), Halt> {
        let prefix_matches = loaded.len() <= state.history.len()
            && loaded
                .iter()
                .zip(&state.history)
                .all(|(have, want)| have.step == want.step);
        if !prefix_matches {
            loaded.clear();
        }
        let missing = &state.history[loaded.len()..];
        let more = self
            .env
            .read(|tx| {
                tx.guard_lease(lease)?;
                let mut steps = Vec::with_capacity(missing.len());
                for step in missing {
                    let mut results = Vec::with_capacity(step.results.len());
                    for reference in &step.results {
                        let text = match reference {
                            ResultRef::Invocation { invocation_id } => {
                                tx.invocation(*invocation_id)?.and_then(|i| i.result_item)
                            }
                            ResultRef::Refusal { derivation_key } => tx
                                .event_by_key(derivation_key)?
                                .and_then(|e| e.payload["result_item"].as_str().map(str::to_owned)),
                        };
                        let Some(item) = text.as_deref().and_then(ResultItem::parse) else {
                            return Ok(None);
                        };
                        results.push(item);
                    }
                    steps.push(PlannerStep {
                        step: step.step,
                        calls: step.calls.clone(),
                        results,
                    });
                }
                Ok(Some(steps))
            })
            // A failed read is a failed worker transaction: abandon, and lease expiry with
            // RECLAIM recovers the run (SPEC §8.3). A result the checkpoint refers to but the
            // store lacks is damage no retry repairs: the run fails.
            .map_err(Halt::from)?
            .ok_or(Halt::Fail(FailureReason::InternalError))?;
        loaded.extend(more);
        Ok(())
    }

    /// PARK (SPEC §10.2): an observation point; parks only while an approval is pending.
    async fn park(
        &self,
        run: &Run,
        lease: &Lease,
        token: &CancelToken,
        state: &CheckpointState,
        version: u32,
    ) -> Parked {
        match token.reason() {
            Some(CancelReason::Fenced) => return Parked::Done(ExecutionEnd::Abandoned),
            Some(CancelReason::Requested) => {
                return Parked::Done(
                    self.finalize(run, lease, state, version, Final::Cancelled, None)
                        .await,
                );
            }
            None => {}
        }
        self.heartbeat.pause();
        let now = self.env.clock.now();
        let actor = self.actor();
        let result = self.env.transact(|tx| {
            tx.guard_lease(lease)?;
            let current = tx.run(run.id)?.ok_or(TxError::NotFound)?;
            if current.cancel_requested_at.is_some() {
                final_commit(
                    tx,
                    run,
                    &current,
                    state,
                    version,
                    Final::Cancelled,
                    None,
                    &actor,
                    now,
                )?;
                return Ok(ParkWrite::Cancelled);
            }
            let step = state.current_step();
            let mut pending: Vec<ApprovalId> = Vec::new();
            for invocation in tx.invocations_of_run(run.id)? {
                if invocation.step_number == step
                    && invocation.status == InvocationStatus::WaitingForApproval
                {
                    let approval = tx
                        .approval_by_action(invocation.id)?
                        .ok_or(TxError::NotFound)?;
                    if approval.status == ApprovalStatus::Pending {
                        pending.push(approval.id);
                    }
                }
            }
            if pending.is_empty() {
                return Ok(ParkWrite::Nothing);
            }
            checkpoint(
                tx,
                run,
                version + 1,
                CheckpointTrigger::Suspended,
                state,
                &actor,
                now,
            )?;
            let next = current.clone();
            #[cfg(feature = "mutants")]
            let next = crate::testing::mutants::resume_counts_attempt(next);
            transition(
                tx,
                &current,
                next,
                Change::Park {
                    approval_ids: pending,
                },
                &actor,
                now,
            )?;
            #[cfg(feature = "mutants")]
            if crate::testing::mutants::park_without_announcing() {
                return Ok(ParkWrite::Parked);
            }
            // By this commit every pending approval of the run is announced (§16 #20).
            for approval in tx.approvals_of_run(run.id)? {
                if approval.status == ApprovalStatus::Pending && approval.requested_at.is_none() {
                    let mut announced = approval.clone();
                    announced.requested_at = Some(now);
                    tx.update_approval(ApprovalStatus::Pending, &announced)?;
                    tx.append_event(&NewEvent {
                        session_id: approval.session_id,
                        run_id: Some(approval.run_id),
                        event_type: EventType::ApprovalRequested,
                        actor: actor.clone(),
                        payload: json!({
                            "approval_id": approval.id.to_string(),
                            "invocation_id": approval.action_id.to_string(),
                            "risk": approval.risk.as_str(),
                            "expires_at": approval.expires_at.to_string(),
                        }),
                        derivation_key: Some(keys::approval_requested(approval.id)),
                        created_at: now,
                    })?;
                }
            }
            Ok(ParkWrite::Parked)
        });
        match result {
            Ok(ParkWrite::Parked) => {
                self.env.reached(CrashPoint::AfterPark).await;
                #[cfg(feature = "mutants")]
                crate::testing::mutants::announce_after_park(self.env, run.id, &actor);
                Parked::Done(ExecutionEnd::Parked)
            }
            Ok(ParkWrite::Cancelled) => {
                self.env.reached(CrashPoint::AfterFinal).await;
                Parked::Done(ExecutionEnd::Finished(RunStatus::Cancelled))
            }
            Ok(ParkWrite::Nothing) => {
                self.heartbeat.resume();
                Parked::Redispatch
            }
            Err(TxError::Fenced) => Parked::Done(ExecutionEnd::Abandoned),
            // PARK failed otherwise: finalize FAILED internal_error (the sweep cancels approvals).
            Err(_) => Parked::Done(
                self.finalize(
                    run,
                    lease,
                    state,
                    version,
                    Final::Failed(FailureReason::InternalError),
                    None,
                )
                .await,
            ),
        }
    }

    /// FINAL: checkpoint, `step_count` after a planner turn, transition, sweep, lease release.
    async fn finalize(
        &self,
        run: &Run,
        lease: &Lease,
        state: &CheckpointState,
        version: u32,
        outcome: Final,
        after_planner: Option<u32>,
    ) -> ExecutionEnd {
        self.heartbeat.pause();
        let now = self.env.clock.now();
        let actor = self.actor();
        let status = match &outcome {
            Final::Completed(_) => RunStatus::Completed,
            Final::Failed(_) => RunStatus::Failed,
            Final::Cancelled => RunStatus::Cancelled,
        };
        let committed = self.env.transact(|tx| {
            tx.guard_lease(lease)?;
            let current = tx.run(run.id)?.ok_or(TxError::NotFound)?;
            final_commit(
                tx,
                run,
                &current,
                state,
                version,
                outcome,
                after_planner,
                &actor,
                now,
            )
        });
        match committed {
            Ok(()) => {
                self.env.reached(CrashPoint::AfterFinal).await;
                ExecutionEnd::Finished(status)
            }
            Err(_) => ExecutionEnd::Abandoned,
        }
    }
}

enum Parked {
    Done(ExecutionEnd),
    Redispatch,
}

enum ParkWrite {
    Parked,
    Cancelled,
    Nothing,
}

/// A turn is invalid if it has no calls, a duplicate or ungrammatical call id, or declares
/// configuration-level trust (SPEC §8.3).
fn valid_turn(turn: &PlannerTurn) -> bool {
    match turn {
        PlannerTurn::Final { .. } => true,
        PlannerTurn::Calls(calls) => {
            let mut ids = BTreeSet::new();
            !calls.is_empty()
                && calls.iter().all(|c| {
                    is_valid_call_id(&c.call_id)
                        && ids.insert(c.call_id.as_str())
                        && c.argument_trust.values().all(|t| t.is_declarable())
                })
        }
    }
}

/// Inserts the next checkpoint with its `run.checkpointed` event.
fn checkpoint(
    tx: &mut dyn StoreTx,
    run: &Run,
    version: u32,
    trigger: CheckpointTrigger,
    state: &CheckpointState,
    actor: &Actor,
    now: Timestamp,
) -> Result<(), TxError> {
    tx.insert_checkpoint(&Checkpoint {
        run_id: run.id,
        version,
        trigger,
        state: state.clone(),
        created_at: now,
    })?;
    tx.append_event(&NewEvent {
        session_id: run.session_id,
        run_id: Some(run.id),
        event_type: EventType::RunCheckpointed,
        actor: actor.clone(),
        payload: json!({"version": version, "trigger": trigger.as_str()}),
        derivation_key: None,
        created_at: now,
    })?;
    Ok(())
}

/// The writes of FINAL inside an open transaction (also PARK's cancel branch).
#[allow(clippy::too_many_arguments)]
fn final_commit(
    tx: &mut dyn StoreTx,
    run: &Run,
    current: &Run,
    state: &CheckpointState,
    version: u32,
    outcome: Final,
    after_planner: Option<u32>,
    actor: &Actor,
    now: Timestamp,
) -> Result<(), TxError> {
    checkpoint(
        tx,
        run,
        version + 1,
        CheckpointTrigger::Final,
        state,
        actor,
        now,
    )?;
    let mut next = current.clone();
    if let Some(step) = after_planner {
        next.step_count = step;
    }
    let change = match outcome {
        Final::Completed(final_message) => Change::Complete { final_message },
        Final::Failed(reason) => Change::Fail(Failure::new(reason, next.step_count, now)),
        Final::Cancelled => Change::Cancel,
    };
    transition(tx, current, next, change, actor, now)?;
    Ok(())
}

/// How a parallel batch ended, once every call has settled: its results in planner order and
/// whether a call parked, or the halt that ends the execution. A failed transaction in any call
/// (`Abandon`) wins over the others, even over an earlier call's `Fail` or `Cancel`: after it
/// the execution writes nothing more (SPEC §8.3), not even FINAL.
fn parallel_ends(ends: Vec<Result<CallEnd, Halt>>) -> Result<(Vec<CallResult>, bool), Halt> {
    if ends.iter().any(|end| matches!(end, Err(Halt::Abandon))) {
        return Err(Halt::Abandon);
    }
    let mut results = Vec::with_capacity(ends.len());
    let mut parked = false;
    for end in ends {
        match end? {
            CallEnd::Done(result) => results.push(result),
            CallEnd::Parked { .. } => parked = true,
        }
    }
    Ok((results, parked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ApprovalId;

    fn parked() -> Result<CallEnd, Halt> {
        Ok(CallEnd::Parked {
            approval_id: ApprovalId(uuid::Uuid::nil()),
        })
    }

    #[test]
    fn an_abandoned_call_wins_over_every_other_end_of_a_parallel_batch() {
        for ends in [
            vec![
                Err(Halt::Fail(FailureReason::InternalError)),
                Err(Halt::Abandon),
            ],
            vec![Err(Halt::Cancel), Err(Halt::Abandon)],
            vec![parked(), Err(Halt::Abandon)],
        ] {
            assert_eq!(parallel_ends(ends).map(|_| ()), Err(Halt::Abandon));
        }
        // Otherwise the first halt in planner order, and a park only when nothing halted.
        assert_eq!(
            parallel_ends(vec![
                parked(),
                Err(Halt::Fail(FailureReason::InternalError)),
                Err(Halt::Cancel)
            ])
            .map(|_| ()),
            Err(Halt::Fail(FailureReason::InternalError))
        );
        assert_eq!(
            parallel_ends(vec![parked(), parked()])
                .map(|(results, parked)| (results.len(), parked)),
            Ok((0, true))
        );
    }
}
