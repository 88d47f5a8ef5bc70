//! `SqliteTx`: core's [`StoreTx`] as SQL on one open transaction (SPEC §2.2, §8.1, §8.2, §9.1,
//! §10.1, §13, §14), with `MemStore`'s semantics, orderings and error kinds.
//!
//! **Guarded writes** read the current row first, so that a failed guard is reported exactly as
//! `MemStore` reports it (a lease that no longer holds is `Fenced` whatever else changed; a
//! status mismatch without a lease is `Conflict`; a changed immutable field is `Conflict`), and
//! then write with the guarded statement of SPEC §8.1 — `UPDATE … WHERE id = ? AND status = ?
//! [AND lease_owner = ? AND lease_epoch = ?]` — whose zero-row result is again `Fenced` or
//! `Conflict`. **Constraint violations** map to `Conflict` (UNIQUE, PRIMARY KEY, CHECK, trigger)
//! or `NotFound` (a missing parent row, as in `MemStore`); anything else is `Backend`.
//!
//! **Atomic methods.** Every method is one statement or checks everything before its single
//! write; `append_event` and `insert_checkpoint` check, then add to the transaction's journal
//! row (`journal` module), whose failed write fails the whole transaction. So a caller that
//! handles an `Err` and carries on sees no partial write, as with `MemStore`. Rows this
//! transaction already read or wrote are answered from the `kept` module. **A dead transaction** —
//! SQLite rolls the whole transaction back by itself after some I/O errors — is detected at the
//! start of every method (`is_autocommit`) and answered with `Backend`, so that no later
//! statement can run outside the transaction and commit on its own.
//!
//! The `MemStore`-only rules are repeated where they are cheap because the current row is read
//! anyway: run edges, `lease_epoch` and `attempts` discipline, the watermark written only by
//! START, outcome/status agreement, object payloads, the run's session, and settlements only of
//! UNCERTAIN invocations. The update rules among them are core's `store::guards`, which
//! `MemStore` and the PostgreSQL store call too.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, ToSql, ffi, params};

use airlock_core::access::ApiToken;
use airlock_core::action::PolicyDecision;
use airlock_core::approval::Approval;
use airlock_core::connection::{Connection as ClientConnection, ConnectionState, ConnectionStatus};
use airlock_core::conversation::ConversationKey;
use airlock_core::conversation::request_state::StateKey;
use airlock_core::conversation::task::CallTask;
use airlock_core::events::{Event, EventType, NewEvent, ProcessEvent};
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

use super::arguments;
use super::journal::{self, Journal, key_subject};
use super::kept::Kept;
use super::planner_inputs::PlannerInputs;
use super::recent::{Absorbed, Recent};
use super::results;
use super::rows::{self, int, json, opt_json, opt_ts, ts};
use super::stored_state::{self, ScriptCalls};
use super::write_log::WriteLog;

/// Maps an SQLite error to core's error kinds (see the module docs).
pub(super) fn tx_error(error: rusqlite::Error) -> TxError {
    if let rusqlite::Error::SqliteFailure(failure, message) = &error
        && failure.code == rusqlite::ErrorCode::ConstraintViolation
    {
        if failure.extended_code == ffi::SQLITE_CONSTRAINT_FOREIGNKEY {
            return TxError::NotFound;
        }
        return TxError::Conflict(message.clone().unwrap_or_else(|| failure.to_string()));
    }
    TxError::Backend(error.to_string())
}

fn conflict(message: impl Into<String>) -> TxError {
    TxError::Conflict(message.into())
}

/// `alive_until`, `closed_at` and `close_reason` of a connection's state.
fn connection_state_columns(
    state: &ConnectionState,
) -> (Option<i64>, Option<i64>, Option<&'static str>) {
    match state {
        ConnectionState::Open { alive_until } => (Some(ts(*alive_until)), None, None),
        ConnectionState::Closed { closed_at, reason } => {
            (None, Some(ts(*closed_at)), Some(reason.as_str()))
        }
    }
}

/// A `LIMIT` value; `usize` beyond `i64::MAX` means "no limit" in practice.
fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `LIMIT n` written into the statement, for a page size the code fixes (not a caller's). A
/// bound `LIMIT ?` makes SQLite re-prepare the statement on every execution: its planner reads
/// the bound value (for `ORDER BY … LIMIT` plans), which marks the statement to be recompiled
/// whenever that parameter is bound again, and every execution binds it. `perf` found the
/// gateway's parked-twin read re-parsed and re-planned on every call (issue 33); a statement
/// per page size keeps one compiled statement in the cache for each fixed page.
fn limit_clause(n: usize) -> String {
    format!("LIMIT {}", limit(n))
}

/// The gateway's parked-twin read (once per call): a page of the principal's calls of `tool`
/// waiting for approval, or approved and waiting for their request.
fn waiting_call_approvals_sql(limit_rows: usize) -> String {
    format!(
        "SELECT {} FROM approvals WHERE tenant_id = ?1 AND principal_id = ?2 \
         AND tool_name = ?3 AND status IN ('pending', 'approved') \
         AND requested_at IS NOT NULL AND expires_at > ?4 \
         AND EXISTS (SELECT 1 FROM tool_invocations AS i \
             WHERE i.id = approvals.action_id AND i.status = 'WAITING_FOR_APPROVAL') \
         ORDER BY created_at, id {}",
        rows::APPROVAL_COLUMNS,
        limit_clause(limit_rows)
    )
}

/// RECLAIM's page of runs whose lease ran out (every worker poll).
fn expired_leases_sql(limit_rows: usize) -> String {
    format!(
        "SELECT {} FROM runs WHERE status = 'RUNNING' AND lease_expires_at <= ?1 \
         ORDER BY lease_expires_at, id {}",
        rows::RUN_COLUMNS,
        limit_clause(limit_rows)
    )
}

/// A run's step records after a step (a planner's history).
fn step_records_sql(limit_rows: usize) -> String {
    format!(
        "SELECT {} FROM step_records WHERE run_id = ?1 AND step > ?2 ORDER BY step {}",
        rows::STEP_RECORD_COLUMNS,
        limit_clause(limit_rows)
    )
}

/// One transaction's view of the connection. Created per `transact` caller, as a member of
/// the open group (see the `group` module).
pub(super) struct SqliteTx<'c> {
    conn: &'c Connection,
    /// Planner inputs already read (see the `planner_inputs` module).
    inputs: &'c PlannerInputs,
    /// The journal row being filled, and what the writer assigns from memory (see the
    /// `journal` module).
    journal: Journal,
    /// Runs and invocations this transaction read or wrote (see the `kept` module).
    kept: Kept,
    /// Nanoseconds spent inside SQLite on this transaction's statements, row decoding
    /// included (`GroupStats::sql_nanos`).
    sql_nanos: Cell<u64>,
    /// Policy decision texts this transaction found or added, by text (`decision_id`).
    decision_ids: BTreeMap<String, i64>,
    /// What the writer's earlier transactions left (see the `recent` module); `None` for a
    /// reader, whose snapshot may predate it.
    recent: Option<&'c Recent>,
    /// The write statements this transaction ran, for the group to replay if a later member
    /// must be undone (see the `write_log` module); `None` for a reader.
    log: Option<RefCell<WriteLog>>,
}

