//! Runs (SPEC §8): the row, its states, leases and limits. Only [`state::transition`] changes a
//! run's status.

pub mod abandon;
pub mod cancel;
pub mod cancel_request;
pub mod checkpoint;
pub mod executor;
pub mod first_write;
pub mod state;
pub mod step_writes;
pub mod submit;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ids::{RunId, SessionId};
use crate::scope::ScopeSet;
use crate::time::Timestamp;
use crate::vocab::{FailureReason, RunStatus, TrustLevel};

/// Budgets of SPEC §8.4, with their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default = "Limits::default_max_steps")]
    pub max_steps: u32,
    #[serde(default = "Limits::default_max_tool_calls")]
    pub max_tool_calls: u32,
    #[serde(default)]
    pub deadline_seconds: Option<u32>,
}

impl Limits {
    fn default_max_steps() -> u32 {
        16
    }
    fn default_max_tool_calls() -> u32 {
        32
    }

    /// Checks the ranges of SPEC §8.4; the message names the offending limit.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=1000).contains(&self.max_steps) {
            return Err("limits.max_steps must be in 1..=1000".to_owned());
        }
        if !(1..=10_000).contains(&self.max_tool_calls) {
            return Err("limits.max_tool_calls must be in 1..=10000".to_owned());
        }
        if self
            .deadline_seconds
            .is_some_and(|d| !(1..=604_800).contains(&d))
        {
            return Err("limits.deadline_seconds must be in 1..=604800".to_owned());
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: Self::default_max_steps(),
            max_tool_calls: Self::default_max_tool_calls(),
            deadline_seconds: None,
        }
    }
}

/// Why and when a run failed (`runs.failure`, `run.failed` payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub reason: FailureReason,
    pub message: String,
    pub step_number: u32,
    pub occurred_at: Timestamp,
}

impl Failure {
    pub fn new(reason: FailureReason, step_number: u32, occurred_at: Timestamp) -> Failure {
        Failure {
            reason,
            message: reason.message().to_owned(),
            step_number,
            occurred_at,
        }
    }
}

/// A run's state with exactly the data that state owns: the lease exists only while running
/// (SPEC §16 #28), the final message only when completed, the failure only when failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    Queued {
        scheduled_for: Option<Timestamp>,
    },
    Running {
        lease_owner: String,
        lease_expires_at: Timestamp,
    },
    WaitingForApproval,
    Completed {
        final_message: String,
    },
    Failed {
        failure: Failure,
    },
    Cancelled,
}

impl RunState {
    pub fn status(&self) -> RunStatus {
        match self {
            RunState::Queued { .. } => RunStatus::Queued,
            RunState::Running { .. } => RunStatus::Running,
            RunState::WaitingForApproval => RunStatus::WaitingForApproval,
            RunState::Completed { .. } => RunStatus::Completed,
            RunState::Failed { .. } => RunStatus::Failed,
            RunState::Cancelled => RunStatus::Cancelled,
        }
    }
}

/// One row of `runs` (SPEC §14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub id: RunId,
    pub session_id: SessionId,
    pub tenant_id: String,
    pub principal_id: String,
    pub principal_scopes: ScopeSet,
    pub origin_trust: TrustLevel,
    pub planner_kind: String,
    /// The planner's input (a scripted run's whole script, up to megabytes), shared: it never
    /// changes after SUBMIT, and a run is cloned on every update (a copied megabyte script
    /// per clone cost a 990-step run most of its time in page faults).
    pub planner_input: Arc<str>,
    pub state: RunState,
    pub step_count: u32,
    pub tool_call_count: u32,
    pub limits: Limits,
    pub deadline_at: Option<Timestamp>,
    pub lease_epoch: u64,
    pub attempts: u32,
    pub cancel_requested_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A run as a list shows it (`runs list`): every column but the planner input, which for a
/// scripted run is the whole script (up to megabytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    pub id: RunId,
    pub session_id: SessionId,
    pub tenant_id: String,
    pub principal_id: String,
    pub planner_kind: String,
    pub status: RunStatus,
    pub step_count: u32,
    pub tool_call_count: u32,
    pub attempts: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&Run> for RunSummary {
    fn from(run: &Run) -> RunSummary {
        RunSummary {
            id: run.id,
            session_id: run.session_id,
            tenant_id: run.tenant_id.clone(),
            principal_id: run.principal_id.clone(),
            planner_kind: run.planner_kind.clone(),
            status: run.status(),
            step_count: run.step_count,
            tool_call_count: run.tool_call_count,
            attempts: run.attempts,
            created_at: run.created_at,
            updated_at: run.updated_at,
        }
    }
}

impl Run {
    pub fn status(&self) -> RunStatus {
        self.state.status()
    }

    /// The lease this run is held under, if running.
    pub fn lease(&self) -> Option<Lease> {
        match &self.state {
            RunState::Running { lease_owner, .. } => Some(Lease {
                run_id: self.id,
                worker_id: lease_owner.clone(),
                lease_epoch: self.lease_epoch,
            }),
            _ => None,
        }
    }

    /// The fields that never change after SUBMIT, for the store's immutability check.
    pub fn same_identity(&self, other: &Run) -> bool {
        self.id == other.id
            && self.session_id == other.session_id
            && self.tenant_id == other.tenant_id
            && self.principal_id == other.principal_id
            && self.principal_scopes == other.principal_scopes
            && self.origin_trust == other.origin_trust
            && self.planner_kind == other.planner_kind
            && self.planner_input == other.planner_input
            && self.limits == other.limits
            && self.deadline_at == other.deadline_at
            && self.created_at == other.created_at
    }
}

/// A worker's claim on a running run. Every worker transaction starts by checking it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    pub run_id: RunId,
    pub worker_id: String,
    pub lease_epoch: u64,
}

/// The expected current state of a guarded run update: `WHERE id = ? AND status = ? [AND
/// lease_owner = ? AND lease_epoch = ?]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunGuard {
    pub run_id: RunId,
    pub status: RunStatus,
    pub lease: Option<Lease>,
}

/// What a heartbeat learns besides renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatObs {
    pub cancel_requested_at: Option<Timestamp>,
}
