//! The gateway's side of approval tasks (SPEC §22.3 item 1), free of I/O but the store's: open a
//! task for a parked call run, read one for a poll, cancel one. The rules are
//! [`crate::conversation::task`]'s; this holds the store and clock they run against, for one
//! client principal.

use crate::conversation::task::{
    CallTask, TASK_ID_PREFIX, TaskRefused, TaskView, adoptable_in_tx, find_task_in_tx,
    open_task_in_tx, task_id_sha256, task_view_in_tx,
};
use crate::env::Env;
use crate::events::Actor;
use crate::ids::RunId;
use crate::store::{Store, TxError};

/// Tasks of one tenant and principal.
pub struct Tasks<S: Store> {
    env: Env<S>,
    tenant_id: String,
    principal_id: String,
}

/// What a poll read.
#[derive(Debug, Clone, PartialEq)]
pub struct Polled {
    pub task: CallTask,
    pub view: TaskView,
    /// It can execute now: the poller should adopt it
    /// ([`crate::connection::live::LiveConnection::adopt`]) unless it serves it already; the
    /// store's claim keeps it to one execution whoever else drives it.
    pub adoptable: bool,
}

impl<S: Store> Tasks<S> {
    pub fn new(env: Env<S>, tenant_id: &str, principal_id: &str) -> Tasks<S> {
        Tasks {
            env,
            tenant_id: tenant_id.to_owned(),
            principal_id: principal_id.to_owned(),
        }
    }

    /// OPEN-TASK for the parked call run `run`: the task's id, which only the client is told
    /// (the store keeps its SHA-256). Two random UUIDs make it: 244 random bits.
    pub fn open(&self, run: RunId) -> Result<String, TxError> {
        let id = format!(
            "{TASK_ID_PREFIX}{}{}",
            self.env.new_uuid().simple(),
            self.env.new_uuid().simple()
        );
        let task = CallTask {
            id_sha256: task_id_sha256(&id),
            run_id: run,
            tenant_id: self.tenant_id.clone(),
            principal_id: self.principal_id.clone(),
            created_at: self.env.clock.now(),
        };
        self.env.transact(|tx| open_task_in_tx(tx, &task))?;
        Ok(id)
    }

    /// `tasks/get`: where task `id` stands, if it is this principal's.
    pub fn poll(&self, id: &str) -> Result<Result<Polled, TaskRefused>, TxError> {
        let now = self.env.clock.now();
        self.env.read(|tx| {
            let task = match find_task_in_tx(tx, id, &self.tenant_id, &self.principal_id)? {
                Ok(task) => task,
                Err(refused) => return Ok(Err(refused)),
            };
            let view = task_view_in_tx(tx, &task)?;
            let adoptable = adoptable_in_tx(tx, &task, now)?;
            Ok(Ok(Polled {
                task,
                view,
                adoptable,
            }))
        })
    }

    /// `tasks/cancel`: a client cancel of the task's run (SPEC §8.5): a parked call is
    /// cancelled with its approval; a running one stops at its next observation point. A task
    /// that has ended is [`TaskRefused::Ended`].
    pub fn cancel(&self, id: &str) -> Result<Result<RunId, TaskRefused>, TxError> {
        let now = self.env.clock.now();
        let actor = Actor::principal(&self.principal_id);
        self.env.transact(|tx| {
            let task = match find_task_in_tx(tx, id, &self.tenant_id, &self.principal_id)? {
                Ok(task) => task,
                Err(refused) => return Ok(Err(refused)),
            };
            let run = tx.run(task.run_id)?.ok_or(TxError::NotFound)?;
            if run.status().is_terminal() {
                return Ok(Err(TaskRefused::Ended(id.chars().take(64).collect())));
            }
            crate::run::cancel_request::request_cancel_in_tx(tx, &run, &actor, now)?;
            Ok(Ok(run.id))
        })
    }
}
