//! `MemStore`: the in-memory [`Store`] that core's tests and the simulator run on (SPEC §2.2,
//! §14 last paragraph, §16 #15, #19, #27–#29, #40).
//!
//! **Transactions.** All committed state lives in one `Mutex<Tables>`. [`Store::transact`] holds
//! the lock for the whole transaction (so transactions are serialized, like SQLite's
//! `BEGIN IMMEDIATE`), runs `f` on a clone of the committed tables and swaps the clone in only
//! if `f` returned `Ok`. An `Err` or a panic inside `f` therefore leaves the committed tables
//! untouched; a poisoned mutex is recovered with `into_inner`, because the only state behind it
//! is the last committed one. Every `StoreTx` method is itself atomic: it checks everything
//! before it writes, so a caller that handles an `Err` and carries on sees no partial write —
//! as with one SQL statement.
//!
//! **Crash model.** The committed tables are the durable state. A host "crash" in the
//! simulator is dropping everything else (provenance maps, tokens, in-flight futures, heartbeat
//! tasks); the `MemStore` survives and the restarted node opens it as it is.
//!
//! **Rules.** The store enforces the rules SPEC §14 requires of the simulator store — guarded
//! run updates (a lease mismatch is `Fenced`, a status mismatch `Conflict`), the lease CHECK
//! (by construction of [`RunState`]) and the uniqueness of `derivation_key`, `(session_id,
//! sequence)`, `idempotency_key`, `(run_id, step_number, call_id)`, `approvals.action_id` and
//! one non-terminal run per session — and, because they are cheap here, the other CHECKs and
//! append-only rules of §14 plus a few defence-in-depth rules beyond the schema: the run edges
//! of §8.1, `lease_epoch` advancing only at CLAIM, `attempts` growing only when a run leaves
//! RUNNING, the watermark being written only by START, outcome/status agreement (these update
//! rules are [`crate::store::guards`], which the SQL stores call too), object payloads, foreign
//! keys (`NotFound`) and settlements only of UNCERTAIN invocations. Every violation is `Conflict`
//! with a message naming the rule. Nested `transact` calls on the same store from inside `f`
//! deadlock, as they would block on SQLite's write lock.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::access::ApiToken;
use crate::approval::Approval;
use crate::conversation::request_state::StateKey;
use crate::conversation::task::CallTask;
use crate::conversation::{Connection, ConnectionState, ConnectionStatus, ConversationKey};
use crate::events::{Event, EventType, NewEvent, ProcessEvent};
use crate::ids::{
    ApiTokenId, ApprovalId, ConnectionId, InvocationId, NotifyTargetId, RunId, SessionId,
    SettlementId,
};
use crate::invocation::Invocation;
use crate::notify::target::{NotifyLease, NotifyTarget, Progress};
use crate::run::checkpoint::{Checkpoint, StepRecord};
use crate::run::{HeartbeatObs, Lease, Run, RunGuard, RunState, RunSummary};
use crate::session::{PolicyProfileRecord, Session, Settlement};
use crate::store::{
    ApprovalCursor, CallIdentity, CreatedPage, RunCursor, Store, StoreTx, Twin, TwinScope, TxError,
    guards,
};
use crate::time::Timestamp;
use crate::vocab::{ApprovalStatus, InvocationStatus, RunStatus};

/// A copy of every committed table, for tests and the simulator's invariant checker.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemSnapshot {
    pub sessions: BTreeMap<SessionId, Session>,
    pub runs: BTreeMap<RunId, Run>,
    /// Keyed `(run_id, version)`, so a run's checkpoints are adjacent and in version order.
    pub checkpoints: BTreeMap<(RunId, u32), Checkpoint>,
    /// Keyed `(run_id, step)`: the append-only history of finished steps (SPEC §17.2).
    pub step_records: BTreeMap<(RunId, u32), StepRecord>,
    pub invocations: BTreeMap<InvocationId, Invocation>,
    pub approvals: BTreeMap<ApprovalId, Approval>,
    /// In id order, which is commit order.
    pub events: Vec<Event>,
    /// In commit order.
    pub process_events: Vec<ProcessEvent>,
    pub settlements: BTreeMap<SettlementId, Settlement>,
    pub policy_profiles: BTreeMap<String, PolicyProfileRecord>,
    /// Gateway connections (SPEC §19.4), at most one per session.
    pub connections: BTreeMap<ConnectionId, Connection>,
    /// SPEC §20.
    pub api_tokens: BTreeMap<ApiTokenId, ApiToken>,
    /// SPEC §22.3 item 1: by the SHA-256 of their ids.
    pub call_tasks: BTreeMap<String, CallTask>,
    /// SPEC §22.3 item 2: `requestState` sealing keys, by id.
    pub state_keys: BTreeMap<String, StateKey>,
    /// Issue 32 item 1: notification targets, removed ones included.
    pub notify_targets: BTreeMap<NotifyTargetId, NotifyTarget>,
    /// Issue 32 item 1: the notifier lease of each tenant.
    pub notify_leases: BTreeMap<String, NotifyLease>,
}

/// The committed state: the rows plus the indexes that make uniqueness checks and lookups cheap.
/// Indexes are derived data; they are cloned and swapped with the rows, so they never disagree.
#[derive(Debug, Clone, Default)]
struct Tables {
    rows: MemSnapshot,
    invocation_by_key: BTreeMap<String, InvocationId>,
    invocation_by_call: BTreeMap<(RunId, u32, String), InvocationId>,
    approval_by_action: BTreeMap<InvocationId, ApprovalId>,
    /// Position in `rows.events` of each derivation key.
    event_by_key: BTreeMap<String, usize>,
    /// `UNIQUE(session_id, sequence)`, with the event's position.
    event_by_sequence: BTreeMap<(SessionId, u64), usize>,
    /// The `(run_id, id)` index of SPEC §14, with the event's position.
    event_by_run: BTreeMap<(RunId, i64), usize>,
    /// Position in `rows.process_events` of each derivation key.
    process_event_by_key: BTreeMap<String, usize>,
    settlement_by_invocation: BTreeMap<InvocationId, SettlementId>,
    /// `UNIQUE(token_sha256)` of `api_tokens`.
    api_token_by_digest: BTreeMap<String, ApiTokenId>,
}

/// The in-memory store. Cheap to share behind an `Arc`; see the module docs for its semantics.
#[derive(Debug, Default)]
pub struct MemStore {
    tables: Mutex<Tables>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// A copy of every committed table. Never observes a transaction in progress: the lock is
    /// held by `transact` until it commits or rolls back.
    pub fn snapshot(&self) -> MemSnapshot {
        self.lock().rows.clone()
    }

    /// Reads the committed tables without copying them, for checkers that scan large histories.
    /// `f` must not call back into this store (the lock is held).
    pub fn inspect<R>(&self, f: impl FnOnce(&MemSnapshot) -> R) -> R {
        f(&self.lock().rows)
    }

