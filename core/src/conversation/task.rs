//! Approvals as tasks (SPEC §22.3 item 1): a client that declared the
//! `io.modelcontextprotocol/tasks` extension is answered a task the moment its call parks, and
//! polls it (`tasks/get`) instead of holding its request open through a human's review.
//!
//! **The call run is the task.** A task row binds an unguessable id to the call's run, its
//! tenant and its principal; only the id's SHA-256 is stored (as API tokens are), so a reader
//! of the store cannot poll or cancel another's task. Its status is never stored: it is read
//! from the run and its call ([`task_view_in_tx`]) by whichever process answers the poll, so a
//! restart, or another gateway process on the store, answers it the same.
//!
//! **A task's call executes without a request waiting.** Outside tasks an approved call runs
//! only while a request waits for it (§22.3); a task stands for its request, so once approved
//! the call executes at once (revalidated, §10.3) and its answer is kept for the next poll. The
//! process that answered the call drives it; after that process is gone, a poll through any
//! other process adopts the run and the store's claim lets exactly one of them execute it.

use serde_json::json;

use crate::approval::Approval;
use crate::conversation::answer::{CallAnswer, CallState, call_state};
pub use crate::conversation::record::CallTask;
use crate::conversation::{MCP_PLANNER_KIND, call_id_of, process_event};
use crate::events::EventType;
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::RunStatus;

/// The prefix of a task id as clients see it.
pub const TASK_ID_PREFIX: &str = "tsk_";

/// The stored form of the task id `id` a client sent.
pub fn task_id_sha256(id: &str) -> String {
    crate::canonical::sha256_hex(id.as_bytes())
}

/// Where a task stands, read from its run and call.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskView {
    /// The call waits for its approval: pending, or approved and about to execute.
    Waiting { approval: Box<Approval> },
    /// Authorized and executing, or queued to.
    Working,
    /// The call's answer: executed, failed, denied, expired or UNCERTAIN (§19.3's texts).
    Answered(CallAnswer),
    /// The run ended without an answer to the call: cancelled (a client's `tasks/cancel`, §8.5)
    /// before the call was sent.
    Cancelled,
}

/// Why a task request was refused (each is −32602 to the client: another's task and an unknown
/// one are told the same).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskRefused {
    #[error("no task {0} of yours")]
    Unknown(String),
    #[error("task {0} has ended")]
    Ended(String),
}

/// OPEN-TASK inside a transaction: the row, and `mcp.task.opened` naming the run. The run must be
/// a call run of `task`'s tenant and principal.
pub fn open_task_in_tx(tx: &mut dyn StoreTx, task: &CallTask) -> Result<(), TxError> {
    let run = tx.run(task.run_id)?.ok_or(TxError::NotFound)?;
    if run.planner_kind != MCP_PLANNER_KIND
        || run.tenant_id != task.tenant_id
        || run.principal_id != task.principal_id
    {
        return Err(TxError::Conflict(format!(
            "call_tasks: run {} is not a call run of {}/{}",
            run.id, task.tenant_id, task.principal_id
        )));
    }
    tx.insert_call_task(task)?;
    tx.append_process_event(&process_event(
        EventType::McpTaskOpened,
        format!("mcp.task.opened:{}", task.run_id),
        json!({
            "run_id": task.run_id.to_string(),
            "tenant_id": task.tenant_id,
            "principal_id": task.principal_id,
        }),
        task.created_at,
    ))?;
    Ok(())
}

/// The task `id` of `tenant` and `principal`, or why not: an id unknown, or of anyone else, is
/// [`TaskRefused::Unknown`] (a prober learns nothing of others' tasks).
pub fn find_task_in_tx(
    tx: &mut dyn StoreTx,
    id: &str,
    tenant: &str,
    principal: &str,
) -> Result<Result<CallTask, TaskRefused>, TxError> {
    Ok(match tx.call_task(&task_id_sha256(id))? {
        Some(task) if task.tenant_id == tenant && task.principal_id == principal => Ok(task),
        _ => Err(TaskRefused::Unknown(short(id))),
    })
}

/// At most 64 characters of a client's id, for an error message.
fn short(id: &str) -> String {
    id.chars().take(64).collect()
}

/// Where `task` stands now.
pub fn task_view_in_tx(tx: &mut dyn StoreTx, task: &CallTask) -> Result<TaskView, TxError> {
    let run = tx.run(task.run_id)?.ok_or(TxError::NotFound)?;
    Ok(match call_state(tx, run.id, 1, &call_id_of(1))? {
        CallState::Parked { approval } => TaskView::Waiting { approval },
        // A cancel (a client's `tasks/cancel`, §8.5) that ended the run before the call was
        // sent closes the call "not performed": the task was cancelled, not answered. A call
        // that ran before the cancel took effect keeps its answer.
        CallState::Answered(CallAnswer::Denied { .. }) if run.status() == RunStatus::Cancelled => {
            TaskView::Cancelled
        }
        CallState::Answered(answer) => TaskView::Answered(answer),
        CallState::InFlight | CallState::Unrecorded => match run.status() {
            RunStatus::Cancelled => TaskView::Cancelled,
            status if status.is_terminal() => TaskView::Answered(CallAnswer::Denied {
                reason_code: crate::invocation::outcome::codes::INTERNAL_ERROR.to_owned(),
                message: format!("Not performed. The call's run ended {status} before it ran."),
            }),
            _ => TaskView::Working,
        },
    })
}

/// Whether the process answering a poll of `task` should adopt its run: its approval is
/// approved and unexpired, or it is past approval and not terminal. The store cannot say
/// whether another live process drives it (a dead one's run looks the same), so the poller
/// adopts whenever it could run now; if another process drives it too, the store's claim lets
/// one of them execute it and the other follows it to its end. A pending approval needs nobody
/// yet; a denied or expired one is recorded by whoever drives or sweeps the run.
pub fn adoptable_in_tx(
    tx: &mut dyn StoreTx,
    task: &CallTask,
    now: Timestamp,
) -> Result<bool, TxError> {
    Ok(match task_view_in_tx(tx, task)? {
        TaskView::Waiting { approval } => {
            approval.status == crate::vocab::ApprovalStatus::Approved && approval.expires_at > now
        }
        TaskView::Working => true,
        TaskView::Answered(_) | TaskView::Cancelled => false,
    })
}
