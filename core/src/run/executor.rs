//! The step loop (SPEC §8.3): asks the planner, checkpoints each batch before dispatching it,
//! runs the calls through the pipeline, parks for approvals and finalizes. A driver in the
//! quinn sense: it orders transactions and port calls; the decisions live in pure functions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::join_all;
use serde_json::json;

use crate::canonical::is_valid_call_id;
use crate::conversation::{RunBinding, binding_of};
use crate::env::Env;
use crate::events::{Actor, EventType, NewEvent, keys};
use crate::ids::{ApprovalId, ParallelGroupId};
use crate::invocation::call_result::CallResult;
use crate::invocation::outcome::ResultItem;
use crate::invocation::pipeline::{
    Begun, CallEnd, CallSite, Halt, ToolPipeline, check_deadline, observe,
};
use crate::ports::{BoxFut, Planner, PlannerInput, PlannerStep, PlannerTurn, ProposedCall};
use crate::run::cancel::CancelToken;
use crate::run::checkpoint::{
    Admission, Checkpoint, CheckpointState, PendingBatch, PinnedCall, ResultRef,
};
use crate::run::state::{Change, transition};
use crate::run::step_writes::{FinalFold, StepLedger, checkpoint};
use crate::run::{Failure, Lease, Run};
use crate::store::{Store, StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{
    ApprovalStatus, CancelReason, CheckpointTrigger, CrashPoint, FailureReason, IdempotencyClass,
    InvocationStatus, RunStatus, SideEffectClass, TrustLevel,
};

/// Identical denials that fail a run (SPEC §8.3).
const REPEATED_DENIAL_LIMIT: u32 = 3;
/// The largest batch that may run concurrently (SPEC §11).
const MAX_PARALLEL_BATCH: usize = 8;
/// Step records read for a planner's history: at most one per step, and a run has at most
/// 1000 steps (§8.4), so one read always suffices.
const MAX_HISTORY_STEPS: usize = 1000;

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

/// The most the run's `tool_call_count` can be while this execution holds its lease: the count
/// read under the lease when the execution began, plus every call this execution has dispatched.
/// Only a lease holder counts calls (START, and RECOVER of an unstartable row, each once per
/// invocation, and a step's call ids are distinct), so the stored count never exceeds it. A step
/// whose calls fit under the bound cannot exceed the run's `max_tool_calls`, and its budget check
/// needs no read: a read transaction per step saved (a round trip on PostgreSQL, issue 33). Only
/// a step the bound cannot settle reads the count itself.
#[derive(Debug, Clone, Copy)]
struct CountBound(u64);

impl CountBound {
    fn at_claim(run: &Run) -> CountBound {
        CountBound(u64::from(run.tool_call_count))
    }

    fn dispatching(&mut self, batch: &PendingBatch) {
        self.0 = self.0.saturating_add(batch.calls.len() as u64);
    }

    fn most(self) -> u64 {
        self.0
    }
}

/// How the run ends when FINAL commits.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Final {
    Completed(String),
    Failed(FailureReason),
    Cancelled,
}

/// Whether a batch's PENDING is already committed when it is dispatched.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Recorded {
    /// A resumed step: its PENDING committed in an earlier execution.
    Yes,
    /// A new step: PENDING folds into its first call transaction (§17.1 F1), and FINAL into its
    /// BATCH when the planner already said its next turn ends the run ([`FinalFold`]).
    No(Option<FinalFold>),
}

/// The result of dispatching one batch.
enum Dispatched {
    Results(Vec<CallResult>),
    Park,
}

/// Who claimed the run, which decides what becomes of a call run whose connection has closed
/// (an orphan, [`RunBinding::Orphaned`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimedFor {
    /// A worker, a sweep or `runs resume`: an orphan is only ended, never executed.
    Work,
    /// A gateway holding a request for the run (SPEC §22.3: an identical call sent again,
    /// perhaps on another connection, bound to the parked call): the run is executed, its
    /// planner being that request's connection.
    WaitingRequest,
}

/// Where an execution's first look at its run comes from.
#[derive(Debug, Clone)]
pub enum Start {
    /// Read under the lease: the run, its latest checkpoint, its binding. Every claim but one.
    Read,
    /// A gateway's call run, as the claim its first write transaction carries will write it
    /// ([`crate::worker::Worker::execute_carrying`]): its checkpoint is the seed and its
    /// binding the claiming connection's, and until that transaction commits there is nothing
    /// in the store to read (issue 33: a read transaction fewer per gateway call, and the
    /// claim in the commit of the call's START). Nothing is skipped that guards anything: the
    /// lease is checked by every write the execution makes, beginning with its first, and a
    /// cancel requested since the claim is seen there and by the heartbeat.
    Admitted(Box<Run>),
}

