//! `PgTx`: core's [`StoreTx`] as SQL on one PostgreSQL transaction (SPEC §2.2, §8.1, §8.2,
//! §9.1, §10.1, §13, §14, §18), with `MemStore`'s semantics, orderings and error kinds — the
//! SQLite store's `SqliteTx`, method for method, in PostgreSQL's dialect.
//!
//! **Concurrency (SPEC §18).** Write transactions run at READ COMMITTED. Where SQLite serializes
//! every writer with `BEGIN IMMEDIATE`, PostgreSQL lets transactions on different runs proceed
//! side by side, so the run row is the unit of mutual exclusion: a write transaction's reads of
//! a run (`run`, `guard_lease`, and the current row that `update_run` compares against) take
//! `FOR NO KEY UPDATE`, which every other transaction changing that run also takes. Core reads
//! a run, builds the next row from it and writes it back; with the lock, no other transaction
//! can change a column in between (a cancel request set by `runs cancel` would otherwise be
//! overwritten by a worker's stale copy). `NO KEY` because inserting a checkpoint, event or
//! invocation of that run takes the foreign key's `KEY SHARE` lock on it, which `FOR UPDATE`
//! would block. CLAIM's `next_claimable_run` takes `FOR UPDATE SKIP LOCKED`, so workers never
//! queue behind one another's claims. Every guarded write is still the statement of SPEC §8.1,
//! `UPDATE … WHERE id = $1 AND status = $2 [AND lease_owner = $3 AND lease_epoch = $4]`, whose
//! zero-row answer is `Fenced` or `Conflict`; no statement needs SERIALIZABLE (the multi-row
//! rules — one active run per session, unique keys, contiguous versions — are unique indexes and
//! primary keys, which PostgreSQL enforces across concurrent transactions).
//!
//! **Connections** (SPEC §19.4, §22.1) are read, changed and written back whole like runs, and
//! a conversation's call counter and taint make a lost update a broken limit or a lost taint,
//! so a write transaction's reads of a connection lock its row too. Their lock order is runs
//! first, then their connection: a call run's transactions hold the run when they read the
//! connection by session (a claim's binding, the taint check, TAINT), which locks the row
//! alone; a read by id (ADMIT, renewal, DISCONNECT and the sweep, CLEAR-TAINT) first locks
//! every active run of the session in `(created_at, id)` order, since DISCONNECT goes on to
//! request those runs' cancellation. A close racing a tainting step then waits for it instead
//! of deadlocking with it, and two ADMITs of one conversation count one after the other.
//!
//! **Event sequences** come from `sessions.next_event_sequence`, advanced by the same statement
//! that inserts the event (a data-modifying CTE), never from a SEQUENCE: a refused or rolled
//! back append leaves no gap behind it. The session row's lock also orders a session's event ids
//! by commit.
//!
//! **Event ids** (SPEC §20's tenant tail, `StoreTx::events_of_tenant`). An event's `id` comes
//! from the identity sequence when its row is inserted, and transactions on different sessions
//! commit in any order, so ids alone do not follow commit order: a tail could see id 11 while
//! id 10 is still uncommitted, move its cursor past it, and never see 10. Writers are not
//! serialized to prevent that (it would queue every event-writing transaction of every worker
//! from its first append to its COMMIT); readers hold back instead. A write transaction
//! registers before it takes its first event id (an exclusive advisory transaction lock keyed
//! by this schema and its backend pid, sent with the first append or a lease holder's first
//! run read: no extra round trip, and no writer ever waits for another). A tail first computes the event horizon: the sequence's
//! last value L, then the registered transactions, each waited for until it ends; every id at
//! or below L was taken by one of them or by a transaction already over, so after the waits
//! every such id is committed or never will be. The tail's snapshot is taken after that, and it
//! returns ids up to L only. The functions are in migration V2, with the argument in full; the
//! test `pg_event_order.rs` holds an earlier id's transaction open while a later one commits.
//! A write transaction's first append also takes a few more ids for its later appends
//! (`appends`), after registering, so the same wait covers them.
//!
//! **Round trips** (issue 33). A row this transaction holds (see "Concurrency") is kept and
//! read again from memory (`kept`); a write transaction's run read brings the run's highest
//! checkpoint version and step record along, for the contiguity checks; and a write whose
//! answer those rows decide — `update_run`, `update_invocation`, a contiguous checkpoint or step
//! record — is sent without waiting for its answer (`pipeline`), which comes back with the next
//! statement that waits. So are event appends whose id, sequence and key are known
//! (`appends`): after a transaction's first append, or from the start in a lease holder's
//! transaction, whose first read of its run (`leased_run_row`) also locks the session's event
//! counter, takes the ids and brings the run's open invocations with their keys. So is an
//! invocation's insert (its `Conflict` comes back with the next answer). A tool call's result
//! transaction, for example, waits for its run and its COMMIT only.
//!
//! Constraint violations map to `Conflict` (UNIQUE, PRIMARY KEY, CHECK, trigger) or `NotFound`
//! (a missing parent row); see `engine::tx_error`. The `MemStore` rules beyond the schema are
//! repeated where they are cheap because the current row is read anyway, with the SQLite
//! store's messages; the update rules are core's `store::guards`, shared by all three stores.

use tokio_postgres::types::ToSql;

use airlock_core::access::ApiToken;
use airlock_core::approval::Approval;
use airlock_core::connection::{Connection as ClientConnection, ConnectionStatus};
use airlock_core::conversation::ConversationKey;
use airlock_core::conversation::request_state::StateKey;
use airlock_core::conversation::task::CallTask;
use airlock_core::events::{Event, EventType, NewEvent, PAYLOAD_SCHEMA_VERSION, ProcessEvent};
use airlock_core::ids::{
    ApiTokenId, ApprovalId, ConnectionId, InvocationId, NotifyTargetId, RunId, SessionId,
};
use airlock_core::invocation::Invocation;
use airlock_core::notify::{NotifyLease, NotifyTarget, Progress};
use airlock_core::run::checkpoint::{Checkpoint, StepRecord};
use airlock_core::run::{HeartbeatObs, Lease, Run, RunGuard, RunSummary};
use airlock_core::session::{PolicyProfileRecord, Session, Settlement};
use airlock_core::store::{
    ApprovalCursor, CallIdentity, CreatedPage, RunCursor, StoreTx, Twin, TwinScope, TxError, guards,
};
use airlock_core::time::Timestamp;
use airlock_core::vocab::{ApprovalStatus, InvocationStatus, RunStatus};

use crate::appends::{self, Appends, KeyState, Slot};
use crate::engine::{Access, Session as Wire};
use crate::kept::Kept;
use crate::rows::{self, int, json, opt_json, opt_ts, ts};

/// One SQL parameter.
type Param<'a> = &'a (dyn ToSql + Sync);

fn conflict(message: impl Into<String>) -> TxError {
    TxError::Conflict(message.into())
}

/// A `LIMIT` value; `usize` beyond `i64::MAX` means "no limit" in practice.
fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A column value of a run row that an update may change.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Column {
    Text(Option<String>),
    Int(Option<i64>),
}

impl Column {
    fn param(&self) -> Param<'_> {
        match self {
            Column::Text(value) => value,
            Column::Int(value) => value,
        }
    }
}

/// The columns of a run row that an update may change, in SET order. Comparing two runs' lists
/// finds the columns an update has to name.
fn mutable_columns(run: &Run) -> Result<[(&'static str, Column); 12], TxError> {
    let state = rows::state_columns(&run.state)?;
    Ok([
        ("status", Column::Text(Some(state.status.to_owned()))),
        ("step_count", Column::Int(Some(i64::from(run.step_count)))),
        (
            "tool_call_count",
            Column::Int(Some(i64::from(run.tool_call_count))),
        ),
        ("lease_owner", Column::Text(state.lease_owner)),
        (
            "lease_epoch",
            Column::Int(Some(int(run.lease_epoch, "runs.lease_epoch")?)),
        ),
        ("lease_expires_at", Column::Int(state.lease_expires_at)),
        ("attempts", Column::Int(Some(i64::from(run.attempts)))),
        ("scheduled_for", Column::Int(state.scheduled_for)),
        (
            "cancel_requested_at",
            Column::Int(opt_ts(run.cancel_requested_at)),
        ),
        ("failure", Column::Text(state.failure)),
        ("final_message", Column::Text(state.final_message)),
        ("updated_at", Column::Int(Some(ts(run.updated_at)))),
    ])
}

/// Registers the transaction as one that takes event ids (see "Event ids"); sent in the same
/// exchange as the first append, inside its savepoint, or with a lease holder's first read of
/// its run (`leased_run_row`).
const REGISTER_EVENT_WRITER: &str = "SELECT airlock_event_register()";

/// A run's highest checkpoint version and step record, for `$1`.
const MAXIMA: &str = "SELECT (SELECT MAX(version) FROM checkpoints WHERE run_id = $1), \
                             (SELECT MAX(step) FROM step_records WHERE run_id = $1)";

/// The statuses of an invocation still in its call (`leased_run_row`), as SQL.
const OPEN_STATUSES: &str = "('PROPOSED', 'AUTHORIZED', 'WAITING_FOR_APPROVAL', 'RUNNING')";

/// Whether run `$1`'s session has no connection, as SQL (`leased_run_row`). A conversation's
/// runs take their locks in the order run, connection, session counter ("Connections"): a
/// claim's binding and TAINT lock the connection while holding their own run and then
/// append. A lease holder of another run of that conversation that locked the counter first
/// and then read the connection (the taint check) would deadlock with them, so in a
/// conversation's session the counter is locked by the first append, as before.
const NO_CONNECTION: &str = "NOT EXISTS (SELECT 1 FROM connections AS c \
     WHERE c.session_id = (SELECT r.session_id FROM runs AS r WHERE r.id = $1))";

/// A run's row by id (`$1`), locked (see "Concurrency").
fn locked_run_sql() -> String {
    format!(
        "SELECT {} FROM runs WHERE id = $1 FOR NO KEY UPDATE",
        rows::RUN_COLUMNS
    )
}

/// The highest event id a tail may return now (see "Event ids"); waits for in-flight writers.
const EVENT_HORIZON: &str = "SELECT airlock_event_horizon()";

/// An append whose id and sequence were known here (see `appends`): it changes one row only if
/// the session's counter is the one predicted, and advances it.
const APPEND_KNOWN: &str = "WITH advanced AS ( \
         UPDATE sessions SET next_event_sequence = $4 + 1 \
         WHERE id = $2 AND next_event_sequence = $4 RETURNING id) \
     INSERT INTO events (id, session_id, run_id, sequence, event_type, payload_schema_version, \
         actor_type, actor_id, payload, derivation_key, created_at) OVERRIDING SYSTEM VALUE \
     SELECT $1, advanced.id, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM advanced";

/// One transaction's `StoreTx`.
pub(crate) struct PgTx<'e> {
    wire: Wire<'e>,
    /// Runs whose row this transaction has locked (write transactions only).
    locked_runs: Vec<RunId>,
    /// Connections whose row this transaction has locked (write transactions only).
    locked_connections: Vec<ConnectionId>,
    /// Whether this transaction holds its event-writer registration (see "Event ids").
    registered_event_writer: bool,
    /// Rows nobody else can change before this transaction ends (see `kept`).
    kept: Kept,
    /// What the next event appends will take (see `appends`).
    appends: Appends,
}

