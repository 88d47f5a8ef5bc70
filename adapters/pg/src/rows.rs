//! Rows ↔ core records for the PostgreSQL store (SPEC §14, §18): column lists, decoding of a
//! result row into a record, and the column values a record is written with.
//!
//! The encoding is the SQLite store's: enums by their wire names (SPEC §3), ids as lowercase
//! hyphenated UUID text, times as BIGINT microseconds, structured fields as `serde_json` text,
//! counts as BIGINT. Decoding fails with `TxError::Backend` rather than guessing when a stored
//! value does not parse: a row core cannot have written means someone changed the database
//! behind the store's back.

use std::error::Error;
use std::str::FromStr;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use airlock_core::access::ApiToken;
use airlock_core::approval::Approval;
use airlock_core::connection::{
    Connection as ClientConnection, ConnectionState, ConnectionStatus, ConversationKey, Taint,
};
use airlock_core::conversation::request_state::StateKey;
use airlock_core::conversation::task::CallTask;
use airlock_core::events::{Actor, Event, ProcessEvent};
use airlock_core::invocation::Invocation;
use airlock_core::notify::{NotifyLease, NotifyTarget, Progress, SecretSource};
use airlock_core::run::checkpoint::{Checkpoint, StepRecord};
use airlock_core::run::{Run, RunState, RunSummary};
use airlock_core::session::{PolicyProfileRecord, Session, Settlement};
use airlock_core::store::TxError;
use airlock_core::time::Timestamp;
use airlock_core::vocab::{RunStatus, TargetKind};

/// `suspended_kind` of an invocation waiting on an approval (SPEC §9.1).
pub(crate) const SUSPENDED_KIND_APPROVAL: &str = "approval";

// ----- writing -------------------------------------------------------------------------------

pub(crate) fn ts(t: Timestamp) -> i64 {
    t.as_micros()
}

pub(crate) fn opt_ts(t: Option<Timestamp>) -> Option<i64> {
    t.map(Timestamp::as_micros)
}

/// An unsigned count as a BIGINT; values past `i64::MAX` cannot be stored.
pub(crate) fn int(value: u64, column: &str) -> Result<i64, TxError> {
    i64::try_from(value).map_err(|_| TxError::Backend(format!("{column} {value} exceeds i64")))
}

/// The JSON text of a structured column. Serializing core's plain data types cannot fail; an
/// error here would be a bug, reported rather than stored half-written.
pub(crate) fn json<T: Serialize + ?Sized>(value: &T, column: &str) -> Result<String, TxError> {
    serde_json::to_string(value)
        .map_err(|e| TxError::Backend(format!("cannot encode {column}: {e}")))
}

pub(crate) fn opt_json<T: Serialize>(
    value: Option<&T>,
    column: &str,
) -> Result<Option<String>, TxError> {
    value.map(|v| json(v, column)).transpose()
}

/// `alive_until`, `closed_at` and `close_reason` of a connection's state: exactly the columns
/// the connection CHECKs expect for its status.
pub(crate) fn connection_state_columns(
    state: &ConnectionState,
) -> (Option<i64>, Option<i64>, Option<&'static str>) {
    match state {
        ConnectionState::Open { alive_until } => (Some(ts(*alive_until)), None, None),
        ConnectionState::Closed { closed_at, reason } => {
            (None, Some(ts(*closed_at)), Some(reason.as_str()))
        }
    }
}

/// The state columns of a run: `status`, `lease_owner`, `lease_expires_at`, `scheduled_for`,
/// `failure`, `final_message`. The lease lives only in `Running`, so the lease CHECK holds by
/// construction.
pub(crate) struct StateColumns {
    pub status: &'static str,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub scheduled_for: Option<i64>,
    pub failure: Option<String>,
    pub final_message: Option<String>,
}