impl<'c> SqliteTx<'c> {
    /// A transaction that reads only what its connection shows (a reader's, a test's).
    pub(super) fn new(conn: &'c Connection, inputs: &'c PlannerInputs) -> SqliteTx<'c> {
        SqliteTx {
            conn,
            inputs,
            journal: Journal::default(),
            kept: Kept::default(),
            sql_nanos: Cell::new(0),
            decision_ids: BTreeMap::new(),
            recent: None,
            log: None,
        }
    }

    /// A member of the writer's group, answered from `recent` where it holds the row.
    pub(super) fn in_group(
        conn: &'c Connection,
        inputs: &'c PlannerInputs,
        recent: &'c Recent,
    ) -> SqliteTx<'c> {
        SqliteTx {
            recent: Some(recent),
            log: Some(RefCell::default()),
            ..SqliteTx::new(conn, inputs)
        }
    }

    /// What this transaction leaves for the writer's cache once it ended well, and the write
    /// statements it ran (see the `write_log` module).
    pub(super) fn into_absorbed(self) -> (Absorbed, WriteLog) {
        let (next_sequences, next_event_id) = self.journal.into_counters();
        let absorbed = Absorbed {
            kept: self.kept,
            next_sequences,
            next_event_id,
            decision_ids: self.decision_ids,
        };
        (
            absorbed,
            self.log.map(RefCell::into_inner).unwrap_or_default(),
        )
    }

    /// Logs a statement that just completed if it changed rows (`total_changes` moved from
    /// `before`, triggers' changes included; see the `write_log` module). A statement that
    /// changed nothing needs no replay, and one that failed changed nothing: SQLite undoes a
    /// failed statement's partial changes.
    fn log_write(&self, before: u64, sql: &str, params: &[&dyn ToSql]) {
        let moved = self.conn.total_changes().wrapping_sub(before);
        if let Some(log) = &self.log
            && moved != 0
        {
            log.borrow_mut().record(self.conn, sql, params, moved);
        }
    }

    /// The session of run `id` if this transaction or the writer's cache met the run (a run's
    /// session never changes).
    fn known_session_of(&self, id: RunId) -> Option<SessionId> {
        self.kept
            .session_of(id)
            .or_else(|| self.recent.and_then(|recent| recent.session_of(id)))
    }

    /// Run `id` as the writer's cache holds it, unless this transaction forgot it. A debug
    /// build (every test) also reads the row and panics if the two differ: the cache must
    /// never answer what the row would not.
    fn recent_run(&self, id: RunId) -> Option<&'c Run> {
        if self.kept.forgot_run(id) {
            return None;
        }
        let recent = self.recent.and_then(|recent| recent.run(id))?;
        #[cfg(debug_assertions)]
        if let Ok(stored) = self.read_run(id) {
            assert_eq!(
                stored.as_ref(),
                Some(recent),
                "the writer's cache of run {id}"
            );
        }
        Some(recent)
    }

    /// The connection, if the transaction is still open (see "a dead transaction" above).
    fn conn(&self) -> Result<&'c Connection, TxError> {
        if self.conn.is_autocommit() {
            return Err(TxError::Backend(
                "the transaction was rolled back by SQLite".to_owned(),
            ));
        }
        Ok(self.conn)
    }

    /// Runs a cached statement that changes rows and returns how many.
    fn execute(&self, sql: &str, params: &[&dyn ToSql]) -> Result<usize, TxError> {
        let conn = self.conn()?;
        let started = Instant::now();
        let before = conn.total_changes();
        let mut statement = conn.prepare_cached(sql).map_err(tx_error)?;
        let changed = statement.execute(params).map_err(tx_error);
        self.log_write(before, sql, params);
        self.count_sql(started);
        changed
    }

    /// Adds the time since `started` to the transaction's SQL clock.
    fn count_sql(&self, started: Instant) {
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.sql_nanos
            .set(self.sql_nanos.get().saturating_add(nanos));
    }

    /// Nanoseconds this transaction spent in SQLite so far (see `GroupStats::sql_nanos`).
    pub(super) fn sql_nanos(&self) -> u64 {
        self.sql_nanos.get()
    }

    /// At most one row.
    fn one<T>(
        &self,
        sql: &str,
        params: &[&dyn ToSql],
        map: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Option<T>, TxError> {
        let conn = self.conn()?;
        let started = Instant::now();
        let before = conn.total_changes();
        let mut statement = conn.prepare_cached(sql).map_err(tx_error)?;
        let row = statement
            .query_row(params, map)
            .optional()
            .map_err(tx_error);
        self.log_write(before, sql, params);
        self.count_sql(started);
        row
    }

    /// Every row, in the statement's order.
    fn all<T>(
        &self,
        sql: &str,
        params: &[&dyn ToSql],
        map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, TxError> {
        let conn = self.conn()?;
        let started = Instant::now();
        let before = conn.total_changes();
        let mut statement = conn.prepare_cached(sql).map_err(tx_error)?;
        let rows = statement
            .query_map(params, map)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<T>>>())
            .map_err(tx_error);
        self.log_write(before, sql, params);
        self.count_sql(started);
        rows
    }

    /// The run ids in the first column of every row, parsed (a malformed one is a backend
    /// error, not a skipped row).
    fn run_ids(&self, sql: &str, params: &[&dyn ToSql]) -> Result<Vec<RunId>, TxError> {
        let ids: Vec<String> = self.all(sql, params, |row| row.get(0))?;
        ids.into_iter()
            .map(|id| {
                id.parse()
                    .map_err(|e| TxError::Backend(format!("runs.id '{id}': {e}")))
            })
            .collect()
    }

    /// Writes the journal's open row, if any (see the `journal` module). A row that cannot be
    /// written poisons the transaction: its events were already returned as appended.
    fn flush_journal(&mut self) -> Result<(), TxError> {
        self.journal.check()?;
        let row = match self.journal.take_row() {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(()),
            Err(error) => {
                self.journal.poison(error.to_string());
                return self.journal.check();
            }
        };
        let params: Vec<&dyn ToSql> = row.params.iter().map(|v| v as &dyn ToSql).collect();
        match self.execute(journal::INSERT_ROW, &params) {
            Ok(_) => {
                self.journal.wrote_subject(row.key_subject.as_deref());
                Ok(())
            }
            Err(error) => {
                self.journal.poison(error.to_string());
                self.journal.check()
            }
        }
    }

    /// Ends a write transaction's closure: writes the journal's open row. The group rolls the
    /// member back if this fails, so no appended event is lost from a committed transaction.
    pub(super) fn finish(&mut self) -> Result<(), TxError> {
        self.flush_journal()
    }

    /// The session of run `id`, if the run exists: known if this transaction met the run (a
    /// run's session never changes), else read and remembered.
    fn run_session(&mut self, id: RunId) -> Result<Option<SessionId>, TxError> {
        if let Some(session) = self.known_session_of(id) {
            return Ok(Some(session));
        }
        let session: Option<SessionId> = self.one(
            "SELECT session_id FROM runs WHERE id = ?1",
            params![id.to_string()],
            |row| rows::parse(row, 0),
        )?;
        if let Some(session) = session {
            self.kept.keep_session_of(id, session);
        }
        Ok(session)
    }

    /// The next sequence of `session_id` for an event of `run_id`, checking that the session
    /// exists and the run is one of its runs (`NotFound`, `Conflict` as `MemStore`). One read
    /// (`rows::EVENT_SLOT`) the first time a session or run is met in the transaction; after
    /// that the journal's own count.
    fn next_sequence(
        &mut self,
        session_id: SessionId,
        run_id: Option<RunId>,
    ) -> Result<i64, TxError> {
        let kept = self.journal.next_sequence_of(session_id).or_else(|| {
            self.recent
                .and_then(|recent| recent.next_sequence_of(session_id))
        });
        let run_known = run_id.is_none_or(|run| self.known_session_of(run) == Some(session_id));
        if let (Some(next), true) = (kept, run_known) {
            #[cfg(debug_assertions)]
            if self.journal.next_sequence_of(session_id).is_none()
                && let Ok(Some(stored)) = self.one(
                    rows::EVENT_SLOT,
                    params![session_id.to_string(), run_id.map(|run| run.to_string())],
                    |row| row.get::<_, i64>(0),
                )
            {
                assert_eq!(stored, next, "the writer's cache of session {session_id}");
            }
            return Ok(next);
        }
        let slot = self.one(
            rows::EVENT_SLOT,
            params![session_id.to_string(), run_id.map(|run| run.to_string())],
            |row| Ok((row.get::<_, i64>(0)?, rows::parse_opt::<SessionId>(row, 1)?)),
        )?;
        let Some((stored_next, run_session)) = slot else {
            return Err(TxError::NotFound);
        };
        if let Some(run) = run_id {
            match run_session {
                None => return Err(TxError::NotFound),
                Some(other) if other != session_id => {
                    return Err(conflict(format!(
                        "events: run {run} is not in session {session_id}"
                    )));
                }
                Some(session) => self.kept.keep_session_of(run, session),
            }
        }
        Ok(kept.unwrap_or(stored_next))
    }

    /// The next event id: one past the journal's last, read once per transaction.
    fn next_event_id(&mut self) -> Result<i64, TxError> {
        if let Some(next) = self.journal.next_event_id() {
            return Ok(next);
        }
        if let Some(next) = self.recent.and_then(Recent::next_event_id) {
            #[cfg(debug_assertions)]
            if let Ok(last) = self.one(journal::LAST_EVENT_ID, [].as_slice(), |row| {
                row.get::<_, i64>(0)
            }) {
                assert_eq!(
                    last.unwrap_or(0) + 1,
                    next,
                    "the writer's cache of event ids"
                );
            }
            self.journal.set_next_event_id(next);
            return Ok(next);
        }
        let last: Option<i64> =
            self.one(journal::LAST_EVENT_ID, [].as_slice(), |row| row.get(0))?;
        let next = last
            .unwrap_or(0)
            .checked_add(1)
            .ok_or_else(|| TxError::Backend("events: the event ids are exhausted".to_owned()))?;
        self.journal.set_next_event_id(next);
        Ok(next)
    }

    /// The events of the journal rows `sql` selects (with `journal::event_row_columns!`),
    /// those after `after_id`, at most `limit_rows`: each row holds at least one event, so
    /// `limit_rows` rows hold enough.
    fn events_of_rows(
        &mut self,
        sql: &str,
        params: &[&dyn ToSql],
        after_id: Option<i64>,
        limit_rows: usize,
    ) -> Result<Vec<Event>, TxError> {
        self.flush_journal()?;
        let rows = self.all(sql, params, journal::events_of_row)?;
        let after = after_id.unwrap_or(i64::MIN);
        Ok(rows
            .into_iter()
            .flatten()
            .filter(|event| event.id > after)
            .take(limit_rows)
            .collect())
    }

    /// The run row, its planner input from [`PlannerInputs`] when kept (see that module): the
    /// row is read with the input's length in place of the input, which is read, and kept,
    /// only when no input of that run and length is.
    fn read_run(&self, id: RunId) -> Result<Option<Run>, TxError> {
        let id = id.to_string();
        let found = self.one(rows::RUN_WITHOUT_INPUT, params![id], |row| {
            Ok((
                rows::run(row)?,
                row.get::<_, Option<i64>>(rows::RUN_INPUT_BYTES)?,
            ))
        })?;
        let Some((mut run, bytes)) = found else {
            return Ok(None);
        };
        let bytes =
            bytes.ok_or_else(|| TxError::Backend(format!("run {id} has no row in run_inputs")))?;
        run.planner_input = match self.inputs.get(&id, bytes) {
            Some(input) => input,
            None => self
                .read_input(&id)?
                .ok_or_else(|| TxError::Backend(format!("run {id} vanished mid-read")))?,
        };
        Ok(Some(run))
    }

    /// Run `run`'s planner input (its id as stored) read from `run_inputs`, and kept.
    fn read_input(&self, run: &str) -> Result<Option<Arc<str>>, TxError> {
        let input: Option<String> = self.one(
            "SELECT planner_input FROM run_inputs WHERE run_id = ?1",
            params![run],
            |row| row.get(0),
        )?;
        Ok(input.map(|input| {
            let input: Arc<str> = input.into();
            self.inputs.keep(run, Arc::clone(&input));
            input
        }))
    }

    /// The script calls of run `run` (its id as stored; see the `stored_state` module): those
    /// of its kept input, else of its input read from `run_inputs` (and kept). A row mapper
    /// asks for them too: the read is another statement on the same connection, and its time
    /// is then counted in `sql_nanos` twice (its own, and within the statement it ran in).
    /// An input too large to keep is read and parsed again at each miss.
    fn script_calls(&self, run: &str) -> Result<Option<Arc<ScriptCalls>>, String> {
        if let Some(calls) = self.inputs.script_calls(run) {
            return Ok(calls);
        }
        let Some(input) = self
            .read_input(run)
            .map_err(|e| format!("cannot read the planner input of run {run}: {e}"))?
        else {
            return Ok(None);
        };
        Ok(match self.inputs.script_calls(run) {
            Some(calls) => calls,
            None => ScriptCalls::of_input(&input).map(Arc::new),
        })
    }

    /// Invocation `id` as its row holds it.
    fn read_invocation(&self, id: InvocationId) -> Result<Option<Invocation>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM tool_invocations WHERE id = ?1",
                rows::INVOCATION_COLUMNS
            ),
            params![id.to_string()],
            self.invocation_row(),
        )
    }

    /// Decodes an invocation row as this transaction reads it: with what it wrote (`kept`), and
    /// the runs' scripts that PENDING checkpoints refer to.
    fn invocation_row(&self) -> impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<Invocation> + '_ {
        move |row| rows::invocation(row, &self.kept, &|run| self.script_calls(run))
    }

    /// The id of `decision`'s text in `policy_decision_texts` (M23), the text added when no
    /// row holds it yet; `None` for no decision. Ids this transaction found or added are kept
    /// in it: only for as long as it lasts, since a text it added is gone if it rolls back. A
    /// text is added before the row that refers to it is written, so a write that then fails
    /// (a conflict its caller tolerates) can leave a text no row refers to: one per distinct
    /// decision at most, never wrong, and kept (the table's triggers refuse deletes).
    fn decision_id(&mut self, decision: Option<&PolicyDecision>) -> Result<Option<i64>, TxError> {
        let Some(decision) = decision else {
            return Ok(None);
        };
        let text = json(decision, "tool_invocations.policy_decision")?;
        if let Some(id) = self.decision_ids.get(&text) {
            return Ok(Some(*id));
        }
        if let Some(id) = self.recent.and_then(|recent| recent.decision_id(&text)) {
            self.decision_ids.insert(text, id);
            return Ok(Some(id));
        }
        let found: Option<i64> = self.one(
            "SELECT id FROM policy_decision_texts WHERE text = ?1",
            params![text],
            |row| row.get(0),
        )?;
        let id = match found {
            Some(id) => id,
            None => {
                self.execute(
                    "INSERT INTO policy_decision_texts (text) VALUES (?1)",
                    params![text],
                )?;
                self.conn()?.last_insert_rowid()
            }
        };
        self.decision_ids.insert(text, id);
        Ok(Some(id))
    }

    /// The run as this transaction last saw it (see the `kept` module), else read and kept.
    fn kept_run(&mut self, id: RunId) -> Result<Option<Run>, TxError> {
        if self.kept.run(id).is_none() {
            let run = match self.recent_run(id) {
                Some(recent) => recent.clone(),
                None => match self.read_run(id)? {
                    Some(run) => run,
                    None => return Ok(None),
                },
            };
            self.kept.keep_read(run);
        }
        Ok(self.kept.run(id).cloned())
    }
}