    /// The committed tables. A panic inside a transaction poisons the mutex but cannot have
    /// touched the committed tables (it ran on a clone), so the poison is harmless.
    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Store for MemStore {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let mut committed = self.lock();
        let mut working = committed.clone();
        let result = f(&mut MemTx {
            tables: &mut working,
        });
        if result.is_ok() {
            *committed = working;
        }
        result
    }

    /// Runs `f` on a copy that is never committed, and refuses the read if `f` changed it: a
    /// write inside a read is a bug that the SQLite store's read-only connections would also
    /// refuse.
    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let committed = self.lock();
        let mut working = committed.clone();
        let result = f(&mut MemTx {
            tables: &mut working,
        });
        if working.rows != committed.rows {
            return Err(TxError::Backend(
                "a read-only transaction tried to write".to_owned(),
            ));
        }
        result
    }
}

/// One transaction: exclusive access to the working copy of the tables.
struct MemTx<'a> {
    tables: &'a mut Tables,
}

fn conflict(message: impl Into<String>) -> TxError {
    TxError::Conflict(message.into())
}

/// Whether `error` is one of this store's refusals of a write that breaks a rule of the rows
/// (§8.1, §8.2, §9.1, §10.1, §13, §14: an illegal transition, an epoch or attempts change, a
/// rewritten watermark or immutable field, a failed CHECK, a duplicate id, a sequence gap),
/// rather than a race the spec expects (a guarded status that changed, a duplicate key at
/// PROPOSE, one active run per session, a second settlement). The simulator reports the former
/// as violations: core then abandons and recovers, which would otherwise hide the bug. The
/// fragments are those of the messages in this file and in `store::guards`; keep them in step.
pub fn is_rule_breach(error: &TxError) -> bool {
    const RULES: [&str; 17] = [
        "invalid run transition",
        "invalid invocation transition",
        "lease_epoch",
        "lease owner changes only",
        "attempts grows",
        "CHECK ",
        "does not match status",
        "immutable field",
        "not contiguous",
        "session_id differs",
        "terminal invocation",
        "terminal approval",
        "effect_sent_at",
        "is not in session",
        "UNIQUE(session_id, sequence)",
        "duplicate id",
        "closed connection",
    ];
    matches!(error, TxError::Conflict(message) if RULES.iter().any(|rule| message.contains(rule)))
}

/// The row CHECKs of `tool_invocations` (SPEC §14), plus outcome/status agreement (MemStore
/// only: `Invocation::close` derives the status from the outcome).
fn check_invocation_row(invocation: &Invocation) -> Result<(), TxError> {
    use InvocationStatus::*;
    let status = invocation.status;
    if invocation.effect_sent_at.is_some()
        && !matches!(status, Running | Succeeded | Failed | Uncertain)
    {
        return Err(conflict(format!(
            "CHECK tool_invocations: effect_sent_at is set only on RUNNING, SUCCEEDED, FAILED or UNCERTAIN rows, not {status}"
        )));
    }
    if status.is_terminal() {
        if invocation.outcome.is_none() {
            return Err(conflict(format!(
                "CHECK tool_invocations: terminal row {status} has no outcome"
            )));
        }
        if invocation.result_item.is_none() {
            return Err(conflict(format!(
                "CHECK tool_invocations: terminal row {status} has no result_item"
            )));
        }
    }
    guards::check_outcome_agrees(invocation)
}

/// The row CHECKs of `approvals` (SPEC §14).
fn check_approval_row(approval: &Approval) -> Result<(), TxError> {
    let resolved = matches!(
        approval.status,
        ApprovalStatus::Approved | ApprovalStatus::Denied
    );
    if resolved != approval.resolution.is_some() {
        return Err(conflict(format!(
            "CHECK approvals: (status IN ('approved','denied')) = (resolution IS NOT NULL) fails for {}",
            approval.status
        )));
    }
    if (approval.status == ApprovalStatus::Pending) != approval.resolved_at.is_none() {
        return Err(conflict(format!(
            "CHECK approvals: (status = 'pending') = (resolved_at IS NULL) fails for {}",
            approval.status
        )));
    }
    Ok(())
}

impl MemTx<'_> {
    /// The session's active run that shares its session with no other: any but a call run.
    fn active_run(&self, session: SessionId) -> Option<RunId> {
        self.tables
            .rows
            .runs
            .values()
            .find(|r| {
                r.session_id == session
                    && !r.status().is_terminal()
                    && r.planner_kind != crate::conversation::MCP_PLANNER_KIND
            })
            .map(|r| r.id)
    }

    fn latest_version(&self, run: RunId) -> Option<u32> {
        self.tables
            .rows
            .checkpoints
            .range((run, 0)..=(run, u32::MAX))
            .next_back()
            .map(|((_, version), _)| *version)
    }
}