pub struct RunExecutor<'e, S: Store> {
    env: &'e Env<S>,
    worker_id: &'e str,
    heartbeat: HeartbeatSwitch,
    claimed_for: ClaimedFor,
}

impl<'e, S: Store> RunExecutor<'e, S> {
    pub fn new(
        env: &'e Env<S>,
        worker_id: &'e str,
        heartbeat: HeartbeatSwitch,
        claimed_for: ClaimedFor,
    ) -> Self {
        RunExecutor {
            env,
            worker_id,
            heartbeat,
            claimed_for,
        }
    }

    fn actor(&self) -> Actor {
        Actor::worker(self.worker_id)
    }

    /// Executes a claimed run until it parks, ends, or must be abandoned.
    pub async fn execute(&self, lease: &Lease, token: &CancelToken, start: Start) -> ExecutionEnd {
        let read = match start {
            Start::Admitted(run) if run.id == lease.run_id => {
                let seed = crate::run::submit::seed_checkpoint(run.id, run.created_at);
                Ok((*run, seed, None))
            }
            Start::Admitted(_) | Start::Read => self.read_start(lease),
        };
        let Ok((run, checkpoint, orphan)) = read else {
            return ExecutionEnd::Abandoned;
        };
        if let Some(running) = orphan {
            // Nothing is asked or invoked: in-flight calls are swept (UNCERTAIN when
            // watermarked and not idempotent), so the run cannot be CANCELLED (§8.1).
            let end = if running {
                Final::Failed(FailureReason::PlannerError)
            } else {
                Final::Cancelled
            };
            return self
                .finalize(
                    &run,
                    lease,
                    &checkpoint.state,
                    checkpoint.version,
                    end,
                    None,
                )
                .await;
        }
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
        let mut counted = CountBound::at_claim(run);
        if let Some(batch) = pending {
            counted.dispatching(&batch);
            self.finish_in_flight(run, lease, token, state, &batch)
                .await?;
            observe(token)?;
            self.check_deadline(run)?;
            if let Some(end) = self
                .run_batch(run, lease, token, state, version, &batch, Recorded::Yes)
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
            if planner.wants_history() {
                self.load_history(run, lease, state, &mut history)?;
            }
            // No transaction is open while the planner runs.
            let turn = planner
                .next_turn(PlannerInput {
                    run,
                    step,
                    history: &history,
                    tainted: state.tainted,
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
            // Content the journal never saw (§19.6) taints from this step on.
            if planner.tainted_outside_journal() {
                state.tainted = true;
            }
            if token.reason().is_some() {
                return self
                    .end_for_token(run, lease, token, state, *version, after_planner)
                    .await; // point 2
            }
            // The budget (§8.3): read only when the bound does not already settle it.
            let within =
                |used: u64| used + calls.len() as u64 <= u64::from(run.limits.max_tool_calls);
            let over_budget = !within(counted.most())
                && !within(u64::from(
                    self.env
                        .read(|tx| {
                            tx.guard_lease(lease)?;
                            Ok(tx.run(run.id)?.ok_or(TxError::NotFound)?.tool_call_count)
                        })
                        .map_err(Halt::from)?,
                ));
            if over_budget {
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
            counted.dispatching(&batch);
            // A planner that already knows its next turn ends the run has FINAL folded into
            // this step's BATCH (issue 33).
            let fold = planner.final_after(step).map(|final_message| FinalFold {
                final_message,
                next_step: step.saturating_add(1),
                denial_limit: REPEATED_DENIAL_LIMIT,
            });
            // PENDING commits with the step's first call transaction (§17.1 F1).
            if let Some(end) = self
                .run_batch(
                    run,
                    lease,
                    token,
                    state,
                    version,
                    &batch,
                    Recorded::No(fold),
                )
                .await?
            {
                return Ok(end);
            }
        }
    }

    /// The run, its latest checkpoint and, for an orphan claimed by a worker, whether a call of
    /// it is RUNNING: read under the lease.
    fn read_start(&self, lease: &Lease) -> Result<(Run, Checkpoint, Option<bool>), TxError> {
        self.env.read(|tx| {
            tx.guard_lease(lease)?;
            let run = tx.run(lease.run_id)?.ok_or(TxError::NotFound)?;
            let checkpoint = tx
                .latest_checkpoint(lease.run_id)?
                .ok_or(TxError::NotFound)?;
            // A run whose client has gone is claimed only to be ended (SPEC §19.4), unless a
            // request sent again for its parked call claimed it (§22.3).
            let orphan = match binding_of(tx, &run)? {
                RunBinding::Orphaned(_) if self.claimed_for == ClaimedFor::Work => Some(
                    !tx.invocations_of_run_in(run.id, &[InvocationStatus::Running])?
                        .is_empty(),
                ),
                _ => None,
            };
            Ok((run, checkpoint, orphan))
        })
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
                    .invocations_of_run_in(run.id, &[InvocationStatus::Running])?
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
            let site = self.site(run, lease, batch, call, state, token, false, None);
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
        ledger: Option<&'a StepLedger<'a>>,
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
            ledger,
        }
    }

    /// Dispatches a batch, then parks or records it; returns `Some` when execution ends.
    /// `recorded` says whether the batch's PENDING is already committed (a resumed step) or
    /// must fold into the step's first call transaction (a new one, §17.1 F1).
    #[allow(clippy::too_many_arguments)]
    async fn run_batch(
        &self,
        run: &Run,
        lease: &Lease,
        token: &CancelToken,
        state: &mut CheckpointState,
        version: &mut u32,
        batch: &PendingBatch,
        recorded: Recorded,
    ) -> Result<Option<ExecutionEnd>, Halt> {
        let span = tracing::info_span!("step", step = batch.step, calls = batch.calls.len());
        tracing::Instrument::instrument(
            self.run_batch_inner(run, lease, token, state, version, batch, recorded),
            span,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_batch_inner(
        &self,
        run: &Run,
        lease: &Lease,
        token: &CancelToken,
        state: &mut CheckpointState,
        version: &mut u32,
        batch: &PendingBatch,
        recorded: Recorded,
    ) -> Result<Option<ExecutionEnd>, Halt> {
        let (mut unwritten, fold) = match recorded {
            Recorded::Yes => (None, None),
            Recorded::No(fold) => (Some(batch.clone()), fold),
        };
        loop {
            let ledger = StepLedger::new(run, self.actor(), *version, state.clone(), unwritten)
                .fold_final(fold.clone());
            let dispatched = self.dispatch(run, lease, token, &ledger, batch).await;
            // Whatever happened, continue from what is really committed.
            (*version, *state) = ledger.committed();
            if ledger.run_ended() {
                // FINAL committed with the step: whatever the token says now, the run is over.
                self.heartbeat.pause();
                return Ok(Some(ExecutionEnd::Finished(RunStatus::Completed)));
            }
            unwritten = ledger.pending_unwritten().then(|| batch.clone());
            let dispatched = match dispatched {
                Ok(dispatched) => dispatched,
                // The planner was asked for this step but nothing of it was recorded: FINAL
                // carries `step_count = k` (§8.3).
                Err(Halt::Cancel) if unwritten.is_some() => {
                    return Ok(Some(
                        self.finalize(
                            run,
                            lease,
                            state,
                            *version,
                            Final::Cancelled,
                            Some(batch.step),
                        )
                        .await,
                    ));
                }
                Err(Halt::Fail(reason)) if unwritten.is_some() => {
                    return Ok(Some(
                        self.finalize(
                            run,
                            lease,
                            state,
                            *version,
                            Final::Failed(reason),
                            Some(batch.step),
                        )
                        .await,
                    ));
                }
                Err(halt) => return Err(halt),
            };
            match dispatched {
                Dispatched::Park => match self.park(run, lease, token, state, *version).await {
                    Parked::Done(end) => return Ok(Some(end)),
                    // Every approval was already resolved: re-dispatch at once under this lease.
                    Parked::Redispatch => continue,
                },
                Dispatched::Results(results) => {
                    if !ledger.step_closed() {
                        self.batch(lease, &ledger, batch, &results).await?;
                        (*version, *state) = ledger.committed();
                        if ledger.run_ended() {
                            self.heartbeat.pause();
                            return Ok(Some(ExecutionEnd::Finished(RunStatus::Completed)));
                        }
                    }
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
        ledger: &StepLedger<'_>,
        batch: &PendingBatch,
    ) -> Result<Dispatched, Halt> {
        let pipeline = ToolPipeline::new(self.env);
        let (_, state) = ledger.committed();
        match batch.admission {
            Admission::Sequential => {
                let mut results = Vec::with_capacity(batch.calls.len());
                for (index, call) in batch.calls.iter().enumerate() {
                    // The last call's closing transaction also closes the step (F4).
                    if index + 1 == batch.calls.len() {
                        ledger.arm_closing(batch, results.clone());
                    }
                    let site =
                        self.site(run, lease, batch, call, &state, token, true, Some(ledger));
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
                // Only the first call carries the step's PENDING, and it commits before any
                // other call of the step begins, so no row of the step exists unrecorded.
                let sites: Vec<CallSite<'_>> = batch
                    .calls
                    .iter()
                    .enumerate()
                    .map(|(index, call)| {
                        let ledger = (index == 0).then_some(ledger);
                        self.site(run, lease, batch, call, &state, token, false, ledger)
                    })
                    .collect();
                let Some((first, rest)) = sites.split_first() else {
                    return Ok(Dispatched::Results(Vec::new()));
                };
                let mut calls: Vec<BoxFut<'_, Result<CallEnd, Halt>>> = Vec::new();
                if ledger.pending_unwritten() {
                    calls.push(match pipeline.begin_call(first).await {
                        Begun::Ended(Err(halt)) => return Err(halt),
                        Begun::Ended(Ok(end)) => Box::pin(std::future::ready(Ok(end))),
                        Begun::Started { row, tool } => {
                            let pipeline = &pipeline;
                            Box::pin(
                                async move { pipeline.finish_started(first, *row, &tool).await },
                            )
                        }
                    });
                } else {
                    // A resumed batch (its PENDING committed earlier) has rows to recover, and
                    // recovering the first call alone would run it to its end before the
                    // others begin: an approval resolved meanwhile would START its call after
                    // a cancel the execution already knew of (§8.5: a parallel batch observes
                    // once, before it begins). Every call begins at once instead.
                    calls.push(Box::pin(pipeline.run_call(first)));
                }
                calls.extend(
                    rest.iter()
                        .map(|site| -> BoxFut<'_, Result<CallEnd, Halt>> {
                            Box::pin(pipeline.run_call(site))
                        }),
                );
                let ends = join_all(calls).await;
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

    /// BATCH in a transaction of its own (a parallel batch, or a sequential one whose last call
    /// closed without a transaction): the step record, taint and denial counts, with the
    /// step's PENDING too if nothing had recorded it yet.
    async fn batch(
        &self,
        lease: &Lease,
        ledger: &StepLedger<'_>,
        batch: &PendingBatch,
        results: &[CallResult],
    ) -> Result<(), Halt> {
        let now = self.env.clock.now();
        let committed = self.env.transact(|tx| {
            tx.guard_lease(lease)?;
            ledger.stage_opening(tx, now)?;
            ledger.stage_batch(tx, batch, results, now)
        });
        let folded = ledger.settle(committed.is_ok());
        committed?;
        if folded.pending {
            self.env.reached(CrashPoint::AfterPending).await;
        }
        debug_assert!(folded.batch, "BATCH committed with its transaction");
        self.env.reached(CrashPoint::AfterBatch).await;
        if folded.run_final {
            self.env.reached(CrashPoint::AfterFinal).await;
        }
        Ok(())
    }

    /// Brings `loaded` up to the run's step records, loading the result items of the steps it
    /// lacks (SPEC §17.2: history is read back only for a planner that wants it). A recorded
    /// step never changes (its invocations are closed, its refusals are events, its record is
    /// append-only), so steps loaded earlier in this execution stay valid.
    fn load_history(
        &self,
        run: &Run,
        lease: &Lease,
        state: &CheckpointState,
        loaded: &mut Vec<PlannerStep>,
    ) -> Result<(), Halt> {
        let after = loaded.last().map_or(0, |s| s.step);
        if after >= state.step {
            return Ok(());
        }
        let more = self
            .env
            .read(|tx| {
                tx.guard_lease(lease)?;
                let records = tx.step_records(run.id, after, MAX_HISTORY_STEPS)?;
                let mut steps = Vec::with_capacity(records.len());
                for record in records {
                    let mut results = Vec::with_capacity(record.results.len());
                    for reference in &record.results {
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
                        step: record.step,
                        calls: record.calls,
                        results,
                    });
                }
                Ok(Some(steps))
            })
            // A failed read is a failed worker transaction: abandon, and lease expiry with
            // RECLAIM recovers the run (SPEC §8.3). A result a step record refers to but the
            // store lacks is damage no retry repairs: the run fails.
            .map_err(Halt::from)?
            .ok_or(Halt::Fail(FailureReason::InternalError))?;
        loaded.extend(more);
        // Every finished step has its record, contiguously from 1 (§17.2); anything else is
        // damage no retry repairs.
        let contiguous = loaded
            .iter()
            .enumerate()
            .all(|(i, s)| u32::try_from(i + 1) == Ok(s.step));
        if !contiguous || loaded.last().map_or(0, |s| s.step) != state.step {
            return Err(Halt::Fail(FailureReason::InternalError));
        }
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
            for invocation in
                tx.invocations_of_run_in(run.id, &[InvocationStatus::WaitingForApproval])?
            {
                if invocation.step_number == step {
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