/// The columns of a run row that an update may change, in SET order, as SQL values. Comparing
/// two runs' lists finds the columns an update has to name.
fn mutable_columns(run: &Run) -> Result<[(&'static str, Value); 12], TxError> {
    let state = rows::state_columns(&run.state)?;
    let text = |t: Option<String>| t.map_or(Value::Null, Value::Text);
    let integer = |i: Option<i64>| i.map_or(Value::Null, Value::Integer);
    Ok([
        ("status", Value::Text(state.status.to_owned())),
        ("step_count", Value::Integer(i64::from(run.step_count))),
        (
            "tool_call_count",
            Value::Integer(i64::from(run.tool_call_count)),
        ),
        ("lease_owner", text(state.lease_owner)),
        (
            "lease_epoch",
            Value::Integer(int(run.lease_epoch, "runs.lease_epoch")?),
        ),
        ("lease_expires_at", integer(state.lease_expires_at)),
        ("attempts", Value::Integer(i64::from(run.attempts))),
        ("scheduled_for", integer(state.scheduled_for)),
        (
            "cancel_requested_at",
            integer(opt_ts(run.cancel_requested_at)),
        ),
        ("failure", text(state.failure)),
        ("final_message", text(state.final_message)),
        ("updated_at", Value::Integer(ts(run.updated_at))),
    ])
}

impl StoreTx for SqliteTx<'_> {
    fn insert_session(&mut self, session: &Session) -> Result<(), TxError> {
        self.execute(
            "INSERT INTO sessions (id, tenant_id, principal_id, next_event_sequence, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                session.id.to_string(),
                session.tenant_id,
                session.principal_id,
                int(session.next_event_sequence, "sessions.next_event_sequence")?,
                ts(session.created_at),
            ],
        )
        .map(drop)
    }

    /// The stored row, its next event sequence the journal's own count when this transaction
    /// appended to the session (its open row is not written yet).
    fn session(&mut self, id: SessionId) -> Result<Option<Session>, TxError> {
        let id = id.to_string();
        let session = self.one(
            &format!(
                "SELECT {} FROM sessions WHERE id = ?1",
                rows::SESSION_COLUMNS
            ),
            params![id],
            rows::session,
        )?;
        Ok(session.map(|mut session| {
            if let Some(next) = self
                .journal
                .next_sequence_of(session.id)
                .and_then(|next| u64::try_from(next).ok())
            {
                session.next_event_sequence = session.next_event_sequence.max(next);
            }
            session
        }))
    }

    /// Two writes (M15): the row, then its planner input in `run_inputs`. An input row of this
    /// id left by a write outside airlock is refused before either (the only constraint the
    /// second write has that the first does not); if the second fails anyway (the disk), the
    /// row just inserted, which nothing refers to, is deleted again, so the method stays
    /// atomic for a caller that carries on.
    fn insert_run(&mut self, run: &Run) -> Result<(), TxError> {
        let state = rows::state_columns(&run.state)?;
        let id = run.id.to_string();
        if self
            .one(
                "SELECT 1 FROM run_inputs WHERE run_id = ?1",
                params![id],
                |row| row.get::<_, i64>(0),
            )?
            .is_some()
        {
            return Err(conflict(format!(
                "run_inputs: an input of run {id} is already stored"
            )));
        }
        self.execute(
            &format!(
                "INSERT INTO runs ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, \
                 ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
                rows::RUN_ROW_COLUMNS
            ),
            params![
                id,
                run.session_id.to_string(),
                run.tenant_id,
                run.principal_id,
                json(&run.principal_scopes, "runs.principal_scopes")?,
                run.origin_trust.as_str(),
                run.planner_kind,
                state.status,
                run.step_count,
                run.tool_call_count,
                json(&run.limits, "runs.limits")?,
                opt_ts(run.deadline_at),
                state.lease_owner,
                int(run.lease_epoch, "runs.lease_epoch")?,
                state.lease_expires_at,
                run.attempts,
                state.scheduled_for,
                opt_ts(run.cancel_requested_at),
                state.failure,
                state.final_message,
                ts(run.created_at),
                ts(run.updated_at),
            ],
        )?;
        let input = self.execute(
            "INSERT INTO run_inputs (run_id, planner_input) VALUES (?1, ?2)",
            params![id, run.planner_input],
        );
        if let Err(error) = input {
            // After an I/O error SQLite may have rolled the whole transaction back already;
            // then there is nothing to undo, and the cause is the error to report.
            if !self.conn.is_autocommit() {
                self.execute("DELETE FROM runs WHERE id = ?1", params![id])?;
            }
            return Err(error);
        }
        Ok(())
    }

    fn run(&mut self, id: RunId) -> Result<Option<Run>, TxError> {
        self.kept_run(id)
    }

    /// Served by `ix_runs_active_by_session` (M7), whose WHERE is this query's and whose order
    /// is the answer's.
    fn active_runs_in_session(&mut self, session: SessionId) -> Result<Vec<RunId>, TxError> {
        self.run_ids(
            "SELECT id FROM runs WHERE session_id = ?1 \
             AND status <> 'COMPLETED' AND status <> 'FAILED' AND status <> 'CANCELLED' \
             ORDER BY created_at, id",
            params![session.to_string()],
        )
    }

    fn guard_lease(&mut self, lease: &Lease) -> Result<(), TxError> {
        let known = self
            .kept
            .run(lease.run_id)
            .or_else(|| self.recent_run(lease.run_id));
        if let Some(kept) = known {
            return if guards::holds(kept, lease) {
                Ok(())
            } else {
                Err(TxError::Fenced)
            };
        }
        let held = self.one(
            "SELECT 1 FROM runs WHERE id = ?1 AND status = 'RUNNING' AND lease_owner = ?2 \
             AND lease_epoch = ?3",
            params![
                lease.run_id.to_string(),
                lease.worker_id,
                int(lease.lease_epoch, "lease_epoch")?
            ],
            |row| row.get::<_, i64>(0),
        )?;
        match held {
            Some(_) => Ok(()),
            None => Err(TxError::Fenced),
        }
    }

    fn update_run(&mut self, guard: &RunGuard, next: &Run) -> Result<Run, TxError> {
        let current = self.kept_run(guard.run_id)?;
        let current = guards::check_run_update(guard, current.as_ref(), next)?;

        // Only the columns that change are written: an index is rewritten only when one of its
        // columns is in the SET list, so a PENDING or START that moves a counter touches the
        // row's own page and none of the status and lease indexes. With nothing to change, the
        // guard checks on `current` above (same transaction, write lock held) are the answer.
        let before = mutable_columns(current)?;
        let after = mutable_columns(next)?;
        let changed: Vec<&(&str, Value)> = before
            .iter()
            .zip(&after)
            .filter(|(old, new)| old.1 != new.1)
            .map(|(_, new)| new)
            .collect();
        if changed.is_empty() {
            self.kept.keep_written(next);
            return Ok(next.clone());
        }
        let set_list: Vec<String> = changed
            .iter()
            .map(|(name, _)| format!("{name} = ?"))
            .collect();
        let mut sql = format!(
            "UPDATE runs SET {} WHERE id = ? AND status = ?",
            set_list.join(", ")
        );
        let id = guard.run_id.to_string();
        let status = guard.status.as_str();
        let mut values: Vec<&dyn ToSql> = changed
            .iter()
            .map(|(_, value)| value as &dyn ToSql)
            .collect();
        values.push(&id);
        values.push(&status);
        let lease_guard = match &guard.lease {
            Some(lease) => Some((&lease.worker_id, int(lease.lease_epoch, "lease_epoch")?)),
            None => None,
        };
        if let Some((owner, epoch)) = &lease_guard {
            sql.push_str(" AND lease_owner = ? AND lease_epoch = ?");
            values.push(owner);
            values.push(epoch);
        }
        if self.execute(&sql, &values)? == 0 {
            return Err(match guard.lease {
                Some(_) => TxError::Fenced,
                None => conflict(format!("run {} is not {}", guard.run_id, guard.status)),
            });
        }
        self.kept.keep_written(next);
        Ok(next.clone())
    }

    /// Exactly the one statement of SPEC §8.2: it renews any lease that still holds, even one
    /// past its expiry that no RECLAIM has taken yet, and touches nothing else (`now` is
    /// unused, as in `MemStore`).
    fn heartbeat(
        &mut self,
        lease: &Lease,
        until: Timestamp,
        _now: Timestamp,
    ) -> Result<Option<HeartbeatObs>, TxError> {
        self.kept.forget_run(lease.run_id);
        let renewed: Option<Option<i64>> = self.one(
            "UPDATE runs SET lease_expires_at = ?1 WHERE id = ?2 AND status = 'RUNNING' \
             AND lease_owner = ?3 AND lease_epoch = ?4 RETURNING cancel_requested_at",
            params![
                ts(until),
                lease.run_id.to_string(),
                lease.worker_id,
                int(lease.lease_epoch, "lease_epoch")?
            ],
            |row| row.get(0),
        )?;
        Ok(renewed.map(|cancel| HeartbeatObs {
            cancel_requested_at: cancel.map(Timestamp::from_micros),
        }))
    }

    fn next_claimable_run(
        &mut self,
        now: Timestamp,
        only: Option<RunId>,
    ) -> Result<Option<Run>, TxError> {
        match only {
            Some(id) => self.one(
                &format!(
                    "SELECT {} FROM runs WHERE status = 'QUEUED' AND id = ?2 \
                     AND (scheduled_for IS NULL OR scheduled_for <= ?1)",
                    rows::RUN_COLUMNS
                ),
                params![ts(now), id.to_string()],
                rows::run,
            ),
            // A call run is claimed by id only: by a gateway holding a request for it, or by
            // the orphan sweep that ends it (§19.4, §22.3).
            None => self.one(
                &format!(
                    "SELECT {} FROM runs WHERE status = 'QUEUED' \
                     AND (scheduled_for IS NULL OR scheduled_for <= ?1) \
                     AND planner_kind <> 'mcp' \
                     ORDER BY created_at, id LIMIT 1",
                    rows::RUN_COLUMNS
                ),
                params![ts(now)],
                rows::run,
            ),
        }
    }

    fn expired_leases(&mut self, now: Timestamp, limit_rows: usize) -> Result<Vec<Run>, TxError> {
        self.all(&expired_leases_sql(limit_rows), params![ts(now)], rows::run)
    }

    /// Every column is written, `last_seen_at` included: M7's default of 0 is only the
    /// placeholder its in-place upgrade needed.
    fn insert_connection(&mut self, connection: &ClientConnection) -> Result<(), TxError> {
        let (alive_until, closed_at, reason) = connection_state_columns(&connection.state);
        let (tainted_at, tainted_by) = rows::taint_columns(connection.taint.as_ref());
        self.execute(
            &format!(
                "INSERT INTO connections ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, \
                 ?11, ?12, ?13, ?14, ?15)",
                rows::CONNECTION_COLUMNS
            ),
            params![
                connection.id.to_string(),
                connection.tenant_id,
                connection.principal_id,
                connection.session_id.to_string(),
                connection.gateway_id,
                connection.status().as_str(),
                alive_until,
                closed_at,
                reason,
                ts(connection.opened_at),
                tainted_at,
                tainted_by,
                connection.call_count,
                ts(connection.last_seen_at),
                connection.conversation_key.as_ref().map(|k| k.as_str()),
            ],
        )?;
        Ok(())
    }

    fn connection(&mut self, id: ConnectionId) -> Result<Option<ClientConnection>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM connections WHERE id = ?1",
                rows::CONNECTION_COLUMNS
            ),
            params![id.to_string()],
            rows::connection,
        )
    }

    fn connection_by_session(
        &mut self,
        session: SessionId,
    ) -> Result<Option<ClientConnection>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM connections WHERE session_id = ?1",
                rows::CONNECTION_COLUMNS
            ),
            params![session.to_string()],
            rows::connection,
        )
    }

    fn insert_state_key(&mut self, key: &StateKey) -> Result<(), TxError> {
        self.execute(
            "INSERT INTO state_keys (id, secret_hex, created_at) VALUES (?1, ?2, ?3)",
            params![key.id, key.secret_hex, ts(key.created_at)],
        )?;
        Ok(())
    }

    fn state_key(&mut self, id: &str) -> Result<Option<StateKey>, TxError> {
        self.one(
            "SELECT id, secret_hex, created_at FROM state_keys WHERE id = ?1",
            params![id],
            rows::state_key,
        )
    }

    /// Served by `ix_state_keys_created` (M10), read backwards.
    fn newest_state_key(&mut self) -> Result<Option<StateKey>, TxError> {
        self.one(
            "SELECT id, secret_hex, created_at FROM state_keys \
             ORDER BY created_at DESC, id DESC LIMIT 1",
            params![],
            rows::state_key,
        )
    }

    /// `Conflict` from the primary key or `uq_call_tasks_run`; `NotFound` from the run's
    /// foreign key.
    fn insert_call_task(&mut self, task: &CallTask) -> Result<(), TxError> {
        self.execute(
            "INSERT INTO call_tasks (id_sha256, run_id, tenant_id, principal_id, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                task.id_sha256,
                task.run_id.to_string(),
                task.tenant_id,
                task.principal_id,
                ts(task.created_at)
            ],
        )?;
        Ok(())
    }

    fn call_task(&mut self, id_sha256: &str) -> Result<Option<CallTask>, TxError> {
        self.one(
            "SELECT id_sha256, run_id, tenant_id, principal_id, created_at FROM call_tasks \
             WHERE id_sha256 = ?1",
            params![id_sha256],
            rows::call_task,
        )
    }

    /// Served by the `UNIQUE(run_id)` index of `call_tasks` (M9).
    fn call_task_of_run(&mut self, run: RunId) -> Result<Option<CallTask>, TxError> {
        self.one(
            "SELECT id_sha256, run_id, tenant_id, principal_id, created_at FROM call_tasks \
             WHERE run_id = ?1",
            params![run.to_string()],
            rows::call_task,
        )
    }

    /// Served by `uq_connections_open_key` (M8).
    fn open_connection_by_key(
        &mut self,
        tenant: &str,
        key: &ConversationKey,
    ) -> Result<Option<ClientConnection>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM connections WHERE tenant_id = ?1 AND conversation_key = ?2 \
                 AND status = 'open'",
                rows::CONNECTION_COLUMNS
            ),
            params![tenant, key.as_str()],
            rows::connection,
        )
    }

    fn update_connection(
        &mut self,
        expected: ConnectionStatus,
        next: &ClientConnection,
    ) -> Result<(), TxError> {
        let Some(current) = self.connection(next.id)? else {
            return Err(TxError::NotFound);
        };
        guards::check_connection_update(expected, &current, next)?;
        let (alive_until, closed_at, reason) = connection_state_columns(&next.state);
        let (tainted_at, tainted_by) = rows::taint_columns(next.taint.as_ref());
        let changed = self.execute(
            "UPDATE connections SET status = ?1, alive_until = ?2, closed_at = ?3, \
             close_reason = ?4, tainted_at = ?5, tainted_by = ?6, call_count = ?7, \
             last_seen_at = ?8 WHERE id = ?9 AND status = ?10",
            params![
                next.status().as_str(),
                alive_until,
                closed_at,
                reason,
                tainted_at,
                tainted_by,
                next.call_count,
                ts(next.last_seen_at),
                next.id.to_string(),
                expected.as_str()
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

    /// Served by `ix_connections_tenant_opened` (M7), read backwards.
    fn connections_of_tenant(
        &mut self,
        tenant: &str,
        limit_rows: usize,
    ) -> Result<Vec<ClientConnection>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM connections WHERE tenant_id = ?1 \
                 ORDER BY opened_at DESC, id DESC LIMIT ?2",
                rows::CONNECTION_COLUMNS
            ),
            params![tenant, limit(limit_rows)],
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
                "SELECT {} FROM connections WHERE status = 'open' AND alive_until <= ?1 \
                 ORDER BY alive_until, id LIMIT ?2",
                rows::CONNECTION_COLUMNS
            ),
            params![ts(now), limit(limit_rows)],
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
             AND (scheduled_for IS NULL OR scheduled_for <= ?1) \
             AND EXISTS (SELECT 1 FROM connections AS c \
                 WHERE c.session_id = runs.session_id AND c.status = 'closed') \
             ORDER BY created_at, id LIMIT ?2",
            params![ts(now), limit(limit_rows)],
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
            &waiting_call_approvals_sql(limit_rows),
            params![tenant, principal, tool, ts(now)],
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
        self.all(
            &format!(
                "SELECT {} FROM runs WHERE tenant_id = ?1 \
                 AND (?2 IS NULL OR (created_at, id) < (?2, ?3)) \
                 ORDER BY created_at DESC, id DESC LIMIT ?4",
                rows::RUN_SUMMARY_COLUMNS
            ),
            params![
                tenant,
                after_at,
                after_id,
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            rows::run_summary,
        )
    }

    fn count_runs(&mut self, status: RunStatus) -> Result<u64, TxError> {
        let count: Option<i64> = self.one(
            "SELECT COUNT(*) FROM runs WHERE status = ?1",
            params![status.as_str()],
            |row| row.get(0),
        )?;
        u64::try_from(count.unwrap_or(0)).map_err(|e| TxError::Backend(e.to_string()))
    }

    /// Checked here (the run exists, the version is the next), then added to the journal's
    /// open row, which the transaction writes (see the `journal` module).
    fn insert_checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<(), TxError> {
        self.journal.check()?;
        let run_id = checkpoint.run_id;
        let Some(session_id) = self.run_session(run_id)? else {
            return Err(TxError::NotFound);
        };
        let latest: Option<i64> = match self.journal.open_checkpoint_of(run_id) {
            Some(open) => Some(i64::from(open.version)),
            None => self.one(
                journal::LAST_CHECKPOINT_VERSION,
                params![run_id.to_string()],
                |row| row.get(0),
            )?,
        };
        let expected = latest.map_or(Some(1), |v| v.checked_add(1));
        if expected != Some(i64::from(checkpoint.version)) {
            return Err(conflict(format!(
                "checkpoints: version {} of run {} is not contiguous (expected {})",
                checkpoint.version,
                checkpoint.run_id,
                expected.map_or_else(|| "none".to_owned(), |v| v.to_string())
            )));
        }
        let script = match checkpoint.state.pending {
            Some(_) => self
                .script_calls(&run_id.to_string())
                .map_err(TxError::Backend)?,
            None => None,
        };
        let state = stored_state::encode_state(&checkpoint.state, script.as_deref())
            .map_err(|e| TxError::Backend(format!("cannot encode checkpoints.state: {e}")))?;
        if !self.journal.fits_checkpoint(run_id) {
            self.flush_journal()?;
        }
        if let Some(batch) = &checkpoint.state.pending {
            self.kept.keep_pending(run_id, checkpoint.version, batch);
        }
        self.journal
            .push_checkpoint(session_id, checkpoint.clone(), state);
        Ok(())
    }

    fn latest_checkpoint(&mut self, run: RunId) -> Result<Option<Checkpoint>, TxError> {
        if let Some(open) = self.journal.open_checkpoint_of(run) {
            return Ok(Some(open.clone()));
        }
        self.one(journal::LAST_CHECKPOINT, params![run.to_string()], |row| {
            rows::checkpoint(row, &|run| self.script_calls(run))
        })
    }

    /// Keeps the calls by reference when core names the checkpoint that holds them (M18).
    fn insert_step_record(
        &mut self,
        record: &StepRecord,
        pending: Option<u32>,
    ) -> Result<(), TxError> {
        if self.run_session(record.run_id)?.is_none() {
            return Err(TxError::NotFound);
        }
        let latest: i64 = self
            .one(
                "SELECT MAX(step) FROM step_records WHERE run_id = ?1",
                params![record.run_id.to_string()],
                |row| row.get::<_, Option<i64>>(0),
            )?
            .flatten()
            .unwrap_or(0);
        if latest.checked_add(1) != Some(i64::from(record.step)) {
            return Err(conflict(format!(
                "step_records: step {} of run {} is not contiguous (latest is {latest})",
                record.step, record.run_id
            )));
        }
        self.execute(
            &format!(
                "INSERT INTO step_records ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                rows::STEP_RECORD_INSERT_COLUMNS
            ),
            params![
                record.run_id.to_string(),
                record.step,
                match pending {
                    Some(_) => None,
                    None => Some(json(&record.calls, "step_records.calls")?),
                },
                json(&record.results, "step_records.results")?,
                ts(record.created_at),
                pending,
            ],
        )
        .map(drop)
    }

    fn step_records(
        &mut self,
        run: RunId,
        after_step: u32,
        limit_rows: usize,
    ) -> Result<Vec<StepRecord>, TxError> {
        self.all(
            &step_records_sql(limit_rows),
            params![run.to_string(), after_step],
            |row| rows::step_record(row, &self.kept, &|run| self.script_calls(run)),
        )
    }

    fn insert_invocation(&mut self, invocation: &Invocation) -> Result<(), TxError> {
        let run_session = self
            .run_session(invocation.run_id)?
            .ok_or(TxError::NotFound)?;
        if run_session != invocation.session_id {
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
        let arguments = arguments::stored(invocation, self.kept.pending(invocation.run_id))?;
        let results = results::stored(invocation)?;
        let decision = self.decision_id(invocation.policy_decision.as_ref())?;
        let values: [&dyn ToSql; 38] = [
            &invocation.id.to_string(),
            &invocation.run_id.to_string(),
            &invocation.session_id.to_string(),
            &invocation.tenant_id,
            &invocation.step_number,
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
            &arguments.raw,
            &arguments.effective,
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
            &None::<String>,
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
            &results.outcome,
            &results.result_item,
            &invocation.outcome_status.map(|s| s.as_str()),
            &invocation.reason_code,
            &ts(invocation.updated_at),
            &target_kind,
            &results.result_trust.map(|trust| trust.as_str()),
            &arguments.at.map(|(version, _)| version),
            &arguments.at.map(|(_, call)| call),
            &decision,
        ];
        self.execute(
            &format!(
                "INSERT INTO tool_invocations ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
                 ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, \
                 ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36, ?37, ?38)",
                rows::INVOCATION_INSERT_COLUMNS
            ),
            &values,
        )?;
        self.kept.keep_invocation(invocation);
        Ok(())
    }

    /// As this transaction last saw or wrote it (see the `kept` module), else read and kept.
    fn invocation(&mut self, id: InvocationId) -> Result<Option<Invocation>, TxError> {
        if let Some(invocation) = self.kept.invocation(id) {
            return Ok(Some(invocation.clone()));
        }
        if let Some(invocation) = self.recent.and_then(|recent| recent.invocation(id)) {
            #[cfg(debug_assertions)]
            if let Ok(stored) = self.read_invocation(id) {
                assert_eq!(
                    stored.as_ref(),
                    Some(invocation),
                    "the writer's cache of invocation {id}"
                );
            }
            self.kept.keep_invocation(invocation);
            return Ok(Some(invocation.clone()));
        }
        let invocation = self.read_invocation(id)?;
        if let Some(invocation) = &invocation {
            self.kept.keep_invocation(invocation);
        }
        Ok(invocation)
    }

    fn invocation_by_key(&mut self, idempotency_key: &str) -> Result<Option<Invocation>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM tool_invocations WHERE idempotency_key = ?1",
                rows::INVOCATION_COLUMNS
            ),
            params![idempotency_key],
            self.invocation_row(),
        )
    }

    fn invocation_by_call(
        &mut self,
        run: RunId,
        step: u32,
        call_id: &str,
    ) -> Result<Option<Invocation>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM tool_invocations \
                 WHERE run_id = ?1 AND step_number = ?2 AND call_id = ?3",
                rows::INVOCATION_COLUMNS
            ),
            params![run.to_string(), step, call_id],
            self.invocation_row(),
        )
    }

    fn invocations_of_run(&mut self, run: RunId) -> Result<Vec<Invocation>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM tool_invocations WHERE run_id = ?1 \
                 ORDER BY step_number, created_at, id",
                rows::INVOCATION_COLUMNS
            ),
            params![run.to_string()],
            self.invocation_row(),
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
        // The (run_id, step_number, call_id) unique index finds the run's rows; only the rows
        // in `statuses` are decoded. One cached statement per number of statuses.
        let placeholders = (2..statuses.len() + 2)
            .map(|n| format!("?{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let run = run.to_string();
        let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        let values: Vec<&dyn ToSql> = std::iter::once(&run as &dyn ToSql)
            .chain(names.iter().map(|name| name as &dyn ToSql))
            .collect();
        self.all(
            &format!(
                "SELECT {} FROM tool_invocations WHERE run_id = ?1 AND status IN ({placeholders}) \
                 ORDER BY step_number, created_at, id",
                rows::INVOCATION_COLUMNS
            ),
            &values,
            self.invocation_row(),
        )
    }

    fn update_invocation(
        &mut self,
        expected: InvocationStatus,
        next: &Invocation,
    ) -> Result<(), TxError> {
        let current = self.invocation(next.id)?.ok_or(TxError::NotFound)?;
        guards::check_invocation_update(expected, &current, next)?;
        guards::check_outcome_agrees(next)?;
        let results = results::stored(next)?;
        let output_bytes = next
            .output_bytes
            .map(|b| int(b, "tool_invocations.output_bytes"))
            .transpose()?;
        // A decision the row already holds stays as it is stored (`?16`): no lookup of its text.
        let same_decision = next.policy_decision == current.policy_decision;
        let decision = match same_decision {
            true => None,
            false => self.decision_id(next.policy_decision.as_ref())?,
        };
        let changed = self.execute(
            "UPDATE tool_invocations SET status = ?3, \
             policy_decision = CASE WHEN ?16 THEN policy_decision END, \
             policy_decision_id = CASE WHEN ?16 THEN policy_decision_id ELSE ?4 END, \
             effect_sent_at = ?5, \
             suspended_kind = ?6, suspended_ref = ?7, structured_result = ?8, output_bytes = ?9, \
             outcome = ?10, result_item = ?11, outcome_status = ?12, reason_code = ?13, \
             updated_at = ?14, result_trust = ?15 WHERE id = ?1 AND status = ?2",
            params![
                next.id.to_string(),
                expected.as_str(),
                next.status.as_str(),
                decision,
                opt_ts(next.effect_sent_at),
                next.suspended_approval
                    .map(|_| rows::SUSPENDED_KIND_APPROVAL),
                next.suspended_approval.map(|a| a.to_string()),
                opt_json(
                    next.structured_result.as_ref(),
                    "tool_invocations.structured_result"
                )?,
                output_bytes,
                results.outcome,
                results.result_item,
                next.outcome_status.map(|s| s.as_str()),
                next.reason_code,
                ts(next.updated_at),
                results.result_trust.map(|trust| trust.as_str()),
                same_decision,
            ],
        )?;
        if changed == 0 {
            return Err(conflict(format!(
                "invocation {} is not {expected}",
                next.id
            )));
        }
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
                "SELECT {} FROM tool_invocations WHERE tenant_id = ?1 AND status = 'UNCERTAIN'{unsettled} \
                 ORDER BY updated_at DESC, id DESC",
                rows::INVOCATION_COLUMNS
            ),
            params![tenant],
            self.invocation_row(),
        )
    }

    /// `BEGIN IMMEDIATE` already serializes every writer, so no lock is taken; the partial
    /// index `ix_tool_invocations_twins` (M5) holds only `RUNNING` and `UNCERTAIN` rows.
    fn twins(
        &mut self,
        identity: &CallIdentity<'_>,
        scope: TwinScope,
    ) -> Result<Vec<Twin>, TxError> {
        let run = match scope {
            TwinScope::Run(run) => Some(run.to_string()),
            TwinScope::Tenant => None,
        };
        self.all(
            &format!(
                "SELECT {}, EXISTS (SELECT 1 FROM uncertain_settlements s \
                   WHERE s.invocation_id = tool_invocations.id) \
                 FROM tool_invocations WHERE tenant_id = ?1 AND tool_name = ?2 \
                 AND effective_arguments_hash = ?3 AND status IN ('RUNNING', 'UNCERTAIN') \
                 AND (?4 IS NULL OR run_id = ?4) ORDER BY created_at, id",
                rows::INVOCATION_COLUMNS
            ),
            params![
                identity.tenant_id,
                identity.tool_name,
                identity.effective_arguments_hash,
                run
            ],
            |row| {
                Ok(Twin {
                    invocation: self.invocation_row()(row)?,
                    settled: row.get(rows::INVOCATION_COLUMN_COUNT)?,
                })
            },
        )
    }

    fn insert_approval(&mut self, approval: &Approval) -> Result<(), TxError> {
        let values: [&dyn ToSql; 28] = [
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
        self.execute(
            &format!(
                "INSERT INTO approvals ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, \
                 ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, \
                 ?27, ?28)",
                rows::APPROVAL_COLUMNS
            ),
            &values,
        )
        .map(drop)
    }

    fn approval(&mut self, id: ApprovalId) -> Result<Option<Approval>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM approvals WHERE id = ?1",
                rows::APPROVAL_COLUMNS
            ),
            params![id.to_string()],
            rows::approval,
        )
    }

    fn approval_by_action(&mut self, action_id: InvocationId) -> Result<Option<Approval>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM approvals WHERE action_id = ?1",
                rows::APPROVAL_COLUMNS
            ),
            params![action_id.to_string()],
            rows::approval,
        )
    }

    /// By `(created_at, id)`: the order the approvals were proposed in.
    fn approvals_of_run(&mut self, run: RunId) -> Result<Vec<Approval>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM approvals WHERE run_id = ?1 ORDER BY created_at, id",
                rows::APPROVAL_COLUMNS
            ),
            params![run.to_string()],
            rows::approval,
        )
    }

    fn update_approval(
        &mut self,
        expected: ApprovalStatus,
        next: &Approval,
    ) -> Result<(), TxError> {
        let current = self.approval(next.id)?.ok_or(TxError::NotFound)?;
        guards::check_approval_update(expected, &current, next)?;
        let changed = self.execute(
            "UPDATE approvals SET action_kind = ?3, action_summary = ?4, arguments = ?5, \
             policy_reason = ?6, policy_decision = ?7, revalidated_policy_version = ?8, \
             status = ?9, resolution = ?10, resolution_reason = ?11, requested_at = ?12, \
             resolved_at = ?13, resolved_by = ?14 WHERE id = ?1 AND status = ?2",
            params![
                next.id.to_string(),
                expected.as_str(),
                next.action_kind.as_str(),
                next.action_summary,
                json(&next.arguments, "approvals.arguments")?,
                next.policy_reason,
                next.policy_decision.as_str(),
                next.revalidated_policy_version,
                next.status.as_str(),
                next.resolution.map(|r| r.as_str()),
                next.resolution_reason,
                opt_ts(next.requested_at),
                opt_ts(next.resolved_at),
                next.resolved_by,
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
        // Optional filters are written as `?n IS NULL OR …`, so one cached statement serves
        // every combination.
        self.all(
            &format!(
                "SELECT {} FROM approvals WHERE tenant_id = ?1 AND status = 'pending' \
                 AND requested_at IS NOT NULL AND (?2 IS NULL OR run_id = ?2) \
                 AND (?3 IS NULL OR created_at < ?3 OR (created_at = ?3 AND id < ?4)) \
                 ORDER BY created_at DESC, id DESC LIMIT ?5",
                rows::APPROVAL_COLUMNS
            ),
            params![
                tenant,
                run.map(|r| r.to_string()),
                after.map(|c| ts(c.created_at)),
                after.map(|c| c.id.to_string()),
                limit(limit_rows),
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
                 AND expires_at <= ?1 AND (?2 IS NULL OR tenant_id = ?2) \
                 ORDER BY expires_at, id LIMIT ?3",
                rows::APPROVAL_COLUMNS
            ),
            params![ts(now), tenant, limit(limit_rows)],
            rows::approval,
        )
    }

    /// Checked and numbered here, then added to the journal's open row, which the transaction
    /// writes (see the `journal` module): a repeated derivation key returns the stored event
    /// (or `Conflict`), then the payload, the session and the run are checked in `MemStore`'s
    /// order. An event refused writes nothing and consumes no sequence or id.
    fn append_event(&mut self, event: &NewEvent) -> Result<Event, TxError> {
        self.journal.check()?;
        if let Some(key) = &event.derivation_key
            && let Some(stored) = self.event_by_key(key)?
        {
            return event.repeat_of(stored);
        }
        if !event.payload.is_object() {
            return Err(conflict("CHECK events: payload is a JSON object"));
        }
        let sequence = self.next_sequence(event.session_id, event.run_id)?;
        let id = self.next_event_id()?;
        let stored = event.stored_as(
            id,
            u64::try_from(sequence).map_err(|e| TxError::Backend(e.to_string()))?,
        );
        if !self.journal.fits_event(&stored) {
            self.flush_journal()?;
        }
        self.journal.push_event(stored.clone());
        self.journal
            .keep_next_sequence(event.session_id, sequence.saturating_add(1));
        Ok(stored)
    }

    /// The open row's event, or the stored one among the rows of the key's subject (see
    /// `journal::key_subject`); a subject no stored row has is remembered as absent for the
    /// transaction, so an invocation's later keys cost no read.
    fn event_by_key(&mut self, derivation_key: &str) -> Result<Option<Event>, TxError> {
        self.journal.check()?;
        if let Some(open) = self.journal.open_event_by_key(derivation_key) {
            return Ok(Some(open));
        }
        let subject = key_subject(derivation_key);
        if self.journal.known_absent(subject) {
            return Ok(None);
        }
        let (whole, by_subject) = journal::key_as_stored(derivation_key).unzip();
        let rows = self.all(
            journal::ROWS_OF_SUBJECT,
            params![subject, whole, by_subject.flatten()],
            |row| {
                if row.get(journal::MAY_HOLD_KEY)? {
                    journal::events_of_row(row).map(Some)
                } else {
                    Ok(None)
                }
            },
        )?;
        if rows.is_empty() {
            self.journal.note_absent(subject);
        }
        Ok(rows
            .into_iter()
            .flatten()
            .flatten()
            .find(|event| event.derivation_key.as_deref() == Some(derivation_key)))
    }

    fn events_of_run(
        &mut self,
        run: RunId,
        after_id: Option<i64>,
        limit_rows: usize,
    ) -> Result<Vec<Event>, TxError> {
        self.events_of_rows(
            journal::ROWS_OF_RUN,
            params![
                run.to_string(),
                after_id.unwrap_or(i64::MIN),
                limit(limit_rows)
            ],
            after_id,
            limit_rows,
        )
    }

    /// Walks the journal by event id from the cursor and keeps the tenant's rows through a
    /// correlated session lookup, so a tail costs about `limit` rows however long the log is
    /// (a join planned from `sessions` would read every row of the tenant and sort them).
    fn events_of_tenant(
        &mut self,
        tenant: &str,
        after_id: Option<i64>,
        limit_rows: usize,
    ) -> Result<Vec<Event>, TxError> {
        self.events_of_rows(
            journal::ROWS_OF_TENANT,
            params![tenant, after_id.unwrap_or(i64::MIN), limit(limit_rows)],
            after_id,
            limit_rows,
        )
    }

    fn last_event_id(&mut self) -> Result<Option<i64>, TxError> {
        self.flush_journal()?;
        self.one(journal::LAST_EVENT_ID, [].as_slice(), |row| row.get(0))
    }

    fn append_process_event(&mut self, event: &ProcessEvent) -> Result<ProcessEvent, TxError> {
        let stored = self.one(
            &format!(
                "SELECT {} FROM process_events WHERE derivation_key = ?1",
                rows::PROCESS_EVENT_COLUMNS
            ),
            params![event.derivation_key],
            rows::process_event,
        )?;
        if let Some(stored) = stored {
            return event.repeat_of(stored);
        }
        if !event.payload.is_object() {
            return Err(conflict("CHECK process_events: payload is a JSON object"));
        }
        self.execute(
            &format!(
                "INSERT INTO process_events ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                rows::PROCESS_EVENT_COLUMNS
            ),
            params![
                event.id.hyphenated().to_string(),
                event.event_type.as_str(),
                event.payload_schema_version,
                event.actor.actor_type.as_str(),
                event.actor.actor_id,
                json(&event.payload, "process_events.payload")?,
                event.derivation_key,
                ts(event.created_at),
            ],
        )?;
        Ok(event.clone())
    }

    /// In commit order: the implicit rowid grows with every insert and rows are never deleted.
    fn process_events(&mut self) -> Result<Vec<ProcessEvent>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM process_events ORDER BY rowid",
                rows::PROCESS_EVENT_COLUMNS
            ),
            [].as_slice(),
            rows::process_event,
        )
    }

    /// `ix_tool_invocations_created` (M11) serves the order and the window.
    fn invocations_created(&mut self, page: &CreatedPage) -> Result<Vec<Invocation>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM tool_invocations \
                 WHERE created_at >= ?1 AND (created_at > ?1 OR (created_at = ?1 AND id > ?2)) \
                 AND (?3 IS NULL OR created_at < ?3) ORDER BY created_at, id LIMIT ?4",
                rows::INVOCATION_COLUMNS
            ),
            params![
                ts(page.at),
                page.after_id_text(),
                page.until.map(ts),
                limit(page.limit)
            ],
            self.invocation_row(),
        )
    }

    /// `ix_process_events_type` (M1) serves the type and the time; ids order one microsecond.
    fn process_events_created(
        &mut self,
        event_type: EventType,
        page: &CreatedPage,
    ) -> Result<Vec<ProcessEvent>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM process_events WHERE event_type = ?1 \
                 AND created_at >= ?2 AND (created_at > ?2 OR (created_at = ?2 AND id > ?3)) \
                 AND (?4 IS NULL OR created_at < ?4) ORDER BY created_at, id LIMIT ?5",
                rows::PROCESS_EVENT_COLUMNS
            ),
            params![
                event_type.as_str(),
                ts(page.at),
                page.after_id_text(),
                page.until.map(ts),
                limit(page.limit)
            ],
            rows::process_event,
        )
    }

    fn insert_settlement(&mut self, settlement: &Settlement) -> Result<(), TxError> {
        let status: String = self
            .one(
                "SELECT status FROM tool_invocations WHERE id = ?1",
                params![settlement.invocation_id.to_string()],
                |row| row.get(0),
            )?
            .ok_or(TxError::NotFound)?;
        if status != InvocationStatus::Uncertain.as_str() {
            return Err(conflict(format!(
                "uncertain_settlements: invocation {} is {status}, not UNCERTAIN",
                settlement.invocation_id
            )));
        }
        self.execute(
            &format!(
                "INSERT INTO uncertain_settlements ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                rows::SETTLEMENT_COLUMNS
            ),
            params![
                settlement.id.to_string(),
                settlement.invocation_id.to_string(),
                settlement.run_id.to_string(),
                settlement.tenant_id,
                settlement.outcome.as_str(),
                settlement.note,
                settlement.settled_by,
                ts(settlement.settled_at),
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
                "SELECT {} FROM uncertain_settlements WHERE invocation_id = ?1",
                rows::SETTLEMENT_COLUMNS
            ),
            params![invocation.to_string()],
            rows::settlement,
        )
    }

    fn insert_policy_profile(
        &mut self,
        record: &PolicyProfileRecord,
    ) -> Result<PolicyProfileRecord, TxError> {
        let stored = self.one(
            &format!(
                "SELECT {} FROM policy_profiles WHERE policy_version = ?1",
                rows::PROFILE_COLUMNS
            ),
            params![record.policy_version],
            rows::profile,
        )?;
        match stored {
            Some(stored) if stored.same_content(record) => Ok(stored),
            Some(_) => Err(conflict("policy version identifies different rules")),
            None => {
                self.execute(
                    &format!(
                        "INSERT INTO policy_profiles ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        rows::PROFILE_COLUMNS
                    ),
                    params![
                        record.policy_version,
                        record.profile_name,
                        record.profile_sha256,
                        record.hardline_sha256,
                        record.rule_count,
                        ts(record.loaded_at),
                        record.loaded_by,
                    ],
                )?;
                Ok(record.clone())
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
            [].as_slice(),
            rows::profile,
        )
    }

    fn insert_api_token(&mut self, token: &ApiToken) -> Result<(), TxError> {
        if self.api_token(token.id)?.is_some() {
            return Err(conflict(format!("api_tokens: duplicate id {}", token.id)));
        }
        self.execute(
            &format!(
                "INSERT INTO api_tokens ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                rows::API_TOKEN_COLUMNS
            ),
            params![
                token.id.to_string(),
                token.tenant_id,
                token.principal_id,
                json(&token.scopes, "api_tokens.scopes")?,
                token.token_sha256,
                token.label,
                ts(token.created_at),
                opt_ts(token.expires_at),
                opt_ts(token.revoked_at),
            ],
        )
        .map(drop)
    }

    fn api_token(&mut self, id: ApiTokenId) -> Result<Option<ApiToken>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM api_tokens WHERE id = ?1",
                rows::API_TOKEN_COLUMNS
            ),
            params![id.to_string()],
            rows::api_token,
        )
    }

    fn api_token_by_digest(&mut self, digest: &str) -> Result<Option<ApiToken>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM api_tokens WHERE token_sha256 = ?1",
                rows::API_TOKEN_COLUMNS
            ),
            params![digest],
            rows::api_token,
        )
    }

    fn api_tokens(&mut self, tenant: &str) -> Result<Vec<ApiToken>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM api_tokens WHERE tenant_id = ?1 ORDER BY created_at, id",
                rows::API_TOKEN_COLUMNS
            ),
            params![tenant],
            rows::api_token,
        )
    }

    /// The trigger `api_tokens_only_revocation` refuses a second revocation from any
    /// connection; this checks first so the refusal reads like `MemStore`'s.
    fn revoke_api_token(&mut self, id: ApiTokenId, at: Timestamp) -> Result<ApiToken, TxError> {
        let token = self.api_token(id)?.ok_or(TxError::NotFound)?;
        if token.revoked_at.is_some() {
            return Err(conflict(format!(
                "api_tokens: revoked_at of token {id} is set once"
            )));
        }
        self.execute(
            "UPDATE api_tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
            params![id.to_string(), ts(at)],
        )?;
        Ok(ApiToken {
            revoked_at: Some(at),
            ..token
        })
    }

    fn insert_notify_target(&mut self, target: &NotifyTarget) -> Result<(), TxError> {
        if self.notify_target(target.id)?.is_some() {
            return Err(conflict(format!(
                "notify_targets: duplicate id {}",
                target.id
            )));
        }
        self.execute(
            &format!(
                "INSERT INTO notify_targets ({}) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                rows::NOTIFY_TARGET_COLUMNS
            ),
            params![
                target.id.to_string(),
                target.tenant_id,
                target.url,
                json(&target.events, "notify_targets.events")?,
                target.format.as_str(),
                target.secret.to_text(),
                target.label,
                target.created_by,
                ts(target.created_at),
                opt_ts(target.removed_at),
                target.progress.after,
                i64::from(target.progress.attempts),
                opt_ts(target.progress.retry_at),
            ],
        )
        .map(drop)
    }

    fn notify_target(&mut self, id: NotifyTargetId) -> Result<Option<NotifyTarget>, TxError> {
        self.one(
            &format!(
                "SELECT {} FROM notify_targets WHERE id = ?1",
                rows::NOTIFY_TARGET_COLUMNS
            ),
            params![id.to_string()],
            rows::notify_target,
        )
    }

    fn notify_targets(&mut self, tenant: Option<&str>) -> Result<Vec<NotifyTarget>, TxError> {
        self.all(
            &format!(
                "SELECT {} FROM notify_targets WHERE removed_at IS NULL \
                 AND (?1 IS NULL OR tenant_id = ?1) ORDER BY created_at, id",
                rows::NOTIFY_TARGET_COLUMNS
            ),
            params![tenant],
            rows::notify_target,
        )
    }

    fn remove_notify_target(
        &mut self,
        id: NotifyTargetId,
        at: Timestamp,
    ) -> Result<NotifyTarget, TxError> {
        let target = self.notify_target(id)?.ok_or(TxError::NotFound)?;
        if target.removed_at.is_some() {
            return Err(conflict(format!(
                "notify_targets: removed_at of target {id} is set once"
            )));
        }
        self.execute(
            "UPDATE notify_targets SET removed_at = ?2 WHERE id = ?1 AND removed_at IS NULL",
            params![id.to_string(), ts(at)],
        )?;
        Ok(NotifyTarget {
            removed_at: Some(at),
            ..target
        })
    }

    fn advance_notify_target(
        &mut self,
        id: NotifyTargetId,
        expected: &Progress,
        next: &Progress,
    ) -> Result<(), TxError> {
        let changed = self.execute(
            "UPDATE notify_targets SET after_event_id = ?5, attempts = ?6, retry_at = ?7 \
             WHERE id = ?1 AND after_event_id = ?2 AND attempts = ?3 AND retry_at IS ?4 \
             AND removed_at IS NULL",
            params![
                id.to_string(),
                expected.after,
                i64::from(expected.attempts),
                opt_ts(expected.retry_at),
                next.after,
                i64::from(next.attempts),
                opt_ts(next.retry_at),
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
            "SELECT tenant_id, holder, expires_at FROM notify_leases WHERE tenant_id = ?1",
            params![tenant],
            rows::notify_lease,
        )
    }

    fn swap_notify_lease(
        &mut self,
        expected: Option<&NotifyLease>,
        next: &NotifyLease,
    ) -> Result<(), TxError> {
        let changed = match expected {
            None => self.execute(
                "INSERT INTO notify_leases (tenant_id, holder, expires_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (tenant_id) DO NOTHING",
                params![next.tenant_id, next.holder, ts(next.expires_at)],
            )?,
            Some(expected) => self.execute(
                "UPDATE notify_leases SET holder = ?4, expires_at = ?5 \
                 WHERE tenant_id = ?1 AND holder = ?2 AND expires_at = ?3",
                params![
                    expected.tenant_id,
                    expected.holder,
                    ts(expected.expires_at),
                    next.holder,
                    ts(next.expires_at),
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

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, StatementStatus};

    use super::{expired_leases_sql, step_records_sql, waiting_call_approvals_sql};

    /// One execution's parameter values.
    type Bindings = Vec<Box<dyn rusqlite::ToSql>>;

    /// Statements run with fixed pages: their compiled form is reused, never re-prepared. A
    /// bound `LIMIT ?` would be (SQLite recompiles such a statement whenever it is bound again;
    /// see `limit_clause`).
    #[test]
    fn a_statement_with_a_fixed_page_is_not_prepared_again_when_it_runs_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("airlock.sqlite3");
        let _store = crate::SqliteStore::open(&path).expect("a store");
        let conn = Connection::open(&path).expect("a connection");
        let cases: [(&str, String, [Bindings; 2]); 3] = [
            (
                "waiting_call_approvals",
                waiting_call_approvals_sql(16),
                [
                    vec![Box::new("t"), Box::new("p"), Box::new("x"), Box::new(1_i64)],
                    vec![Box::new("t"), Box::new("p"), Box::new("x"), Box::new(2_i64)],
                ],
            ),
            (
                "expired_leases",
                expired_leases_sql(16),
                [vec![Box::new(1_i64)], vec![Box::new(2_i64)]],
            ),
            (
                "step_records",
                step_records_sql(16),
                [
                    vec![Box::new("r"), Box::new(0_i64)],
                    vec![Box::new("r"), Box::new(1_i64)],
                ],
            ),
        ];
        for (name, sql, bindings) in cases {
            let mut statement = conn.prepare_cached(&sql).expect("prepares");
            for values in &bindings {
                let values: Vec<&dyn rusqlite::ToSql> = values.iter().map(|v| &**v).collect();
                let mut rows = statement.query(values.as_slice()).expect("runs");
                while rows.next().expect("a row").is_some() {}
            }
            assert_eq!(
                statement.get_status(StatementStatus::RePrepare),
                0,
                "{name} was prepared again"
            );
        }
    }
}
