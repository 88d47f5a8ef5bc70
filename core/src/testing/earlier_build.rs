//! What a build before SPEC §17.1's commit folding left in a store, for the recovery tests.
//!
//! The folded build never commits a PENDING without the step's first call, nor leaves an
//! allowed call AUTHORIZED without START; but a store written by the earlier build can hold
//! both (a crash at its `after_pending` or `after_propose`), and the recovery table (§9.4) must
//! still finish such runs. These helpers commit exactly what the earlier build's PENDING and
//! PROPOSE transactions committed, through core's own record builders.

use crate::env::Env;
use crate::events::Actor;
use crate::invocation::Invocation;
use crate::invocation::pipeline::{CallSite, ToolPipeline};
use crate::run::Lease;
use crate::run::cancel::CancelToken;
use crate::run::checkpoint::{Admission, PendingBatch, PinnedCall};
use crate::run::state::update_fields;
use crate::run::step_writes::checkpoint;
use crate::store::{Store, TxError};
use crate::vocab::CheckpointTrigger;

/// The earlier build's PENDING: `step_count = 1` and checkpoint v2 `tool_pending` holding
/// `script_calls` (the run's first step, each call pinned to its latest registered version) as
/// a sequential batch. The run must be RUNNING under `lease` with only its seed checkpoint.
pub fn record_pending<S: Store>(
    env: &Env<S>,
    lease: &Lease,
    script_calls: Vec<crate::ports::ProposedCall>,
) -> PendingBatch {
    let batch = PendingBatch {
        step: 1,
        calls: script_calls
            .into_iter()
            .map(|call| PinnedCall {
                pinned_version: env
                    .tools
                    .resolve(&call.tool, call.version.as_deref())
                    .map(|t| t.spec().version.to_string()),
                call,
            })
            .collect(),
        admission: Admission::Sequential,
    };
    let now = env.clock.now();
    env.transact(|tx| {
        tx.guard_lease(lease)?;
        let current = tx.run(lease.run_id)?.ok_or(TxError::NotFound)?;
        let latest = tx
            .latest_checkpoint(lease.run_id)?
            .ok_or(TxError::NotFound)?;
        let mut next = current.clone();
        next.step_count = batch.step;
        update_fields(tx, &current, next, now)?;
        let mut state = latest.state;
        state.pending = Some(batch.clone());
        checkpoint(
            tx,
            &current,
            latest.version + 1,
            CheckpointTrigger::ToolPending,
            &state,
            &Actor::worker(&lease.worker_id),
            now,
        )
    })
    .expect("the earlier build's PENDING commits");
    batch
}

/// The earlier build's PROPOSE of the batch's first call, with nothing folded in: an allowed
/// call stays AUTHORIZED with `tool.call.proposed` and `tool.call.authorized`.
pub fn propose_first<S: Store>(env: &Env<S>, lease: &Lease, batch: &PendingBatch) -> Invocation {
    let run = env
        .read(|tx| tx.run(lease.run_id))
        .expect("readable")
        .expect("the run");
    let token = CancelToken::default();
    let site = CallSite {
        run: &run,
        lease,
        step: batch.step,
        call: &batch.calls[0],
        parallel_group: None,
        origin_trust: run.origin_trust,
        sequential: true,
        token: &token,
        worker_id: &lease.worker_id,
        ledger: None,
    };
    ToolPipeline::new(env).propose_as_earlier_build(&site)
}
