//! The `Store` port (SPEC §2.2, §14): one atomic write transaction at a time, with guarded
//! updates, uniqueness and append-only audit tables. Core builds every change; a store only
//! persists it.

pub mod guards;

use crate::access::token::ApiToken;
use crate::approval::Approval;
use crate::conversation::record::{
    CallTask, Connection, ConnectionStatus, ConversationKey, StateKey,
};
use crate::events::{Event, EventType, NewEvent, ProcessEvent};
use crate::ids::{
    ApiTokenId, ApprovalId, ConnectionId, InvocationId, NotifyTargetId, RunId, SessionId,
};
use crate::invocation::Invocation;
use crate::notify::target::{NotifyLease, NotifyTarget, Progress};
use crate::run::checkpoint::{Checkpoint, StepRecord};
use crate::run::{HeartbeatObs, Lease, Run, RunGuard, RunSummary};
use crate::session::{PolicyProfileRecord, Session, Settlement};
use crate::time::Timestamp;
use crate::vocab::{ApprovalStatus, InvocationStatus, RunStatus};

pub use crate::tx_error::TxError;

/// The `approvals list` keyset position: strictly after `(created_at, id)` in descending order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalCursor {
    pub created_at: Timestamp,
    pub id: ApprovalId,
}

/// The `runs list` keyset position: strictly after `(created_at, id)` in descending order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCursor {
    pub created_at: Timestamp,
    pub id: RunId,
}

/// The identity a new call shares with its twins (SPEC §9.2 step 5, §19.3, §19.7): its
/// tenant, tool name and effective arguments hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallIdentity<'a> {
    pub tenant_id: &'a str,
    pub tool_name: &'a str,
    pub effective_arguments_hash: &'a str,
}

/// Whose invocations the repeat check compares a new call with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwinScope {
    /// The run's own (a scripted run: SPEC §9.2 step 5).
    Run(RunId),
    /// The whole tenant's (a gateway run: an agent restarted after a crash is a new run,
    /// §19.3, §19.7). Proposals of one identity on different runs must then be ordered.
    Tenant,
}

/// An invocation with the identity of a new call whose outcome is not (yet) known: it is
/// `RUNNING` or `UNCERTAIN`. Core decides from these whether the new call may run.
#[derive(Debug, Clone, PartialEq)]
pub struct Twin {
    pub invocation: Invocation,
    /// Whether a human recorded a settlement for it (SPEC §9.5); only an `UNCERTAIN` row has one.
    pub settled: bool,
}

/// A store: a sequence of atomic transactions. Core uses it as a generic parameter.
pub trait Store: Send + Sync {
    /// One atomic write transaction (SQLite: `BEGIN IMMEDIATE … COMMIT`); an `Err` from `f` or
    /// from the commit rolls everything back. `f` is synchronous, so no tool, planner or
    /// dispatcher call can happen inside a transaction (SPEC §16 #12).
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError>;

    /// One read-only transaction: a consistent view of everything committed before it began.
    /// `f` must not write. A store may run reads beside its writer (SQLite: a second
    /// connection, outside the group commit), so a read neither queues behind writers nor
    /// waits for their fsync; such a store refuses a write inside with `Backend`, as
    /// `MemStore` does. The default runs the read as a write transaction.
    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.transact(f)
    }
}

/// What one transaction may do. Guarded writes name the expected status (and lease); when no
/// row matches they fail with `Fenced` (a lease guard) or `Conflict`.
pub trait StoreTx {
    // Sessions.
    fn insert_session(&mut self, session: &Session) -> Result<(), TxError>;
    fn session(&mut self, id: SessionId) -> Result<Option<Session>, TxError>;

