//! Rows ↔ core records for the SQLite store (SPEC §14): column lists, decoding of a result row
//! into a record, and the column values a record is written with.
//!
//! Enums are stored by their wire names (SPEC §3), ids as lowercase hyphenated UUIDs, times as
//! microseconds, and structured fields as `serde_json` text. Decoding fails (and the store
//! answers `TxError::Backend`) rather than guessing when a stored value does not parse: a row
//! that core cannot have written means the file was changed behind the store's back.

use std::error::Error;
use std::str::FromStr;

use rusqlite::Row;
use rusqlite::types::Type;
use serde::Serialize;
use serde::de::DeserializeOwned;

use airlock_core::access::ApiToken;
use airlock_core::approval::Approval;
use airlock_core::connection::{
    Connection as ClientConnection, ConnectionState, ConnectionStatus, ConversationKey, Taint,
};
use airlock_core::conversation::request_state::StateKey;
use airlock_core::conversation::task::CallTask;
use airlock_core::events::{Actor, ProcessEvent};
use airlock_core::invocation::Invocation;
use airlock_core::notify::{NotifyLease, NotifyTarget, Progress, SecretSource};
use airlock_core::run::checkpoint::{Checkpoint, StepRecord};
use airlock_core::run::{Run, RunState, RunSummary};
use airlock_core::session::{PolicyProfileRecord, Session, Settlement};
use airlock_core::store::TxError;
use airlock_core::time::Timestamp;
use airlock_core::vocab::{RunStatus, TargetKind};

use super::arguments;
use super::kept::Kept;
use super::results;
use super::stored_json::from_json;
use super::stored_state::{self, Scripts};

/// `suspended_kind` of an invocation waiting on an approval (SPEC §9.1).
pub(super) const SUSPENDED_KIND_APPROVAL: &str = "approval";

// ----- writing -------------------------------------------------------------------------------

pub(super) fn ts(t: Timestamp) -> i64 {
    t.as_micros()
}

pub(super) fn opt_ts(t: Option<Timestamp>) -> Option<i64> {
    t.map(Timestamp::as_micros)
}

/// An unsigned count as an SQLite INTEGER; values past `i64::MAX` cannot be stored.
pub(super) fn int(value: u64, column: &str) -> Result<i64, TxError> {
    i64::try_from(value).map_err(|_| TxError::Backend(format!("{column} {value} exceeds i64")))
}

/// The JSON text of a structured column. Serializing core's plain data types cannot fail; an
/// error here would be a bug, reported rather than stored half-written.
pub(super) fn json<T: Serialize + ?Sized>(value: &T, column: &str) -> Result<String, TxError> {
    serde_json::to_string(value)
        .map_err(|e| TxError::Backend(format!("cannot encode {column}: {e}")))
}

pub(super) fn opt_json<T: Serialize>(
    value: Option<&T>,
    column: &str,
) -> Result<Option<String>, TxError> {
    value.map(|v| json(v, column)).transpose()
}

/// The state columns of a run: `status`, `lease_owner`, `lease_expires_at`, `scheduled_for`,
/// `failure`, `final_message`. The lease lives only in `Running`, so the lease CHECK holds by
/// construction.
pub(super) struct StateColumns {
    pub status: &'static str,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub scheduled_for: Option<i64>,
    pub failure: Option<String>,
    pub final_message: Option<String>,
}

pub(super) fn state_columns(state: &RunState) -> Result<StateColumns, TxError> {
    let mut columns = StateColumns {
        status: state.status().as_str(),
        lease_owner: None,
        lease_expires_at: None,
        scheduled_for: None,
        failure: None,
        final_message: None,
    };
    match state {
        RunState::Queued { scheduled_for } => columns.scheduled_for = opt_ts(*scheduled_for),
        RunState::Running {
            lease_owner,
            lease_expires_at,
        } => {
            columns.lease_owner = Some(lease_owner.clone());
            columns.lease_expires_at = Some(ts(*lease_expires_at));
        }
        RunState::Completed { final_message } => {
            columns.final_message = Some(final_message.clone());
        }
        RunState::Failed { failure } => columns.failure = Some(json(failure, "runs.failure")?),
        RunState::WaitingForApproval | RunState::Cancelled => {}
    }
    Ok(columns)
}