impl<'e> PgTx<'e> {
    pub(crate) fn new(wire: Wire<'e>) -> PgTx<'e> {
        PgTx {
            wire,
            locked_runs: Vec::new(),
            locked_connections: Vec::new(),
            registered_event_writer: false,
            kept: Kept::default(),
            appends: Appends::default(),
        }
    }

    /// The event horizon: every event id at or below it is committed or will never be, so a
    /// tail may return up to it and no further. It must be computed before the snapshot the
    /// tail is read from: before `BEGIN` when the transaction has not begun (a read's snapshot
    /// is then taken by the tail's own query), or as a statement of its own inside a write
    /// transaction (READ COMMITTED: the next statement takes a new snapshot). A read whose
    /// snapshot is already taken cannot be made gap-free, so it is refused.
    fn event_horizon(&mut self) -> Result<i64, TxError> {
        let row = if !self.wire.begun() {
            self.wire.row_before_begin(EVENT_HORIZON, &[])?
        } else if self.wire.access == Access::Write {
            self.wire.row(EVENT_HORIZON, &[])?
        } else {
            return Err(TxError::Backend(
                "the event tail must be the first read of a PostgreSQL read transaction (its \
                 snapshot would otherwise predate the wait for in-flight event writers)"
                    .to_owned(),
            ));
        };
        let row = row.ok_or_else(|| TxError::Backend("the event horizon is missing".into()))?;
        row.try_get(0)
            .map_err(|e| TxError::Backend(format!("the event horizon: {e}")))
    }

    fn note_locked(&mut self, run: RunId) {
        if self.wire.access == Access::Write && !self.locked_runs.contains(&run) {
            self.locked_runs.push(run);
        }
    }

    /// Locks the run's row before a row of that run's invocations or approvals, unless this
    /// transaction already holds it: every writer then takes a run's locks in one order — the
    /// run, then its rows, then its session's event counter — so an approval expiry racing a
    /// cancel of the same run waits instead of deadlocking (a deadlock would reach the caller
    /// as a storage error and stop a worker's sweep).
    fn lock_run_first(&mut self, run: RunId) -> Result<(), TxError> {
        if self.wire.access != Access::Write || self.locked_runs.contains(&run) {
            return Ok(());
        }
        self.wire.row(
            "SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE",
            &[&run.to_string()],
        )?;
        self.locked_runs.push(run);
        Ok(())
    }

    /// Before a write transaction locks connection `id` (see "Connections" in the module
    /// docs): the active runs of its session, in `(created_at, id)` order, the order every
    /// such lock takes them in. PostgreSQL locks the rows as the sorted result returns them.
    /// Nothing once the connection is held, or in a read.
    fn lock_runs_before_connection(&mut self, id: ConnectionId) -> Result<(), TxError> {
        if self.wire.access != Access::Write || self.locked_connections.contains(&id) {
            return Ok(());
        }
        let runs = self.run_ids(
            "SELECT r.id FROM runs AS r WHERE r.session_id = \
               (SELECT c.session_id FROM connections AS c WHERE c.id = $1) \
             AND r.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') \
             ORDER BY r.created_at, r.id FOR NO KEY UPDATE OF r",
            &[&id.to_string()],
        )?;
        for run in runs {
            self.note_locked(run);
        }
        Ok(())
    }

    /// Notes a connection row this write transaction has read locked.
    fn note_connection_locked(&mut self, connection: Option<&ClientConnection>) {
        if self.wire.access == Access::Write
            && let Some(c) = connection
            && !self.locked_connections.contains(&c.id)
        {
            self.locked_connections.push(c.id);
        }
    }

    pub(crate) fn into_wire(self) -> Wire<'e> {
        self.wire
    }