    // Runs.
    /// Fails with `Conflict` if the session already has a non-terminal run, unless both are
    /// call runs of a conversation (`planner_kind = mcp`, SPEC §22.2), which run side by side.
    fn insert_run(&mut self, run: &Run) -> Result<(), TxError>;
    fn run(&mut self, id: RunId) -> Result<Option<Run>, TxError>;
    /// The session's non-terminal runs by `(created_at, id)`: at most one unless they are a
    /// conversation's call runs.
    fn active_runs_in_session(&mut self, session: SessionId) -> Result<Vec<RunId>, TxError>;
    /// `Fenced` unless the run is RUNNING under exactly this owner and epoch.
    fn guard_lease(&mut self, lease: &Lease) -> Result<(), TxError>;
    /// Replaces the row if it matches the guard; immutable fields must be unchanged (`Conflict`).
    fn update_run(&mut self, guard: &RunGuard, next: &Run) -> Result<Run, TxError>;
    /// Renews a lease and reports a cancellation request; `None` if the lease no longer holds.
    fn heartbeat(
        &mut self,
        lease: &Lease,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<Option<HeartbeatObs>, TxError>;
    /// The oldest `(created_at, id)` QUEUED run that is due, optionally only `only`. Without
    /// `only`, a call run (`planner_kind = 'mcp'`) is skipped: it is claimed by id, by a gateway
    /// holding a request for it (SPEC §19.4, §22.3), or by the orphan sweep that ends it
    /// ([`StoreTx::orphaned_call_runs`]).
    fn next_claimable_run(
        &mut self,
        now: Timestamp,
        only: Option<RunId>,
    ) -> Result<Option<Run>, TxError>;
    /// RUNNING runs whose lease expired at or before `now`, oldest expiry first.
    fn expired_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Run>, TxError>;
    fn count_runs(&mut self, status: RunStatus) -> Result<u64, TxError>;
    /// The tenant's runs by `created_at DESC, id DESC`, strictly after the cursor, at most
    /// `limit`, without their planner input.
    fn runs_of_tenant(
        &mut self,
        tenant: &str,
        after: Option<RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunSummary>, TxError>;

    // Connections (SPEC §19.4): the liveness of gateway clients.
    /// `Conflict` on a duplicate id, a session that already has a connection, or a conversation
    /// key that already has an open connection of the tenant; `NotFound` without the session.
    fn insert_connection(&mut self, connection: &Connection) -> Result<(), TxError>;
    fn connection(&mut self, id: ConnectionId) -> Result<Option<Connection>, TxError>;
    fn connection_by_session(&mut self, session: SessionId) -> Result<Option<Connection>, TxError>;
    /// The open connection of `tenant` whose conversation is `key` (SPEC §22.1: a sessionless
    /// 2026-07-28 HTTP conversation), whether or not its `alive_until` has passed. At most one
    /// exists: `insert_connection` refuses a second open row of a tenant and key (`Conflict`).
    fn open_connection_by_key(
        &mut self,
        tenant: &str,
        key: &ConversationKey,
    ) -> Result<Option<Connection>, TxError>;
    /// A `requestState` sealing key (SPEC §22.3 item 2): `Conflict` on a duplicate id. Keys
    /// never change.
    fn insert_state_key(&mut self, key: &StateKey) -> Result<(), TxError>;
    /// The key named `id`.
    fn state_key(&mut self, id: &str) -> Result<Option<StateKey>, TxError>;
    /// The newest key (by `created_at`, then id).
    fn newest_state_key(&mut self) -> Result<Option<StateKey>, TxError>;
    /// A task row (SPEC §22.3 item 1): `Conflict` on a duplicate id or a run that has a task
    /// already; `NotFound` without the run. Rows never change.
    fn insert_call_task(&mut self, task: &CallTask) -> Result<(), TxError>;
    /// The task whose id hashes to `id_sha256`.
    fn call_task(&mut self, id_sha256: &str) -> Result<Option<CallTask>, TxError>;
    /// The task of run `run`, if its call was answered as one (`UNIQUE(run_id)`).
    fn call_task_of_run(&mut self, run: RunId) -> Result<Option<CallTask>, TxError>;
    /// Guarded by the expected status (`Conflict` otherwise); immutable fields must be unchanged
    /// and a closed connection never changes.
    fn update_connection(
        &mut self,
        expected: ConnectionStatus,
        next: &Connection,
    ) -> Result<(), TxError>;
    /// The tenant's connections (its conversations, SPEC §22.1) by `opened_at DESC, id DESC`,
    /// at most `limit`.
    fn connections_of_tenant(
        &mut self,
        tenant: &str,
        limit: usize,
    ) -> Result<Vec<Connection>, TxError>;
    /// Open connections whose `alive_until` is at or before `now`, oldest first, at most `limit`.
    fn expired_connections(
        &mut self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Connection>, TxError>;
    /// QUEUED call runs (`planner_kind = 'mcp'`) that are due and whose session's connection is
    /// closed, by `created_at, id`, at most `limit`: runs no client of theirs serves any more,
    /// which the orphan sweep ends unless their call waits for a re-sent request (SPEC §22.3).
    fn orphaned_call_runs(&mut self, now: Timestamp, limit: usize) -> Result<Vec<RunId>, TxError>;
    /// Announced approvals of `tenant` and `principal` for `tool`, `pending` or `approved`, with
    /// `expires_at` after `now`, whose action is still WAITING_FOR_APPROVAL, by `created_at, id`,
    /// at most `limit`: the parked calls an identical call sent again may bind to (SPEC §22.3).
    fn waiting_call_approvals(
        &mut self,
        tenant: &str,
        principal: &str,
        tool: &str,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Approval>, TxError>;

    // Checkpoints.
    /// Versions must be contiguous: `Conflict` unless `version` is the latest plus one.
    fn insert_checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<(), TxError>;
    fn latest_checkpoint(&mut self, run: RunId) -> Result<Option<Checkpoint>, TxError>;

    // Step records (SPEC §17.2): the history of finished steps, append-only.
    /// Steps must be contiguous: `Conflict` unless `record.step` is the run's latest recorded
    /// step plus one (1 for the first); `NotFound` without the run.
    ///
    /// `pending` is the version of the run's checkpoint whose pending batch holds this step's
    /// calls (`record.calls` are its `PinnedCall::call`s, in order), when core knows one: a
    /// store may keep that reference instead of a second copy of the calls (checkpoints are
    /// never changed or deleted) and then reads the calls from there. `MemStore` checks the
    /// claim and refuses a wrong one with `Backend`.
    fn insert_step_record(
        &mut self,
        record: &StepRecord,
        pending: Option<u32>,
    ) -> Result<(), TxError>;
    /// The run's step records with `step > after_step`, in step order, at most `limit`.
    fn step_records(
        &mut self,
        run: RunId,
        after_step: u32,
        limit: usize,
    ) -> Result<Vec<StepRecord>, TxError>;

    // Invocations.
    /// `Conflict` on a duplicate id, idempotency key or `(run_id, step_number, call_id)`.
    ///
    /// A store may report that `Conflict` later in the same transaction — from its next
    /// statement that waits for an answer, or from the commit — instead of from this call
    /// (the PostgreSQL store sends the insert ahead of its answer); the transaction then
    /// commits nothing. Core never continues a transaction after this call failed: it ends the
    /// transaction and reads the row that won in a new one.
    fn insert_invocation(&mut self, invocation: &Invocation) -> Result<(), TxError>;
    fn invocation(&mut self, id: InvocationId) -> Result<Option<Invocation>, TxError>;
    fn invocation_by_key(&mut self, idempotency_key: &str) -> Result<Option<Invocation>, TxError>;
    fn invocation_by_call(
        &mut self,
        run: RunId,
        step: u32,
        call_id: &str,
    ) -> Result<Option<Invocation>, TxError>;
    /// The run's invocations by `(step_number, created_at, id)`.
    fn invocations_of_run(&mut self, run: RunId) -> Result<Vec<Invocation>, TxError>;
    /// The run's invocations in any of `statuses`, in the order of
    /// [`StoreTx::invocations_of_run`]. The hot paths (the UNCERTAIN-twin check before every
    /// call, the RUNNING calls of a resumed step, the terminal sweep's unfinished calls) want a
    /// handful of rows out of a run's whole history; a store with an index answers without
    /// decoding the rest. The default filters the full list.
    fn invocations_of_run_in(
        &mut self,
        run: RunId,
        statuses: &[InvocationStatus],
    ) -> Result<Vec<Invocation>, TxError> {
        let mut rows = self.invocations_of_run(run)?;
        rows.retain(|i| statuses.contains(&i.status));
        Ok(rows)
    }
    /// Guarded by the expected status; immutable fields must be unchanged.
    fn update_invocation(
        &mut self,
        expected: InvocationStatus,
        next: &Invocation,
    ) -> Result<(), TxError>;
    /// The tenant's UNCERTAIN invocations (without a settlement unless `include_settled`), by
    /// `updated_at DESC, id DESC`.
    fn uncertain_invocations(
        &mut self,
        tenant: &str,
        include_settled: bool,
    ) -> Result<Vec<Invocation>, TxError>;

    /// The `RUNNING` and `UNCERTAIN` invocations of this identity in `scope`, by `(created_at,
    /// id)`, each with whether it is settled: what the repeat check of §9.2 step 5 compares a new
    /// call with, inside the call's first transaction. For [`TwinScope::Tenant`] in a write
    /// transaction, a store whose write transactions run side by side (PostgreSQL) first takes
    /// a lock on the identity that is held until the transaction ends, so that of two
    /// transactions proposing identical calls at once the later one sees the earlier one's
    /// START (§19.7: two gateways on one store cannot both pass the check); a store that runs
    /// one writer at a time needs no lock, and one run's calls are ordered by its lease.
    fn twins(
        &mut self,
        identity: &CallIdentity<'_>,
        scope: TwinScope,
    ) -> Result<Vec<Twin>, TxError>;

    // Approvals.
    /// `Conflict` on a duplicate id or `action_id`.
    fn insert_approval(&mut self, approval: &Approval) -> Result<(), TxError>;
    fn approval(&mut self, id: ApprovalId) -> Result<Option<Approval>, TxError>;
    fn approval_by_action(&mut self, action_id: InvocationId) -> Result<Option<Approval>, TxError>;
    fn approvals_of_run(&mut self, run: RunId) -> Result<Vec<Approval>, TxError>;
    /// Guarded by the expected status.
    fn update_approval(&mut self, expected: ApprovalStatus, next: &Approval)
    -> Result<(), TxError>;
    /// Announced `pending` approvals of a tenant (optionally one run), by `created_at DESC, id
    /// DESC`, strictly after the cursor, at most `limit`.
    fn pending_approvals(
        &mut self,
        tenant: &str,
        run: Option<RunId>,
        after: Option<ApprovalCursor>,
        limit: usize,
    ) -> Result<Vec<Approval>, TxError>;
    /// Announced `pending` approvals with `expires_at <= now`, by `expires_at, id`.
    fn due_approvals(
        &mut self,
        now: Timestamp,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Approval>, TxError>;

    // Events.
    /// Takes the session's next sequence. A repeated derivation key returns the stored event if
    /// type, run and payload are equal, else `Conflict`.
    fn append_event(&mut self, event: &NewEvent) -> Result<Event, TxError>;
    fn event_by_key(&mut self, derivation_key: &str) -> Result<Option<Event>, TxError>;
    /// The run's events by id, strictly after `after_id`.
    fn events_of_run(
        &mut self,
        run: RunId,
        after_id: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Event>, TxError>;
    /// The events of every session of `tenant`, by id, strictly after `after_id`, at most
    /// `limit` (SPEC §20's event stream). Ids must follow commit order for this to be a
    /// gap-free tail: a reader that has seen id `n` must never later see a new event with an
    /// id below `n`. SQLite and `MemStore` commit one writer at a time, so an id is taken and
    /// committed before the next one is taken; a store whose ids can commit out of order (a
    /// PostgreSQL sequence) must hold back ids above the oldest uncommitted one.
    ///
    /// In a read transaction, call it first: the PostgreSQL store computes what it may return
    /// before its snapshot is taken, and refuses a tail read after any other read (`Backend`).
    /// `MemStore` and SQLite do not check this; `adapters/pg/tests/pg_notify.rs` runs the
    /// notifier, which reads a tail and then its target, on PostgreSQL.
    fn events_of_tenant(
        &mut self,
        tenant: &str,
        after_id: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Event>, TxError>;
    /// The highest event id committed so far in any session (`None` before the first): a
    /// position to start a tail from, under the same commit-order rule.
    fn last_event_id(&mut self) -> Result<Option<i64>, TxError>;
    /// Idempotent by derivation key like `append_event`.
    fn append_process_event(&mut self, event: &ProcessEvent) -> Result<ProcessEvent, TxError>;
    fn process_events(&mut self) -> Result<Vec<ProcessEvent>, TxError>;

    // Pages in creation order, for the policy commands that read a whole history
    // (`policy replay`, `policy shadow report`).
    /// Every tenant's invocations in `(created_at, id)` order within `page`.
    fn invocations_created(&mut self, page: &CreatedPage) -> Result<Vec<Invocation>, TxError>;
    /// The process events of `event_type` in `(created_at, id)` order within `page`.
    fn process_events_created(
        &mut self,
        event_type: EventType,
        page: &CreatedPage,
    ) -> Result<Vec<ProcessEvent>, TxError>;

    // Settlements and policy profiles.
    /// `Conflict` if the invocation already has one.
    fn insert_settlement(&mut self, settlement: &Settlement) -> Result<(), TxError>;
    fn settlement_by_invocation(
        &mut self,
        invocation: InvocationId,
    ) -> Result<Option<Settlement>, TxError>;
    /// Keeps the first of identical records; different content under one version is a
    /// `Conflict`.
    fn insert_policy_profile(
        &mut self,
        record: &PolicyProfileRecord,
    ) -> Result<PolicyProfileRecord, TxError>;
    /// Every recorded profile, ordered by `policy_version`.
    fn policy_profiles(&mut self) -> Result<Vec<PolicyProfileRecord>, TxError>;

    // API tokens (SPEC §20).
    /// `Conflict` on a duplicate id or `token_sha256`.
    fn insert_api_token(&mut self, token: &ApiToken) -> Result<(), TxError>;
    fn api_token(&mut self, id: ApiTokenId) -> Result<Option<ApiToken>, TxError>;
    /// The token whose `token_sha256` is `digest`.
    fn api_token_by_digest(&mut self, digest: &str) -> Result<Option<ApiToken>, TxError>;
    /// The tenant's tokens by `created_at, id`.
    fn api_tokens(&mut self, tenant: &str) -> Result<Vec<ApiToken>, TxError>;
    /// Sets `revoked_at` once: `NotFound` for an unknown id, `Conflict` if it is already set
    /// (nothing else of a token ever changes).
    fn revoke_api_token(&mut self, id: ApiTokenId, at: Timestamp) -> Result<ApiToken, TxError>;

    // Notification targets (issue 32 item 1).
    /// `Conflict` on a duplicate id.
    fn insert_notify_target(&mut self, target: &NotifyTarget) -> Result<(), TxError>;
    fn notify_target(&mut self, id: NotifyTargetId) -> Result<Option<NotifyTarget>, TxError>;
    /// The targets not removed, of one tenant or of all, by `created_at, id`.
    fn notify_targets(&mut self, tenant: Option<&str>) -> Result<Vec<NotifyTarget>, TxError>;
    /// Sets `removed_at` once: `NotFound` for an unknown id, `Conflict` if it is already set.
    fn remove_notify_target(
        &mut self,
        id: NotifyTargetId,
        at: Timestamp,
    ) -> Result<NotifyTarget, TxError>;
    /// Sets a target's progress iff the stored one is `expected` (`Conflict` otherwise,
    /// `NotFound` for an unknown id): two notifiers never move one cursor apart.
    fn advance_notify_target(
        &mut self,
        id: NotifyTargetId,
        expected: &Progress,
        next: &Progress,
    ) -> Result<(), TxError>;
    /// The tenant's notifier lease, if one was ever taken.
    fn notify_lease(&mut self, tenant: &str) -> Result<Option<NotifyLease>, TxError>;
    /// Replaces the tenant's lease iff the stored one is `expected` (`None`: no row yet);
    /// `Conflict` otherwise. Compare-and-set, so two processes racing for an expired lease
    /// cannot both win whatever the store's isolation level.
    fn swap_notify_lease(
        &mut self,
        expected: Option<&NotifyLease>,
        next: &NotifyLease,
    ) -> Result<(), TxError>;
}

/// One page of rows in `(created_at, id)` order: the rows after the position `(at, after_id)`
/// (with no `after_id`, every row created at `at` itself is included: the first page of a
/// window starting at `at`), created before `until` when it is set, at most `limit` of them.
/// The next page starts after the last row returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreatedPage {
    pub at: Timestamp,
    pub after_id: Option<uuid::Uuid>,
    pub until: Option<Timestamp>,
    pub limit: usize,
}

impl CreatedPage {
    /// The first page of the window `[from, until)`.
    pub fn first(from: Timestamp, until: Option<Timestamp>, limit: usize) -> CreatedPage {
        CreatedPage {
            at: from,
            after_id: None,
            until,
            limit,
        }
    }

    /// The page after a row created at `at` with id `id`.
    pub fn after(self, at: Timestamp, id: uuid::Uuid) -> CreatedPage {
        CreatedPage {
            at,
            after_id: Some(id),
            ..self
        }
    }

    /// Whether a row belongs to this page's window (for stores that filter in memory).
    pub fn admits(&self, created_at: Timestamp, id: uuid::Uuid) -> bool {
        let after = match self.after_id {
            None => created_at >= self.at,
            Some(after_id) => (created_at, id) > (self.at, after_id),
        };
        after && self.until.is_none_or(|until| created_at < until)
    }

    /// The id bound as the stores compare it: text, with `""` below every id.
    pub fn after_id_text(&self) -> String {
        self.after_id.map(|id| id.to_string()).unwrap_or_default()
    }
}