pub(crate) fn state_columns(state: &RunState) -> Result<StateColumns, TxError> {
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

/// `tainted_at` and `tainted_by` of a conversation's taint (SPEC §22.1): both NULL, or both set
/// (`ck_connections_taint_together`).
pub(crate) fn taint_columns(taint: Option<&Taint>) -> (Option<i64>, Option<&str>) {
    match taint {
        Some(taint) => (Some(ts(taint.at)), Some(taint.by.as_str())),
        None => (None, None),
    }
}

// ----- reading -------------------------------------------------------------------------------

fn decode_error(index: usize, error: impl std::fmt::Display) -> TxError {
    TxError::Backend(format!("cannot decode column {index}: {error}"))
}

fn get<'a, T: FromSql<'a>>(row: &'a Row, index: usize) -> Result<T, TxError> {
    row.try_get(index).map_err(|e| decode_error(index, e))
}

/// A TEXT column parsed with `FromStr`: ids and wire enums.
fn parse<T>(row: &Row, index: usize) -> Result<T, TxError>
where
    T: FromStr,
    T::Err: Error,
{
    let text: String = get(row, index)?;
    text.parse().map_err(|e| decode_error(index, e))
}

fn parse_opt<T>(row: &Row, index: usize) -> Result<Option<T>, TxError>
where
    T: FromStr,
    T::Err: Error,
{
    let text: Option<String> = get(row, index)?;
    text.map(|t| t.parse().map_err(|e| decode_error(index, e)))
        .transpose()
}

/// Parses stored JSON without serde_json's recursion limit: the text was serialized by this
/// store from a value core had already bounded (SPEC §4.2 caps argument depth at 128, and a
/// checkpoint nests arguments a few levels deeper), so the default limit would reject rows the
/// store itself wrote.
fn from_json<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    let value = T::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

fn json_col<T: DeserializeOwned>(row: &Row, index: usize) -> Result<T, TxError> {
    let text: String = get(row, index)?;
    from_json(&text).map_err(|e| decode_error(index, e))
}

fn json_opt<T: DeserializeOwned>(row: &Row, index: usize) -> Result<Option<T>, TxError> {
    let text: Option<String> = get(row, index)?;
    text.map(|t| from_json(&t).map_err(|e| decode_error(index, e)))
        .transpose()
}

fn time(row: &Row, index: usize) -> Result<Timestamp, TxError> {
    get::<i64>(row, index).map(Timestamp::from_micros)
}

fn time_opt(row: &Row, index: usize) -> Result<Option<Timestamp>, TxError> {
    get::<Option<i64>>(row, index).map(|t| t.map(Timestamp::from_micros))
}

pub(crate) fn unsigned<T: TryFrom<i64>>(row: &Row, index: usize) -> Result<T, TxError>
where
    T::Error: std::fmt::Display,
{
    let value: i64 = get(row, index)?;
    T::try_from(value).map_err(|e| decode_error(index, e))
}

fn unsigned_opt<T: TryFrom<i64>>(row: &Row, index: usize) -> Result<Option<T>, TxError>
where
    T::Error: std::fmt::Display,
{
    let value: Option<i64> = get(row, index)?;
    value
        .map(|v| T::try_from(v).map_err(|e| decode_error(index, e)))
        .transpose()
}

fn required<T>(value: Option<T>, index: usize, what: &str) -> Result<T, TxError> {
    value.ok_or_else(|| decode_error(index, format!("{what} is null")))
}

pub(crate) const SESSION_COLUMNS: &str =
    "id, tenant_id, principal_id, next_event_sequence, created_at";

pub(crate) fn session(row: &Row) -> Result<Session, TxError> {
    Ok(Session {
        id: parse(row, 0)?,
        tenant_id: get(row, 1)?,
        principal_id: get(row, 2)?,
        next_event_sequence: unsigned(row, 3)?,
        created_at: time(row, 4)?,
    })
}

pub(crate) const RUN_COLUMNS: &str = "id, session_id, tenant_id, principal_id, principal_scopes, \
     origin_trust, planner_kind, planner_input, status, step_count, tool_call_count, limits, \
     deadline_at, lease_owner, lease_epoch, lease_expires_at, attempts, scheduled_for, \
     cancel_requested_at, failure, final_message, created_at, updated_at";

pub(crate) fn run(row: &Row) -> Result<Run, TxError> {
    let status: RunStatus = parse(row, 8)?;
    let state = match status {
        RunStatus::Queued => RunState::Queued {
            scheduled_for: time_opt(row, 17)?,
        },
        RunStatus::Running => RunState::Running {
            lease_owner: required(get(row, 13)?, 13, "lease_owner of a RUNNING run")?,
            lease_expires_at: required(
                time_opt(row, 15)?,
                15,
                "lease_expires_at of a RUNNING run",
            )?,
        },
        RunStatus::WaitingForApproval => RunState::WaitingForApproval,
        RunStatus::Completed => RunState::Completed {
            final_message: required(get(row, 20)?, 20, "final_message of a COMPLETED run")?,
        },
        RunStatus::Failed => RunState::Failed {
            failure: required(json_opt(row, 19)?, 19, "failure of a FAILED run")?,
        },
        RunStatus::Cancelled => RunState::Cancelled,
    };
    Ok(Run {
        id: parse(row, 0)?,
        session_id: parse(row, 1)?,
        tenant_id: get(row, 2)?,
        principal_id: get(row, 3)?,
        principal_scopes: json_col(row, 4)?,
        origin_trust: parse(row, 5)?,
        planner_kind: get(row, 6)?,
        planner_input: get::<String>(row, 7)?.into(),
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
pub(crate) const RUN_SUMMARY_COLUMNS: &str = "id, session_id, tenant_id, principal_id, planner_kind, \
     status, step_count, tool_call_count, attempts, created_at, updated_at";

pub(crate) fn run_summary(row: &Row) -> Result<RunSummary, TxError> {
    Ok(RunSummary {
        id: parse(row, 0)?,
        session_id: parse(row, 1)?,
        tenant_id: get(row, 2)?,
        principal_id: get(row, 3)?,
        planner_kind: get(row, 4)?,
        status: parse(row, 5)?,
        step_count: unsigned(row, 6)?,
        tool_call_count: unsigned(row, 7)?,
        attempts: unsigned(row, 8)?,
        created_at: time(row, 9)?,
        updated_at: time(row, 10)?,
    })
}

pub(crate) const CHECKPOINT_COLUMNS: &str = "run_id, version, \"trigger\", state, created_at";

pub(crate) fn checkpoint(row: &Row) -> Result<Checkpoint, TxError> {
    Ok(Checkpoint {
        run_id: parse(row, 0)?,
        version: unsigned(row, 1)?,
        trigger: parse(row, 2)?,
        state: json_col(row, 3)?,
        created_at: time(row, 4)?,
    })
}

pub(crate) const STEP_RECORD_COLUMNS: &str = "run_id, step, calls, results, created_at";

pub(crate) fn step_record(row: &Row) -> Result<StepRecord, TxError> {
    Ok(StepRecord {
        run_id: parse(row, 0)?,
        step: unsigned(row, 1)?,
        calls: json_col(row, 2)?,
        results: json_col(row, 3)?,
        created_at: time(row, 4)?,
    })
}

pub(crate) const INVOCATION_COLUMNS: &str = "id, run_id, session_id, tenant_id, step_number, \
     call_id, tool_name, tool_version, side_effect, risk, idempotency_class, required_scopes, \
     raw_arguments, arguments, normalized_arguments_hash, effective_arguments_hash, \
     idempotency_key, argument_trust, origin_trust, parallel_group, created_at, status, \
     policy_decision, effect_sent_at, suspended_kind, suspended_ref, structured_result, \
     output_bytes, outcome, result_item, outcome_status, reason_code, updated_at, target_kind";

/// How many columns [`INVOCATION_COLUMNS`] names: a query may select more after them.
pub(crate) const INVOCATION_COLUMN_COUNT: usize = 34;

/// Whether a `twins` row is settled: the column after [`INVOCATION_COLUMNS`].
pub(crate) fn settled_after_invocation(row: &Row) -> Result<bool, TxError> {
    get(row, INVOCATION_COLUMN_COUNT)
}

pub(crate) fn invocation(row: &Row) -> Result<Invocation, TxError> {
    let suspended_kind: Option<String> = get(row, 24)?;
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
    Ok(Invocation {
        id: parse(row, 0)?,
        run_id: parse(row, 1)?,
        session_id: parse(row, 2)?,
        tenant_id: get(row, 3)?,
        step_number: unsigned(row, 4)?,
        call_id: get(row, 5)?,
        tool_name: get(row, 6)?,
        tool_version: get(row, 7)?,
        side_effect: parse(row, 8)?,
        risk: parse(row, 9)?,
        idempotency_class: parse(row, 10)?,
        required_scopes: json_col(row, 11)?,
        raw_arguments: json_col(row, 12)?,
        arguments: get(row, 13)?,
        normalized_arguments_hash: get(row, 14)?,
        effective_arguments_hash: get(row, 15)?,
        idempotency_key: get(row, 16)?,
        argument_trust: json_col(row, 17)?,
        origin_trust: parse(row, 18)?,
        parallel_group: parse_opt(row, 19)?,
        created_at: time(row, 20)?,
        status: parse(row, 21)?,
        policy_decision: json_opt(row, 22)?,
        effect_sent_at: time_opt(row, 23)?,
        suspended_approval,
        structured_result: json_opt(row, 26)?,
        output_bytes: unsigned_opt(row, 27)?,
        outcome: json_opt(row, 28)?,
        result_item: get(row, 29)?,
        outcome_status: parse_opt(row, 30)?,
        reason_code: get(row, 31)?,
        updated_at: time(row, 32)?,
        target_kind: get::<Option<String>>(row, 33)?.map(|kind| TargetKind::parse(&kind)),
    })
}

pub(crate) const APPROVAL_COLUMNS: &str = "id, tenant_id, principal_id, session_id, run_id, \
     action_kind, action_id, tool_invocation_id, tool_name, tool_version, action_summary, \
     arguments, normalized_arguments_hash, effective_arguments_hash, required_scopes, risk, \
     policy_reason, policy_decision, policy_version, revalidated_policy_version, status, \
     resolution, resolution_reason, expires_at, created_at, requested_at, resolved_at, \
     resolved_by";

pub(crate) fn approval(row: &Row) -> Result<Approval, TxError> {
    Ok(Approval {
        id: parse(row, 0)?,
        tenant_id: get(row, 1)?,
        principal_id: get(row, 2)?,
        session_id: parse(row, 3)?,
        run_id: parse(row, 4)?,
        action_kind: parse(row, 5)?,
        action_id: parse(row, 6)?,
        tool_invocation_id: parse(row, 7)?,
        tool_name: get(row, 8)?,
        tool_version: get(row, 9)?,
        action_summary: get(row, 10)?,
        arguments: json_col(row, 11)?,
        normalized_arguments_hash: get(row, 12)?,
        effective_arguments_hash: get(row, 13)?,
        required_scopes: json_col(row, 14)?,
        risk: parse(row, 15)?,
        policy_reason: get(row, 16)?,
        policy_decision: parse(row, 17)?,
        policy_version: get(row, 18)?,
        revalidated_policy_version: get(row, 19)?,
        status: parse(row, 20)?,
        resolution: parse_opt(row, 21)?,
        resolution_reason: get(row, 22)?,
        expires_at: time(row, 23)?,
        created_at: time(row, 24)?,
        requested_at: time_opt(row, 25)?,
        resolved_at: time_opt(row, 26)?,
        resolved_by: get(row, 27)?,
    })
}

pub(crate) const EVENT_COLUMNS: &str = "id, session_id, run_id, sequence, event_type, \
     payload_schema_version, actor_type, actor_id, payload, derivation_key, created_at";

pub(crate) fn event(row: &Row) -> Result<Event, TxError> {
    Ok(Event {
        id: get(row, 0)?,
        session_id: parse(row, 1)?,
        run_id: parse_opt(row, 2)?,
        sequence: unsigned(row, 3)?,
        event_type: parse(row, 4)?,
        payload_schema_version: unsigned(row, 5)?,
        actor: Actor {
            actor_type: parse(row, 6)?,
            actor_id: get(row, 7)?,
        },
        payload: json_col(row, 8)?,
        derivation_key: get(row, 9)?,
        created_at: time(row, 10)?,
    })
}

pub(crate) const PROCESS_EVENT_COLUMNS: &str = "id, event_type, payload_schema_version, \
     actor_type, actor_id, payload, derivation_key, created_at";

pub(crate) fn process_event(row: &Row) -> Result<ProcessEvent, TxError> {
    Ok(ProcessEvent {
        id: parse(row, 0)?,
        event_type: parse(row, 1)?,
        payload_schema_version: unsigned(row, 2)?,
        actor: Actor {
            actor_type: parse(row, 3)?,
            actor_id: get(row, 4)?,
        },
        payload: json_col(row, 5)?,
        derivation_key: get(row, 6)?,
        created_at: time(row, 7)?,
    })
}

pub(crate) const SETTLEMENT_COLUMNS: &str =
    "id, invocation_id, run_id, tenant_id, outcome, note, settled_by, settled_at";

pub(crate) fn settlement(row: &Row) -> Result<Settlement, TxError> {
    Ok(Settlement {
        id: parse(row, 0)?,
        invocation_id: parse(row, 1)?,
        run_id: parse(row, 2)?,
        tenant_id: get(row, 3)?,
        outcome: parse(row, 4)?,
        note: get(row, 5)?,
        settled_by: get(row, 6)?,
        settled_at: time(row, 7)?,
    })
}

pub(crate) const PROFILE_COLUMNS: &str = "policy_version, profile_name, profile_sha256, \
     hardline_sha256, rule_count, loaded_at, loaded_by";

pub(crate) fn profile(row: &Row) -> Result<PolicyProfileRecord, TxError> {
    Ok(PolicyProfileRecord {
        policy_version: get(row, 0)?,
        profile_name: get(row, 1)?,
        profile_sha256: get(row, 2)?,
        hardline_sha256: get(row, 3)?,
        rule_count: unsigned(row, 4)?,
        loaded_at: time(row, 5)?,
        loaded_by: get(row, 6)?,
    })
}

pub(crate) const CONNECTION_COLUMNS: &str = "id, tenant_id, principal_id, session_id, \
     gateway_id, status, alive_until, closed_at, close_reason, opened_at, tainted_at, \
     tainted_by, call_count, last_seen_at, conversation_key";

pub(crate) fn connection(row: &Row) -> Result<ClientConnection, TxError> {
    let status: ConnectionStatus = parse(row, 5)?;
    let state = match status {
        ConnectionStatus::Open => ConnectionState::Open {
            alive_until: required(time_opt(row, 6)?, 6, "alive_until of an open connection")?,
        },
        ConnectionStatus::Closed => ConnectionState::Closed {
            closed_at: required(time_opt(row, 7)?, 7, "closed_at of a closed connection")?,
            reason: required(parse_opt(row, 8)?, 8, "close_reason of a closed connection")?,
        },
    };
    Ok(ClientConnection {
        id: parse(row, 0)?,
        tenant_id: get(row, 1)?,
        principal_id: get(row, 2)?,
        session_id: parse(row, 3)?,
        gateway_id: get(row, 4)?,
        state,
        opened_at: time(row, 9)?,
        taint: match (time_opt(row, 10)?, get::<Option<String>>(row, 11)?) {
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
        conversation_key: get::<Option<String>>(row, 14)?.map(ConversationKey::from_stored),
    })
}

pub(crate) fn state_key(row: &Row) -> Result<StateKey, TxError> {
    Ok(StateKey {
        id: get(row, 0)?,
        secret_hex: get(row, 1)?,
        created_at: time(row, 2)?,
    })
}

pub(crate) fn call_task(row: &Row) -> Result<CallTask, TxError> {
    Ok(CallTask {
        id_sha256: get(row, 0)?,
        run_id: parse(row, 1)?,
        tenant_id: get(row, 2)?,
        principal_id: get(row, 3)?,
        created_at: time(row, 4)?,
    })
}

pub(crate) const API_TOKEN_COLUMNS: &str = "id, tenant_id, principal_id, scopes, token_sha256, \
     label, created_at, expires_at, revoked_at";

pub(crate) fn api_token(row: &Row) -> Result<ApiToken, TxError> {
    Ok(ApiToken {
        id: parse(row, 0)?,
        tenant_id: get(row, 1)?,
        principal_id: get(row, 2)?,
        scopes: json_col(row, 3)?,
        token_sha256: get(row, 4)?,
        label: get(row, 5)?,
        created_at: time(row, 6)?,
        expires_at: time_opt(row, 7)?,
        revoked_at: time_opt(row, 8)?,
    })
}

pub(crate) const NOTIFY_TARGET_COLUMNS: &str = "id, tenant_id, url, events, format, secret, \
     label, created_by, created_at, removed_at, after_event_id, attempts, retry_at";

pub(crate) fn notify_target(row: &Row) -> Result<NotifyTarget, TxError> {
    let secret: String = get(row, 5)?;
    Ok(NotifyTarget {
        id: parse(row, 0)?,
        tenant_id: get(row, 1)?,
        url: get(row, 2)?,
        events: json_col(row, 3)?,
        format: parse(row, 4)?,
        secret: SecretSource::parse(&secret).map_err(|e| decode_error(5, e))?,
        label: get(row, 6)?,
        created_by: get(row, 7)?,
        created_at: time(row, 8)?,
        removed_at: time_opt(row, 9)?,
        progress: Progress {
            after: get(row, 10)?,
            attempts: u32::try_from(get::<i64>(row, 11)?).map_err(|e| decode_error(11, e))?,
            retry_at: time_opt(row, 12)?,
        },
    })
}

pub(crate) fn notify_lease(row: &Row) -> Result<NotifyLease, TxError> {
    Ok(NotifyLease {
        tenant_id: get(row, 0)?,
        holder: get(row, 1)?,
        expires_at: time(row, 2)?,
    })
}