    /// ` FOR NO KEY UPDATE` in a write transaction (see "Concurrency"); nothing in a read.
    fn lock(&self) -> &'static str {
        match self.wire.access {
            Access::Write => " FOR NO KEY UPDATE",
            Access::Read => "",
        }
    }

    fn one<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        decode: impl FnOnce(&tokio_postgres::Row) -> Result<T, TxError>,
    ) -> Result<Option<T>, TxError> {
        self.wire.row(sql, params)?.as_ref().map(decode).transpose()
    }

    fn all<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        decode: impl Fn(&tokio_postgres::Row) -> Result<T, TxError>,
    ) -> Result<Vec<T>, TxError> {
        self.wire.rows(sql, params)?.iter().map(decode).collect()
    }

    /// The run ids in the first column of every row, parsed (a malformed one is a backend
    /// error, not a skipped row).
    fn run_ids(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<RunId>, TxError> {
        let ids: Vec<String> = self.all(sql, params, |row| {
            row.try_get(0).map_err(|e| TxError::Backend(e.to_string()))
        })?;
        ids.into_iter()
            .map(|id| {
                id.parse()
                    .map_err(|e| TxError::Backend(format!("runs.id '{id}': {e}")))
            })
            .collect()
    }

    /// Why `append_event`'s INSERT wrote nothing, checked in `MemStore`'s order: the
    /// idempotent repeat of a derivation key first (it returns the stored event), then the
    /// payload, the session and the run.
    fn refused_event(
        &mut self,
        event: &NewEvent,
        insert_error: Option<TxError>,
    ) -> Result<Event, TxError> {
        if let Some(key) = &event.derivation_key
            && let Some(stored) = self.event_by_key(key)?
        {
            return event.repeat_of(stored);
        }
        if !event.payload.is_object() {
            return Err(conflict("CHECK events: payload is a JSON object"));
        }
        if self.session(event.session_id)?.is_none() {
            return Err(TxError::NotFound);
        }
        if let Some(run_id) = event.run_id {
            let run_session = self.run_session(run_id)?.ok_or(TxError::NotFound)?;
            if run_session != event.session_id.to_string() {
                return Err(conflict(format!(
                    "events: run {run_id} is not in session {}",
                    event.session_id
                )));
            }
        }
        Err(insert_error.unwrap_or_else(|| {
            TxError::Backend("events: the INSERT wrote no row for no known reason".to_owned())
        }))
    }

    /// The session a run belongs to, if the run exists. A run's session never changes, so
    /// once this transaction met the run the answer is known without a read.
    fn run_session(&mut self, id: RunId) -> Result<Option<String>, TxError> {
        if let Some(session) = self.kept.session_of(id) {
            return Ok(Some(session.to_string()));
        }
        let session: Option<String> = self.one(
            "SELECT session_id FROM runs WHERE id = $1",
            &[&id.to_string()],
            |row| row.try_get(0).map_err(|e| TxError::Backend(e.to_string())),
        )?;
        if let Some(parsed) = session.as_deref().and_then(|s| s.parse().ok()) {
            self.kept.keep_session_of(id, parsed);
        }
        Ok(session)
    }

    /// The current row of a run, locked in a write transaction; a kept row when this
    /// transaction already holds it (see `kept`).
    fn run_row(&mut self, id: RunId) -> Result<Option<Run>, TxError> {
        if let Some(run) = self.kept.run(id) {
            return Ok(Some(run.clone()));
        }
        if self.wire.access == Access::Read {
            let sql = format!("SELECT {} FROM runs WHERE id = $1", rows::RUN_COLUMNS);
            let run = self.one(&sql, &[&id.to_string()], rows::run)?;
            if let Some(run) = &run {
                self.kept.keep_run(run);
            }
            return Ok(run);
        }
        // A write transaction that reads a run goes on to write its checkpoint or step record
        // more often than not: their highest version and step come in the same exchange, for
        // the contiguity checks (see `kept`). They are a statement of their own, after the
        // locked read: its snapshot is taken once the lock is held, so it sees a checkpoint the
        // previous holder committed while this read waited (a subquery of the locked read
        // would not).
        let id_text = id.to_string();
        let [runs, maxima] = self
            .wire
            .rows_each([(&locked_run_sql(), &[&id_text]), (MAXIMA, &[&id_text])])?;
        let Some(row) = runs.first() else {
            return Ok(None);
        };
        let run = rows::run(row)?;
        self.keep_locked_run(&run, &maxima)?;
        Ok(Some(run))
    }

    /// Keeps a run this write transaction read locked, with the answer of [`MAXIMA`].
    fn keep_locked_run(
        &mut self,
        run: &Run,
        maxima: &[tokio_postgres::Row],
    ) -> Result<(), TxError> {
        let backend = |e: tokio_postgres::Error| TxError::Backend(e.to_string());
        let (version, step): (Option<i64>, Option<i64>) = match maxima.first() {
            Some(row) => (
                row.try_get(0).map_err(backend)?,
                row.try_get(1).map_err(backend)?,
            ),
            None => (None, None),
        };
        let id = run.id;
        self.note_locked(id);
        self.kept.keep_run(run);
        if self.kept.checkpoint_version(id).is_none() {
            self.kept.keep_checkpoint_version(id, version.unwrap_or(0));
        }
        if self.kept.step(id).is_none() {
            self.kept.keep_step(id, step.unwrap_or(0));
        }
        Ok(())
    }

    /// A lease holder's first read of its run in a write transaction (`guard_lease`): the run
    /// locked, as [`PgTx::run_row`] reads it, and in the same exchange what the transaction
    /// goes on to ask nearly every time (issue 33: round trips).
    ///
    /// - **The run's open invocations** (`PROPOSED`, `AUTHORIZED`, `WAITING_FOR_APPROVAL`,
    ///   `RUNNING`), kept (see `kept`: every writer of an invocation locks its run first), with
    ///   the taken keys of their subjects: the result transaction's read of its `RUNNING` call
    ///   and the read of that call's event keys need no exchange of their own.
    /// - **Its session's event counter**, locked (`FOR NO KEY UPDATE`, after registering as an
    ///   event writer), and [`appends::RESERVED_IDS`] ids taken after the lock is held: every
    ///   append of the transaction to the run's session is then predicted (see `appends`)
    ///   instead of the first one waiting for its answer. The locks are taken in the order
    ///   every writer takes them (the run, then its session's counter: `lock_run_first`); a
    ///   lease holder's transaction appends events nearly always, so the counter is rarely
    ///   locked for nothing, and ids taken and not used are gaps, as before. Not in a
    ///   conversation's session, where the connection's lock comes between ([`NO_CONNECTION`]).
    fn leased_run_row(&mut self, id: RunId) -> Result<Option<Run>, TxError> {
        let id_text = id.to_string();
        let open_sql = format!(
            "SELECT {} FROM tool_invocations WHERE run_id = $1 AND status IN {OPEN_STATUSES}",
            rows::INVOCATION_COLUMNS
        );
        let open_keys_sql = format!(
            "SELECT derivation_key FROM events WHERE derivation_key IS NOT NULL AND {} IN \
             (SELECT id FROM tool_invocations WHERE run_id = $1 AND status IN {OPEN_STATUSES})",
            appends::subject_sql("derivation_key")
        );
        // Both only in a session without a connection (see `NO_CONNECTION`).
        let counter_sql = format!(
            "SELECT next_event_sequence FROM sessions \
             WHERE id = (SELECT session_id FROM runs WHERE id = $1) AND {NO_CONNECTION} \
             FOR NO KEY UPDATE"
        );
        let reserve_sql = format!(
            "SELECT ARRAY(SELECT nextval('events_id_seq') FROM generate_series(1, {})) \
             WHERE {NO_CONNECTION}",
            appends::RESERVED_IDS
        );
        let by_run: [Param<'_>; 1] = [&id_text];
        // The registration comes before the ids are taken (see "Event ids"); registering again
        // in a transaction that already did takes the same advisory lock once more, harmlessly.
        let [runs, maxima, open, open_keys, _, counter, reserved] = self.wire.rows_each([
            (&locked_run_sql(), &by_run),
            (MAXIMA, &by_run),
            (&open_sql, &by_run),
            (&open_keys_sql, &by_run),
            (REGISTER_EVENT_WRITER, &[]),
            (&counter_sql, &by_run),
            (&reserve_sql, &by_run),
        ])?;
        self.registered_event_writer = true;
        let Some(row) = runs.first() else {
            return Ok(None);
        };
        let run = rows::run(row)?;
        self.keep_locked_run(&run, &maxima)?;
        for row in &open {
            let invocation = rows::invocation(row)?;
            self.appends
                .know_subject(&invocation.id.to_string(), std::iter::empty());
            self.kept.keep_invocation(&invocation);
        }
        for key in appends::keys_of(&open_keys)? {
            self.appends.know_taken(&key);
        }
        if let (Some(counter), Some(reserved)) = (counter.first(), reserved.first()) {
            let backend = |e: tokio_postgres::Error| TxError::Backend(e.to_string());
            self.appends
                .know_sequence(run.session_id, counter.try_get(0).map_err(backend)?);
            self.appends.reserve(
                reserved
                    .try_get::<_, Vec<i64>>(0)
                    .map_err(|e| TxError::Backend(format!("reserved event ids: {e}")))?,
            );
        }
        Ok(Some(run))
    }

    /// Keeps an invocation read by this transaction if nobody else can change it before it
    /// ends: in a read's snapshot, or under its run's lock (see `kept`).
    fn keep_read_invocation(&mut self, invocation: &Option<Invocation>) {
        if let Some(invocation) = invocation
            && (self.wire.access == Access::Read || self.locked_runs.contains(&invocation.run_id))
        {
            self.kept.keep_invocation(invocation);
        }
    }

    fn invocation_row(
        &mut self,
        id: InvocationId,
        lock: bool,
    ) -> Result<Option<Invocation>, TxError> {
        if let Some(invocation) = self.kept.invocation(id) {
            return Ok(Some(invocation.clone()));
        }
        let sql = format!(
            "SELECT {} FROM tool_invocations WHERE id = $1{}",
            rows::INVOCATION_COLUMNS,
            if lock { self.lock() } else { "" }
        );
        let invocation = self.one(&sql, &[&id.to_string()], rows::invocation)?;
        self.keep_read_invocation(&invocation);
        Ok(invocation)
    }

    fn approval_row(&mut self, id: ApprovalId, lock: bool) -> Result<Option<Approval>, TxError> {
        let sql = format!(
            "SELECT {} FROM approvals WHERE id = $1{}",
            rows::APPROVAL_COLUMNS,
            if lock { self.lock() } else { "" }
        );
        self.one(&sql, &[&id.to_string()], rows::approval)
    }

    fn max_of(&mut self, sql: &str, run: RunId) -> Result<i64, TxError> {
        let latest: Option<Option<i64>> = self.one(sql, &[&run.to_string()], |row| {
            row.try_get(0).map_err(|e| TxError::Backend(e.to_string()))
        })?;
        Ok(latest.flatten().unwrap_or(0))
    }

    /// An append whose id, sequence and key this transaction knows (see `appends`), sent
    /// ahead; a key whose subject is not known yet costs one read of the subject's keys. `None`
    /// when something is not known: the append then waits for its answer.
    fn append_known(&mut self, event: &NewEvent) -> Result<Option<Event>, TxError> {
        let Some(slot) = self.appends.slot(event.session_id) else {
            return Ok(None);
        };
        if let Some(run) = event.run_id
            && self.kept.session_of(run) != Some(event.session_id)
        {
            return Ok(None);
        }
        if let Some(key) = &event.derivation_key {
            match self.appends.key(key) {
                // The answered append finds the stored event and compares.
                KeyState::Taken => return Ok(None),
                KeyState::Free => {}
                KeyState::Unknown => {
                    let taken = self.events_of_subject(appends::subject(key))?;
                    if let Some(stored) = taken
                        .into_iter()
                        .find(|e| e.derivation_key.as_deref() == Some(key.as_str()))
                    {
                        return event.repeat_of(stored).map(Some);
                    }
                }
            }
        }
        let sequence = u64::try_from(slot.sequence)
            .map_err(|e| TxError::Backend(format!("events.sequence {}: {e}", slot.sequence)))?;
        self.wire.write_later(
            APPEND_KNOWN,
            &[
                &slot.id,
                &event.session_id.to_string(),
                &event.run_id.map(|r| r.to_string()),
                &slot.sequence,
                &event.event_type.as_str(),
                &i64::from(PAYLOAD_SCHEMA_VERSION),
                &event.actor.actor_type.as_str(),
                &event.actor.actor_id,
                &json(&event.payload, "events.payload")?,
                &event.derivation_key,
                &ts(event.created_at),
            ],
        )?;
        self.appends
            .took(event.session_id, slot, event.derivation_key.as_deref());
        Ok(Some(event.stored_as(slot.id, sequence)))
    }

    /// An append that waits for its answer: the session's next sequence, an id, and in the
    /// same statement [`appends::RESERVED_IDS`] more ids and every taken key of its key's
    /// subject, for the appends after it.
    fn append_answered(&mut self, event: &NewEvent) -> Result<Event, TxError> {
        let session_id = event.session_id.to_string();
        let run_id = event.run_id.map(|r| r.to_string());
        let payload = json(&event.payload, "events.payload")?;
        let register = (self.wire.access == Access::Write && !self.registered_event_writer)
            .then_some(REGISTER_EVENT_WRITER);
        let insert = format!(
            "WITH taken AS ( \
                     UPDATE sessions SET next_event_sequence = next_event_sequence + 1 \
                     WHERE id = $1 AND ($2::text IS NULL OR EXISTS \
                         (SELECT 1 FROM runs WHERE runs.id = $2::text AND runs.session_id = $1)) \
                     RETURNING id, next_event_sequence - 1 AS sequence) \
                 INSERT INTO events (session_id, run_id, sequence, event_type, \
                     payload_schema_version, actor_type, actor_id, payload, derivation_key, \
                     created_at) \
                 SELECT taken.id, $2::text, taken.sequence, $3, $4, $5, $6, $7, $8, $9 \
                 FROM taken \
                 RETURNING id, sequence, \
                     ARRAY(SELECT nextval('events_id_seq') FROM generate_series(1, {}))",
            appends::RESERVED_IDS,
        );
        let params: [Param<'_>; 9] = [
            &session_id,
            &run_id,
            &event.event_type.as_str(),
            &i64::from(PAYLOAD_SCHEMA_VERSION),
            &event.actor.actor_type.as_str(),
            &event.actor.actor_id,
            &payload,
            &event.derivation_key,
            &ts(event.created_at),
        ];
        // A keyed append reads its subject's taken keys in the same exchange, as a statement
        // after the insert: its snapshot then includes whatever the holder of the session's
        // counter committed while the insert waited for it.
        let inserted = match &event.derivation_key {
            Some(key) => self
                .wire
                .write_then_read(
                    register,
                    &insert,
                    &params,
                    &appends::subject_keys_sql(),
                    &[&appends::subject(key)],
                )
                .map(|(rows, keys)| (rows, Some(keys))),
            None => self
                .wire
                .write_rows_after(register, &insert, &params)
                .map(|rows| (rows, None)),
        };
        let (row, subject_keys) = match inserted {
            Ok((rows, keys)) => match rows.into_iter().next() {
                Some(row) => {
                    self.registered_event_writer |= register.is_some();
                    (row, keys)
                }
                None => return self.refused_event(event, None),
            },
            Err(error @ TxError::Conflict(_)) => return self.refused_event(event, Some(error)),
            Err(error) => return Err(error),
        };
        let backend = |e: tokio_postgres::Error| TxError::Backend(e.to_string());
        let id: i64 = row.try_get(0).map_err(backend)?;
        let sequence: u64 = rows::unsigned(&row, 1)?;
        let reserved: Vec<i64> = row.try_get(2).map_err(backend)?;
        let subject_keys = subject_keys.as_deref().map(appends::keys_of).transpose()?;
        if let Some(run) = event.run_id {
            // The statement checked that the run is in the session.
            self.kept.keep_session_of(run, event.session_id);
        }
        if let (Some(key), Some(keys)) = (&event.derivation_key, subject_keys) {
            self.appends.know_subject(appends::subject(key), keys);
        }
        let slot = Slot {
            id,
            sequence: i64::try_from(sequence)
                .map_err(|e| TxError::Backend(format!("events.sequence {sequence}: {e}")))?,
        };
        self.appends
            .took(event.session_id, slot, event.derivation_key.as_deref());
        self.appends.reserve(reserved);
        Ok(event.stored_as(id, sequence))
    }

    /// Every stored event whose key has `subject`, through `ix_events_key_subject` (V11);
    /// remembered as the subject's taken keys.
    fn events_of_subject(&mut self, subject: &str) -> Result<Vec<Event>, TxError> {
        let events = self.all(
            &format!(
                "SELECT {} FROM events WHERE derivation_key IS NOT NULL AND {} = $1",
                rows::EVENT_COLUMNS,
                appends::subject_sql("derivation_key"),
            ),
            &[&subject],
            rows::event,
        )?;
        self.appends.know_subject(
            subject,
            events.iter().filter_map(|e| e.derivation_key.clone()),
        );
        Ok(events)
    }

    /// Notes a run this transaction makes QUEUED, for the NOTIFY at COMMIT.
    fn queues(&mut self, run: RunId) {
        self.wire.queued.push(run);
    }
}

impl StoreTx for PgTx<'_> {
    fn insert_session(&mut self, session: &Session) -> Result<(), TxError> {
        self.wire
            .write(
                "INSERT INTO sessions (id, tenant_id, principal_id, next_event_sequence, \
                 created_at) VALUES ($1, $2, $3, $4, $5)",
                &[
                    &session.id.to_string(),
                    &session.tenant_id,
                    &session.principal_id,
                    &int(session.next_event_sequence, "sessions.next_event_sequence")?,
                    &ts(session.created_at),
                ],
            )
            .map(drop)
    }

    fn session(&mut self, id: SessionId) -> Result<Option<Session>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM sessions WHERE id = $1",
                rows::SESSION_COLUMNS
            ),
            &[&id.to_string()],
            rows::session,
        )
    }

    fn insert_run(&mut self, run: &Run) -> Result<(), TxError> {
        let state = rows::state_columns(&run.state)?;
        self.wire.write(
            &format!(
                "INSERT INTO runs ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                 $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)",
                rows::RUN_COLUMNS
            ),
            &[
                &run.id.to_string(),
                &run.session_id.to_string(),
                &run.tenant_id,
                &run.principal_id,
                &json(&run.principal_scopes, "runs.principal_scopes")?,
                &run.origin_trust.as_str(),
                &run.planner_kind,
                &&*run.planner_input,
                &state.status,
                &i64::from(run.step_count),
                &i64::from(run.tool_call_count),
                &json(&run.limits, "runs.limits")?,
                &opt_ts(run.deadline_at),
                &state.lease_owner,
                &int(run.lease_epoch, "runs.lease_epoch")?,
                &state.lease_expires_at,
                &i64::from(run.attempts),
                &state.scheduled_for,
                &opt_ts(run.cancel_requested_at),
                &state.failure,
                &state.final_message,
                &ts(run.created_at),
                &ts(run.updated_at),
            ],
        )?;
        self.note_locked(run.id);
        self.kept.keep_run(run);
        if run.status() == RunStatus::Queued {
            self.queues(run.id);
        }
        Ok(())
    }

    fn run(&mut self, id: RunId) -> Result<Option<Run>, TxError> {
        self.run_row(id)
    }

    /// Served by `ix_runs_active_by_session` (V5), whose WHERE is this query's and whose order
    /// is the answer's.
    fn active_runs_in_session(&mut self, session: SessionId) -> Result<Vec<RunId>, TxError> {
        self.run_ids(
            "SELECT id FROM runs WHERE session_id = $1 \
             AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') ORDER BY created_at, id",
            &[&session.to_string()],
        )
    }

    /// Reads (and in a write transaction locks) the run's whole row, so that the run read
    /// that nearly always follows is answered from `kept` instead of a second exchange; the
    /// lease is checked against it with core's own rule. A transaction fenced here also holds
    /// the run's lock until it ends (the old statement locked only a matching row); core ends
    /// it at once, so the lock is held for no longer than one exchange.
    fn guard_lease(&mut self, lease: &Lease) -> Result<(), TxError> {
        let run = if self.wire.access == Access::Write && self.kept.run(lease.run_id).is_none() {
            self.leased_run_row(lease.run_id)?
        } else {
            self.run_row(lease.run_id)?
        };
        match run {
            Some(run) if guards::holds(&run, lease) => Ok(()),
            _ => Err(TxError::Fenced),
        }
    }

    fn update_run(&mut self, guard: &RunGuard, next: &Run) -> Result<Run, TxError> {
        let current = self.run_row(guard.run_id)?;
        let current = guards::check_run_update(guard, current.as_ref(), next)?;

        // Only the columns that change are written (the current row is locked, so nothing
        // else changes them meanwhile); with nothing to change, the checks above are the
        // answer.
        let before = mutable_columns(current)?;
        let after = mutable_columns(next)?;
        let changed: Vec<&(&str, Column)> = before
            .iter()
            .zip(&after)
            .filter(|(old, new)| old.1 != new.1)
            .map(|(_, new)| new)
            .collect();
        if changed.is_empty() {
            return Ok(next.clone());
        }
        let mut values: Vec<Param<'_>> = changed.iter().map(|(_, value)| value.param()).collect();
        let set_list: Vec<String> = changed
            .iter()
            .enumerate()
            .map(|(i, (name, _))| format!("{name} = ${}", i + 1))
            .collect();
        let id = guard.run_id.to_string();
        let status = guard.status.as_str();
        let mut sql = format!(
            "UPDATE runs SET {} WHERE id = ${} AND status = ${}",
            set_list.join(", "),
            values.len() + 1,
            values.len() + 2
        );
        values.push(&id);
        values.push(&status);
        let lease_guard = match &guard.lease {
            Some(lease) => Some((&lease.worker_id, int(lease.lease_epoch, "lease_epoch")?)),
            None => None,
        };
        if let Some((owner, epoch)) = &lease_guard {
            sql.push_str(&format!(
                " AND lease_owner = ${} AND lease_epoch = ${}",
                values.len() + 1,
                values.len() + 2
            ));
            values.push(owner);
            values.push(epoch);
        }
        // The current row is locked by this transaction and the guard was checked against it:
        // the statement changes this one row (see `pipeline`).
        self.wire.write_later(&sql, &values)?;
        if next.status() == RunStatus::Queued && current.status() != RunStatus::Queued {
            self.queues(next.id);
        }
        self.kept.keep_run(next);
        Ok(next.clone())
    }

    /// Exactly the one statement of SPEC §8.2: it renews any lease that still holds, even one
    /// past its expiry that no RECLAIM has taken yet, and touches nothing else.
    fn heartbeat(
        &mut self,
        lease: &Lease,
        until: Timestamp,
        _now: Timestamp,
    ) -> Result<Option<HeartbeatObs>, TxError> {
        // The statement changes the row in a way not known here.
        self.kept.forget_run(lease.run_id);
        let renewed = self.wire.write_rows(
            "UPDATE runs SET lease_expires_at = $1 WHERE id = $2 AND status = 'RUNNING' \
             AND lease_owner = $3 AND lease_epoch = $4 RETURNING cancel_requested_at",
            &[
                &ts(until),
                &lease.run_id.to_string(),
                &lease.worker_id,
                &int(lease.lease_epoch, "lease_epoch")?,
            ],
        )?;
        renewed
            .first()
            .map(|row| {
                let cancel: Option<i64> = row
                    .try_get(0)
                    .map_err(|e| TxError::Backend(e.to_string()))?;
                Ok(HeartbeatObs {
                    cancel_requested_at: cancel.map(Timestamp::from_micros),
                })
            })
            .transpose()
    }

    /// In a write transaction the row comes locked `FOR UPDATE SKIP LOCKED` (SPEC §18): a run
    /// another worker is claiming right now is skipped, not waited for.
    fn next_claimable_run(
        &mut self,
        now: Timestamp,
        only: Option<RunId>,
    ) -> Result<Option<Run>, TxError> {
        let lock = match self.wire.access {
            Access::Write => " FOR UPDATE SKIP LOCKED",
            Access::Read => "",
        };
        let claimable = match only {
            Some(id) => self.one(
                &format!(
                    "SELECT {} FROM runs WHERE status = 'QUEUED' AND id = $2 \
                     AND (scheduled_for IS NULL OR scheduled_for <= $1){lock}",
                    rows::RUN_COLUMNS
                ),
                &[&ts(now), &id.to_string()],
                rows::run,
            )?,
            // A call run is claimed by id only: by a gateway holding a request for it, or by
            // the orphan sweep that ends it (§19.4, §22.3).
            None => self.one(
                &format!(
                    "SELECT {} FROM runs WHERE status = 'QUEUED' \
                     AND (scheduled_for IS NULL OR scheduled_for <= $1) \
                     AND planner_kind <> 'mcp' \
                     ORDER BY created_at, id LIMIT 1{lock}",
                    rows::RUN_COLUMNS
                ),
                &[&ts(now)],
                rows::run,
            )?,
        };
        if let Some(run) = &claimable {
            self.note_locked(run.id);
            self.kept.keep_run(run);
        }
        Ok(claimable)
    }

    fn expired_leases(&mut self, now: Timestamp, limit_rows: usize) -> Result<Vec<Run>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM runs WHERE status = 'RUNNING' AND lease_expires_at <= $1 \
                 ORDER BY lease_expires_at, id LIMIT $2",
                rows::RUN_COLUMNS
            ),
            &[&ts(now), &limit(limit_rows)],
            rows::run,
        )
    }

    /// Duplicate id or session: the primary key or `uq_connections_session` (`Conflict`); a
    /// second open row of a tenant and conversation key: `uq_connections_open_key`, whose
    /// insert waits for the first row's transaction and then fails (`Conflict`); a missing
    /// session: the foreign key (`NotFound`).
    fn insert_connection(&mut self, connection: &ClientConnection) -> Result<(), TxError> {
        let (alive_until, closed_at, reason) = rows::connection_state_columns(&connection.state);
        let (tainted_at, tainted_by) = rows::taint_columns(connection.taint.as_ref());
        self.wire
            .write(
                &format!(
                    "INSERT INTO connections ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
                     $10, $11, $12, $13, $14, $15)",
                    rows::CONNECTION_COLUMNS
                ),
                &[
                    &connection.id.to_string(),
                    &connection.tenant_id,
                    &connection.principal_id,
                    &connection.session_id.to_string(),
                    &connection.gateway_id,
                    &connection.status().as_str(),
                    &alive_until,
                    &closed_at,
                    &reason,
                    &ts(connection.opened_at),
                    &tainted_at,
                    &tainted_by,
                    &i64::from(connection.call_count),
                    &ts(connection.last_seen_at),
                    &connection.conversation_key.as_ref().map(|k| k.as_str()),
                ],
            )
            .map(drop)
    }

    /// In a write transaction, the session's active runs and then the row are locked (see
    /// "Connections" in the module docs): core reads a connection by id to change it (ADMIT,
    /// renewal, DISCONNECT, the sweep, CLEAR-TAINT).
    fn connection(&mut self, id: ConnectionId) -> Result<Option<ClientConnection>, TxError> {
        self.lock_runs_before_connection(id)?;
        let found = self.one(
            &format!(
                "SELECT {} FROM connections WHERE id = $1{}",
                rows::CONNECTION_COLUMNS,
                self.lock()
            ),
            &[&id.to_string()],
            rows::connection,
        )?;
        self.note_connection_locked(found.as_ref());
        Ok(found)
    }

    /// In a write transaction the row is locked, alone: core reads a connection by session
    /// inside a transaction of one of its runs (a claim's binding, a call's taint check, TAINT),
    /// which holds that run already.
    fn connection_by_session(
        &mut self,
        session: SessionId,
    ) -> Result<Option<ClientConnection>, TxError> {
        let found = self.one(
            &format!(
                "SELECT {} FROM connections WHERE session_id = $1{}",
                rows::CONNECTION_COLUMNS,
                self.lock()
            ),
            &[&session.to_string()],
            rows::connection,
        )?;
        self.note_connection_locked(found.as_ref());
        Ok(found)
    }

    fn insert_state_key(&mut self, key: &StateKey) -> Result<(), TxError> {
        self.wire
            .write(
                "INSERT INTO state_keys (id, secret_hex, created_at) VALUES ($1, $2, $3)",
                &[&key.id, &key.secret_hex, &ts(key.created_at)],
            )
            .map(drop)
    }

    fn state_key(&mut self, id: &str) -> Result<Option<StateKey>, TxError> {
        self.one(
            "SELECT id, secret_hex, created_at FROM state_keys WHERE id = $1",
            &[&id],
            rows::state_key,
        )
    }

    /// Served by `ix_state_keys_created` (V8), read backwards.
    fn newest_state_key(&mut self) -> Result<Option<StateKey>, TxError> {
        self.one(
            "SELECT id, secret_hex, created_at FROM state_keys \
             ORDER BY created_at DESC, id DESC LIMIT 1",
            &[],
            rows::state_key,
        )
    }

    /// `Conflict` from the primary key or `uq_call_tasks_run`; `NotFound` from the run's
    /// foreign key.
    fn insert_call_task(&mut self, task: &CallTask) -> Result<(), TxError> {
        self.wire
            .write(
                "INSERT INTO call_tasks (id_sha256, run_id, tenant_id, principal_id, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &task.id_sha256,
                    &task.run_id.to_string(),
                    &task.tenant_id,
                    &task.principal_id,
                    &ts(task.created_at),
                ],
            )
            .map(drop)
    }

    fn call_task(&mut self, id_sha256: &str) -> Result<Option<CallTask>, TxError> {
        self.one(
            "SELECT id_sha256, run_id, tenant_id, principal_id, created_at FROM call_tasks \
             WHERE id_sha256 = $1",
            &[&id_sha256],
            rows::call_task,
        )
    }

    /// Served by the `UNIQUE(run_id)` index of `call_tasks` (V7).
    fn call_task_of_run(&mut self, run: RunId) -> Result<Option<CallTask>, TxError> {
        self.one(
            "SELECT id_sha256, run_id, tenant_id, principal_id, created_at FROM call_tasks \
             WHERE run_id = $1",
            &[&run.to_string()],
            rows::call_task,
        )
    }

    /// Found through `uq_connections_open_key` (V6), then read again by id, which in a write
    /// transaction takes the locks in their order (the session's active runs, then the row;
    /// see "Connections" in the module docs); a row closed in between is not the conversation.
    fn open_connection_by_key(
        &mut self,
        tenant: &str,
        key: &ConversationKey,
    ) -> Result<Option<ClientConnection>, TxError> {
        let found = self.one(
            &format!(
                "SELECT {} FROM connections WHERE tenant_id = $1 AND conversation_key = $2 \
                 AND status = 'open'",
                rows::CONNECTION_COLUMNS,
            ),
            &[&tenant, &key.as_str()],
            rows::connection,
        )?;
        let Some(found) = found else {
            return Ok(None);
        };
        Ok(self.connection(found.id)?.filter(|c| c.is_open()))
    }

    /// The current row is read locked (in a write transaction), so the checks and the guarded
    /// UPDATE see the same row; the trigger `connections_guarded` repeats the immutability
    /// rules for any other writer. Core has read the row already in this transaction (and so
    /// holds it); a change without that read takes the locks as [`StoreTx::connection`] does.
    fn update_connection(
        &mut self,
        expected: ConnectionStatus,
        next: &ClientConnection,
    ) -> Result<(), TxError> {
        self.lock_runs_before_connection(next.id)?;
        let sql = format!(
            "SELECT {} FROM connections WHERE id = $1{}",
            rows::CONNECTION_COLUMNS,
            self.lock()
        );
        let current = self
            .one(&sql, &[&next.id.to_string()], rows::connection)?
            .ok_or(TxError::NotFound)?;
        self.note_connection_locked(Some(&current));
        guards::check_connection_update(expected, &current, next)?;
        let (alive_until, closed_at, reason) = rows::connection_state_columns(&next.state);
        let (tainted_at, tainted_by) = rows::taint_columns(next.taint.as_ref());
        let changed = self.wire.write(
            "UPDATE connections SET status = $1, alive_until = $2, closed_at = $3, \
             close_reason = $4, tainted_at = $5, tainted_by = $6, call_count = $7, \
             last_seen_at = $8 WHERE id = $9 AND status = $10",
            &[
                &next.status().as_str(),
                &alive_until,
                &closed_at,
                &reason,
                &tainted_at,
                &tainted_by,
                &i64::from(next.call_count),
                &ts(next.last_seen_at),
                &next.id.to_string(),
                &expected.as_str(),
            ],
        )?;
        if changed == 0 {
            return Err(conflict(format!(
                "connections: connection {} is not {expected}",
                next.id
            )));
        }
        Ok(())
    }

    /// Served by `ix_connections_tenant_opened` (V5), read backwards.
    fn connections_of_tenant(
        &mut self,
        tenant: &str,
        limit_rows: usize,
    ) -> Result<Vec<ClientConnection>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM connections WHERE tenant_id = $1 \
                 ORDER BY opened_at DESC, id DESC LIMIT $2",
                rows::CONNECTION_COLUMNS
            ),
            &[&tenant, &limit(limit_rows)],
            rows::connection,
        )
    }

    fn expired_connections(
        &mut self,
        now: Timestamp,
        limit_rows: usize,
    ) -> Result<Vec<ClientConnection>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM connections WHERE status = 'open' AND alive_until <= $1 \
                 ORDER BY alive_until, id LIMIT $2",
                rows::CONNECTION_COLUMNS
            ),
            &[&ts(now), &limit(limit_rows)],
            rows::connection,
        )
    }

    fn orphaned_call_runs(
        &mut self,
        now: Timestamp,
        limit_rows: usize,
    ) -> Result<Vec<RunId>, TxError> {
        self.run_ids(
            "SELECT id FROM runs WHERE status = 'QUEUED' AND planner_kind = 'mcp' \
             AND (scheduled_for IS NULL OR scheduled_for <= $1) \
             AND EXISTS (SELECT 1 FROM connections AS c \
                 WHERE c.session_id = runs.session_id AND c.status = 'closed') \
             ORDER BY created_at, id LIMIT $2",
            &[&ts(now), &limit(limit_rows)],
        )
    }

    fn waiting_call_approvals(
        &mut self,
        tenant: &str,
        principal: &str,
        tool: &str,
        now: Timestamp,
        limit_rows: usize,
    ) -> Result<Vec<Approval>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM approvals WHERE tenant_id = $1 AND principal_id = $2 \
                 AND tool_name = $3 AND status IN ('pending', 'approved') \
                 AND requested_at IS NOT NULL AND expires_at > $4 \
                 AND EXISTS (SELECT 1 FROM tool_invocations AS i \
                     WHERE i.id = approvals.action_id AND i.status = 'WAITING_FOR_APPROVAL') \
                 ORDER BY created_at, id LIMIT $5",
                rows::APPROVAL_COLUMNS
            ),
            &[&tenant, &principal, &tool, &ts(now), &limit(limit_rows)],
            rows::approval,
        )
    }

    fn runs_of_tenant(
        &mut self,
        tenant: &str,
        after: Option<RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunSummary>, TxError> {
        let (after_at, after_id) = match after {
            Some(c) => (Some(c.created_at.as_micros()), Some(c.id.to_string())),
            None => (None, None),
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.all(
            &format!(
                "SELECT {} FROM runs WHERE tenant_id = $1 \
                 AND ($2::bigint IS NULL OR (created_at, id) < ($2, $3::text)) \
                 ORDER BY created_at DESC, id DESC LIMIT $4",
                rows::RUN_SUMMARY_COLUMNS
            ),
            &[&tenant, &after_at, &after_id, &limit],
            rows::run_summary,
        )
    }

    fn count_runs(&mut self, status: RunStatus) -> Result<u64, TxError> {
        let count: Option<i64> = self.one(
            "SELECT COUNT(*) FROM runs WHERE status = $1",
            &[&status.as_str()],
            |row| row.try_get(0).map_err(|e| TxError::Backend(e.to_string())),
        )?;
        u64::try_from(count.unwrap_or(0)).map_err(|e| TxError::Backend(e.to_string()))
    }

    fn insert_checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<(), TxError> {
        if self.run_session(checkpoint.run_id)?.is_none() {
            return Err(TxError::NotFound);
        }
        let latest = match self.kept.checkpoint_version(checkpoint.run_id) {
            Some(version) => version,
            None => self.max_of(
                "SELECT MAX(version) FROM checkpoints WHERE run_id = $1",
                checkpoint.run_id,
            )?,
        };
        let expected = latest.checked_add(1);
        if expected != Some(i64::from(checkpoint.version)) {
            return Err(conflict(format!(
                "checkpoints: version {} of run {} is not contiguous (expected {})",
                checkpoint.version,
                checkpoint.run_id,
                expected.map_or_else(|| "none".to_owned(), |v| v.to_string())
            )));
        }
        // Every check was made here (the run exists, the version is contiguous).
        self.wire.write_later(
            &format!(
                "INSERT INTO checkpoints ({}) VALUES ($1, $2, $3, $4, $5)",
                rows::CHECKPOINT_COLUMNS
            ),
            &[
                &checkpoint.run_id.to_string(),
                &i64::from(checkpoint.version),
                &checkpoint.trigger.as_str(),
                &json(&checkpoint.state, "checkpoints.state")?,
                &ts(checkpoint.created_at),
            ],
        )?;
        self.kept
            .keep_checkpoint_version(checkpoint.run_id, i64::from(checkpoint.version));
        Ok(())
    }

    fn latest_checkpoint(&mut self, run: RunId) -> Result<Option<Checkpoint>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM checkpoints WHERE run_id = $1 ORDER BY version DESC LIMIT 1",
                rows::CHECKPOINT_COLUMNS
            ),
            &[&run.to_string()],
            rows::checkpoint,
        )
    }

    /// The calls are kept inline: this store does not take the `pending` reference (SQLite
    /// does, migration M18).
    fn insert_step_record(
        &mut self,
        record: &StepRecord,
        _pending: Option<u32>,
    ) -> Result<(), TxError> {
        if self.run_session(record.run_id)?.is_none() {
            return Err(TxError::NotFound);
        }
        let latest = match self.kept.step(record.run_id) {
            Some(step) => step,
            None => self.max_of(
                "SELECT MAX(step) FROM step_records WHERE run_id = $1",
                record.run_id,
            )?,
        };
        if latest.checked_add(1) != Some(i64::from(record.step)) {
            return Err(conflict(format!(
                "step_records: step {} of run {} is not contiguous (latest is {latest})",
                record.step, record.run_id
            )));
        }
        // Every check was made here (the run exists, the step is contiguous).
        self.wire.write_later(
            &format!(
                "INSERT INTO step_records ({}) VALUES ($1, $2, $3, $4, $5)",
                rows::STEP_RECORD_COLUMNS
            ),
            &[
                &record.run_id.to_string(),
                &i64::from(record.step),
                &json(&record.calls, "step_records.calls")?,
                &json(&record.results, "step_records.results")?,
                &ts(record.created_at),
            ],
        )?;
        self.kept.keep_step(record.run_id, i64::from(record.step));
        Ok(())
    }

    fn step_records(
        &mut self,
        run: RunId,
        after_step: u32,
        limit_rows: usize,
    ) -> Result<Vec<StepRecord>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM step_records WHERE run_id = $1 AND step > $2 \
                 ORDER BY step LIMIT $3",
                rows::STEP_RECORD_COLUMNS
            ),
            &[&run.to_string(), &i64::from(after_step), &limit(limit_rows)],
            rows::step_record,
        )
    }

    fn insert_invocation(&mut self, invocation: &Invocation) -> Result<(), TxError> {
        let run_session = self
            .run_session(invocation.run_id)?
            .ok_or(TxError::NotFound)?;
        if run_session != invocation.session_id.to_string() {
            return Err(conflict(
                "tool_invocations: session_id differs from the run's",
            ));
        }
        guards::check_outcome_agrees(invocation)?;
        let output_bytes = invocation
            .output_bytes
            .map(|b| int(b, "tool_invocations.output_bytes"))
            .transpose()?;
        let target_kind = invocation.target_kind.as_ref().map(|kind| kind.as_str());
        let values: [Param<'_>; 34] = [
            &invocation.id.to_string(),
            &invocation.run_id.to_string(),
            &invocation.session_id.to_string(),
            &invocation.tenant_id,
            &i64::from(invocation.step_number),
            &invocation.call_id,
            &invocation.tool_name,
            &invocation.tool_version,
            &invocation.side_effect.as_str(),
            &invocation.risk.as_str(),
            &invocation.idempotency_class.as_str(),
            &json(
                &invocation.required_scopes,
                "tool_invocations.required_scopes",
            )?,
            &json(&invocation.raw_arguments, "tool_invocations.raw_arguments")?,
            &invocation.arguments,
            &invocation.normalized_arguments_hash,
            &invocation.effective_arguments_hash,
            &invocation.idempotency_key,
            &json(
                &invocation.argument_trust,
                "tool_invocations.argument_trust",
            )?,
            &invocation.origin_trust.as_str(),
            &invocation.parallel_group.map(|g| g.to_string()),
            &ts(invocation.created_at),
            &invocation.status.as_str(),
            &opt_json(
                invocation.policy_decision.as_ref(),
                "tool_invocations.policy_decision",
            )?,
            &opt_ts(invocation.effect_sent_at),
            &invocation
                .suspended_approval
                .map(|_| rows::SUSPENDED_KIND_APPROVAL),
            &invocation.suspended_approval.map(|a| a.to_string()),
            &opt_json(
                invocation.structured_result.as_ref(),
                "tool_invocations.structured_result",
            )?,
            &output_bytes,
            &opt_json(invocation.outcome.as_ref(), "tool_invocations.outcome")?,
            &invocation.result_item,
            &invocation.outcome_status.map(|s| s.as_str()),
            &invocation.reason_code,
            &ts(invocation.updated_at),
            &target_kind,
        ];
        let insert = format!(
            "INSERT INTO tool_invocations ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
             $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, \
             $27, $28, $29, $30, $31, $32, $33, $34)",
            rows::INVOCATION_COLUMNS
        );
        if self.wire.access == Access::Write {
            // Sent ahead (see `pipeline`): a refused insert (a duplicate id, idempotency key or
            // call) is reported by the transaction's next statement that waits, or its COMMIT,
            // as the `Conflict` it is, and nothing of the transaction commits; core never goes
            // on with a transaction after `insert_invocation` failed (the Store port says so).
            self.wire.write_later(&insert, &values)?;
            // The invocation's events are keyed by its id (`tool.call.proposed:<id>`, …), and
            // none has a key of that subject yet: the id is new (an insert that commits proves
            // no row had it), and an invocation's events are appended only by transactions
            // that insert it or hold its run's lock after it committed. Should a key of it be
            // taken all the same, the append's insert is refused by the key's unique index and
            // the transaction fails: closed, never a second event for one key.
            self.appends
                .know_subject(&invocation.id.to_string(), std::iter::empty());
        } else {
            self.wire.write(&insert, &values)?;
        }
        // Nobody else sees the row before this transaction commits.
        self.kept.keep_invocation(invocation);
        Ok(())
    }

    fn invocation(&mut self, id: InvocationId) -> Result<Option<Invocation>, TxError> {
        self.invocation_row(id, false)
    }

    fn invocation_by_key(&mut self, idempotency_key: &str) -> Result<Option<Invocation>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM tool_invocations WHERE idempotency_key = $1",
                rows::INVOCATION_COLUMNS
            ),
            &[&idempotency_key],
            rows::invocation,
        )
    }

    fn invocation_by_call(
        &mut self,
        run: RunId,
        step: u32,
        call_id: &str,
    ) -> Result<Option<Invocation>, TxError> {
        let invocation = self.one(
            &format!(
                "SELECT {} FROM tool_invocations \
                 WHERE run_id = $1 AND step_number = $2 AND call_id = $3",
                rows::INVOCATION_COLUMNS
            ),
            &[&run.to_string(), &i64::from(step), &call_id],
            rows::invocation,
        )?;
        self.keep_read_invocation(&invocation);
        Ok(invocation)
    }

    fn invocations_of_run(&mut self, run: RunId) -> Result<Vec<Invocation>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM tool_invocations WHERE run_id = $1 \
                 ORDER BY step_number, created_at, id",
                rows::INVOCATION_COLUMNS
            ),
            &[&run.to_string()],
            rows::invocation,
        )
    }

    fn invocations_of_run_in(
        &mut self,
        run: RunId,
        statuses: &[InvocationStatus],
    ) -> Result<Vec<Invocation>, TxError> {
        if statuses.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        self.all(
            &format!(
                "SELECT {} FROM tool_invocations WHERE run_id = $1 AND status = ANY($2) \
                 ORDER BY step_number, created_at, id",
                rows::INVOCATION_COLUMNS
            ),
            &[&run.to_string(), &names],
            rows::invocation,
        )
    }

    fn update_invocation(
        &mut self,
        expected: InvocationStatus,
        next: &Invocation,
    ) -> Result<(), TxError> {
        self.lock_run_first(next.run_id)?;
        let current = self
            .invocation_row(next.id, true)?
            .ok_or(TxError::NotFound)?;
        guards::check_invocation_update(expected, &current, next)?;
        guards::check_outcome_agrees(next)?;
        let output_bytes = next
            .output_bytes
            .map(|b| int(b, "tool_invocations.output_bytes"))
            .transpose()?;
        let sql = "UPDATE tool_invocations SET status = $3, policy_decision = $4, effect_sent_at = $5, \
             suspended_kind = $6, suspended_ref = $7, structured_result = $8, output_bytes = $9, \
             outcome = $10, result_item = $11, outcome_status = $12, reason_code = $13, \
             updated_at = $14 WHERE id = $1 AND status = $2";
        let values: [Param<'_>; 14] = [
            &next.id.to_string(),
            &expected.as_str(),
            &next.status.as_str(),
            &opt_json(
                next.policy_decision.as_ref(),
                "tool_invocations.policy_decision",
            )?,
            &opt_ts(next.effect_sent_at),
            &next
                .suspended_approval
                .map(|_| rows::SUSPENDED_KIND_APPROVAL),
            &next.suspended_approval.map(|a| a.to_string()),
            &opt_json(
                next.structured_result.as_ref(),
                "tool_invocations.structured_result",
            )?,
            &output_bytes,
            &opt_json(next.outcome.as_ref(), "tool_invocations.outcome")?,
            &next.result_item,
            &next.outcome_status.map(|s| s.as_str()),
            &next.reason_code,
            &ts(next.updated_at),
        ];
        // Its run is locked by this transaction and the guard was checked against the current
        // row: the statement changes this one row (see `pipeline`).
        self.wire.write_later(sql, &values)?;
        self.kept.keep_invocation(next);
        Ok(())
    }

    fn uncertain_invocations(
        &mut self,
        tenant: &str,
        include_settled: bool,
    ) -> Result<Vec<Invocation>, TxError> {
        let unsettled = if include_settled {
            ""
        } else {
            " AND NOT EXISTS (SELECT 1 FROM uncertain_settlements s \
               WHERE s.invocation_id = tool_invocations.id)"
        };
        self.all(
            &format!(
                "SELECT {} FROM tool_invocations WHERE tenant_id = $1 \
                 AND status = 'UNCERTAIN'{unsettled} ORDER BY updated_at DESC, id DESC",
                rows::INVOCATION_COLUMNS
            ),
            &[&tenant],
            rows::invocation,
        )
    }

    /// For [`TwinScope::Tenant`] in a write transaction, first an advisory transaction lock on
    /// the identity (a 64-bit key hashed from the schema, tenant, tool and arguments hash; that
    /// key space does not overlap the two-key locks of the event writers): READ COMMITTED
    /// alone would let two transactions proposing identical calls on different runs both find
    /// no twin and both START (§19.7). The second waits for the first to end, and its SELECT,
    /// a new snapshot, sees the first's START. A hash collision only makes two unrelated
    /// proposals wait for each other. One run's proposals are already ordered by its row lock.
    fn twins(
        &mut self,
        identity: &CallIdentity<'_>,
        scope: TwinScope,
    ) -> Result<Vec<Twin>, TxError> {
        let run = match scope {
            TwinScope::Run(run) => Some(run.to_string()),
            TwinScope::Tenant => None,
        };
        let select = format!(
            "SELECT {}, EXISTS (SELECT 1 FROM uncertain_settlements s \
               WHERE s.invocation_id = tool_invocations.id) \
             FROM tool_invocations WHERE tenant_id = $1 AND tool_name = $2 \
             AND effective_arguments_hash = $3 AND status IN ('RUNNING', 'UNCERTAIN') \
             AND ($4::text IS NULL OR run_id = $4) ORDER BY created_at, id",
            rows::INVOCATION_COLUMNS
        );
        let by_identity: [Param<'_>; 4] = [
            &identity.tenant_id,
            &identity.tool_name,
            &identity.effective_arguments_hash,
            &run,
        ];
        let rows = if run.is_none() && self.wire.access == Access::Write {
            // The lock and the SELECT in one exchange: the SELECT, a statement of its own,
            // takes its snapshot once the lock is held.
            let [_, rows] = self.wire.rows_each([
                (
                    "SELECT pg_advisory_xact_lock(hashtextextended(\
                       current_schema() || chr(31) || $1 || chr(31) || $2 || chr(31) || $3, 0))",
                    &by_identity[..3],
                ),
                (&select, &by_identity),
            ])?;
            rows
        } else {
            self.wire.rows(&select, &by_identity)?
        };
        rows.iter()
            .map(|row| {
                Ok(Twin {
                    invocation: rows::invocation(row)?,
                    settled: rows::settled_after_invocation(row)?,
                })
            })
            .collect()
    }

    fn insert_approval(&mut self, approval: &Approval) -> Result<(), TxError> {
        let values: [Param<'_>; 28] = [
            &approval.id.to_string(),
            &approval.tenant_id,
            &approval.principal_id,
            &approval.session_id.to_string(),
            &approval.run_id.to_string(),
            &approval.action_kind.as_str(),
            &approval.action_id.to_string(),
            &approval.tool_invocation_id.to_string(),
            &approval.tool_name,
            &approval.tool_version,
            &approval.action_summary,
            &json(&approval.arguments, "approvals.arguments")?,
            &approval.normalized_arguments_hash,
            &approval.effective_arguments_hash,
            &json(&approval.required_scopes, "approvals.required_scopes")?,
            &approval.risk.as_str(),
            &approval.policy_reason,
            &approval.policy_decision.as_str(),
            &approval.policy_version,
            &approval.revalidated_policy_version,
            &approval.status.as_str(),
            &approval.resolution.map(|r| r.as_str()),
            &approval.resolution_reason,
            &ts(approval.expires_at),
            &ts(approval.created_at),
            &opt_ts(approval.requested_at),
            &opt_ts(approval.resolved_at),
            &approval.resolved_by,
        ];
        self.wire
            .write(
                &format!(
                    "INSERT INTO approvals ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
                     $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, \
                     $25, $26, $27, $28)",
                    rows::APPROVAL_COLUMNS
                ),
                &values,
            )
            .map(drop)
    }

    fn approval(&mut self, id: ApprovalId) -> Result<Option<Approval>, TxError> {
        self.approval_row(id, false)
    }

    fn approval_by_action(&mut self, action_id: InvocationId) -> Result<Option<Approval>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM approvals WHERE action_id = $1",
                rows::APPROVAL_COLUMNS
            ),
            &[&action_id.to_string()],
            rows::approval,
        )
    }

    /// By `(created_at, id)`: the order the approvals were proposed in.
    fn approvals_of_run(&mut self, run: RunId) -> Result<Vec<Approval>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM approvals WHERE run_id = $1 ORDER BY created_at, id",
                rows::APPROVAL_COLUMNS
            ),
            &[&run.to_string()],
            rows::approval,
        )
    }

    fn update_approval(
        &mut self,
        expected: ApprovalStatus,
        next: &Approval,
    ) -> Result<(), TxError> {
        self.lock_run_first(next.run_id)?;
        let current = self.approval_row(next.id, true)?.ok_or(TxError::NotFound)?;
        guards::check_approval_update(expected, &current, next)?;
        let changed = self.wire.write(
            "UPDATE approvals SET action_kind = $3, action_summary = $4, arguments = $5, \
             policy_reason = $6, policy_decision = $7, revalidated_policy_version = $8, \
             status = $9, resolution = $10, resolution_reason = $11, requested_at = $12, \
             resolved_at = $13, resolved_by = $14 WHERE id = $1 AND status = $2",
            &[
                &next.id.to_string(),
                &expected.as_str(),
                &next.action_kind.as_str(),
                &next.action_summary,
                &json(&next.arguments, "approvals.arguments")?,
                &next.policy_reason,
                &next.policy_decision.as_str(),
                &next.revalidated_policy_version,
                &next.status.as_str(),
                &next.resolution.map(|r| r.as_str()),
                &next.resolution_reason,
                &opt_ts(next.requested_at),
                &opt_ts(next.resolved_at),
                &next.resolved_by,
            ],
        )?;
        if changed == 0 {
            return Err(conflict(format!("approval {} is not {expected}", next.id)));
        }
        Ok(())
    }

    fn pending_approvals(
        &mut self,
        tenant: &str,
        run: Option<RunId>,
        after: Option<ApprovalCursor>,
        limit_rows: usize,
    ) -> Result<Vec<Approval>, TxError> {
        // Optional filters are written as `$n IS NULL OR …`, so one prepared statement serves
        // every combination.
        self.all(
            &format!(
                "SELECT {} FROM approvals WHERE tenant_id = $1 AND status = 'pending' \
                 AND requested_at IS NOT NULL AND ($2::text IS NULL OR run_id = $2::text) \
                 AND ($3::bigint IS NULL OR created_at < $3::bigint \
                      OR (created_at = $3::bigint AND id < $4::text)) \
                 ORDER BY created_at DESC, id DESC LIMIT $5",
                rows::APPROVAL_COLUMNS
            ),
            &[
                &tenant,
                &run.map(|r| r.to_string()),
                &after.map(|c| ts(c.created_at)),
                &after.map(|c| c.id.to_string()),
                &limit(limit_rows),
            ],
            rows::approval,
        )
    }

    fn due_approvals(
        &mut self,
        now: Timestamp,
        tenant: Option<&str>,
        limit_rows: usize,
    ) -> Result<Vec<Approval>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM approvals WHERE status = 'pending' AND requested_at IS NOT NULL \
                 AND expires_at <= $1 AND ($2::text IS NULL OR tenant_id = $2::text) \
                 ORDER BY expires_at, id LIMIT $3",
                rows::APPROVAL_COLUMNS
            ),
            &[&ts(now), &tenant, &limit(limit_rows)],
            rows::approval,
        )
    }

    /// One statement on the common path: a data-modifying CTE advances the session's counter
    /// (checking the run's session) and the INSERT takes the sequence it returns, so the event
    /// and the advance are atomic. Whatever stops it — a repeated derivation key, a missing
    /// session or run, a run of another session — rolls back to the write's savepoint and is
    /// sorted out by [`PgTx::refused_event`], in `MemStore`'s order: a refused append consumes
    /// no sequence.
    /// In a write transaction, an append whose id, sequence and key are known is sent ahead
    /// (see `appends`); any other waits for its answer.
    fn append_event(&mut self, event: &NewEvent) -> Result<Event, TxError> {
        if !event.payload.is_object() {
            return self.refused_event(event, None);
        }
        if self.wire.access == Access::Write
            && let Some(stored) = self.append_known(event)?
        {
            return Ok(stored);
        }
        self.append_answered(event)
    }

    fn event_by_key(&mut self, derivation_key: &str) -> Result<Option<Event>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM events WHERE derivation_key = $1",
                rows::EVENT_COLUMNS
            ),
            &[&derivation_key],
            rows::event,
        )
    }

    fn events_of_run(
        &mut self,
        run: RunId,
        after_id: Option<i64>,
        limit_rows: usize,
    ) -> Result<Vec<Event>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM events WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3",
                rows::EVENT_COLUMNS
            ),
            &[
                &run.to_string(),
                &after_id.unwrap_or(i64::MIN),
                &limit(limit_rows),
            ],
            rows::event,
        )
    }

    /// Up to the event horizon (see "Event ids"): an id above it may still be preceded by one
    /// that commits later, so it waits for the next read. Walks `events` by id from the cursor
    /// and keeps the tenant's through the session, as the SQLite store does.
    fn events_of_tenant(
        &mut self,
        tenant: &str,
        after_id: Option<i64>,
        limit_rows: usize,
    ) -> Result<Vec<Event>, TxError> {
        let horizon = self.event_horizon()?;
        self.all(
            &format!(
                "SELECT {} FROM events WHERE id > $2 AND id <= $3 AND EXISTS \
                 (SELECT 1 FROM sessions WHERE sessions.id = events.session_id \
                  AND sessions.tenant_id = $1) ORDER BY id LIMIT $4",
                rows::EVENT_COLUMNS
            ),
            &[
                &tenant,
                &after_id.unwrap_or(i64::MIN),
                &horizon,
                &limit(limit_rows),
            ],
            rows::event,
        )
    }

    /// The highest id at or below the event horizon, so a tail started from it misses nothing
    /// that commits later.
    fn last_event_id(&mut self) -> Result<Option<i64>, TxError> {
        let horizon = self.event_horizon()?;
        let last: Option<Option<i64>> = self.one(
            "SELECT MAX(id) FROM events WHERE id <= $1",
            &[&horizon],
            |row| row.try_get(0).map_err(|e| TxError::Backend(e.to_string())),
        )?;
        Ok(last.flatten())
    }

    fn append_process_event(&mut self, event: &ProcessEvent) -> Result<ProcessEvent, TxError> {
        let stored = self.one(
            &format!(
                "SELECT {} FROM process_events WHERE derivation_key = $1",
                rows::PROCESS_EVENT_COLUMNS
            ),
            &[&event.derivation_key],
            rows::process_event,
        )?;
        if let Some(stored) = stored {
            return event.repeat_of(stored);
        }
        if !event.payload.is_object() {
            return Err(conflict("CHECK process_events: payload is a JSON object"));
        }
        self.wire.write(
            &format!(
                "INSERT INTO process_events ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                rows::PROCESS_EVENT_COLUMNS
            ),
            &[
                &event.id.hyphenated().to_string(),
                &event.event_type.as_str(),
                &i64::from(event.payload_schema_version),
                &event.actor.actor_type.as_str(),
                &event.actor.actor_id,
                &json(&event.payload, "process_events.payload")?,
                &event.derivation_key,
                &ts(event.created_at),
            ],
        )?;
        Ok(event.clone())
    }

    /// In insertion order (`position`, an identity column; rows are never deleted).
    fn process_events(&mut self) -> Result<Vec<ProcessEvent>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM process_events ORDER BY position",
                rows::PROCESS_EVENT_COLUMNS
            ),
            &[],
            rows::process_event,
        )
    }

    /// `ix_tool_invocations_created` (V9, ids in byte order) serves the order and the window;
    /// the redundant `created_at >= $1` gives the planner the range to start the scan at.
    fn invocations_created(&mut self, page: &CreatedPage) -> Result<Vec<Invocation>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM tool_invocations \
                 WHERE created_at >= $1 \
                 AND (created_at > $1 OR (created_at = $1 AND id COLLATE \"C\" > $2)) \
                 AND ($3::BIGINT IS NULL OR created_at < $3) ORDER BY created_at, id COLLATE \"C\" \
                 LIMIT $4",
                rows::INVOCATION_COLUMNS
            ),
            &[
                &ts(page.at),
                &page.after_id_text(),
                &page.until.map(ts),
                &limit(page.limit),
            ],
            rows::invocation,
        )
    }

    /// `ix_process_events_type` (V1) serves the type and the time.
    fn process_events_created(
        &mut self,
        event_type: EventType,
        page: &CreatedPage,
    ) -> Result<Vec<ProcessEvent>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM process_events WHERE event_type = $1 \
                 AND created_at >= $2 \
                 AND (created_at > $2 OR (created_at = $2 AND id COLLATE \"C\" > $3)) \
                 AND ($4::BIGINT IS NULL OR created_at < $4) ORDER BY created_at, id COLLATE \"C\" \
                 LIMIT $5",
                rows::PROCESS_EVENT_COLUMNS
            ),
            &[
                &event_type.as_str(),
                &ts(page.at),
                &page.after_id_text(),
                &page.until.map(ts),
                &limit(page.limit),
            ],
            rows::process_event,
        )
    }

    fn insert_settlement(&mut self, settlement: &Settlement) -> Result<(), TxError> {
        let status: String = self
            .one(
                "SELECT status FROM tool_invocations WHERE id = $1",
                &[&settlement.invocation_id.to_string()],
                |row| row.try_get(0).map_err(|e| TxError::Backend(e.to_string())),
            )?
            .ok_or(TxError::NotFound)?;
        if status != InvocationStatus::Uncertain.as_str() {
            return Err(conflict(format!(
                "uncertain_settlements: invocation {} is {status}, not UNCERTAIN",
                settlement.invocation_id
            )));
        }
        self.wire
            .write(
                &format!(
                    "INSERT INTO uncertain_settlements ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, \
                     $8)",
                    rows::SETTLEMENT_COLUMNS
                ),
                &[
                    &settlement.id.to_string(),
                    &settlement.invocation_id.to_string(),
                    &settlement.run_id.to_string(),
                    &settlement.tenant_id,
                    &settlement.outcome.as_str(),
                    &settlement.note,
                    &settlement.settled_by,
                    &ts(settlement.settled_at),
                ],
            )
            .map(drop)
    }

    fn settlement_by_invocation(
        &mut self,
        invocation: InvocationId,
    ) -> Result<Option<Settlement>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM uncertain_settlements WHERE invocation_id = $1",
                rows::SETTLEMENT_COLUMNS
            ),
            &[&invocation.to_string()],
            rows::settlement,
        )
    }

    fn insert_policy_profile(
        &mut self,
        record: &PolicyProfileRecord,
    ) -> Result<PolicyProfileRecord, TxError> {
        let stored = self.one(
            &format!(
                "SELECT {} FROM policy_profiles WHERE policy_version = $1",
                rows::PROFILE_COLUMNS
            ),
            &[&record.policy_version],
            rows::profile,
        )?;
        match stored {
            Some(stored) if stored.same_content(record) => Ok(stored),
            Some(_) => Err(conflict("policy version identifies different rules")),
            None => {
                // Two processes starting with the same policy at once may both find nothing:
                // the loser's INSERT meets the primary key, and the winner's row is the answer.
                let inserted = self.wire.write(
                    &format!(
                        "INSERT INTO policy_profiles ({}) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        rows::PROFILE_COLUMNS
                    ),
                    &[
                        &record.policy_version,
                        &record.profile_name,
                        &record.profile_sha256,
                        &record.hardline_sha256,
                        &i64::from(record.rule_count),
                        &ts(record.loaded_at),
                        &record.loaded_by,
                    ],
                );
                match inserted {
                    Ok(_) => Ok(record.clone()),
                    Err(TxError::Conflict(message)) => {
                        let winner = self.one(
                            &format!(
                                "SELECT {} FROM policy_profiles WHERE policy_version = $1",
                                rows::PROFILE_COLUMNS
                            ),
                            &[&record.policy_version],
                            rows::profile,
                        )?;
                        match winner {
                            Some(stored) if stored.same_content(record) => Ok(stored),
                            _ => Err(TxError::Conflict(message)),
                        }
                    }
                    Err(error) => Err(error),
                }
            }
        }
    }

    /// By `policy_version`.
    fn policy_profiles(&mut self) -> Result<Vec<PolicyProfileRecord>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM policy_profiles ORDER BY policy_version",
                rows::PROFILE_COLUMNS
            ),
            &[],
            rows::profile,
        )
    }

    /// Duplicate id or digest: the primary key or `uq_api_tokens_token_sha256` (`Conflict`).
    fn insert_api_token(&mut self, token: &ApiToken) -> Result<(), TxError> {
        self.wire
            .write(
                &format!(
                    "INSERT INTO api_tokens ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    rows::API_TOKEN_COLUMNS
                ),
                &[
                    &token.id.to_string(),
                    &token.tenant_id,
                    &token.principal_id,
                    &json(&token.scopes, "api_tokens.scopes")?,
                    &token.token_sha256,
                    &token.label,
                    &ts(token.created_at),
                    &opt_ts(token.expires_at),
                    &opt_ts(token.revoked_at),
                ],
            )
            .map(drop)
    }

    fn api_token(&mut self, id: ApiTokenId) -> Result<Option<ApiToken>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM api_tokens WHERE id = $1",
                rows::API_TOKEN_COLUMNS
            ),
            &[&id.to_string()],
            rows::api_token,
        )
    }

    fn api_token_by_digest(&mut self, digest: &str) -> Result<Option<ApiToken>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM api_tokens WHERE token_sha256 = $1",
                rows::API_TOKEN_COLUMNS
            ),
            &[&digest],
            rows::api_token,
        )
    }

    fn api_tokens(&mut self, tenant: &str) -> Result<Vec<ApiToken>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM api_tokens WHERE tenant_id = $1 ORDER BY created_at, id",
                rows::API_TOKEN_COLUMNS
            ),
            &[&tenant],
            rows::api_token,
        )
    }

    /// One guarded statement: `revoked_at IS NULL` in the WHERE makes a second revocation
    /// change nothing (two racing revocations: one wins, the other is a `Conflict`), and the
    /// trigger `api_tokens_only_revocation` refuses it from any other writer too.
    fn revoke_api_token(&mut self, id: ApiTokenId, at: Timestamp) -> Result<ApiToken, TxError> {
        let revoked = self.wire.write_rows(
            &format!(
                "UPDATE api_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL \
                 RETURNING {}",
                rows::API_TOKEN_COLUMNS
            ),
            &[&id.to_string(), &ts(at)],
        )?;
        match revoked.first() {
            Some(row) => rows::api_token(row),
            None if self.api_token(id)?.is_some() => Err(conflict(format!(
                "api_tokens: revoked_at of token {id} is set once"
            ))),
            None => Err(TxError::NotFound),
        }
    }

    /// Duplicate id: the primary key (`Conflict`).
    fn insert_notify_target(&mut self, target: &NotifyTarget) -> Result<(), TxError> {
        self.wire
            .write(
                &format!(
                    "INSERT INTO notify_targets ({}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                    rows::NOTIFY_TARGET_COLUMNS
                ),
                &[
                    &target.id.to_string(),
                    &target.tenant_id,
                    &target.url,
                    &json(&target.events, "notify_targets.events")?,
                    &target.format.as_str(),
                    &target.secret.to_text(),
                    &target.label,
                    &target.created_by,
                    &ts(target.created_at),
                    &opt_ts(target.removed_at),
                    &target.progress.after,
                    &i64::from(target.progress.attempts),
                    &opt_ts(target.progress.retry_at),
                ],
            )
            .map(drop)
    }

    fn notify_target(&mut self, id: NotifyTargetId) -> Result<Option<NotifyTarget>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM notify_targets WHERE id = $1",
                rows::NOTIFY_TARGET_COLUMNS
            ),
            &[&id.to_string()],
            rows::notify_target,
        )
    }

    fn notify_targets(&mut self, tenant: Option<&str>) -> Result<Vec<NotifyTarget>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM notify_targets WHERE removed_at IS NULL \
                 AND ($1::TEXT IS NULL OR tenant_id = $1) ORDER BY created_at, id COLLATE \"C\"",
                rows::NOTIFY_TARGET_COLUMNS
            ),
            &[&tenant],
            rows::notify_target,
        )
    }

    /// One guarded statement, as `revoke_api_token`: a second removal changes nothing.
    fn remove_notify_target(
        &mut self,
        id: NotifyTargetId,
        at: Timestamp,
    ) -> Result<NotifyTarget, TxError> {
        let removed = self.wire.write_rows(
            &format!(
                "UPDATE notify_targets SET removed_at = $2 WHERE id = $1 AND removed_at IS NULL \
                 RETURNING {}",
                rows::NOTIFY_TARGET_COLUMNS
            ),
            &[&id.to_string(), &ts(at)],
        )?;
        match removed.first() {
            Some(row) => rows::notify_target(row),
            None if self.notify_target(id)?.is_some() => Err(conflict(format!(
                "notify_targets: removed_at of target {id} is set once"
            ))),
            None => Err(TxError::NotFound),
        }
    }

    /// Compare-and-set in one statement: the row changes only while its progress is `expected`.
    fn advance_notify_target(
        &mut self,
        id: NotifyTargetId,
        expected: &Progress,
        next: &Progress,
    ) -> Result<(), TxError> {
        let changed = self.wire.write(
            "UPDATE notify_targets SET after_event_id = $5, attempts = $6, retry_at = $7 \
             WHERE id = $1 AND after_event_id = $2 AND attempts = $3 \
             AND retry_at IS NOT DISTINCT FROM $4 AND removed_at IS NULL",
            &[
                &id.to_string(),
                &expected.after,
                &i64::from(expected.attempts),
                &opt_ts(expected.retry_at),
                &next.after,
                &i64::from(next.attempts),
                &opt_ts(next.retry_at),
            ],
        )?;
        if changed == 1 {
            return Ok(());
        }
        if self.notify_target(id)?.is_none() {
            return Err(TxError::NotFound);
        }
        Err(conflict(format!(
            "notify_targets: the progress of target {id} moved, or it was removed"
        )))
    }

    fn notify_lease(&mut self, tenant: &str) -> Result<Option<NotifyLease>, TxError> {
        self.one(
            "SELECT tenant_id, holder, expires_at FROM notify_leases WHERE tenant_id = $1",
            &[&tenant],
            rows::notify_lease,
        )
    }

    /// Compare-and-set in one statement: an insert that finds a row, or an update that finds
    /// another holder or expiry, changes nothing and is a `Conflict`.
    fn swap_notify_lease(
        &mut self,
        expected: Option<&NotifyLease>,
        next: &NotifyLease,
    ) -> Result<(), TxError> {
        let changed = match expected {
            None => self.wire.write(
                "INSERT INTO notify_leases (tenant_id, holder, expires_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (tenant_id) DO NOTHING",
                &[&next.tenant_id, &next.holder, &ts(next.expires_at)],
            )?,
            Some(expected) => self.wire.write(
                "UPDATE notify_leases SET holder = $4, expires_at = $5 \
                 WHERE tenant_id = $1 AND holder = $2 AND expires_at = $3",
                &[
                    &expected.tenant_id,
                    &expected.holder,
                    &ts(expected.expires_at),
                    &next.holder,
                    &ts(next.expires_at),
                ],
            )?,
        };
        if changed == 1 {
            Ok(())
        } else {
            Err(conflict(format!(
                "notify_leases: the lease of tenant {} moved",
                next.tenant_id
            )))
        }
    }
}