impl StoreTx for MemTx<'_> {
    fn insert_session(&mut self, session: &Session) -> Result<(), TxError> {
        if self.tables.rows.sessions.contains_key(&session.id) {
            return Err(conflict(format!("sessions: duplicate id {}", session.id)));
        }
        // §13.1: a session's first event is sequence 1 (SQLite's CHECK in §14 refuses 0 too).
        if session.next_event_sequence < 1 {
            return Err(conflict("sessions: next_event_sequence must be at least 1"));
        }
        self.tables
            .rows
            .sessions
            .insert(session.id, session.clone());
        Ok(())
    }

    fn session(&mut self, id: SessionId) -> Result<Option<Session>, TxError> {
        Ok(self.tables.rows.sessions.get(&id).cloned())
    }

    fn insert_run(&mut self, run: &Run) -> Result<(), TxError> {
        if self.tables.rows.runs.contains_key(&run.id) {
            return Err(conflict(format!("runs: duplicate id {}", run.id)));
        }
        if !self.tables.rows.sessions.contains_key(&run.session_id) {
            return Err(TxError::NotFound);
        }
        if !run.status().is_terminal()
            && run.planner_kind != crate::conversation::MCP_PLANNER_KIND
            && let Some(active) = self.active_run(run.session_id)
        {
            return Err(conflict(format!(
                "uq_runs_one_active_per_session: session {} already has run {active}",
                run.session_id
            )));
        }
        self.tables.rows.runs.insert(run.id, run.clone());
        Ok(())
    }

    fn run(&mut self, id: RunId) -> Result<Option<Run>, TxError> {
        Ok(self.tables.rows.runs.get(&id).cloned())
    }

    fn active_runs_in_session(&mut self, session: SessionId) -> Result<Vec<RunId>, TxError> {
        let mut active: Vec<&Run> = self
            .tables
            .rows
            .runs
            .values()
            .filter(|r| r.session_id == session && !r.status().is_terminal())
            .collect();
        active.sort_by_key(|r| (r.created_at, r.id));
        Ok(active.into_iter().map(|r| r.id).collect())
    }

    fn guard_lease(&mut self, lease: &Lease) -> Result<(), TxError> {
        #[cfg(feature = "mutants")]
        if crate::testing::mutants::skip_fencing() {
            return Ok(());
        }
        match self.tables.rows.runs.get(&lease.run_id) {
            Some(run) if guards::holds(run, lease) => Ok(()),
            _ => Err(TxError::Fenced),
        }
    }

    fn update_run(&mut self, guard: &RunGuard, next: &Run) -> Result<Run, TxError> {
        guards::check_run_update(guard, self.tables.rows.runs.get(&guard.run_id), next)?;
        self.tables.rows.runs.insert(next.id, next.clone());
        Ok(next.clone())
    }

    /// Exactly the statement of SPEC §8.2: it renews any lease that still holds, even one past
    /// its expiry that no RECLAIM has taken yet, and touches nothing else (`now` is unused).
    fn heartbeat(
        &mut self,
        lease: &Lease,
        until: Timestamp,
        _now: Timestamp,
    ) -> Result<Option<HeartbeatObs>, TxError> {
        let Some(run) = self.tables.rows.runs.get_mut(&lease.run_id) else {
            return Ok(None);
        };
        if !guards::holds(run, lease) {
            return Ok(None);
        }
        if let RunState::Running {
            lease_expires_at, ..
        } = &mut run.state
        {
            *lease_expires_at = until;
        }
        Ok(Some(HeartbeatObs {
            cancel_requested_at: run.cancel_requested_at,
        }))
    }

    fn next_claimable_run(
        &mut self,
        now: Timestamp,
        only: Option<RunId>,
    ) -> Result<Option<Run>, TxError> {
        let due = |run: &&Run| match run.state {
            RunState::Queued { scheduled_for } => scheduled_for.is_none_or(|at| at <= now),
            _ => false,
        };
        let wanted = |run: &&Run| only.is_none_or(|id| run.id == id);
        // A call run is claimed by id only (by its gateway, or by the orphan sweep).
        let claimable = |run: &&Run| {
            only.is_some() || run.planner_kind != crate::conversation::MCP_PLANNER_KIND
        };
        Ok(self
            .tables
            .rows
            .runs
            .values()
            .filter(due)
            .filter(wanted)
            .filter(claimable)
            .min_by_key(|r| (r.created_at, r.id))
            .cloned())
    }

    fn expired_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Run>, TxError> {
        let mut expired: Vec<(Timestamp, &Run)> = self
            .tables
            .rows
            .runs
            .values()
            .filter_map(|run| match run.state {
                RunState::Running {
                    lease_expires_at, ..
                } if lease_expires_at <= now => Some((lease_expires_at, run)),
                _ => None,
            })
            .collect();
        expired.sort_by_key(|(expires_at, run)| (*expires_at, run.id));
        Ok(expired
            .into_iter()
            .take(limit)
            .map(|(_, run)| run.clone())
            .collect())
    }

    fn insert_connection(&mut self, connection: &Connection) -> Result<(), TxError> {
        let connections = &self.tables.rows.connections;
        if connections.contains_key(&connection.id) {
            return Err(conflict(format!(
                "connections: duplicate id {}",
                connection.id
            )));
        }
        if connections
            .values()
            .any(|c| c.session_id == connection.session_id)
        {
            return Err(conflict(format!(
                "connections: UNIQUE(session_id): session {} already has a connection",
                connection.session_id
            )));
        }
        if let Some(key) = &connection.conversation_key
            && connection.is_open()
            && connections.values().any(|c| {
                c.is_open()
                    && c.tenant_id == connection.tenant_id
                    && c.conversation_key.as_ref() == Some(key)
            })
        {
            return Err(conflict(format!(
                "connections: UNIQUE(tenant_id, conversation_key) WHERE open: conversation {key} is open"
            )));
        }
        if !self
            .tables
            .rows
            .sessions
            .contains_key(&connection.session_id)
        {
            return Err(TxError::NotFound);
        }
        self.tables
            .rows
            .connections
            .insert(connection.id, connection.clone());
        Ok(())
    }

    fn connection(&mut self, id: ConnectionId) -> Result<Option<Connection>, TxError> {
        Ok(self.tables.rows.connections.get(&id).cloned())
    }

    fn connection_by_session(&mut self, session: SessionId) -> Result<Option<Connection>, TxError> {
        Ok(self
            .tables
            .rows
            .connections
            .values()
            .find(|c| c.session_id == session)
            .cloned())
    }

    fn insert_state_key(&mut self, key: &StateKey) -> Result<(), TxError> {
        if self.tables.rows.state_keys.contains_key(&key.id) {
            return Err(conflict(format!("state_keys: duplicate id {}", key.id)));
        }
        self.tables
            .rows
            .state_keys
            .insert(key.id.clone(), key.clone());
        Ok(())
    }

    fn state_key(&mut self, id: &str) -> Result<Option<StateKey>, TxError> {
        Ok(self.tables.rows.state_keys.get(id).cloned())
    }

    fn newest_state_key(&mut self) -> Result<Option<StateKey>, TxError> {
        Ok(self
            .tables
            .rows
            .state_keys
            .values()
            .max_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)))
            .cloned())
    }

    fn insert_call_task(&mut self, task: &CallTask) -> Result<(), TxError> {
        let tasks = &self.tables.rows.call_tasks;
        if tasks.contains_key(&task.id_sha256) {
            return Err(conflict("call_tasks: duplicate id".to_owned()));
        }
        if tasks.values().any(|t| t.run_id == task.run_id) {
            return Err(conflict(format!(
                "call_tasks: UNIQUE(run_id): run {} has a task",
                task.run_id
            )));
        }
        if !self.tables.rows.runs.contains_key(&task.run_id) {
            return Err(TxError::NotFound);
        }
        self.tables
            .rows
            .call_tasks
            .insert(task.id_sha256.clone(), task.clone());
        Ok(())
    }

    fn call_task(&mut self, id_sha256: &str) -> Result<Option<CallTask>, TxError> {
        Ok(self.tables.rows.call_tasks.get(id_sha256).cloned())
    }

    fn call_task_of_run(&mut self, run: RunId) -> Result<Option<CallTask>, TxError> {
        Ok(self
            .tables
            .rows
            .call_tasks
            .values()
            .find(|task| task.run_id == run)
            .cloned())
    }

    fn open_connection_by_key(
        &mut self,
        tenant: &str,
        key: &ConversationKey,
    ) -> Result<Option<Connection>, TxError> {
        Ok(self
            .tables
            .rows
            .connections
            .values()
            .find(|c| {
                c.is_open() && c.tenant_id == tenant && c.conversation_key.as_ref() == Some(key)
            })
            .cloned())
    }

    fn update_connection(
        &mut self,
        expected: ConnectionStatus,
        next: &Connection,
    ) -> Result<(), TxError> {
        let Some(current) = self.tables.rows.connections.get(&next.id) else {
            return Err(TxError::NotFound);
        };
        guards::check_connection_update(expected, current, next)?;
        self.tables.rows.connections.insert(next.id, next.clone());
        Ok(())
    }

    fn connections_of_tenant(
        &mut self,
        tenant: &str,
        limit: usize,
    ) -> Result<Vec<Connection>, TxError> {
        let mut of_tenant: Vec<&Connection> = self
            .tables
            .rows
            .connections
            .values()
            .filter(|c| c.tenant_id == tenant)
            .collect();
        of_tenant.sort_by_key(|c| std::cmp::Reverse((c.opened_at, c.id)));
        Ok(of_tenant.into_iter().take(limit).cloned().collect())
    }

    fn expired_connections(
        &mut self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Connection>, TxError> {
        let mut expired: Vec<(Timestamp, &Connection)> = self
            .tables
            .rows
            .connections
            .values()
            .filter_map(|c| match c.state {
                ConnectionState::Open { alive_until } if alive_until <= now => {
                    Some((alive_until, c))
                }
                _ => None,
            })
            .collect();
        expired.sort_by_key(|(until, c)| (*until, c.id));
        Ok(expired
            .into_iter()
            .take(limit)
            .map(|(_, c)| c.clone())
            .collect())
    }

    fn orphaned_call_runs(&mut self, now: Timestamp, limit: usize) -> Result<Vec<RunId>, TxError> {
        let rows = &self.tables.rows;
        let closed = |session: SessionId| {
            rows.connections
                .values()
                .any(|c| c.session_id == session && !c.is_open())
        };
        let mut orphans: Vec<&Run> = rows
            .runs
            .values()
            .filter(|run| {
                run.planner_kind == crate::conversation::MCP_PLANNER_KIND
                    && matches!(run.state, RunState::Queued { scheduled_for } if scheduled_for.is_none_or(|at| at <= now))
                    && closed(run.session_id)
            })
            .collect();
        orphans.sort_by_key(|run| (run.created_at, run.id));
        Ok(orphans.into_iter().take(limit).map(|run| run.id).collect())
    }

    fn waiting_call_approvals(
        &mut self,
        tenant: &str,
        principal: &str,
        tool: &str,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Approval>, TxError> {
        let rows = &self.tables.rows;
        let mut waiting: Vec<&Approval> = rows
            .approvals
            .values()
            .filter(|a| {
                a.tenant_id == tenant
                    && a.principal_id == principal
                    && a.tool_name == tool
                    && a.requested_at.is_some()
                    && matches!(a.status, ApprovalStatus::Pending | ApprovalStatus::Approved)
                    && a.expires_at > now
                    && rows
                        .invocations
                        .get(&a.action_id)
                        .is_some_and(|i| i.status == InvocationStatus::WaitingForApproval)
            })
            .collect();
        waiting.sort_by_key(|a| (a.created_at, a.id));
        Ok(waiting.into_iter().take(limit).cloned().collect())
    }

    fn runs_of_tenant(
        &mut self,
        tenant: &str,
        after: Option<RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunSummary>, TxError> {
        let mut rows: Vec<&Run> = self
            .tables
            .rows
            .runs
            .values()
            .filter(|r| r.tenant_id == tenant)
            .filter(|r| after.is_none_or(|c| (r.created_at, r.id) < (c.created_at, c.id)))
            .collect();
        rows.sort_by_key(|r| Reverse((r.created_at, r.id)));
        Ok(rows.into_iter().take(limit).map(RunSummary::from).collect())
    }

    fn count_runs(&mut self, status: RunStatus) -> Result<u64, TxError> {
        let count = self
            .tables
            .rows
            .runs
            .values()
            .filter(|r| r.status() == status)
            .count();
        u64::try_from(count).map_err(|e| TxError::Backend(e.to_string()))
    }

    fn insert_checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<(), TxError> {
        if !self.tables.rows.runs.contains_key(&checkpoint.run_id) {
            return Err(TxError::NotFound);
        }
        let expected = self
            .latest_version(checkpoint.run_id)
            .map_or(Some(1), |v| v.checked_add(1));
        if expected != Some(checkpoint.version) {
            return Err(conflict(format!(
                "checkpoints: version {} of run {} is not contiguous (expected {})",
                checkpoint.version,
                checkpoint.run_id,
                expected.map_or_else(|| "none".to_owned(), |v| v.to_string())
            )));
        }
        self.tables
            .rows
            .checkpoints
            .insert((checkpoint.run_id, checkpoint.version), checkpoint.clone());
        Ok(())
    }

    fn latest_checkpoint(&mut self, run: RunId) -> Result<Option<Checkpoint>, TxError> {
        Ok(self
            .tables
            .rows
            .checkpoints
            .range((run, 0)..=(run, u32::MAX))
            .next_back()
            .map(|(_, c)| c.clone()))
    }

    fn insert_step_record(
        &mut self,
        record: &StepRecord,
        pending: Option<u32>,
    ) -> Result<(), TxError> {
        if !self.tables.rows.runs.contains_key(&record.run_id) {
            return Err(TxError::NotFound);
        }
        if let Some(version) = pending {
            let holds = self
                .tables
                .rows
                .checkpoints
                .get(&(record.run_id, version))
                .and_then(|c| c.state.pending.as_ref())
                .is_some_and(|batch| {
                    batch.step == record.step
                        && batch.calls.iter().map(|p| &p.call).eq(record.calls.iter())
                });
            if !holds {
                return Err(TxError::Backend(format!(
                    "step_records: checkpoint {version} of run {} does not hold step {}'s calls",
                    record.run_id, record.step
                )));
            }
        }
        let latest = self
            .tables
            .rows
            .step_records
            .range((record.run_id, 0)..=(record.run_id, u32::MAX))
            .next_back()
            .map_or(0, |((_, step), _)| *step);
        if latest.checked_add(1) != Some(record.step) {
            return Err(conflict(format!(
                "step_records: step {} of run {} is not contiguous (latest is {latest})",
                record.step, record.run_id
            )));
        }
        self.tables
            .rows
            .step_records
            .insert((record.run_id, record.step), record.clone());
        Ok(())
    }

    fn step_records(
        &mut self,
        run: RunId,
        after_step: u32,
        limit: usize,
    ) -> Result<Vec<StepRecord>, TxError> {
        let Some(first) = after_step.checked_add(1) else {
            return Ok(Vec::new());
        };
        Ok(self
            .tables
            .rows
            .step_records
            .range((run, first)..=(run, u32::MAX))
            .take(limit)
            .map(|(_, r)| r.clone())
            .collect())
    }

    fn insert_invocation(&mut self, invocation: &Invocation) -> Result<(), TxError> {
        let tables = &*self.tables;
        if tables.rows.invocations.contains_key(&invocation.id) {
            return Err(conflict(format!(
                "tool_invocations: duplicate id {}",
                invocation.id
            )));
        }
        if tables
            .invocation_by_key
            .contains_key(&invocation.idempotency_key)
        {
            return Err(conflict(format!(
                "uq_tool_invocations_idempotency_key: {}",
                invocation.idempotency_key
            )));
        }
        let call = (
            invocation.run_id,
            invocation.step_number,
            invocation.call_id.clone(),
        );
        if tables.invocation_by_call.contains_key(&call) {
            return Err(conflict(format!(
                "tool_invocations: UNIQUE(run_id, step_number, call_id) holds ({}, {}, {})",
                call.0, call.1, call.2
            )));
        }
        let run = tables
            .rows
            .runs
            .get(&invocation.run_id)
            .ok_or(TxError::NotFound)?;
        if run.session_id != invocation.session_id {
            return Err(conflict(
                "tool_invocations: session_id differs from the run's",
            ));
        }
        check_invocation_row(invocation)?;
        let tables = &mut *self.tables;
        tables
            .invocation_by_key
            .insert(invocation.idempotency_key.clone(), invocation.id);
        tables.invocation_by_call.insert(call, invocation.id);
        tables
            .rows
            .invocations
            .insert(invocation.id, invocation.clone());
        Ok(())
    }

    fn invocation(&mut self, id: InvocationId) -> Result<Option<Invocation>, TxError> {
        Ok(self.tables.rows.invocations.get(&id).cloned())
    }

    fn invocation_by_key(&mut self, idempotency_key: &str) -> Result<Option<Invocation>, TxError> {
        let id = self.tables.invocation_by_key.get(idempotency_key);
        Ok(id
            .and_then(|id| self.tables.rows.invocations.get(id))
            .cloned())
    }

    fn invocation_by_call(
        &mut self,
        run: RunId,
        step: u32,
        call_id: &str,
    ) -> Result<Option<Invocation>, TxError> {
        let id = self
            .tables
            .invocation_by_call
            .get(&(run, step, call_id.to_owned()));
        Ok(id
            .and_then(|id| self.tables.rows.invocations.get(id))
            .cloned())
    }

    fn invocations_of_run(&mut self, run: RunId) -> Result<Vec<Invocation>, TxError> {
        let mut rows: Vec<Invocation> = self
            .tables
            .rows
            .invocations
            .values()
            .filter(|i| i.run_id == run)
            .cloned()
            .collect();
        rows.sort_by_key(|i| (i.step_number, i.created_at, i.id));
        Ok(rows)
    }

    fn update_invocation(
        &mut self,
        expected: InvocationStatus,
        next: &Invocation,
    ) -> Result<(), TxError> {
        let current = self
            .tables
            .rows
            .invocations
            .get(&next.id)
            .ok_or(TxError::NotFound)?;
        guards::check_invocation_update(expected, current, next)?;
        check_invocation_row(next)?;
        self.tables.rows.invocations.insert(next.id, next.clone());
        Ok(())
    }

    fn twins(
        &mut self,
        identity: &CallIdentity<'_>,
        scope: TwinScope,
    ) -> Result<Vec<Twin>, TxError> {
        let tables = &*self.tables;
        let mut rows: Vec<Twin> = tables
            .rows
            .invocations
            .values()
            .filter(|i| {
                matches!(
                    i.status,
                    InvocationStatus::Running | InvocationStatus::Uncertain
                ) && i.tenant_id == identity.tenant_id
                    && i.tool_name == identity.tool_name
                    && i.effective_arguments_hash == identity.effective_arguments_hash
                    && match scope {
                        TwinScope::Run(run) => i.run_id == run,
                        TwinScope::Tenant => true,
                    }
            })
            .map(|i| Twin {
                invocation: i.clone(),
                settled: tables.settlement_by_invocation.contains_key(&i.id),
            })
            .collect();
        rows.sort_by_key(|t| (t.invocation.created_at, t.invocation.id));
        Ok(rows)
    }

    fn uncertain_invocations(
        &mut self,
        tenant: &str,
        include_settled: bool,
    ) -> Result<Vec<Invocation>, TxError> {
        let tables = &*self.tables;
        let mut rows: Vec<Invocation> = tables
            .rows
            .invocations
            .values()
            .filter(|i| i.status == InvocationStatus::Uncertain && i.tenant_id == tenant)
            .filter(|i| include_settled || !tables.settlement_by_invocation.contains_key(&i.id))
            .cloned()
            .collect();
        rows.sort_by_key(|i| Reverse((i.updated_at, i.id)));
        Ok(rows)
    }

    fn insert_approval(&mut self, approval: &Approval) -> Result<(), TxError> {
        let tables = &*self.tables;
        if tables.rows.approvals.contains_key(&approval.id) {
            return Err(conflict(format!("approvals: duplicate id {}", approval.id)));
        }
        if let Some(existing) = tables.approval_by_action.get(&approval.action_id) {
            return Err(conflict(format!(
                "uq_approvals_action_id: action {} already has approval {existing}",
                approval.action_id
            )));
        }
        if !tables.rows.runs.contains_key(&approval.run_id) {
            return Err(TxError::NotFound);
        }
        check_approval_row(approval)?;
        let tables = &mut *self.tables;
        tables
            .approval_by_action
            .insert(approval.action_id, approval.id);
        tables.rows.approvals.insert(approval.id, approval.clone());
        Ok(())
    }

    fn approval(&mut self, id: ApprovalId) -> Result<Option<Approval>, TxError> {
        Ok(self.tables.rows.approvals.get(&id).cloned())
    }

    fn approval_by_action(&mut self, action_id: InvocationId) -> Result<Option<Approval>, TxError> {
        let id = self.tables.approval_by_action.get(&action_id);
        Ok(id
            .and_then(|id| self.tables.rows.approvals.get(id))
            .cloned())
    }

    /// By `(created_at, id)`: the order the approvals were proposed in.
    fn approvals_of_run(&mut self, run: RunId) -> Result<Vec<Approval>, TxError> {
        let mut rows: Vec<Approval> = self
            .tables
            .rows
            .approvals
            .values()
            .filter(|a| a.run_id == run)
            .cloned()
            .collect();
        rows.sort_by_key(|a| (a.created_at, a.id));
        Ok(rows)
    }

    fn update_approval(
        &mut self,
        expected: ApprovalStatus,
        next: &Approval,
    ) -> Result<(), TxError> {
        let current = self
            .tables
            .rows
            .approvals
            .get(&next.id)
            .ok_or(TxError::NotFound)?;
        guards::check_approval_update(expected, current, next)?;
        check_approval_row(next)?;
        self.tables.rows.approvals.insert(next.id, next.clone());
        Ok(())
    }

    fn pending_approvals(
        &mut self,
        tenant: &str,
        run: Option<RunId>,
        after: Option<ApprovalCursor>,
        limit: usize,
    ) -> Result<Vec<Approval>, TxError> {
        let mut rows: Vec<&Approval> = self
            .tables
            .rows
            .approvals
            .values()
            .filter(|a| {
                a.status == ApprovalStatus::Pending
                    && a.requested_at.is_some()
                    && a.tenant_id == tenant
            })
            .filter(|a| run.is_none_or(|r| a.run_id == r))
            .filter(|a| after.is_none_or(|c| (a.created_at, a.id) < (c.created_at, c.id)))
            .collect();
        rows.sort_by_key(|a| Reverse((a.created_at, a.id)));
        Ok(rows.into_iter().take(limit).cloned().collect())
    }

    fn due_approvals(
        &mut self,
        now: Timestamp,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Approval>, TxError> {
        let mut rows: Vec<&Approval> = self
            .tables
            .rows
            .approvals
            .values()
            .filter(|a| {
                a.status == ApprovalStatus::Pending
                    && a.requested_at.is_some()
                    && a.expires_at <= now
            })
            .filter(|a| tenant.is_none_or(|t| a.tenant_id == t))
            .collect();
        rows.sort_by_key(|a| (a.expires_at, a.id));
        Ok(rows.into_iter().take(limit).cloned().collect())
    }

    fn append_event(&mut self, event: &NewEvent) -> Result<Event, TxError> {
        let tables = &*self.tables;
        // The idempotent repeat comes first and consumes nothing: no sequence, no id.
        if let Some(key) = &event.derivation_key
            && let Some(&position) = tables.event_by_key.get(key)
        {
            let stored = tables
                .rows
                .events
                .get(position)
                .ok_or_else(|| TxError::Backend("event index out of step".to_owned()))?;
            return event.repeat_of(stored.clone());
        }
        if !event.payload.is_object() {
            return Err(conflict("CHECK events: payload is a JSON object"));
        }
        let session = tables
            .rows
            .sessions
            .get(&event.session_id)
            .ok_or(TxError::NotFound)?;
        if let Some(run_id) = event.run_id {
            let run = tables.rows.runs.get(&run_id).ok_or(TxError::NotFound)?;
            if run.session_id != event.session_id {
                return Err(conflict(format!(
                    "events: run {run_id} is not in session {}",
                    event.session_id
                )));
            }
        }
        let sequence = session.next_event_sequence;
        let next_sequence = sequence
            .checked_add(1)
            .ok_or_else(|| TxError::Backend("event sequence overflow".to_owned()))?;
        if tables
            .event_by_sequence
            .contains_key(&(event.session_id, sequence))
        {
            return Err(conflict(format!(
                "events: UNIQUE(session_id, sequence) holds ({}, {sequence})",
                event.session_id
            )));
        }
        let id = match tables.rows.events.last() {
            Some(last) => last
                .id
                .checked_add(1)
                .ok_or_else(|| TxError::Backend("event id overflow".to_owned()))?,
            None => 1,
        };
        let stored = event.stored_as(id, sequence);

        let tables = &mut *self.tables;
        let position = tables.rows.events.len();
        if let Some(session) = tables.rows.sessions.get_mut(&event.session_id) {
            session.next_event_sequence = next_sequence;
        }
        if let Some(key) = &event.derivation_key {
            tables.event_by_key.insert(key.clone(), position);
        }
        tables
            .event_by_sequence
            .insert((event.session_id, sequence), position);
        if let Some(run_id) = event.run_id {
            tables.event_by_run.insert((run_id, id), position);
        }
        tables.rows.events.push(stored.clone());
        Ok(stored)
    }

    fn event_by_key(&mut self, derivation_key: &str) -> Result<Option<Event>, TxError> {
        let position = self.tables.event_by_key.get(derivation_key);
        Ok(position
            .and_then(|&p| self.tables.rows.events.get(p))
            .cloned())
    }

    fn events_of_run(
        &mut self,
        run: RunId,
        after_id: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Event>, TxError> {
        let start = after_id.map_or(Bound::Included((run, i64::MIN)), |id| {
            Bound::Excluded((run, id))
        });
        let tables = &*self.tables;
        Ok(tables
            .event_by_run
            .range((start, Bound::Included((run, i64::MAX))))
            .take(limit)
            .filter_map(|(_, &p)| tables.rows.events.get(p).cloned())
            .collect())
    }

    fn events_of_tenant(
        &mut self,
        tenant: &str,
        after_id: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Event>, TxError> {
        let rows = &self.tables.rows;
        // Events are kept in id order, so the first one after the cursor is found by bisection.
        let start = after_id.map_or(0, |after| rows.events.partition_point(|e| e.id <= after));
        Ok(rows.events[start..]
            .iter()
            .filter(|e| {
                rows.sessions
                    .get(&e.session_id)
                    .is_some_and(|s| s.tenant_id == tenant)
            })
            .take(limit)
            .cloned()
            .collect())
    }

    fn last_event_id(&mut self) -> Result<Option<i64>, TxError> {
        Ok(self.tables.rows.events.last().map(|e| e.id))
    }

    fn append_process_event(&mut self, event: &ProcessEvent) -> Result<ProcessEvent, TxError> {
        let tables = &*self.tables;
        if let Some(&position) = tables.process_event_by_key.get(&event.derivation_key) {
            let stored =
                tables.rows.process_events.get(position).ok_or_else(|| {
                    TxError::Backend("process event index out of step".to_owned())
                })?;
            return event.repeat_of(stored.clone());
        }
        if tables.rows.process_events.iter().any(|e| e.id == event.id) {
            return Err(conflict(format!(
                "process_events: duplicate id {}",
                event.id
            )));
        }
        if !event.payload.is_object() {
            return Err(conflict("CHECK process_events: payload is a JSON object"));
        }
        let tables = &mut *self.tables;
        tables.process_event_by_key.insert(
            event.derivation_key.clone(),
            tables.rows.process_events.len(),
        );
        tables.rows.process_events.push(event.clone());
        Ok(event.clone())
    }

    /// In commit order.
    fn process_events(&mut self) -> Result<Vec<ProcessEvent>, TxError> {
        Ok(self.tables.rows.process_events.clone())
    }

    fn invocations_created(&mut self, page: &CreatedPage) -> Result<Vec<Invocation>, TxError> {
        let mut rows: Vec<Invocation> = self
            .tables
            .rows
            .invocations
            .values()
            .filter(|i| page.admits(i.created_at, i.id.as_uuid()))
            .cloned()
            .collect();
        rows.sort_by_key(|i| (i.created_at, i.id));
        rows.truncate(page.limit);
        Ok(rows)
    }

    fn process_events_created(
        &mut self,
        event_type: EventType,
        page: &CreatedPage,
    ) -> Result<Vec<ProcessEvent>, TxError> {
        let mut rows: Vec<ProcessEvent> = self
            .tables
            .rows
            .process_events
            .iter()
            .filter(|e| e.event_type == event_type && page.admits(e.created_at, e.id))
            .cloned()
            .collect();
        rows.sort_by_key(|e| (e.created_at, e.id));
        rows.truncate(page.limit);
        Ok(rows)
    }

    fn insert_settlement(&mut self, settlement: &Settlement) -> Result<(), TxError> {
        let tables = &*self.tables;
        if tables.rows.settlements.contains_key(&settlement.id) {
            return Err(conflict(format!(
                "uncertain_settlements: duplicate id {}",
                settlement.id
            )));
        }
        if let Some(existing) = tables
            .settlement_by_invocation
            .get(&settlement.invocation_id)
        {
            return Err(conflict(format!(
                "uncertain_settlements: UNIQUE(invocation_id): invocation {} already has settlement {existing}",
                settlement.invocation_id
            )));
        }
        let invocation = tables
            .rows
            .invocations
            .get(&settlement.invocation_id)
            .ok_or(TxError::NotFound)?;
        if invocation.status != InvocationStatus::Uncertain {
            return Err(conflict(format!(
                "uncertain_settlements: invocation {} is {}, not UNCERTAIN",
                invocation.id, invocation.status
            )));
        }
        let tables = &mut *self.tables;
        tables
            .settlement_by_invocation
            .insert(settlement.invocation_id, settlement.id);
        tables
            .rows
            .settlements
            .insert(settlement.id, settlement.clone());
        Ok(())
    }

    fn settlement_by_invocation(
        &mut self,
        invocation: InvocationId,
    ) -> Result<Option<Settlement>, TxError> {
        let id = self.tables.settlement_by_invocation.get(&invocation);
        Ok(id
            .and_then(|id| self.tables.rows.settlements.get(id))
            .cloned())
    }

    fn insert_policy_profile(
        &mut self,
        record: &PolicyProfileRecord,
    ) -> Result<PolicyProfileRecord, TxError> {
        match self.tables.rows.policy_profiles.get(&record.policy_version) {
            Some(stored) if stored.same_content(record) => Ok(stored.clone()),
            Some(_) => Err(conflict("policy version identifies different rules")),
            None => {
                self.tables
                    .rows
                    .policy_profiles
                    .insert(record.policy_version.clone(), record.clone());
                Ok(record.clone())
            }
        }
    }

    /// By `policy_version`.
    fn policy_profiles(&mut self) -> Result<Vec<PolicyProfileRecord>, TxError> {
        Ok(self.tables.rows.policy_profiles.values().cloned().collect())
    }

    fn insert_api_token(&mut self, token: &ApiToken) -> Result<(), TxError> {
        if self.tables.rows.api_tokens.contains_key(&token.id) {
            return Err(conflict(format!("api_tokens: duplicate id {}", token.id)));
        }
        if self
            .tables
            .api_token_by_digest
            .contains_key(&token.token_sha256)
        {
            return Err(conflict("api_tokens: UNIQUE(token_sha256) holds"));
        }
        self.tables
            .api_token_by_digest
            .insert(token.token_sha256.clone(), token.id);
        self.tables.rows.api_tokens.insert(token.id, token.clone());
        Ok(())
    }

    fn api_token(&mut self, id: ApiTokenId) -> Result<Option<ApiToken>, TxError> {
        Ok(self.tables.rows.api_tokens.get(&id).cloned())
    }

    fn api_token_by_digest(&mut self, digest: &str) -> Result<Option<ApiToken>, TxError> {
        Ok(self
            .tables
            .api_token_by_digest
            .get(digest)
            .and_then(|id| self.tables.rows.api_tokens.get(id))
            .cloned())
    }

    fn api_tokens(&mut self, tenant: &str) -> Result<Vec<ApiToken>, TxError> {
        let mut tokens: Vec<ApiToken> = self
            .tables
            .rows
            .api_tokens
            .values()
            .filter(|t| t.tenant_id == tenant)
            .cloned()
            .collect();
        tokens.sort_by_key(|t| (t.created_at, t.id));
        Ok(tokens)
    }

    fn revoke_api_token(&mut self, id: ApiTokenId, at: Timestamp) -> Result<ApiToken, TxError> {
        let token = self
            .tables
            .rows
            .api_tokens
            .get_mut(&id)
            .ok_or(TxError::NotFound)?;
        if token.revoked_at.is_some() {
            return Err(conflict(format!(
                "api_tokens: revoked_at of token {id} is set once"
            )));
        }
        token.revoked_at = Some(at);
        Ok(token.clone())
    }

    fn insert_notify_target(&mut self, target: &NotifyTarget) -> Result<(), TxError> {
        let targets = &mut self.tables.rows.notify_targets;
        if targets.contains_key(&target.id) {
            return Err(conflict(format!(
                "notify_targets: duplicate id {}",
                target.id
            )));
        }
        targets.insert(target.id, target.clone());
        Ok(())
    }

    fn notify_target(&mut self, id: NotifyTargetId) -> Result<Option<NotifyTarget>, TxError> {
        Ok(self.tables.rows.notify_targets.get(&id).cloned())
    }

    fn notify_targets(&mut self, tenant: Option<&str>) -> Result<Vec<NotifyTarget>, TxError> {
        let mut targets: Vec<NotifyTarget> = self
            .tables
            .rows
            .notify_targets
            .values()
            .filter(|t| t.removed_at.is_none() && tenant.is_none_or(|x| t.tenant_id == x))
            .cloned()
            .collect();
        targets.sort_by_key(|t| (t.created_at, t.id));
        Ok(targets)
    }

    fn remove_notify_target(
        &mut self,
        id: NotifyTargetId,
        at: Timestamp,
    ) -> Result<NotifyTarget, TxError> {
        let target = self
            .tables
            .rows
            .notify_targets
            .get_mut(&id)
            .ok_or(TxError::NotFound)?;
        if target.removed_at.is_some() {
            return Err(conflict(format!(
                "notify_targets: removed_at of target {id} is set once"
            )));
        }
        target.removed_at = Some(at);
        Ok(target.clone())
    }

    fn advance_notify_target(
        &mut self,
        id: NotifyTargetId,
        expected: &Progress,
        next: &Progress,
    ) -> Result<(), TxError> {
        let target = self
            .tables
            .rows
            .notify_targets
            .get_mut(&id)
            .ok_or(TxError::NotFound)?;
        if target.progress != *expected || target.removed_at.is_some() {
            return Err(conflict(format!(
                "notify_targets: the progress of target {id} moved, or it was removed"
            )));
        }
        target.progress = *next;
        Ok(())
    }

    fn notify_lease(&mut self, tenant: &str) -> Result<Option<NotifyLease>, TxError> {
        Ok(self.tables.rows.notify_leases.get(tenant).cloned())
    }

    fn swap_notify_lease(
        &mut self,
        expected: Option<&NotifyLease>,
        next: &NotifyLease,
    ) -> Result<(), TxError> {
        let leases = &mut self.tables.rows.notify_leases;
        if leases.get(&next.tenant_id) != expected {
            return Err(conflict(format!(
                "notify_leases: the lease of tenant {} moved",
                next.tenant_id
            )));
        }
        leases.insert(next.tenant_id.clone(), next.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use serde_json::json;

    use super::*;
    use crate::events::EventType;
    use crate::testing::contract::run_contract;
    use crate::testing::fixtures::*;

    /// `insert_step_record`'s `pending` is checked here, so the simulator catches core naming a
    /// checkpoint that does not hold the step's calls (a store that keeps the reference would
    /// read other calls back).
    #[test]
    fn a_step_record_naming_a_checkpoint_without_its_calls_is_refused() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, crate::vocab::RunStatus::Running);
        let record = sample_step_record(run.id, 1);
        let seed = Checkpoint {
            run_id: run.id,
            version: 1,
            trigger: crate::vocab::CheckpointTrigger::Seed,
            state: crate::run::checkpoint::CheckpointState::default(),
            created_at: T0,
        };
        commit(&store, "seed checkpoint", |tx| tx.insert_checkpoint(&seed));
        for (pending, what) in [(1, "a checkpoint without a batch"), (2, "no checkpoint")] {
            let refused = store.transact(|tx| tx.insert_step_record(&record, Some(pending)));
            assert!(
                matches!(refused, Err(TxError::Backend(_))),
                "{what}: {refused:?}"
            );
        }
        commit(&store, "inline", |tx| tx.insert_step_record(&record, None));
    }

    #[test]
    fn a_rule_breaking_write_is_told_apart_from_a_lost_race() {
        let store = MemStore::new();
        let queued = seed_run(&store, 1, RunStatus::Queued);
        let guard = crate::run::RunGuard {
            run_id: queued.id,
            status: RunStatus::Queued,
            lease: None,
        };
        let mut completed = queued.clone();
        completed.state = crate::run::RunState::Completed {
            final_message: "done".to_owned(),
        };
        let breach = store
            .transact(|tx| tx.update_run(&guard, &completed))
            .unwrap_err();
        assert!(is_rule_breach(&breach), "{breach}");

        // The same write against a status that moved meanwhile: a race, not a breach.
        let stale = crate::run::RunGuard {
            status: RunStatus::Running,
            ..guard
        };
        let race = store
            .transact(|tx| tx.update_run(&stale, &completed))
            .unwrap_err();
        assert!(matches!(race, TxError::Conflict(_)), "{race:?}");
        assert!(!is_rule_breach(&race), "{race}");
        assert!(!is_rule_breach(&TxError::Fenced));
    }

    #[test]
    fn mem_store_passes_the_store_contract() {
        run_contract(MemStore::new);
    }

    #[test]
    fn mem_store_is_shareable_across_tasks() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<MemStore>();
    }

    #[test]
    fn panic_inside_a_transaction_keeps_the_committed_state() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        let before = store.snapshot();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            store.transact(|tx| -> Result<(), TxError> {
                tx.append_event(&sample_event(
                    &run,
                    EventType::RunStarted,
                    json!({}),
                    Some("k"),
                ))?;
                tx.insert_checkpoint(&sample_checkpoint(run.id, 1))?;
                panic!("simulated bug inside a transaction");
            })
        }));
        assert!(outcome.is_err(), "the panic propagates to the caller");
        assert_eq!(
            store.snapshot(),
            before,
            "a panicking transaction commits nothing"
        );
        // The poisoned lock is recovered and the store keeps working from the committed state.
        let event = commit(&store, "after the panic", |tx| {
            tx.append_event(&sample_event(
                &run,
                EventType::RunStarted,
                json!({}),
                Some("k"),
            ))
        });
        assert_eq!(
            (event.id, event.sequence),
            (1, 1),
            "nothing of the panicked transaction was consumed"
        );
    }

    #[test]
    fn snapshot_copies_every_committed_table() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        let uncertain = seed_invocation(
            &store,
            sample_invocation(1, &run, 1, "c1", InvocationStatus::Uncertain),
        );
        let waiting = seed_invocation(
            &store,
            sample_invocation(2, &run, 1, "c2", InvocationStatus::WaitingForApproval),
        );
        commit(&store, "fill every table", |tx| {
            tx.insert_checkpoint(&sample_checkpoint(run.id, 1))?;
            tx.insert_approval(&sample_approval(2, &waiting, ApprovalStatus::Pending))?;
            tx.append_event(&sample_event(&run, EventType::RunStarted, json!({}), None))?;
            tx.append_process_event(&sample_process_event(1, "v1"))?;
            tx.insert_settlement(&sample_settlement(1, &uncertain))?;
            tx.insert_policy_profile(&sample_policy_profile("v1"))?;
            Ok(())
        });
        let snapshot = store.snapshot();
        assert_eq!(snapshot.sessions.len(), 1);
        assert_eq!(snapshot.runs.get(&run.id), Some(&run));
        assert_eq!(
            snapshot.checkpoints.keys().copied().collect::<Vec<_>>(),
            vec![(run.id, 1)]
        );
        assert_eq!(snapshot.invocations.len(), 2);
        assert_eq!(snapshot.approvals.len(), 1);
        assert_eq!(snapshot.events.len(), 1);
        assert_eq!(snapshot.process_events.len(), 1);
        assert_eq!(snapshot.settlements.len(), 1);
        assert_eq!(snapshot.policy_profiles.len(), 1);
        assert_eq!(
            snapshot
                .sessions
                .get(&run.session_id)
                .map(|s| s.next_event_sequence),
            Some(2)
        );

        commit(&store, "a later event", |tx| {
            tx.append_event(&sample_event(
                &run,
                EventType::RunCheckpointed,
                json!({}),
                None,
            ))
        });
        assert_eq!(snapshot.events.len(), 1, "a snapshot is a copy, not a view");
        assert_eq!(
            store.inspect(|tables| tables.events.len()),
            2,
            "inspect reads the committed tables"
        );
    }

    #[test]
    fn event_ids_start_at_one_and_rollbacks_leave_no_gap() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        let first = commit(&store, "first", |tx| {
            tx.append_event(&sample_event(&run, EventType::RunStarted, json!({}), None))
        });
        let _ = store.transact(|tx| -> Result<(), TxError> {
            tx.append_event(&sample_event(
                &run,
                EventType::RunCheckpointed,
                json!({}),
                None,
            ))?;
            Err(TxError::Fenced)
        });
        let second = commit(&store, "second", |tx| {
            tx.append_event(&sample_event(
                &run,
                EventType::RunCheckpointed,
                json!({}),
                None,
            ))
        });
        assert_eq!(
            (first.id, first.sequence, second.id, second.sequence),
            (1, 1, 2, 2)
        );
    }

    #[test]
    fn a_failed_statement_inside_a_transaction_writes_nothing() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        let first = seed_invocation(
            &store,
            sample_invocation(1, &run, 1, "c1", InvocationStatus::Authorized),
        );
        commit(&store, "handle a duplicate and carry on", |tx| {
            // Same call as `first`, fresh key: rejected, and the fresh key must not be indexed.
            let mut duplicate = sample_invocation(2, &run, 1, "c1", InvocationStatus::Authorized);
            duplicate.idempotency_key = "fresh".to_owned();
            assert!(matches!(
                tx.insert_invocation(&duplicate),
                Err(TxError::Conflict(_))
            ));
            let mut reuse = sample_invocation(3, &run, 1, "c3", InvocationStatus::Authorized);
            reuse.idempotency_key = "fresh".to_owned();
            tx.insert_invocation(&reuse)
        });
        let snapshot = store.snapshot();
        assert_eq!(snapshot.invocations.len(), 2);
        assert!(snapshot.invocations.contains_key(&first.id));
    }
}