// ----- reading -------------------------------------------------------------------------------

pub(super) fn decode_error(
    index: usize,
    error: impl Into<Box<dyn Error + Send + Sync + 'static>>,
) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(index, Type::Text, error.into())
}

/// A TEXT column parsed with `FromStr`: ids and wire enums.
pub(super) fn parse<T>(row: &Row<'_>, index: usize) -> rusqlite::Result<T>
where
    T: FromStr,
    T::Err: Error + Send + Sync + 'static,
{
    let text: String = row.get(index)?;
    text.parse().map_err(|e| decode_error(index, e))
}

pub(super) fn parse_opt<T>(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<T>>
where
    T: FromStr,
    T::Err: Error + Send + Sync + 'static,
{
    let text: Option<String> = row.get(index)?;
    text.map(|t| t.parse().map_err(|e| decode_error(index, e)))
        .transpose()
}

fn json_col<T: DeserializeOwned>(row: &Row<'_>, index: usize) -> rusqlite::Result<T> {
    let text: String = row.get(index)?;
    from_json(&text).map_err(|e| decode_error(index, e))
}

fn json_opt<T: DeserializeOwned>(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<T>> {
    let text: Option<String> = row.get(index)?;
    text.map(|t| from_json(&t).map_err(|e| decode_error(index, e)))
        .transpose()
}

fn time(row: &Row<'_>, index: usize) -> rusqlite::Result<Timestamp> {
    row.get(index).map(Timestamp::from_micros)
}

fn time_opt(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<Timestamp>> {
    row.get::<_, Option<i64>>(index)
        .map(|t| t.map(Timestamp::from_micros))
}

fn unsigned<T: TryFrom<i64>>(row: &Row<'_>, index: usize) -> rusqlite::Result<T>
where
    T::Error: Error + Send + Sync + 'static,
{
    let value: i64 = row.get(index)?;
    T::try_from(value)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(index, Type::Integer, e.into()))
}

fn unsigned_opt<T: TryFrom<i64>>(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<T>>
where
    T::Error: Error + Send + Sync + 'static,
{
    let value: Option<i64> = row.get(index)?;
    value
        .map(|v| {
            T::try_from(v).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(index, Type::Integer, e.into())
            })
        })
        .transpose()
}

fn required<T>(value: Option<T>, index: usize, what: &str) -> rusqlite::Result<T> {
    value.ok_or_else(|| decode_error(index, format!("{what} is null")))
}

pub(super) const CONNECTION_COLUMNS: &str = "id, tenant_id, principal_id, session_id, \
     gateway_id, status, alive_until, closed_at, close_reason, opened_at, tainted_at, \
     tainted_by, call_count, last_seen_at, conversation_key";

/// `tainted_at` and `tainted_by` of a conversation's taint (SPEC §22.1): both NULL, or both set
/// (`ck_connections_taint_together`).
pub(super) fn taint_columns(taint: Option<&Taint>) -> (Option<i64>, Option<&str>) {
    match taint {
        Some(taint) => (Some(ts(taint.at)), Some(taint.by.as_str())),
        None => (None, None),
    }
}

pub(super) fn connection(row: &Row<'_>) -> rusqlite::Result<ClientConnection> {
    let status: ConnectionStatus = parse(row, 5)?;
    let state = match status {
        ConnectionStatus::Open => ConnectionState::Open {
            alive_until: required(time_opt(row, 6)?, 6, "alive_until of an open connection")?,
        },
        ConnectionStatus::Closed => ConnectionState::Closed {
            closed_at: required(time_opt(row, 7)?, 7, "closed_at of a closed connection")?,
            reason: {
                let text: Option<String> = row.get(8)?;
                let text = required(text, 8, "close_reason of a closed connection")?;
                text.parse()
                    .map_err(|e: airlock_core::vocab::UnknownVariant| {
                        decode_error(8, e.to_string())
                    })?
            },
        },
    };
    Ok(ClientConnection {
        id: parse(row, 0)?,
        tenant_id: row.get(1)?,
        principal_id: row.get(2)?,
        session_id: parse(row, 3)?,
        gateway_id: row.get(4)?,
        state,
        opened_at: time(row, 9)?,
        taint: match (time_opt(row, 10)?, row.get::<_, Option<String>>(11)?) {
            (None, None) => None,
            (Some(at), Some(by)) => Some(Taint { at, by }),
            // The CHECK keeps them together; a row without it was not written by this store.
            _ => {
                return Err(decode_error(
                    10,
                    "tainted_at and tainted_by are not both set",
                ));
            }
        },
        call_count: unsigned(row, 12)?,
        last_seen_at: time(row, 13)?,
        conversation_key: row
            .get::<_, Option<String>>(14)?
            .map(ConversationKey::from_stored),
    })
}

pub(super) fn state_key(row: &Row<'_>) -> rusqlite::Result<StateKey> {
    Ok(StateKey {
        id: row.get(0)?,
        secret_hex: row.get(1)?,
        created_at: time(row, 2)?,
    })
}

pub(super) fn call_task(row: &Row<'_>) -> rusqlite::Result<CallTask> {
    Ok(CallTask {
        id_sha256: row.get(0)?,
        run_id: parse(row, 1)?,
        tenant_id: row.get(2)?,
        principal_id: row.get(3)?,
        created_at: time(row, 4)?,
    })
}

/// The next event sequence of the session row `sessions`: the larger of the stored
/// `next_event_sequence` and one past the session's last event, found at the end of
/// `uq_journal_session_sequence` (M16; an explicit `ORDER BY … DESC LIMIT 1`, so that the read
/// is one index seek by its plan rather than by SQLite's `MAX()` optimization, which the
/// partial index's `IS NOT NULL` must not defeat). Since M13 the stored column
/// is only the session's floor (its first sequence, or what the dropped M1 trigger last left
/// there), so that appending an event writes the journal and nothing else.
macro_rules! next_event_sequence {
    () => {
        "MAX(sessions.next_event_sequence, COALESCE((SELECT j.last_sequence FROM journal AS j \
         WHERE j.session_id = sessions.id AND j.last_sequence IS NOT NULL \
         ORDER BY j.last_sequence DESC LIMIT 1), 0) + 1)"
    };
}

/// A session's columns as `Session` reads them, from `sessions`.
pub(super) const SESSION_COLUMNS: &str = concat!(
    "id, tenant_id, principal_id, ",
    next_event_sequence!(),
    ", created_at"
);

/// The session's next event sequence, as [`SESSION_COLUMNS`] reads it, and the session of the
/// run `?2` (NULL if there is none), for `sessions` row `?1`: `append_event`'s one read.
pub(super) const EVENT_SLOT: &str = concat!(
    "SELECT ",
    next_event_sequence!(),
    ", (SELECT r.session_id FROM runs AS r WHERE r.id = ?2) FROM sessions WHERE sessions.id = ?1"
);

pub(super) fn session(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: parse(row, 0)?,
        tenant_id: row.get(1)?,
        principal_id: row.get(2)?,
        next_event_sequence: unsigned(row, 3)?,
        created_at: time(row, 4)?,
    })
}

/// A run row's columns before its planner input, in [`run`]'s order.
macro_rules! run_columns_before_input {
    () => {
        "id, session_id, tenant_id, principal_id, principal_scopes, origin_trust, planner_kind"
    };
}

/// A run row's columns after its planner input, in [`run`]'s order.
macro_rules! run_columns_after_input {
    () => {
        "status, step_count, tool_call_count, limits, deadline_at, lease_owner, lease_epoch, \
         lease_expires_at, attempts, scheduled_for, cancel_requested_at, failure, final_message, \
         created_at, updated_at"
    };
}

/// A run as [`run`] reads it from `runs`: the row's columns, with the planner input from its
/// own table (`run_inputs`, M15) in eighth place.
pub(super) const RUN_COLUMNS: &str = concat!(
    run_columns_before_input!(),
    ", (SELECT i.planner_input FROM run_inputs AS i WHERE i.run_id = runs.id), ",
    run_columns_after_input!()
);

/// The columns `insert_run` writes to `runs`, in the order of its parameters: [`RUN_COLUMNS`]
/// without the planner input, which goes to `run_inputs`.
pub(super) const RUN_ROW_COLUMNS: &str = concat!(
    run_columns_before_input!(),
    ", ",
    run_columns_after_input!()
);

/// A run row as [`run`] reads it, with the empty text in place of the planner input and the
/// input's length in bytes after the other columns ([`RUN_INPUT_BYTES`]): `octet_length` of a
/// column is answered from the record header, so the input's overflow pages are not read (see
/// the `planner_inputs` module).
pub(super) const RUN_WITHOUT_INPUT: &str = concat!(
    "SELECT ",
    run_columns_before_input!(),
    ", '', ",
    run_columns_after_input!(),
    ", (SELECT octet_length(i.planner_input) FROM run_inputs AS i WHERE i.run_id = runs.id) \
     FROM runs WHERE id = ?1"
);

/// The column of [`RUN_WITHOUT_INPUT`] that holds the input's length.
pub(super) const RUN_INPUT_BYTES: usize = 23;

pub(super) fn run(row: &Row<'_>) -> rusqlite::Result<Run> {
    let status: RunStatus = parse(row, 8)?;
    let state = match status {
        RunStatus::Queued => RunState::Queued {
            scheduled_for: time_opt(row, 17)?,
        },
        RunStatus::Running => RunState::Running {
            lease_owner: required(row.get(13)?, 13, "lease_owner of a RUNNING run")?,
            lease_expires_at: required(
                time_opt(row, 15)?,
                15,
                "lease_expires_at of a RUNNING run",
            )?,
        },
        RunStatus::WaitingForApproval => RunState::WaitingForApproval,
        RunStatus::Completed => RunState::Completed {
            final_message: required(row.get(20)?, 20, "final_message of a COMPLETED run")?,
        },
        RunStatus::Failed => RunState::Failed {
            failure: required(json_opt(row, 19)?, 19, "failure of a FAILED run")?,
        },
        RunStatus::Cancelled => RunState::Cancelled,
    };
    Ok(Run {
        id: parse(row, 0)?,
        session_id: parse(row, 1)?,
        tenant_id: row.get(2)?,
        principal_id: row.get(3)?,
        principal_scopes: json_col(row, 4)?,
        origin_trust: parse(row, 5)?,
        planner_kind: row.get(6)?,
        planner_input: row.get(7)?,
        state,
        step_count: unsigned(row, 9)?,
        tool_call_count: unsigned(row, 10)?,
        limits: json_col(row, 11)?,
        deadline_at: time_opt(row, 12)?,
        lease_epoch: unsigned(row, 14)?,
        attempts: unsigned(row, 16)?,
        cancel_requested_at: time_opt(row, 18)?,
        created_at: time(row, 21)?,
        updated_at: time(row, 22)?,
    })
}

/// The columns of a run list: [`RUN_COLUMNS`] without the planner input.
pub(super) const RUN_SUMMARY_COLUMNS: &str = "id, session_id, tenant_id, principal_id, planner_kind, \
     status, step_count, tool_call_count, attempts, created_at, updated_at";

pub(super) fn run_summary(row: &Row<'_>) -> rusqlite::Result<RunSummary> {
    Ok(RunSummary {
        id: parse(row, 0)?,
        session_id: parse(row, 1)?,
        tenant_id: row.get(2)?,
        principal_id: row.get(3)?,
        planner_kind: row.get(4)?,
        status: parse(row, 5)?,
        step_count: unsigned(row, 6)?,
        tool_call_count: unsigned(row, 7)?,
        attempts: unsigned(row, 8)?,
        created_at: time(row, 9)?,
        updated_at: time(row, 10)?,
    })
}

/// A checkpoint, read with `journal::CHECKPOINT_ROW_COLUMNS`; its pending calls read from the
/// run's script where they refer to it (M21).
pub(super) fn checkpoint(row: &Row<'_>, scripts: Scripts<'_>) -> rusqlite::Result<Checkpoint> {
    let run: String = row.get(0)?;
    let state: String = row.get(3)?;
    Ok(Checkpoint {
        run_id: parse(row, 0)?,
        version: unsigned(row, 1)?,
        trigger: parse(row, 2)?,
        state: stored_state::decode_state(&state, scripts, &run).map_err(|e| decode_error(3, e))?,
        created_at: time(row, 4)?,
    })
}

/// What a step record's INSERT names: `calls` is NULL when `calls_checkpoint` names the
/// checkpoint whose pending batch holds them (M18).
pub(super) const STEP_RECORD_INSERT_COLUMNS: &str =
    "run_id, step, calls, results, created_at, calls_checkpoint";

/// The part at JSON path `$path` (an SQL expression) of the state of checkpoint `$table.$version`
/// of `$table`'s run, for a row that refers to it when `$table.$inline` is NULL (M17, M18): one
/// lookup of `uq_journal_checkpoints` (`the_writers_reads_search_an_index` holds it to that).
macro_rules! from_pending_checkpoint {
    ($table:literal, $inline:literal, $version:literal, $path:literal) => {
        concat!(
            "CASE WHEN ",
            $table,
            ".",
            $inline,
            " IS NULL \
             THEN (SELECT json_extract(j.checkpoint_state, ",
            $path,
            ") \
             FROM journal AS j WHERE j.run_id = ",
            $table,
            ".run_id \
             AND j.checkpoint_version = ",
            $table,
            ".",
            $version,
            " \
             AND j.checkpoint_version IS NOT NULL) END"
        )
    };
}

/// What [`step_record`] decodes: the stored columns and, for a record whose calls are in a
/// checkpoint, that checkpoint's pending batch (6).
pub(super) const STEP_RECORD_COLUMNS: &str = concat!(
    "run_id, step, calls, results, created_at, calls_checkpoint, ",
    from_pending_checkpoint!("step_records", "calls", "calls_checkpoint", "'$.pending'")
);

/// A step record; `written` and `scripts` as for [`invocation`].
pub(super) fn step_record(
    row: &Row<'_>,
    written: &Kept,
    scripts: Scripts<'_>,
) -> rusqlite::Result<StepRecord> {
    let run_id = parse(row, 0)?;
    let step = unsigned(row, 1)?;
    let calls = match row.get::<_, Option<String>>(2)? {
        Some(text) => from_json(&text).map_err(|e| decode_error(2, e))?,
        None => arguments::calls_of_step(
            written.pending(run_id),
            unsigned(row, 5)?,
            row.get::<_, Option<String>>(6)?.as_deref(),
            step,
            (scripts, &row.get::<_, String>(0)?),
        )
        .map_err(|e| decode_error(2, e))?,
    };
    Ok(StepRecord {
        run_id,
        step,
        calls,
        results: json_col(row, 3)?,
        created_at: time(row, 4)?,
    })
}

/// The columns an invocation's INSERT writes: every field of [`Invocation`], its arguments as
/// the `arguments` module stores them (the last two columns say where the raw ones are).
macro_rules! invocation_stored_columns {
    () => {
        "id, run_id, session_id, tenant_id, step_number, \
         call_id, tool_name, tool_version, side_effect, risk, idempotency_class, required_scopes, \
         raw_arguments, arguments, normalized_arguments_hash, effective_arguments_hash, \
         idempotency_key, argument_trust, origin_trust, parallel_group, created_at, status, \
         policy_decision, effect_sent_at, suspended_kind, suspended_ref, structured_result, \
         output_bytes, outcome, result_item, outcome_status, reason_code, updated_at, target_kind, \
         result_trust"
    };
}

/// What an invocation's INSERT names: [`invocation_stored_columns`] and the reference to the
/// PENDING checkpoint that holds its raw arguments.
pub(super) const INVOCATION_INSERT_COLUMNS: &str = concat!(
    invocation_stored_columns!(),
    ", arguments_checkpoint, arguments_call, policy_decision_id"
);

/// What [`invocation`] decodes: the stored columns, where the raw arguments are kept (35, 36)
/// and, for a row whose raw arguments are in its PENDING checkpoint, the call read from there
/// (37; see `arguments::referenced`); for a row whose policy decision is kept once (M23), its
/// text (38).
pub(super) const INVOCATION_COLUMNS: &str = concat!(
    invocation_stored_columns!(),
    ", arguments_checkpoint, arguments_call, ",
    from_pending_checkpoint!(
        "tool_invocations",
        "raw_arguments",
        "arguments_checkpoint",
        "'$.pending.calls[' || tool_invocations.arguments_call || '].call'"
    ),
    ", CASE WHEN tool_invocations.policy_decision_id IS NOT NULL \
     THEN (SELECT d.text FROM policy_decision_texts AS d \
     WHERE d.id = tool_invocations.policy_decision_id) END"
);

/// How many columns [`INVOCATION_COLUMNS`] names: a query may select more after them.
pub(super) const INVOCATION_COLUMN_COUNT: usize = 39;

/// An invocation row; `written` is what the reading transaction wrote, whose PENDING checkpoint
/// may hold the row's raw arguments before its journal row is written; `scripts` gives a
/// run's script calls, to which a PENDING checkpoint's calls may refer (M21).
pub(super) fn invocation(
    row: &Row<'_>,
    written: &Kept,
    scripts: Scripts<'_>,
) -> rusqlite::Result<Invocation> {
    let call_id: String = row.get(5)?;
    let raw_arguments: serde_json::Value = match row.get::<_, Option<String>>(12)? {
        Some(text) => from_json(&text).map_err(|e| decode_error(12, e))?,
        None => arguments::referenced(
            written.pending(parse(row, 1)?),
            (unsigned(row, 35)?, unsigned(row, 36)?),
            row.get::<_, Option<String>>(37)?.as_deref(),
            &call_id,
            (scripts, &row.get::<_, String>(1)?),
        )
        .map_err(|e| decode_error(12, e))?,
    };
    let arguments = arguments::effective(row.get(13)?, &raw_arguments);
    let suspended_kind: Option<String> = row.get(24)?;
    let suspended_approval = match suspended_kind.as_deref() {
        None => None,
        Some(SUSPENDED_KIND_APPROVAL) => Some(required(parse_opt(row, 25)?, 25, "suspended_ref")?),
        Some(other) => {
            return Err(decode_error(
                24,
                format!("unknown suspended_kind '{other}'"),
            ));
        }
    };
    let tool_name: String = row.get(6)?;
    let structured_result: Option<serde_json::Value> = json_opt(row, 26)?;
    let outcome_status = parse_opt(row, 30)?;
    let reason_code: Option<String> = row.get(31)?;
    let (outcome, result_item) = results::read(results::Columns {
        call_id: &call_id,
        tool_name: &tool_name,
        structured_result: structured_result.as_ref(),
        outcome: row.get(28)?,
        result_item: row.get(29)?,
        outcome_status,
        reason_code: reason_code.as_deref(),
        result_trust: parse_opt(row, 34)?,
    })
    .map_err(|e| decode_error(28, e))?;
    Ok(Invocation {
        id: parse(row, 0)?,
        run_id: parse(row, 1)?,
        session_id: parse(row, 2)?,
        tenant_id: row.get(3)?,
        step_number: unsigned(row, 4)?,
        call_id,
        tool_name,
        tool_version: row.get(7)?,
        side_effect: parse(row, 8)?,
        risk: parse(row, 9)?,
        idempotency_class: parse(row, 10)?,
        required_scopes: json_col(row, 11)?,
        raw_arguments,
        arguments,
        normalized_arguments_hash: row.get(14)?,
        effective_arguments_hash: row.get(15)?,
        idempotency_key: row.get(16)?,
        argument_trust: json_col(row, 17)?,
        origin_trust: parse(row, 18)?,
        parallel_group: parse_opt(row, 19)?,
        created_at: time(row, 20)?,
        status: parse(row, 21)?,
        policy_decision: match json_opt(row, 22)? {
            Some(decision) => Some(decision),
            None => json_opt(row, 38)?,
        },
        effect_sent_at: time_opt(row, 23)?,
        suspended_approval,
        structured_result,
        output_bytes: unsigned_opt(row, 27)?,
        outcome,
        result_item,
        outcome_status,
        reason_code,
        updated_at: time(row, 32)?,
        target_kind: row
            .get::<_, Option<String>>(33)?
            .map(|kind| TargetKind::parse(&kind)),
    })
}

pub(super) const APPROVAL_COLUMNS: &str = "id, tenant_id, principal_id, session_id, run_id, \
     action_kind, action_id, tool_invocation_id, tool_name, tool_version, action_summary, \
     arguments, normalized_arguments_hash, effective_arguments_hash, required_scopes, risk, \
     policy_reason, policy_decision, policy_version, revalidated_policy_version, status, \
     resolution, resolution_reason, expires_at, created_at, requested_at, resolved_at, \
     resolved_by";

pub(super) fn approval(row: &Row<'_>) -> rusqlite::Result<Approval> {
    Ok(Approval {
        id: parse(row, 0)?,
        tenant_id: row.get(1)?,
        principal_id: row.get(2)?,
        session_id: parse(row, 3)?,
        run_id: parse(row, 4)?,
        action_kind: parse(row, 5)?,
        action_id: parse(row, 6)?,
        tool_invocation_id: parse(row, 7)?,
        tool_name: row.get(8)?,
        tool_version: row.get(9)?,
        action_summary: row.get(10)?,
        arguments: json_col(row, 11)?,
        normalized_arguments_hash: row.get(12)?,
        effective_arguments_hash: row.get(13)?,
        required_scopes: json_col(row, 14)?,
        risk: parse(row, 15)?,
        policy_reason: row.get(16)?,
        policy_decision: parse(row, 17)?,
        policy_version: row.get(18)?,
        revalidated_policy_version: row.get(19)?,
        status: parse(row, 20)?,
        resolution: parse_opt(row, 21)?,
        resolution_reason: row.get(22)?,
        expires_at: time(row, 23)?,
        created_at: time(row, 24)?,
        requested_at: time_opt(row, 25)?,
        resolved_at: time_opt(row, 26)?,
        resolved_by: row.get(27)?,
    })
}

pub(super) const PROCESS_EVENT_COLUMNS: &str = "id, event_type, payload_schema_version, \
     actor_type, actor_id, payload, derivation_key, created_at";

pub(super) fn process_event(row: &Row<'_>) -> rusqlite::Result<ProcessEvent> {
    Ok(ProcessEvent {
        id: parse(row, 0)?,
        event_type: parse(row, 1)?,
        payload_schema_version: unsigned(row, 2)?,
        actor: Actor {
            actor_type: parse(row, 3)?,
            actor_id: row.get(4)?,
        },
        payload: json_col(row, 5)?,
        derivation_key: row.get(6)?,
        created_at: time(row, 7)?,
    })
}

pub(super) const SETTLEMENT_COLUMNS: &str =
    "id, invocation_id, run_id, tenant_id, outcome, note, settled_by, settled_at";

pub(super) fn settlement(row: &Row<'_>) -> rusqlite::Result<Settlement> {
    Ok(Settlement {
        id: parse(row, 0)?,
        invocation_id: parse(row, 1)?,
        run_id: parse(row, 2)?,
        tenant_id: row.get(3)?,
        outcome: parse(row, 4)?,
        note: row.get(5)?,
        settled_by: row.get(6)?,
        settled_at: time(row, 7)?,
    })
}

pub(super) const PROFILE_COLUMNS: &str = "policy_version, profile_name, profile_sha256, \
     hardline_sha256, rule_count, loaded_at, loaded_by";

pub(super) fn profile(row: &Row<'_>) -> rusqlite::Result<PolicyProfileRecord> {
    Ok(PolicyProfileRecord {
        policy_version: row.get(0)?,
        profile_name: row.get(1)?,
        profile_sha256: row.get(2)?,
        hardline_sha256: row.get(3)?,
        rule_count: unsigned(row, 4)?,
        loaded_at: time(row, 5)?,
        loaded_by: row.get(6)?,
    })
}

pub(super) const API_TOKEN_COLUMNS: &str = "id, tenant_id, principal_id, scopes, token_sha256, \
     label, created_at, expires_at, revoked_at";

pub(super) fn api_token(row: &Row<'_>) -> rusqlite::Result<ApiToken> {
    Ok(ApiToken {
        id: parse(row, 0)?,
        tenant_id: row.get(1)?,
        principal_id: row.get(2)?,
        scopes: json_col(row, 3)?,
        token_sha256: row.get(4)?,
        label: row.get(5)?,
        created_at: time(row, 6)?,
        expires_at: time_opt(row, 7)?,
        revoked_at: time_opt(row, 8)?,
    })
}

pub(super) const NOTIFY_TARGET_COLUMNS: &str = "id, tenant_id, url, events, format, secret, \
     label, created_by, created_at, removed_at, after_event_id, attempts, retry_at";

pub(super) fn notify_target(row: &Row<'_>) -> rusqlite::Result<NotifyTarget> {
    let secret: String = row.get(5)?;
    Ok(NotifyTarget {
        id: parse(row, 0)?,
        tenant_id: row.get(1)?,
        url: row.get(2)?,
        events: json_col(row, 3)?,
        format: parse(row, 4)?,
        secret: SecretSource::parse(&secret).map_err(|e| decode_error(5, e))?,
        label: row.get(6)?,
        created_by: row.get(7)?,
        created_at: time(row, 8)?,
        removed_at: time_opt(row, 9)?,
        progress: Progress {
            after: row.get(10)?,
            attempts: u32::try_from(row.get::<_, i64>(11)?).map_err(|e| decode_error(11, e))?,
            retry_at: time_opt(row, 12)?,
        },
    })
}

pub(super) fn notify_lease(row: &Row<'_>) -> rusqlite::Result<NotifyLease> {
    Ok(NotifyLease {
        tenant_id: row.get(0)?,
        holder: row.get(1)?,
        expires_at: time(row, 2)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The light run read names the columns of the full one, in its order, with only the
    /// planner input replaced (by the empty text, its length appended last); the row's own
    /// columns are the full read's without the input.
    #[test]
    fn the_run_reads_and_the_insert_name_the_same_columns_in_order() {
        let words = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let input = "(SELECT i.planner_input FROM run_inputs AS i WHERE i.run_id = runs.id)";
        let expected = format!(
            "SELECT {}, (SELECT octet_length(i.planner_input) FROM run_inputs AS i \
             WHERE i.run_id = runs.id) FROM runs WHERE id = ?1",
            words(RUN_COLUMNS).replace(input, "''")
        );
        assert_eq!(words(RUN_WITHOUT_INPUT), words(&expected));
        assert_eq!(
            words(RUN_ROW_COLUMNS),
            words(RUN_COLUMNS).replace(&format!("{input}, "), ""),
        );
        assert_eq!(
            RUN_ROW_COLUMNS.split(',').count() + 1,
            RUN_INPUT_BYTES,
            "the length follows the run's columns"
        );
    }
}
