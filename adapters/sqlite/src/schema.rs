//! The SQLite schema of SPEC §14, applied as migrations through `rusqlite_migration` (which
//! keeps `PRAGMA user_version` equal to the number of migrations applied: a fully migrated store
//! reports 7). M1 is the whole v1 schema; M2 (SPEC §17.2) adds the append-only per-step history
//! records, copies the history that earlier checkpoints carried into them, and indexes
//! invocations by run and status; M3 (§19.4) adds gateway connections; M4 (§20) the API
//! tokens; M5 (§19.7) indexes the invocations the repeat check compares a new call with; M6
//! the runs of a tenant by creation (`runs list`); M7 (§22) makes a connection row the MCP
//! conversation (taint, call counter, last seen) and lets a conversation's call runs share its
//! session.
//!
//! Times are INTEGER microseconds since the Unix epoch (UTC), ids lowercase hyphenated UUID
//! TEXT, JSON TEXT. Constraints carry names so that a violation's message (mapped to
//! `TxError::Conflict`) names the rule it broke. Besides the §14 constraints the schema keeps
//! three CHECKs that only restate what core's `RunState` already guarantees (failure iff FAILED,
//! final message iff COMPLETED, `scheduled_for` only while QUEUED), and `ix_approvals_run` for
//! `approvals_of_run`; neither can reject a row core builds.
//!
//! Foreign keys are immediate and exactly the parent links `MemStore` checks (`NotFound`): a
//! deferred key would fail at COMMIT, which under group commit would fail every transaction of
//! the group, not just the offending one.

use rusqlite::Connection;
use rusqlite_migration::{HookError, HookResult, M, Migrations};

/// M1: the whole v1 schema.
const M1: &str = r#"
CREATE TABLE sessions (
    id                  TEXT    NOT NULL PRIMARY KEY,
    tenant_id           TEXT    NOT NULL,
    principal_id        TEXT    NOT NULL,
    next_event_sequence INTEGER NOT NULL DEFAULT 1
        CONSTRAINT ck_sessions_next_event_sequence CHECK (next_event_sequence >= 1),
    created_at          INTEGER NOT NULL
);

CREATE TABLE runs (
    id                  TEXT    NOT NULL PRIMARY KEY,
    session_id          TEXT    NOT NULL REFERENCES sessions (id),
    tenant_id           TEXT    NOT NULL,
    principal_id        TEXT    NOT NULL,
    principal_scopes    TEXT    NOT NULL,
    origin_trust        TEXT    NOT NULL,
    planner_kind        TEXT    NOT NULL DEFAULT 'scripted',
    status              TEXT    NOT NULL
        CONSTRAINT ck_runs_status CHECK (status IN ('QUEUED', 'RUNNING', 'WAITING_FOR_APPROVAL',
                                                    'COMPLETED', 'FAILED', 'CANCELLED')),
    step_count          INTEGER NOT NULL DEFAULT 0,
    tool_call_count     INTEGER NOT NULL DEFAULT 0,
    limits              TEXT    NOT NULL,
    deadline_at         INTEGER,
    lease_owner         TEXT,
    lease_epoch         INTEGER NOT NULL DEFAULT 0,
    lease_expires_at    INTEGER,
    attempts            INTEGER NOT NULL DEFAULT 0,
    scheduled_for       INTEGER,
    cancel_requested_at INTEGER,
    failure             TEXT,
    final_message       TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    -- Last, because it is large (the whole run script) and never changes: an UPDATE that keeps
    -- the row's size rewrites only the bytes that changed, and the columns before this one
    -- stay on the row's own page, so a lease or status check never reads its overflow pages.
    planner_input       TEXT    NOT NULL,
    CONSTRAINT ck_runs_lease_iff_running
        CHECK ((status = 'RUNNING') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT ck_runs_lease_columns_together
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CONSTRAINT ck_runs_failure_iff_failed CHECK ((status = 'FAILED') = (failure IS NOT NULL)),
    CONSTRAINT ck_runs_final_message_iff_completed
        CHECK ((status = 'COMPLETED') = (final_message IS NOT NULL)),
    CONSTRAINT ck_runs_scheduled_only_when_queued
        CHECK (scheduled_for IS NULL OR status = 'QUEUED')
);
CREATE UNIQUE INDEX uq_runs_one_active_per_session ON runs (session_id)
    WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED');
CREATE INDEX ix_runs_claim ON runs (created_at, id) WHERE status = 'QUEUED';
CREATE INDEX ix_runs_lease_expires_at ON runs (lease_expires_at, id) WHERE status = 'RUNNING';

-- A rowid table, not WITHOUT ROWID: a snapshot of a few KB then sits whole on the table's
-- right-most leaf, which every run's inserts share, instead of spilling all but ~500 bytes onto
-- overflow pages of a per-run leaf (index b-trees keep at most ~1 KB of a row on the leaf).
CREATE TABLE checkpoints (
    run_id     TEXT    NOT NULL REFERENCES runs (id),
    version    INTEGER NOT NULL CONSTRAINT ck_checkpoints_version CHECK (version >= 1),
    "trigger"  TEXT    NOT NULL
        CONSTRAINT ck_checkpoints_trigger CHECK ("trigger" IN ('seed', 'tool_pending', 'tool_batch',
                                                                'suspended', 'final')),
    state      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, version)
);
CREATE TRIGGER checkpoints_versions_contiguous BEFORE INSERT ON checkpoints
WHEN NEW.version <> 1 + COALESCE((SELECT MAX(version) FROM checkpoints WHERE run_id = NEW.run_id), 0)
BEGIN
    SELECT RAISE(ABORT, 'checkpoints: versions are contiguous');
END;

CREATE TABLE tool_invocations (
    id                        TEXT    NOT NULL PRIMARY KEY,
    run_id                    TEXT    NOT NULL REFERENCES runs (id),
    session_id                TEXT    NOT NULL REFERENCES sessions (id),
    tenant_id                 TEXT    NOT NULL,
    step_number               INTEGER NOT NULL,
    call_id                   TEXT    NOT NULL,
    tool_name                 TEXT    NOT NULL,
    tool_version              TEXT    NOT NULL,
    side_effect               TEXT    NOT NULL,
    risk                      TEXT    NOT NULL,
    idempotency_class         TEXT    NOT NULL,
    required_scopes           TEXT    NOT NULL,
    raw_arguments             TEXT    NOT NULL,
    arguments                 TEXT    NOT NULL,
    normalized_arguments_hash TEXT    NOT NULL,
    effective_arguments_hash  TEXT    NOT NULL,
    idempotency_key           TEXT    NOT NULL,
    argument_trust            TEXT    NOT NULL,
    origin_trust              TEXT    NOT NULL,
    parallel_group            TEXT,
    created_at                INTEGER NOT NULL,
    status                    TEXT    NOT NULL
        CONSTRAINT ck_tool_invocations_status
        CHECK (status IN ('PROPOSED', 'AUTHORIZED', 'WAITING_FOR_APPROVAL', 'RUNNING',
                          'SUCCEEDED', 'FAILED', 'DENIED', 'UNCERTAIN')),
    policy_decision           TEXT,
    effect_sent_at            INTEGER,
    suspended_kind            TEXT
        CONSTRAINT ck_tool_invocations_suspended_kind CHECK (suspended_kind IN ('approval')),
    suspended_ref             TEXT,
    structured_result         TEXT,
    output_bytes              INTEGER,
    outcome                   TEXT,
    result_item               TEXT,
    outcome_status            TEXT
        CONSTRAINT ck_tool_invocations_outcome_status
        CHECK (outcome_status IN ('succeeded', 'failed', 'denied', 'uncertain')),
    reason_code               TEXT,
    updated_at                INTEGER NOT NULL,
    CONSTRAINT uq_tool_invocations_call UNIQUE (run_id, step_number, call_id),
    CONSTRAINT ck_tool_invocations_suspension
        CHECK ((suspended_kind IS NULL) = (suspended_ref IS NULL)),
    CONSTRAINT ck_tool_invocations_effect_sent_at
        CHECK (effect_sent_at IS NULL OR status IN ('RUNNING', 'SUCCEEDED', 'FAILED', 'UNCERTAIN')),
    CONSTRAINT ck_tool_invocations_terminal_outcome
        CHECK (status NOT IN ('SUCCEEDED', 'FAILED', 'DENIED', 'UNCERTAIN')
               OR (outcome IS NOT NULL AND result_item IS NOT NULL))
);
CREATE UNIQUE INDEX uq_tool_invocations_idempotency_key ON tool_invocations (idempotency_key);
CREATE INDEX ix_tool_invocations_tenant_status ON tool_invocations (tenant_id, status);

CREATE TABLE approvals (
    id                         TEXT    NOT NULL PRIMARY KEY,
    tenant_id                  TEXT    NOT NULL,
    principal_id               TEXT    NOT NULL,
    session_id                 TEXT    NOT NULL,
    run_id                     TEXT    NOT NULL REFERENCES runs (id),
    action_kind                TEXT    NOT NULL,
    action_id                  TEXT    NOT NULL,
    tool_invocation_id         TEXT    NOT NULL,
    tool_name                  TEXT    NOT NULL,
    tool_version               TEXT    NOT NULL,
    action_summary             TEXT    NOT NULL,
    arguments                  TEXT    NOT NULL,
    normalized_arguments_hash  TEXT    NOT NULL,
    effective_arguments_hash   TEXT    NOT NULL,
    required_scopes            TEXT    NOT NULL,
    risk                       TEXT    NOT NULL,
    policy_reason              TEXT    NOT NULL,
    policy_decision            TEXT    NOT NULL,
    policy_version             TEXT    NOT NULL,
    revalidated_policy_version TEXT,
    status                     TEXT    NOT NULL
        CONSTRAINT ck_approvals_status
        CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled')),
    resolution                 TEXT
        CONSTRAINT ck_approvals_resolution CHECK (resolution IN ('approve_once', 'deny')),
    resolution_reason          TEXT,
    expires_at                 INTEGER NOT NULL,
    created_at                 INTEGER NOT NULL,
    requested_at               INTEGER,
    resolved_at                INTEGER,
    resolved_by                TEXT,
    CONSTRAINT ck_approvals_resolution_iff_resolved
        CHECK ((status IN ('approved', 'denied')) = (resolution IS NOT NULL)),
    CONSTRAINT ck_approvals_resolved_at_iff_closed
        CHECK ((status = 'pending') = (resolved_at IS NULL))
);
CREATE UNIQUE INDEX uq_approvals_action_id ON approvals (action_id);
CREATE INDEX ix_approvals_tenant_status ON approvals (tenant_id, status, created_at, id);
CREATE INDEX ix_approvals_pending_expires_at ON approvals (expires_at, id) WHERE status = 'pending';
CREATE INDEX ix_approvals_run ON approvals (run_id);

CREATE TABLE events (
    id                     INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id             TEXT    NOT NULL REFERENCES sessions (id),
    run_id                 TEXT    REFERENCES runs (id),
    sequence               INTEGER NOT NULL CONSTRAINT ck_events_sequence CHECK (sequence >= 1),
    event_type             TEXT    NOT NULL,
    payload_schema_version INTEGER NOT NULL,
    actor_type             TEXT    NOT NULL
        CONSTRAINT ck_events_actor_type
        CHECK (actor_type IN ('principal', 'worker', 'application', 'maintenance', 'process')),
    actor_id               TEXT,
    payload                TEXT    NOT NULL,
    derivation_key         TEXT,
    created_at             INTEGER NOT NULL,
    CONSTRAINT uq_events_session_sequence UNIQUE (session_id, sequence),
    CONSTRAINT uq_events_derivation_key UNIQUE (derivation_key)
);
CREATE INDEX ix_events_run ON events (run_id, id);
-- The session's counter advances inside the statement that takes a sequence (SPEC §13.1), so an
-- event and its counter's advance are one atomic write: neither can stay without the other.
CREATE TRIGGER events_advance_session_sequence AFTER INSERT ON events
BEGIN
    UPDATE sessions SET next_event_sequence = MAX(next_event_sequence, NEW.sequence + 1)
    WHERE id = NEW.session_id;
END;

CREATE TABLE process_events (
    id                     TEXT    NOT NULL PRIMARY KEY,
    event_type             TEXT    NOT NULL,
    payload_schema_version INTEGER NOT NULL,
    actor_type             TEXT    NOT NULL
        CONSTRAINT ck_process_events_actor_type
        CHECK (actor_type IN ('principal', 'worker', 'application', 'maintenance', 'process')),
    actor_id               TEXT,
    payload                TEXT    NOT NULL,
    derivation_key         TEXT    NOT NULL,
    created_at             INTEGER NOT NULL,
    CONSTRAINT uq_process_events_derivation_key UNIQUE (derivation_key)
);
CREATE INDEX ix_process_events_type ON process_events (event_type, created_at);

CREATE TABLE policy_profiles (
    policy_version  TEXT    NOT NULL PRIMARY KEY,
    profile_name    TEXT    NOT NULL,
    profile_sha256  TEXT    NOT NULL,
    hardline_sha256 TEXT    NOT NULL,
    rule_count      INTEGER NOT NULL,
    loaded_at       INTEGER NOT NULL,
    loaded_by       TEXT    NOT NULL
);

CREATE TABLE uncertain_settlements (
    id            TEXT    NOT NULL PRIMARY KEY,
    invocation_id TEXT    NOT NULL REFERENCES tool_invocations (id),
    run_id        TEXT    NOT NULL,
    tenant_id     TEXT    NOT NULL,
    outcome       TEXT    NOT NULL
        CONSTRAINT ck_uncertain_settlements_outcome CHECK (outcome IN ('succeeded', 'failed')),
    note          TEXT    NOT NULL,
    settled_by    TEXT    NOT NULL,
    settled_at    INTEGER NOT NULL,
    CONSTRAINT uq_uncertain_settlements_invocation UNIQUE (invocation_id)
);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER process_events_no_update BEFORE UPDATE ON process_events
BEGIN SELECT RAISE(ABORT, 'process_events are append-only'); END;
CREATE TRIGGER process_events_no_delete BEFORE DELETE ON process_events
BEGIN SELECT RAISE(ABORT, 'process_events are append-only'); END;
CREATE TRIGGER policy_profiles_no_update BEFORE UPDATE ON policy_profiles
BEGIN SELECT RAISE(ABORT, 'policy_profiles are append-only'); END;
CREATE TRIGGER policy_profiles_no_delete BEFORE DELETE ON policy_profiles
BEGIN SELECT RAISE(ABORT, 'policy_profiles are append-only'); END;
CREATE TRIGGER uncertain_settlements_no_update BEFORE UPDATE ON uncertain_settlements
BEGIN SELECT RAISE(ABORT, 'uncertain_settlements are append-only'); END;
CREATE TRIGGER uncertain_settlements_no_delete BEFORE DELETE ON uncertain_settlements
BEGIN SELECT RAISE(ABORT, 'uncertain_settlements are append-only'); END;
"#;

/// M2 (SPEC §17.2): checkpoints of constant size. A step's calls and result references are
/// written once, when the step closes, to `step_records`; checkpoints no longer carry them.
///
/// A store written by M1's build keeps its checkpoints as they are (their `history` field is
/// ignored when read, so nothing is rewritten), and the history of each run's latest
/// checkpoint — every step that run finished — is copied into step records here, so parked,
/// queued and interrupted runs continue with their history intact. The copy runs before the
/// contiguity trigger exists; each run's history is contiguous from step 1 by construction.
///
/// `ix_tool_invocations_run_status` serves the two per-call lookups by run and status (the
/// UNCERTAIN twins of step 5, the RUNNING calls of a resumed step); without it each call
/// scanned every earlier invocation of its run, so a call's cost grew with the step number.
const M2: &str = r#"
CREATE TABLE step_records (
    run_id     TEXT    NOT NULL REFERENCES runs (id),
    step       INTEGER NOT NULL CONSTRAINT ck_step_records_step CHECK (step >= 1),
    calls      TEXT    NOT NULL,
    results    TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    CONSTRAINT pk_step_records PRIMARY KEY (run_id, step)
);

INSERT INTO step_records (run_id, step, calls, results, created_at)
SELECT c.run_id,
       json_extract(h.value, '$.step'),
       json_extract(h.value, '$.calls'),
       json_extract(h.value, '$.results'),
       c.created_at
FROM checkpoints AS c, json_each(c.state, '$.history') AS h
WHERE c.version = (SELECT MAX(version) FROM checkpoints WHERE run_id = c.run_id)
ORDER BY c.run_id, h.key;

CREATE TRIGGER step_records_contiguous BEFORE INSERT ON step_records
WHEN NEW.step <> 1 + COALESCE((SELECT MAX(step) FROM step_records WHERE run_id = NEW.run_id), 0)
BEGIN
    SELECT RAISE(ABORT, 'step_records: steps are contiguous');
END;
CREATE TRIGGER step_records_no_update BEFORE UPDATE ON step_records
BEGIN SELECT RAISE(ABORT, 'step_records are append-only'); END;
CREATE TRIGGER step_records_no_delete BEFORE DELETE ON step_records
BEGIN SELECT RAISE(ABORT, 'step_records are append-only'); END;

CREATE INDEX ix_tool_invocations_run_status ON tool_invocations (run_id, status);
"#;

/// M3 (SPEC §19.4): gateway connections, the durable liveness of MCP clients. One per session
/// (`uq_connections_session`); `alive_until` is set exactly while `open`, `closed_at` and
/// `close_reason` exactly while `closed`. The partial index serves the connection sweep; the
/// claim query joins on `session_id` through the unique index.
const M3: &str = r#"
CREATE TABLE connections (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant_id    TEXT    NOT NULL,
    principal_id TEXT    NOT NULL,
    session_id   TEXT    NOT NULL REFERENCES sessions (id),
    gateway_id   TEXT    NOT NULL,
    status       TEXT    NOT NULL
        CONSTRAINT ck_connections_status CHECK (status IN ('open', 'closed')),
    alive_until  INTEGER,
    closed_at    INTEGER,
    close_reason TEXT
        CONSTRAINT ck_connections_close_reason
            CHECK (close_reason IS NULL OR close_reason IN ('disconnected', 'expired')),
    opened_at    INTEGER NOT NULL,
    CONSTRAINT ck_connections_alive_iff_open CHECK ((status = 'open') = (alive_until IS NOT NULL)),
    CONSTRAINT ck_connections_closed_iff_closed
        CHECK ((status = 'closed') = (closed_at IS NOT NULL AND close_reason IS NOT NULL))
);
CREATE UNIQUE INDEX uq_connections_session ON connections (session_id);
CREATE INDEX ix_connections_alive_until ON connections (alive_until, id) WHERE status = 'open';
"#;

/// M4: the API tokens of SPEC §20, self-contained (one table, its index and its triggers) so it can
/// be renumbered beside other migrations. Only the SHA-256 of a token is stored. Rows are never
/// deleted and only `revoked_at` ever changes, once: the table is the record of who could act
/// through the HTTP API, and when.
const M_API_TOKENS: &str = r#"
CREATE TABLE api_tokens (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant_id    TEXT    NOT NULL,
    principal_id TEXT    NOT NULL,
    scopes       TEXT    NOT NULL,
    token_sha256 TEXT    NOT NULL
        CONSTRAINT ck_api_tokens_token_sha256 CHECK (length(token_sha256) = 64),
    label        TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    revoked_at   INTEGER,
    CONSTRAINT uq_api_tokens_token_sha256 UNIQUE (token_sha256)
);
CREATE INDEX ix_api_tokens_tenant ON api_tokens (tenant_id, created_at, id);
CREATE TRIGGER api_tokens_only_revocation BEFORE UPDATE ON api_tokens
WHEN OLD.revoked_at IS NOT NULL OR NEW.revoked_at IS NULL
    OR NEW.id IS NOT OLD.id OR NEW.tenant_id IS NOT OLD.tenant_id
    OR NEW.principal_id IS NOT OLD.principal_id OR NEW.scopes IS NOT OLD.scopes
    OR NEW.token_sha256 IS NOT OLD.token_sha256 OR NEW.label IS NOT OLD.label
    OR NEW.created_at IS NOT OLD.created_at OR NEW.expires_at IS NOT OLD.expires_at
BEGIN
    SELECT RAISE(ABORT, 'api_tokens: only revoked_at changes, and only once');
END;
CREATE TRIGGER api_tokens_no_delete BEFORE DELETE ON api_tokens
BEGIN SELECT RAISE(ABORT, 'api_tokens are kept: revoke a token instead'); END;
"#;

/// M5 (SPEC §19.7): the repeat check of every call (`StoreTx::twins`) looks up the tenant's
/// `RUNNING` and `UNCERTAIN` invocations of one tool and effective arguments hash inside the
/// call's first transaction; a partial index keeps that lookup to those rows, however long the
/// tenant's history grows.
const M_TWINS: &str = r#"
CREATE INDEX ix_tool_invocations_twins ON tool_invocations
    (tenant_id, tool_name, effective_arguments_hash) WHERE status IN ('RUNNING', 'UNCERTAIN');
"#;

/// M6: `runs list` pages a tenant's runs newest first.
const M_RUNS_BY_TENANT: &str = r#"
CREATE INDEX ix_runs_tenant_created ON runs (tenant_id, created_at, id);
"#;

/// M7 (SPEC §22.1, §22.2): a connection row is also the MCP **conversation**, the unit of taint
/// and `[limits]`, and every `tools/call` becomes its own run (`planner_kind = 'mcp'`) in the
/// conversation's session, so several of them are active at once.
///
/// An in-place upgrade (`ALTER TABLE ... ADD COLUMN`): no table is rebuilt, so the foreign keys
/// into `sessions` and every other object stay as they are, and a store of any earlier build
/// ends with exactly the schema a new file gets (the schema check compares `sqlite_master`,
/// whose `CREATE TABLE` text SQLite amends the same way on both paths).
/// - `tainted_at`/`tainted_by`: NULL until tainted, set together (the column CHECK may name
///   the other column; SQLite tests it against the existing rows, all NULL).
/// - `call_count`: the calls the conversation started, never negative.
/// - `last_seen_at`: `NOT NULL` needs a constant default for `ADD COLUMN`; 0 is only a
///   placeholder for the `UPDATE` that follows, which gives every existing connection its
///   `opened_at` (what core reads as "no call yet"). This build writes the column on every
///   insert, and an older build refuses the upgraded file (its schema check fails), so no row
///   keeps the placeholder.
///
/// `uq_runs_one_active_per_session` keeps its name and leaves call runs out (a non-mcp run still
/// conflicts with another non-mcp active run of its session). `active_runs_in_session` can no
/// longer use it (its WHERE no longer implies the index's), so `ix_runs_active_by_session`
/// serves that lookup; `ix_connections_tenant_opened` serves `connections_of_tenant`, read
/// newest first by scanning it backwards.
const M_CONVERSATIONS: &str = r#"
ALTER TABLE connections ADD COLUMN tainted_at INTEGER;
ALTER TABLE connections ADD COLUMN tainted_by TEXT
    CONSTRAINT ck_connections_taint_together CHECK ((tainted_at IS NULL) = (tainted_by IS NULL));
ALTER TABLE connections ADD COLUMN call_count INTEGER NOT NULL DEFAULT 0
    CONSTRAINT ck_connections_call_count CHECK (call_count >= 0);
ALTER TABLE connections ADD COLUMN last_seen_at INTEGER NOT NULL DEFAULT 0;
UPDATE connections SET last_seen_at = opened_at;
CREATE INDEX ix_connections_tenant_opened ON connections (tenant_id, opened_at, id);

DROP INDEX uq_runs_one_active_per_session;
CREATE UNIQUE INDEX uq_runs_one_active_per_session ON runs (session_id)
    WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') AND planner_kind <> 'mcp';
CREATE INDEX ix_runs_active_by_session ON runs (session_id, created_at, id)
    WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED');
"#;

/// M8 (SPEC §22.1, §23): a sessionless 2026-07-28 HTTP conversation is the connection row of its
/// key (the hash of principal, token id and client name), which any gateway process of the
/// store joins. `uq_connections_open_key` keeps one open row per tenant and key, so two
/// processes opening the key's conversation at once cannot both commit (one retries and joins
/// the other's). Existing rows are connections of their own (NULL key), which the index leaves out.
const M_CONVERSATION_KEYS: &str = r#"
ALTER TABLE connections ADD COLUMN conversation_key TEXT
    CONSTRAINT ck_connections_conversation_key
        CHECK (conversation_key IS NULL OR length(conversation_key) = 64);
CREATE UNIQUE INDEX uq_connections_open_key ON connections (tenant_id, conversation_key)
    WHERE status = 'open' AND conversation_key IS NOT NULL;
"#;

/// M9 (SPEC §22.3 item 1): approval tasks. A row binds the SHA-256 of a task id (the client holds
/// the id; the store never does) to its call run, one task per run, with the tenant and principal
/// every `tasks/*` request is checked against. Rows never change or go: the status is the run's.
const M_CALL_TASKS: &str = r#"
CREATE TABLE call_tasks (
    id_sha256    TEXT    NOT NULL PRIMARY KEY
        CONSTRAINT ck_call_tasks_id_sha256 CHECK (length(id_sha256) = 64),
    run_id       TEXT    NOT NULL REFERENCES runs (id),
    tenant_id    TEXT    NOT NULL,
    principal_id TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    CONSTRAINT uq_call_tasks_run UNIQUE (run_id)
);
CREATE TRIGGER call_tasks_no_update BEFORE UPDATE ON call_tasks
BEGIN
    SELECT RAISE(ABORT, 'call_tasks: a task row never changes');
END;
CREATE TRIGGER call_tasks_no_delete BEFORE DELETE ON call_tasks
BEGIN
    SELECT RAISE(ABORT, 'call_tasks: a task row is kept');
END;
"#;

/// M10 (SPEC §22.3 item 2): the keys `requestState`s are sealed with, so any gateway process of
/// the store opens a state another sealed. Keys never change or go: a rotated key still opens
/// the states it sealed (which expire with their approvals).
const M_STATE_KEYS: &str = r#"
CREATE TABLE state_keys (
    id         TEXT    NOT NULL PRIMARY KEY,
    secret_hex TEXT    NOT NULL
        CONSTRAINT ck_state_keys_secret CHECK (length(secret_hex) = 64),
    created_at INTEGER NOT NULL
);
CREATE INDEX ix_state_keys_created ON state_keys (created_at, id);
CREATE TRIGGER state_keys_no_update BEFORE UPDATE ON state_keys
BEGIN
    SELECT RAISE(ABORT, 'state_keys: a key never changes');
END;
CREATE TRIGGER state_keys_no_delete BEFORE DELETE ON state_keys
BEGIN
    SELECT RAISE(ABORT, 'state_keys: a key is kept');
END;
"#;

/// M11 (issue 32 item 3): each call keeps its whole proposed action, so `policy replay` decides
/// it again: the tool's target kind joins the fields the row already had (NULL on older rows),
/// and calls are read in creation order across tenants.
const M_REPLAY: &str = r#"
ALTER TABLE tool_invocations ADD COLUMN target_kind TEXT;
CREATE INDEX ix_tool_invocations_created ON tool_invocations (created_at, id);
"#;

/// M12 (issue 32 item 1): each tenant's notification targets with their delivery cursor, and
/// the lease that lets one process at a time deliver a tenant's notifications. A target is
/// never deleted (it is the record of where notifications went); only its removal, once, and
/// its progress change.
const M_NOTIFY: &str = r#"
CREATE TABLE notify_targets (
    id             TEXT    NOT NULL PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    url            TEXT    NOT NULL,
    events         TEXT    NOT NULL,
    format         TEXT    NOT NULL
        CONSTRAINT ck_notify_targets_format CHECK (format IN ('json', 'slack', 'ntfy')),
    secret         TEXT    NOT NULL,
    label          TEXT,
    created_by     TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    removed_at     INTEGER,
    after_event_id INTEGER NOT NULL
        CONSTRAINT ck_notify_targets_after CHECK (after_event_id >= 0),
    attempts       INTEGER NOT NULL
        CONSTRAINT ck_notify_targets_attempts CHECK (attempts >= 0),
    retry_at       INTEGER
);
CREATE INDEX ix_notify_targets_tenant ON notify_targets (tenant_id, created_at, id);
CREATE TRIGGER notify_targets_only_removal_and_progress BEFORE UPDATE ON notify_targets
WHEN NEW.id IS NOT OLD.id OR NEW.tenant_id IS NOT OLD.tenant_id OR NEW.url IS NOT OLD.url
  OR NEW.events IS NOT OLD.events OR NEW.format IS NOT OLD.format
  OR NEW.secret IS NOT OLD.secret OR NEW.label IS NOT OLD.label
  OR NEW.created_by IS NOT OLD.created_by OR NEW.created_at IS NOT OLD.created_at
  OR (OLD.removed_at IS NOT NULL AND NEW.removed_at IS NOT OLD.removed_at)
BEGIN
    SELECT RAISE(ABORT, 'notify_targets: only removal, once, and delivery progress change');
END;
CREATE TRIGGER notify_targets_no_delete BEFORE DELETE ON notify_targets
BEGIN SELECT RAISE(ABORT, 'notify_targets are kept: remove a target instead'); END;

CREATE TABLE notify_leases (
    tenant_id  TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
"#;

/// M13 (issue 33): no trigger on a hot path. Each of these ran as a sub-program on every row
/// the writer inserts on a tool call's path, and SQLite materialises an `INSERT … SELECT` into a
/// table with a row trigger in a temporary table first:
/// - `events_advance_session_sequence`: a session's next sequence is now read as one past its
///   last event (`rows::SESSION_COLUMNS`); the stored `next_event_sequence` stays as the
///   session's floor, which every existing row already satisfies (the trigger kept it one past
///   the last event), so nothing is rewritten.
/// - `checkpoints_versions_contiguous`, `step_records_contiguous`: `SqliteTx` checks both
///   before it inserts (as `MemStore` does) and refuses a gap with the same `Conflict`; the
///   primary keys still refuse a repeated version or step. Only a writer that bypasses airlock
///   could now leave a gap, as it could already edit a row's content.
const M_NO_HOT_TRIGGERS: &str = r#"
DROP TRIGGER events_advance_session_sequence;
DROP TRIGGER checkpoints_versions_contiguous;
DROP TRIGGER step_records_contiguous;
"#;

/// M14 (issue 33): the vocabulary checks of M1 without temporary b-trees. SQLite compiles
/// `x IN (…)` of more than two constants into a temporary index that it fills again on every
/// execution of a statement writing `x`; a call's writes ran about thirty of them. The same
/// checks as `=`/`<>` chains accept and refuse exactly the same rows (each column's NULL
/// yields NULL both ways, which a CHECK accepts) and build nothing.
///
/// The partial indexes of `runs` are dropped and created again with the same chains (and
/// `active_runs_in_session` reads them with the same terms, so the planner still proves its
/// WHERE implies the index's). The table CHECKs cannot be altered by DDL, and rebuilding
/// `runs`, `tool_invocations` and `approvals` would rewrite every row and every foreign key
/// into them, so [`rewrite_vocabulary_checks`] edits their `CREATE TABLE` text in place, the
/// way SQLite documents for changes that leave the stored rows valid ("Making Other Kinds Of
/// Table Schema Changes" in its ALTER TABLE page): `writable_schema`, the text, the schema
/// cookie one up, then an integrity check inside the same transaction.
const M_VOCABULARY_CHAINS: &str = r#"
DROP INDEX uq_runs_one_active_per_session;
CREATE UNIQUE INDEX uq_runs_one_active_per_session ON runs (session_id)
    WHERE status <> 'COMPLETED' AND status <> 'FAILED' AND status <> 'CANCELLED'
        AND planner_kind <> 'mcp';
DROP INDEX ix_runs_active_by_session;
CREATE INDEX ix_runs_active_by_session ON runs (session_id, created_at, id)
    WHERE status <> 'COMPLETED' AND status <> 'FAILED' AND status <> 'CANCELLED';
"#;

/// The `CHECK` texts [`M_VOCABULARY_CHAINS`] rewrites: table, M1's text, its replacement.
const VOCABULARY_CHAINS: [(&str, &str, &str); 9] = [
    (
        "runs",
        "CHECK (status IN ('QUEUED', 'RUNNING', 'WAITING_FOR_APPROVAL',
                                                    'COMPLETED', 'FAILED', 'CANCELLED'))",
        "CHECK (status = 'QUEUED' OR status = 'RUNNING' OR status = 'WAITING_FOR_APPROVAL'
            OR status = 'COMPLETED' OR status = 'FAILED' OR status = 'CANCELLED')",
    ),
    (
        "checkpoints",
        "CHECK (\"trigger\" IN ('seed', 'tool_pending', 'tool_batch',
                                                                'suspended', 'final'))",
        "CHECK (\"trigger\" = 'seed' OR \"trigger\" = 'tool_pending'
            OR \"trigger\" = 'tool_batch' OR \"trigger\" = 'suspended' OR \"trigger\" = 'final')",
    ),
    (
        "tool_invocations",
        "CHECK (status IN ('PROPOSED', 'AUTHORIZED', 'WAITING_FOR_APPROVAL', 'RUNNING',
                          'SUCCEEDED', 'FAILED', 'DENIED', 'UNCERTAIN'))",
        "CHECK (status = 'PROPOSED' OR status = 'AUTHORIZED' OR status = 'WAITING_FOR_APPROVAL'
            OR status = 'RUNNING' OR status = 'SUCCEEDED' OR status = 'FAILED'
            OR status = 'DENIED' OR status = 'UNCERTAIN')",
    ),
    (
        "tool_invocations",
        "CHECK (outcome_status IN ('succeeded', 'failed', 'denied', 'uncertain'))",
        "CHECK (outcome_status = 'succeeded' OR outcome_status = 'failed'
            OR outcome_status = 'denied' OR outcome_status = 'uncertain')",
    ),
    (
        "tool_invocations",
        "CHECK (effect_sent_at IS NULL OR status IN ('RUNNING', 'SUCCEEDED', 'FAILED', 'UNCERTAIN'))",
        "CHECK (effect_sent_at IS NULL OR status = 'RUNNING' OR status = 'SUCCEEDED'
            OR status = 'FAILED' OR status = 'UNCERTAIN')",
    ),
    (
        "tool_invocations",
        "CHECK (status NOT IN ('SUCCEEDED', 'FAILED', 'DENIED', 'UNCERTAIN')",
        "CHECK ((status <> 'SUCCEEDED' AND status <> 'FAILED' AND status <> 'DENIED'
                AND status <> 'UNCERTAIN')",
    ),
    (
        "approvals",
        "CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled'))",
        "CHECK (status = 'pending' OR status = 'approved' OR status = 'denied'
            OR status = 'expired' OR status = 'cancelled')",
    ),
    (
        "events",
        "CHECK (actor_type IN ('principal', 'worker', 'application', 'maintenance', 'process'))",
        "CHECK (actor_type = 'principal' OR actor_type = 'worker' OR actor_type = 'application'
            OR actor_type = 'maintenance' OR actor_type = 'process')",
    ),
    (
        "process_events",
        "CHECK (actor_type IN ('principal', 'worker', 'application', 'maintenance', 'process'))",
        "CHECK (actor_type = 'principal' OR actor_type = 'worker' OR actor_type = 'application'
            OR actor_type = 'maintenance' OR actor_type = 'process')",
    ),
];

/// M14's hook: the table `CHECK`s of [`VOCABULARY_CHAINS`], edited in the schema's text (see
/// [`M_VOCABULARY_CHAINS`]).
fn rewrite_vocabulary_checks(tx: &rusqlite::Transaction<'_>) -> HookResult {
    edit_table_definitions(tx, "M14", &VOCABULARY_CHAINS)
}

/// Edits `CREATE TABLE` texts in place, for changes that leave every stored row valid (see
/// [`M_VOCABULARY_CHAINS`]): each `(table, from, to)` replaces `from` in `table`'s text. Each
/// `from` must occur exactly once in its table, or nothing is changed and the migration
/// (`label`) fails: a store whose schema was edited by hand is not guessed at.
fn edit_table_definitions(
    tx: &rusqlite::Transaction<'_>,
    label: &str,
    edits: &[(&str, &str, &str)],
) -> HookResult {
    let cookie: i64 = tx.query_row("PRAGMA schema_version", [], |row| row.get(0))?;
    let mut tables: Vec<(&str, String)> = Vec::new();
    for &(table, from, to) in edits {
        let index = match tables.iter().position(|(name, _)| *name == table) {
            Some(index) => index,
            None => {
                let sql: String = tx.query_row(
                    "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                    [table],
                    |row| row.get(0),
                )?;
                tables.push((table, sql));
                tables.len() - 1
            }
        };
        let sql = &mut tables[index].1;
        if sql.matches(from).count() != 1 {
            return Err(HookError::Hook(format!(
                "{label}: table {table} does not hold exactly one `{from}`"
            )));
        }
        *sql = sql.replacen(from, to, 1);
    }
    tx.pragma_update(None, "writable_schema", true)?;
    for (table, sql) in &tables {
        tx.execute(
            "UPDATE sqlite_schema SET sql = ?2 WHERE type = 'table' AND name = ?1",
            rusqlite::params![table, sql],
        )?;
    }
    tx.pragma_update(None, "schema_version", cookie + 1)?;
    tx.pragma_update(None, "writable_schema", false)?;
    let integrity: String = tx.query_row("PRAGMA integrity_check", [], |row| row.get(0))?;
    if integrity != "ok" {
        return Err(HookError::Hook(format!(
            "{label}: integrity check: {integrity}"
        )));
    }
    Ok(())
}

/// M15 (issue 33): a run's planner input in a table of its own. The input is the whole run
/// script (1 MB for a 990-step run of 1 KB writes) and never changes, but SQLite rebuilds a
/// row's whole record on every UPDATE, so each of the several run updates of a tool call read
/// and compared the script again, and one that changed the record's size (a counter crossing a
/// byte boundary, a status of another length) rewrote every overflow page of it into the WAL:
/// measured on a 150 KB script, 300 KB of WAL and 0.74 ms per such update, 0.3 ms per
/// same-size one. `run_inputs` is written once per run and, like the other append-only
/// records, never updated or deleted.
///
/// The upgrade copies every input across, then drops the column (SQLite rewrites `runs` in
/// place; nothing else refers to the column).
const M_RUN_INPUTS: &str = r#"
CREATE TABLE run_inputs (
    run_id        TEXT NOT NULL PRIMARY KEY REFERENCES runs (id),
    planner_input TEXT NOT NULL
);
INSERT INTO run_inputs (run_id, planner_input) SELECT id, planner_input FROM runs;
ALTER TABLE runs DROP COLUMN planner_input;
CREATE TRIGGER run_inputs_no_update BEFORE UPDATE ON run_inputs
BEGIN SELECT RAISE(ABORT, 'run_inputs never change'); END;
CREATE TRIGGER run_inputs_no_delete BEFORE DELETE ON run_inputs
BEGIN SELECT RAISE(ABORT, 'run_inputs are kept'); END;
"#;

/// M16 (issue 33): the journal. A write transaction used to insert a row per event (six per
/// allowed call, each with four b-tree entries) beside its checkpoint; now each phase of a call
/// (the watermark, the result) inserts one `journal` row that carries the phase's events and
/// its checkpoint, so an allowed call inserts four rows in all (two journal rows, its
/// invocation and its step record). `events` and `checkpoints` become views of the journal
/// with the columns and values the tables had, so SQL written against them still reads the
/// same rows (they are no longer written to).
///
/// A row holds consecutive events of one session and one run (or of no run), with consecutive
/// ids and sequences from `first_event_id`/`first_sequence`, as a JSON array of
/// `[event_type, payload_schema_version, actor_type, actor_id, payload, derivation_key,
/// created_at]` with `payload` as its JSON text (kept byte for byte); and at most one
/// checkpoint of its run. Derivation keys are found by their **subject**, the text after the
/// key's first `:` (the invocation, approval or refusal they derive from; the whole key when it
/// has none): a row's keyed events share one subject, indexed by `ix_journal_key_subject`.
/// Ids, sequences, key repeats and checkpoint versions are checked and assigned by the writer
/// (`journal` module), which holds SQLite's write lock; the unique indexes below refuse a
/// repeated id, sequence or version should anything else write here.
///
/// The upgrade moves every event into a row of its own and every checkpoint into a row of its
/// own (ids, sequences and versions kept), then drops the two tables.
const M_JOURNAL: &str = r#"
CREATE TABLE journal (
    id                    INTEGER PRIMARY KEY,
    session_id            TEXT    NOT NULL,
    run_id                TEXT,
    first_event_id        INTEGER,
    last_event_id         INTEGER,
    first_sequence        INTEGER,
    last_sequence         INTEGER,
    key_subject           TEXT,
    events                TEXT,
    checkpoint_version    INTEGER,
    checkpoint_trigger    TEXT
        CONSTRAINT ck_journal_checkpoint_trigger
        CHECK (checkpoint_trigger = 'seed' OR checkpoint_trigger = 'tool_pending'
               OR checkpoint_trigger = 'tool_batch' OR checkpoint_trigger = 'suspended'
               OR checkpoint_trigger = 'final'),
    checkpoint_state      TEXT,
    checkpoint_created_at INTEGER,
    CONSTRAINT ck_journal_events_together
        CHECK ((events IS NULL) = (first_event_id IS NULL)
               AND (events IS NULL) = (last_event_id IS NULL)
               AND (events IS NULL) = (first_sequence IS NULL)
               AND (events IS NULL) = (last_sequence IS NULL)),
    CONSTRAINT ck_journal_event_range
        CHECK (first_event_id <= last_event_id AND first_sequence >= 1
               AND last_event_id - first_event_id = last_sequence - first_sequence),
    CONSTRAINT ck_journal_checkpoint_together
        CHECK ((checkpoint_version IS NULL) = (checkpoint_trigger IS NULL)
               AND (checkpoint_version IS NULL) = (checkpoint_state IS NULL)
               AND (checkpoint_version IS NULL) = (checkpoint_created_at IS NULL)),
    CONSTRAINT ck_journal_checkpoint_of_a_run
        CHECK (checkpoint_version IS NULL OR (run_id IS NOT NULL AND checkpoint_version >= 1)),
    CONSTRAINT ck_journal_not_empty CHECK (events IS NOT NULL OR checkpoint_version IS NOT NULL)
);

INSERT INTO journal (session_id, run_id, first_event_id, last_event_id, first_sequence,
                     last_sequence, key_subject, events)
SELECT session_id, run_id, id, id, sequence, sequence,
       CASE WHEN derivation_key IS NULL THEN NULL
            WHEN instr(derivation_key, ':') > 0
                THEN substr(derivation_key, instr(derivation_key, ':') + 1)
            ELSE derivation_key END,
       json_array(json_array(event_type, payload_schema_version, actor_type, actor_id, payload,
                             derivation_key, created_at))
FROM events ORDER BY id;

INSERT INTO journal (session_id, run_id, checkpoint_version, checkpoint_trigger,
                     checkpoint_state, checkpoint_created_at)
SELECT r.session_id, c.run_id, c.version, c."trigger", c.state, c.created_at
FROM checkpoints AS c JOIN runs AS r ON r.id = c.run_id ORDER BY c.run_id, c.version;

DROP TRIGGER events_no_update;
DROP TRIGGER events_no_delete;
DROP TABLE events;
DROP TABLE checkpoints;

CREATE UNIQUE INDEX uq_journal_event_ids ON journal (last_event_id)
    WHERE last_event_id IS NOT NULL;
CREATE INDEX ix_journal_run_events ON journal (run_id, last_event_id)
    WHERE last_event_id IS NOT NULL;
CREATE UNIQUE INDEX uq_journal_session_sequence ON journal (session_id, last_sequence)
    WHERE last_sequence IS NOT NULL;
CREATE INDEX ix_journal_key_subject ON journal (key_subject) WHERE key_subject IS NOT NULL;
CREATE UNIQUE INDEX uq_journal_checkpoints ON journal (run_id, checkpoint_version)
    WHERE checkpoint_version IS NOT NULL;

CREATE TRIGGER journal_no_update BEFORE UPDATE ON journal
BEGIN SELECT RAISE(ABORT, 'the journal is append-only'); END;
CREATE TRIGGER journal_no_delete BEFORE DELETE ON journal
BEGIN SELECT RAISE(ABORT, 'the journal is append-only'); END;

CREATE VIEW events (id, session_id, run_id, sequence, event_type, payload_schema_version,
                    actor_type, actor_id, payload, derivation_key, created_at) AS
SELECT j.first_event_id + e.key, j.session_id, j.run_id, j.first_sequence + e.key,
       e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, e.value ->> 4,
       e.value ->> 5, e.value ->> 6
FROM journal AS j, json_each(j.events) AS e
WHERE j.events IS NOT NULL;

CREATE VIEW checkpoints (run_id, version, "trigger", state, created_at) AS
SELECT run_id, checkpoint_version, checkpoint_trigger, checkpoint_state, checkpoint_created_at
FROM journal WHERE checkpoint_version IS NOT NULL;
"#;

/// M17 (issue 33): a call's arguments stored once. An invocation kept its raw arguments and its
/// effective (normalized, canonical) arguments, equal for nearly every call, and the PENDING
/// checkpoint that fixed its batch held the same raw arguments a third time: a 1 KB write
/// filled a 4 KB page of `tool_invocations` on its own. Now (`arguments` module):
/// - `arguments` is NULL when it is the canonical text of the raw arguments (computed again
///   when read);
/// - `raw_arguments` is NULL when the PENDING checkpoint written in the invocation's own
///   transaction holds the call with these arguments: `arguments_checkpoint` is that
///   checkpoint's version of the invocation's run and `arguments_call` the call's index in its
///   batch. Journal rows are append-only (their triggers refuse an UPDATE or DELETE), so the
///   reference stays good; a read checks the call id it finds there.
///
/// Rows written before keep both columns as they are. Dropping the two `NOT NULL`s leaves every
/// stored row valid, so the table's text is edited in place as M14 did ([`ARGUMENTS_NULLABLE`]).
const M_ARGUMENTS_ONCE: &str = r#"
ALTER TABLE tool_invocations ADD COLUMN arguments_checkpoint INTEGER;
ALTER TABLE tool_invocations ADD COLUMN arguments_call INTEGER
    CONSTRAINT ck_tool_invocations_arguments_at
    CHECK ((arguments_checkpoint IS NULL) = (arguments_call IS NULL)
           AND (raw_arguments IS NULL) = (arguments_call IS NOT NULL)
           AND arguments_call >= 0 AND arguments_checkpoint >= 1);
"#;

/// The `NOT NULL`s M17 drops: table, M1's text, its replacement.
const ARGUMENTS_NULLABLE: [(&str, &str, &str); 2] = [
    (
        "tool_invocations",
        "\n    raw_arguments             TEXT    NOT NULL,",
        "\n    raw_arguments             TEXT,",
    ),
    (
        "tool_invocations",
        "\n    arguments                 TEXT    NOT NULL,",
        "\n    arguments                 TEXT,",
    ),
];

/// M17's hook (see [`M_ARGUMENTS_ONCE`]).
fn arguments_nullable(tx: &rusqlite::Transaction<'_>) -> HookResult {
    edit_table_definitions(tx, "M17", &ARGUMENTS_NULLABLE)
}

/// M18 (issue 33): a step record's calls stored once. The calls of a finished step were the
/// pending batch of the checkpoint that fixed it, copied again into `step_records` when the step
/// closed (a 1 KB call: 1.3 KB more per step). Now core says which checkpoint holds them
/// (`StoreTx::insert_step_record`'s `pending`), and the record keeps `calls` NULL and that
/// version in `calls_checkpoint`; a read takes the calls from the checkpoint's pending batch
/// (one lookup of `uq_journal_checkpoints`) and checks that the batch is this step's. Records
/// written before keep their calls.
const M_STEP_CALLS_ONCE: &str = r#"
ALTER TABLE step_records ADD COLUMN calls_checkpoint INTEGER
    CONSTRAINT ck_step_records_calls_at
    CHECK ((calls IS NULL) = (calls_checkpoint IS NOT NULL) AND calls_checkpoint >= 1);
"#;

/// The `NOT NULL` M18 drops: table, M2's text, its replacement.
const STEP_CALLS_NULLABLE: [(&str, &str, &str); 1] = [(
    "step_records",
    "\n    calls      TEXT    NOT NULL,",
    "\n    calls      TEXT,",
)];

/// M18's hook (see [`M_STEP_CALLS_ONCE`]).
fn step_calls_nullable(tx: &rusqlite::Transaction<'_>) -> HookResult {
    edit_table_definitions(tx, "M18", &STEP_CALLS_NULLABLE)
}

/// M19 (issue 33): a journal row's events in a shorter shape (`stored_events`): the actor,
/// time and payload schema version the row's events share written once, each payload as JSON
/// rather than a string of it, a key by its prefix when its subject is the row's, and a
/// `run.checkpointed` that repeats the row's own checkpoint without its payload. Rows written
/// before keep their array of arrays; nothing is rewritten. The `events` view reads both
/// shapes into the same columns (told apart by their first character, as the reader does:
/// neither writer puts whitespace first).
const M_EVENTS_SHORTER: &str = r#"
DROP VIEW events;
CREATE VIEW events (id, session_id, run_id, sequence, event_type, payload_schema_version,
                    actor_type, actor_id, payload, derivation_key, created_at) AS
SELECT j.first_event_id + e.key, j.session_id, j.run_id, j.first_sequence + e.key,
       e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, e.value ->> 4,
       e.value ->> 5, e.value ->> 6
FROM journal AS j, json_each(j.events) AS e
WHERE j.events IS NOT NULL AND substr(j.events, 1, 1) = '['
UNION ALL
SELECT j.first_event_id + e.key, j.session_id, j.run_id, j.first_sequence + e.key,
       e.value ->> 't',
       coalesce(e.value ->> 'v', j.events ->> 'v'),
       coalesce(e.value ->> 'a', j.events ->> 'a'),
       CASE WHEN json_type(e.value, '$.i') IS NULL THEN j.events ->> 'i'
            ELSE e.value ->> 'i' END,
       CASE WHEN json_type(e.value, '$.p') IS NULL
            THEN json_object('trigger', j.checkpoint_trigger, 'version', j.checkpoint_version)
            ELSE e.value -> 'p' END,
       CASE WHEN json_type(e.value, '$.s') IS NOT NULL
            THEN (e.value ->> 's') || ':' || j.key_subject
            ELSE e.value ->> 'k' END,
       coalesce(e.value ->> 'c', j.events ->> 'c')
FROM journal AS j, json_each(j.events, '$.e') AS e
WHERE j.events IS NOT NULL AND substr(j.events, 1, 1) = '{';
"#;

/// M20 (issue 33): a finished call's outcome and result item derived from the row when they
/// follow from it (`results` module): `result_item` NULL with `result_trust` set is the
/// success or failure item of the row at that trust level, and in such a row `outcome` NULL is
/// the success outcome of the row's tool. Both are built by the store from frozen parts and
/// compared with core's values when written, so a read derives what was written. Rows written before keep both columns;
/// the terminal-outcome check is edited in place to accept either form ([`RESULTS_DERIVED`]).
const M_RESULTS_DERIVED: &str = r#"
ALTER TABLE tool_invocations ADD COLUMN result_trust TEXT
    CONSTRAINT ck_tool_invocations_result_trust
    CHECK (result_trust IS NULL
           OR (result_item IS NULL
               AND (outcome IS NOT NULL
                    OR (outcome_status = 'succeeded' AND reason_code = 'tool.succeeded'))));
"#;

/// The check M20 widens: table, its text since M14, its replacement.
const RESULTS_DERIVED: [(&str, &str, &str); 1] = [(
    "tool_invocations",
    "OR (outcome IS NOT NULL AND result_item IS NOT NULL))",
    "OR ((outcome IS NOT NULL OR result_trust IS NOT NULL)
                   AND (result_item IS NOT NULL OR result_trust IS NOT NULL)))",
)];

/// M20's hook (see [`M_RESULTS_DERIVED`]).
fn results_derived(tx: &rusqlite::Transaction<'_>) -> HookResult {
    edit_table_definitions(tx, "M20", &RESULTS_DERIVED)
}

/// M21 (issue 33): a PENDING checkpoint's calls by reference to the run's script
/// (`stored_state`): a pending call that is exactly its script's call at (batch step − 1, its
/// index) is stored as `{"script_call": [step index, call index]}`. Nothing is rewritten; the
/// tables are as they were. The `checkpoints` view resolves references from the run's input,
/// so SQL readers see each call whole (as the script holds it); a state without a reference
/// (the text has no `"script_call"` key) is shown as stored. The calls are gathered in
/// `json_each`'s order, which is theirs; `json_group_array(… ORDER BY …)` would say so, but
/// SQLite before 3.44 (Debian 12's `sqlite3` is 3.40) cannot parse it and would refuse the
/// whole schema. The version rises so that an earlier build, which would misread a
/// reference, refuses the file.
const M_SCRIPT_CALLS: &str = r#"
DROP VIEW checkpoints;
CREATE VIEW checkpoints (run_id, version, "trigger", state, created_at) AS
SELECT j.run_id, j.checkpoint_version, j.checkpoint_trigger,
       CASE WHEN instr(j.checkpoint_state, '"script_call"') = 0 THEN j.checkpoint_state
       ELSE json_set(j.checkpoint_state, '$.pending.calls',
            (SELECT json_group_array(
                        CASE WHEN json_type(c.value, '$.call.script_call') IS NULL
                             THEN json(c.value)
                             ELSE json_set(c.value, '$.call',
                                  json_extract(i.planner_input,
                                      '$.steps[' || (c.value ->> '$.call.script_call[0]')
                                      || '].calls['
                                      || (c.value ->> '$.call.script_call[1]') || ']'))
                        END)
             FROM json_each(j.checkpoint_state, '$.pending.calls') AS c, run_inputs AS i
             WHERE i.run_id = j.run_id))
       END,
       j.checkpoint_created_at
FROM journal AS j WHERE j.checkpoint_version IS NOT NULL;
"#;

/// M22 (issue 33): a journal row's events leave out what the row says already
/// (`stored_events`): a key prefix that is the event type (`"s": true`), a payload's
/// `invocation_id` that is the row's key subject (`"q": true`), and a `result_item` that is the
/// canonical item of the payload's call id and name (`"r": [content, is_error, trust]`). Nothing
/// is rewritten. The `events` view puts them back: the item rebuilt by `json_object` with its
/// keys in canonical order, the restored keys last in the payload's text (`json_set` appends).
const M_EVENTS_SHORTER_STILL: &str = r#"
DROP VIEW events;
CREATE VIEW events (id, session_id, run_id, sequence, event_type, payload_schema_version,
                    actor_type, actor_id, payload, derivation_key, created_at) AS
SELECT j.first_event_id + e.key, j.session_id, j.run_id, j.first_sequence + e.key,
       e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, e.value ->> 4,
       e.value ->> 5, e.value ->> 6
FROM journal AS j, json_each(j.events) AS e
WHERE j.events IS NOT NULL AND substr(j.events, 1, 1) = '['
UNION ALL
SELECT j.first_event_id + e.key, j.session_id, j.run_id, j.first_sequence + e.key,
       e.value ->> 't',
       coalesce(e.value ->> 'v', j.events ->> 'v'),
       coalesce(e.value ->> 'a', j.events ->> 'a'),
       CASE WHEN json_type(e.value, '$.i') IS NULL THEN j.events ->> 'i'
            ELSE e.value ->> 'i' END,
       CASE WHEN json_type(e.value, '$.p') IS NULL
            THEN json_object('trigger', j.checkpoint_trigger, 'version', j.checkpoint_version)
            WHEN json_type(e.value, '$.q') IS NULL AND json_type(e.value, '$.r') IS NULL
            THEN e.value -> 'p'
            WHEN json_type(e.value, '$.r') IS NULL
            THEN json_set(e.value -> 'p', '$.invocation_id', j.key_subject)
            WHEN json_type(e.value, '$.q') IS NULL
            THEN json_set(e.value -> 'p', '$.result_item',
                     json_object('call_id', e.value ->> '$.p.call_id',
                                 'content', e.value ->> '$.r[0]',
                                 'is_error', e.value -> '$.r[1]',
                                 'name', e.value ->> '$.p.name',
                                 'trust', e.value ->> '$.r[2]') || '')
            ELSE json_set(e.value -> 'p', '$.invocation_id', j.key_subject, '$.result_item',
                     json_object('call_id', e.value ->> '$.p.call_id',
                                 'content', e.value ->> '$.r[0]',
                                 'is_error', e.value -> '$.r[1]',
                                 'name', e.value ->> '$.p.name',
                                 'trust', e.value ->> '$.r[2]') || '')
       END,
       CASE json_type(e.value, '$.s')
            WHEN 'true' THEN (e.value ->> 't') || ':' || j.key_subject
            WHEN 'text' THEN (e.value ->> 's') || ':' || j.key_subject
            ELSE e.value ->> 'k' END,
       coalesce(e.value ->> 'c', j.events ->> 'c')
FROM journal AS j, json_each(j.events, '$.e') AS e
WHERE j.events IS NOT NULL AND substr(j.events, 1, 1) = '{';
"#;

/// M23 (issue 33): a call's policy decision stored once per distinct text. Every call of a run
/// under one policy carries the same decision (`{"decision":"allow","reason_code":…,
/// "explanation":…,"policy_version":…}`, 200 characters), which each row repeated: 190 KB of
/// the 990-step run. A row written since keeps `policy_decision` NULL and
/// `policy_decision_id`, the id of its text in `policy_decision_texts`, whose rows never
/// change (triggers). Rows written before keep their text; a row never has both.
const M_DECISIONS_ONCE: &str = r#"
CREATE TABLE policy_decision_texts (
    id   INTEGER PRIMARY KEY,
    text TEXT    NOT NULL UNIQUE
);
CREATE TRIGGER policy_decision_texts_no_update BEFORE UPDATE ON policy_decision_texts
BEGIN SELECT RAISE(ABORT, 'policy_decision_texts are append-only'); END;
CREATE TRIGGER policy_decision_texts_no_delete BEFORE DELETE ON policy_decision_texts
BEGIN SELECT RAISE(ABORT, 'policy_decision_texts are append-only'); END;
ALTER TABLE tool_invocations ADD COLUMN policy_decision_id INTEGER
    REFERENCES policy_decision_texts (id)
    CONSTRAINT ck_tool_invocations_policy_decision_once
    CHECK (policy_decision_id IS NULL OR policy_decision IS NULL);
"#;

/// Every migration, oldest first; the schema version is their count.
fn all_migrations() -> Vec<M<'static>> {
    vec![
        M::up(M1),
        M::up(M2),
        M::up(M3),
        M::up(M_API_TOKENS),
        M::up(M_TWINS),
        M::up(M_RUNS_BY_TENANT),
        M::up(M_CONVERSATIONS),
        M::up(M_CONVERSATION_KEYS),
        M::up(M_CALL_TASKS),
        M::up(M_STATE_KEYS),
        M::up(M_REPLAY),
        M::up(M_NOTIFY),
        M::up(M_NO_HOT_TRIGGERS),
        M::up_with_hook(M_VOCABULARY_CHAINS, rewrite_vocabulary_checks),
        M::up(M_RUN_INPUTS),
        M::up(M_JOURNAL),
        M::up_with_hook(M_ARGUMENTS_ONCE, arguments_nullable),
        M::up_with_hook(M_STEP_CALLS_ONCE, step_calls_nullable),
        M::up(M_EVENTS_SHORTER),
        M::up_with_hook(M_RESULTS_DERIVED, results_derived),
        M::up(M_SCRIPT_CALLS),
        M::up(M_EVENTS_SHORTER_STILL),
        M::up(M_DECISIONS_ONCE),
    ]
}

/// The schema version a fully migrated store reports as `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 23;

pub(super) fn migrations() -> Migrations<'static> {
    Migrations::new(all_migrations())
}

/// One schema object as `sqlite_master` records it: type, name and its `CREATE` text.
pub(super) type SchemaObject = (String, String, Option<String>);

/// The schema objects of `conn`, in a fixed order (SQLite's own `sqlite_*` objects left out).
pub(super) fn objects(conn: &Connection) -> rusqlite::Result<Vec<SchemaObject>> {
    let mut statement = conn.prepare(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
         ORDER BY type, name",
    )?;
    let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    rows.collect()
}

/// What a store of this build holds: the migrations applied to an empty in-memory database.
pub(super) fn expected_objects() -> Result<Vec<SchemaObject>, rusqlite_migration::Error> {
    let mut conn = Connection::open_in_memory()?;
    migrations().to_latest(&mut conn)?;
    Ok(objects(&conn)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_valid_and_end_at_the_schema_version() {
        let migrations = migrations();
        assert!(migrations.validate().is_ok());
        assert_eq!(all_migrations().len() as i64, SCHEMA_VERSION);
    }

    /// M14's chains decide every value as M1's `IN` lists did: each CHECK, as an expression of
    /// its column, gives the same answer (true, false or NULL) before and after for every word
    /// of its vocabulary, other spellings of them, a foreign word, the empty text and NULL.
    #[test]
    fn m14_chains_decide_every_value_as_the_in_lists_did() {
        let conn = Connection::open_in_memory().expect("open");
        let columns = ["outcome_status", "actor_type", "\"trigger\"", "status"];
        let words = |text: &str| -> Vec<String> {
            text.split('\'')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        };
        for (table, from, to) in VOCABULARY_CHAINS {
            let expression = |check: &str| {
                let mut text = check.trim_start_matches("CHECK ").to_owned();
                if text.matches('(').count() > text.matches(')').count() {
                    text.push_str(" OR 0)");
                }
                for column in columns {
                    text = text.replace(column, "?1");
                }
                // Every expression names ?2 (true whatever it is), so each takes both parameters.
                format!(
                    "({}) AND (?2 IS NULL OR ?2 IS NOT NULL)",
                    text.replace("effect_sent_at", "?2")
                )
            };
            let (before, after) = (expression(from), expression(to));
            let decide =
                |expression: &str, value: Option<&str>, sent: Option<i64>| -> Option<bool> {
                    conn.query_row(
                        &format!("SELECT {expression}"),
                        rusqlite::params![value, sent],
                        |row| row.get(0),
                    )
                    .unwrap_or_else(|e| panic!("{table}: SELECT {expression}: {e}"))
                };
            let mut probes: Vec<Option<String>> =
                vec![None, Some(String::new()), Some("bogus".into())];
            for word in words(from) {
                probes.push(Some(word.to_uppercase()));
                probes.push(Some(word.to_lowercase()));
                probes.push(Some(format!("{word} ")));
                probes.push(Some(word));
            }
            assert!(probes.len() > 8, "{table}: the vocabulary was read");
            for probe in &probes {
                for sent in [None, Some(5)] {
                    assert_eq!(
                        decide(&before, probe.as_deref(), sent),
                        decide(&after, probe.as_deref(), sent),
                        "{table}: {probe:?} (effect sent {sent:?}): {before} against {after}"
                    );
                }
            }
        }
    }

    /// M13 to M15 upgrade a store of M12 in place: its schema becomes a new file's, a
    /// session's next sequence continues after its last event (the dropped trigger's counter
    /// is only a floor now), the rewritten checks still refuse what M1's refused, under
    /// their names, and each run's input moved to `run_inputs`.
    #[test]
    fn m13_to_m16_upgrade_an_m12_store_in_place() {
        let mut conn = Connection::open_in_memory().expect("open");
        Migrations::new(all_migrations().into_iter().take(12).collect())
            .to_latest(&mut conn)
            .expect("M1..M12");
        let session = "00000000-0000-0000-0000-000000000001";
        conn.execute(
            "INSERT INTO sessions (id, tenant_id, principal_id, created_at) VALUES (?1, 't', 'p', 1)",
            [session],
        )
        .expect("session");
        insert_run(&conn, "r1", session, "scripted", "QUEUED").expect("run");
        for sequence in 1..=3 {
            conn.execute(
                "INSERT INTO events (session_id, run_id, sequence, event_type, \
                 payload_schema_version, actor_type, payload, created_at) \
                 VALUES (?1, 'r1', ?2, 'run.started', 1, 'worker', '{}', 1)",
                rusqlite::params![session, sequence],
            )
            .expect("event under M12's trigger");
        }
        upgrade_to_a_new_files_schema(&mut conn, "M13 to M16");
        let moved: Vec<(i64, i64, String)> = conn
            .prepare("SELECT id, sequence, event_type FROM events ORDER BY id")
            .and_then(|mut statement| {
                statement
                    .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
                    .collect()
            })
            .expect("M16 moved the events into the journal");
        assert_eq!(
            moved,
            (1..=3)
                .map(|n| (n, n, "run.started".to_owned()))
                .collect::<Vec<_>>(),
            "the events view reads them with their ids and sequences"
        );
        let next: i64 = conn
            .query_row(
                &format!("SELECT {} FROM sessions", crate::rows::SESSION_COLUMNS),
                [],
                |row| row.get(3),
            )
            .expect("session");
        assert_eq!(next, 4, "the sequence continues after the last event");
        let input: String = conn
            .query_row(
                "SELECT planner_input FROM run_inputs WHERE run_id = 'r1'",
                [],
                |row| row.get(0),
            )
            .expect("M15 moved the run's input");
        assert_eq!(input, "{}");
        for (sql, constraint) in [
            (
                "UPDATE runs SET status = 'PAUSED' WHERE id = 'r1'",
                "ck_runs_status",
            ),
            (
                "UPDATE journal SET key_subject = 'x'",
                "the journal is append-only",
            ),
            ("DELETE FROM journal", "the journal is append-only"),
            (
                "INSERT INTO events (session_id, sequence, event_type, payload_schema_version, \
                 actor_type, payload, created_at) \
                 VALUES ('00000000-0000-0000-0000-000000000001', 4, 'x', 1, 'worker', '{}', 1)",
                "cannot modify events because it is a view",
            ),
        ] {
            let message = conn.execute(sql, []).expect_err(sql).to_string();
            assert!(message.contains(constraint), "{sql}: {message}");
        }
        insert_run(&conn, "r2", session, "scripted", "QUEUED")
            .expect_err("a second active non-mcp run of the session");
    }

    /// A store of the first `migrations` migrations holding one session and a QUEUED scripted
    /// run of it: the connection, the session's id and the run's.
    fn store_with_a_run(migrations: usize) -> (Connection, &'static str, &'static str) {
        let mut conn = Connection::open_in_memory().expect("open");
        Migrations::new(all_migrations().into_iter().take(migrations).collect())
            .to_latest(&mut conn)
            .expect("the earlier migrations");
        let session = "00000000-0000-0000-0000-000000000001";
        let run = "00000000-0000-0000-0000-0000000000a1";
        conn.execute(
            "INSERT INTO sessions (id, tenant_id, principal_id, created_at) VALUES (?1, 't', 'p', 1)",
            [session],
        )
        .expect("session");
        insert_run(&conn, run, session, "scripted", "QUEUED").expect("run");
        (conn, session, run)
    }

    /// M17 upgrades an M16 store in place: an invocation written with both argument columns
    /// reads back as it did, the schema is a new file's, and the new columns' CHECK refuses a
    /// row whose raw arguments are neither inline nor referenced (or both).
    #[test]
    fn m17_keeps_inline_arguments_and_refuses_a_row_without_them() {
        use airlock_core::store::StoreTx;

        let (mut conn, session, run) = store_with_a_run(16);
        let invocation = "00000000-0000-0000-0000-0000000000b1";
        let insert =
            |conn: &Connection, id: &str, key: &str, raw: Option<&str>, at: Option<(i64, i64)>| {
                let at_columns = if at.is_some() {
                    ", arguments_checkpoint, arguments_call"
                } else {
                    ""
                };
                let at_values = at.map_or(String::new(), |(v, c)| format!(", {v}, {c}"));
                conn.execute(
                    &format!(
                        "INSERT INTO tool_invocations (id, run_id, session_id, tenant_id, \
                     step_number, call_id, tool_name, tool_version, side_effect, risk, \
                     idempotency_class, required_scopes, raw_arguments, arguments, \
                     normalized_arguments_hash, effective_arguments_hash, idempotency_key, \
                     argument_trust, origin_trust, created_at, status, updated_at{at_columns}) \
                     VALUES (?1, ?2, ?3, 't', 1, 'c1', 'demo.echo', '1.0.0', 'none', 'low', \
                     'idempotent', '[]', ?4, ?5, 'h', 'h', ?6, '{{}}', 'user', 1, 'PROPOSED', 1\
                     {at_values})"
                    ),
                    rusqlite::params![id, run, session, raw, raw, key],
                )
            };
        insert(&conn, invocation, "k1", Some(r#"{"a":1}"#), None).expect("an M16 invocation");
        upgrade_to_a_new_files_schema(&mut conn, "M17");

        conn.execute_batch("BEGIN").expect("begin");
        let inputs = crate::planner_inputs::PlannerInputs::default();
        let mut tx = crate::tx::SqliteTx::new(&conn, &inputs);
        let read = tx
            .invocation(invocation.parse().expect("id"))
            .expect("read")
            .expect("the row");
        assert_eq!(read.raw_arguments, serde_json::json!({"a": 1}));
        assert_eq!(read.arguments, r#"{"a":1}"#);
        drop(tx);
        conn.execute_batch("ROLLBACK").expect("rollback");

        for (key, raw, at) in [
            ("k2", None, None),
            ("k3", Some("{}"), Some((1, 0))),
            ("k4", None, Some((0, 0))),
            ("k5", None, Some((1, -1))),
        ] {
            let id = format!("00000000-0000-0000-0000-0000000000c{}", &key[1..]);
            let message = insert(&conn, &id, key, raw, at).expect_err(key).to_string();
            assert!(
                message.contains("ck_tool_invocations_arguments_at"),
                "{key}: {message}"
            );
        }
    }

    /// M18 upgrades an M17 store in place: a step record with its calls inline reads back as
    /// it did, and the new column's CHECK refuses a record with its calls both inline and
    /// referenced, or neither.
    #[test]
    fn m18_keeps_inline_calls_and_refuses_a_record_without_them() {
        use airlock_core::store::StoreTx;

        let (mut conn, _, run) = store_with_a_run(17);
        let calls = r#"[{"call_id":"c1","tool":"t","version":null,"arguments":{"a":1},"argument_trust":{}}]"#;
        conn.execute(
            "INSERT INTO step_records (run_id, step, calls, results, created_at) \
             VALUES (?1, 1, ?2, '[]', 1)",
            [run, calls],
        )
        .expect("an M17 step record");
        upgrade_to_a_new_files_schema(&mut conn, "M18");

        conn.execute_batch("BEGIN").expect("begin");
        let inputs = crate::planner_inputs::PlannerInputs::default();
        let mut tx = crate::tx::SqliteTx::new(&conn, &inputs);
        let records = tx
            .step_records(run.parse().expect("id"), 0, 10)
            .expect("read");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].calls[0].arguments, serde_json::json!({"a": 1}));
        drop(tx);
        conn.execute_batch("ROLLBACK").expect("rollback");

        for (step, calls, at) in [
            (2, None, None),
            (2, Some(calls), Some(1)),
            (2, None, Some(0)),
        ] {
            let message = conn
                .execute(
                    "INSERT INTO step_records (run_id, step, calls, results, created_at, \
                     calls_checkpoint) VALUES (?1, ?2, ?3, '[]', 1, ?4)",
                    rusqlite::params![run, step, calls, at],
                )
                .expect_err("refused")
                .to_string();
            assert!(
                message.contains("ck_step_records_calls_at"),
                "{calls:?} {at:?}: {message}"
            );
        }
    }

    /// M19 and M20 upgrade an M18 store in place: a journal row of the array shape reads back
    /// through the store and the `events` view as it did; a finished invocation with its outcome
    /// and result item inline reads back whole; and the widened terminal check still refuses a
    /// finished row with neither an outcome nor a result item, as the new column's check refuses
    /// a trust level beside an inline item.
    #[test]
    fn m19_and_m20_read_rows_written_before_and_keep_refusing_a_finished_row_without_results() {
        use airlock_core::store::StoreTx;

        let (mut conn, session, run) = store_with_a_run(18);
        conn.execute(
            "INSERT INTO journal (session_id, run_id, first_event_id, last_event_id, \
             first_sequence, last_sequence, key_subject, events) VALUES (?1, ?2, 1, 1, 1, 1, \
             'inv', json_array(json_array('run.started', 1, 'worker', 'w-1', '{\"n\":1}', \
             'run.started:inv', 5)))",
            [session, run],
        )
        .expect("an M18 journal row");
        const SUCCEEDED: &str = "tool.succeeded";
        let outcome = r#"{"status":"succeeded","action":"demo.echo","reason_code":"tool.succeeded","message":"Completed.","retryable":false,"remediation":"none"}"#;
        let item = r#"{"call_id":"c1","content":"{}","is_error":false,"name":"demo.echo","trust":"internal_tool"}"#;
        // `results`: the outcome, the result item, and `result_trust` as an SQL literal (`None`:
        // the column is not named, as before M20); `reason`: the row's reason code.
        let insert = |conn: &Connection,
                      id: &str,
                      key: &str,
                      results: (Option<&str>, Option<&str>, Option<&str>),
                      reason: &str| {
            let (outcome, item, trust) = results;
            let (trust_column, trust_value) = trust
                .map_or((String::new(), String::new()), |literal| {
                    (", result_trust".to_owned(), format!(", {literal}"))
                });
            conn.execute(
                &format!(
                    "INSERT INTO tool_invocations (id, run_id, session_id, tenant_id, \
                     step_number, call_id, tool_name, tool_version, side_effect, risk, \
                     idempotency_class, required_scopes, raw_arguments, \
                     normalized_arguments_hash, effective_arguments_hash, idempotency_key, \
                     argument_trust, origin_trust, created_at, status, effect_sent_at, \
                     structured_result, outcome, result_item, outcome_status, reason_code, \
                     updated_at{trust_column}) \
                     VALUES (?1, ?2, ?3, 't', 1, ?4, 'demo.echo', '1.0.0', 'none', 'low', \
                     'idempotent', '[]', '{{}}', 'h', 'h', ?4, '{{}}', 'user', 1, 'SUCCEEDED', \
                     1, '{{}}', ?5, ?6, 'succeeded', ?7, 1{trust_value})"
                ),
                rusqlite::params![id, run, session, key, outcome, item, reason],
            )
        };
        let invocation = "00000000-0000-0000-0000-0000000000b1";
        insert(
            &conn,
            invocation,
            "c1",
            (Some(outcome), Some(item), None),
            SUCCEEDED,
        )
        .expect("an M18 finished invocation");
        upgrade_to_a_new_files_schema(&mut conn, "M19, M20");

        let viewed: (String, String, String) = conn
            .query_row(
                "SELECT actor_id, payload, derivation_key FROM events",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .expect("the view");
        assert_eq!(
            viewed,
            (
                "w-1".to_owned(),
                r#"{"n":1}"#.to_owned(),
                "run.started:inv".to_owned()
            )
        );
        conn.execute_batch("BEGIN").expect("begin");
        let inputs = crate::planner_inputs::PlannerInputs::default();
        let mut tx = crate::tx::SqliteTx::new(&conn, &inputs);
        let events = tx
            .events_of_run(run.parse().expect("id"), None, 10)
            .expect("events");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].payload, serde_json::json!({"n": 1}));
        let read = tx
            .invocation(invocation.parse().expect("id"))
            .expect("read")
            .expect("the row");
        assert_eq!(read.result_item.as_deref(), Some(item));
        assert_eq!(
            read.outcome.map(|o| o.message),
            Some("Completed.".to_owned())
        );
        drop(tx);
        conn.execute_batch("ROLLBACK").expect("rollback");

        let derived = Some("'internal_tool'");
        for (key, results, reason, check) in [
            (
                "k2",
                (None, None, Some("NULL")),
                SUCCEEDED,
                "ck_tool_invocations_terminal_outcome",
            ),
            (
                "k3",
                (Some(outcome), None, Some("NULL")),
                SUCCEEDED,
                "ck_tool_invocations_terminal_outcome",
            ),
            (
                "k4",
                (None, Some(item), Some("NULL")),
                SUCCEEDED,
                "ck_tool_invocations_terminal_outcome",
            ),
            (
                "k5",
                (Some(outcome), Some(item), derived),
                SUCCEEDED,
                "ck_tool_invocations_result_trust",
            ),
            // Only a success's outcome is left out.
            (
                "k7",
                (None, None, derived),
                "tool.timeout",
                "ck_tool_invocations_result_trust",
            ),
        ] {
            let id = format!("00000000-0000-0000-0000-0000000000c{}", &key[1..]);
            let message = insert(&conn, &id, key, results, reason)
                .expect_err(key)
                .to_string();
            assert!(message.contains(check), "{key}: {message}");
        }
        insert(
            &conn,
            "00000000-0000-0000-0000-0000000000d1",
            "k6",
            (None, None, derived),
            SUCCEEDED,
        )
        .expect("a derived row");
    }

    /// M16 moves a store's events and checkpoints into the journal where the writer looks for
    /// them: every derivation key is found again by its subject (the SQL of the migration and
    /// `journal::key_subject` agree), appending a stored key returns the stored event, the
    /// latest checkpoint is the moved one, and new events continue the ids and the sequence.
    #[test]
    fn m16_moves_events_and_checkpoints_where_the_writer_finds_them() {
        use airlock_core::events::{Actor, EventType, NewEvent};
        use airlock_core::ids::{RunId, SessionId};
        use airlock_core::store::StoreTx;
        use airlock_core::time::Timestamp;

        let (mut conn, session, run) = store_with_a_run(15);
        let keys = [
            "tool.call.started:6f1c0000-0000-0000-0000-000000000001",
            "tool.call.refused:x:3:c1",
            "keyless",
            "trailing:",
        ];
        for (sequence, key) in (1_i64..).zip(keys) {
            conn.execute(
                "INSERT INTO events (session_id, run_id, sequence, event_type, \
                 payload_schema_version, actor_type, payload, derivation_key, created_at) \
                 VALUES (?1, ?2, ?3, 'run.started', 1, 'worker', '{\"n\":1.5}', ?4, 7)",
                rusqlite::params![session, run, sequence, key],
            )
            .expect("an M15 event");
        }
        conn.execute(
            "INSERT INTO checkpoints (run_id, version, \"trigger\", state, created_at) \
             VALUES (?1, 1, 'seed', ?2, 7)",
            rusqlite::params![
                run,
                serde_json::to_string(&airlock_core::run::checkpoint::CheckpointState::default())
                    .expect("state")
            ],
        )
        .expect("an M15 checkpoint");
        upgrade_to_a_new_files_schema(&mut conn, "M16");

        conn.execute_batch("BEGIN").expect("begin");
        let inputs = crate::planner_inputs::PlannerInputs::default();
        let mut tx = crate::tx::SqliteTx::new(&conn, &inputs);
        for (id, key) in (1_i64..).zip(keys) {
            let found = tx.event_by_key(key).expect("read").expect(key);
            assert_eq!(
                (found.id, found.sequence),
                (id, u64::try_from(id).expect("id"))
            );
            assert_eq!(found.payload, serde_json::json!({"n": 1.5}), "{key}");
        }
        let run_id: RunId = run.parse().expect("run id");
        let checkpoint = tx.latest_checkpoint(run_id).expect("read").expect("moved");
        assert_eq!(checkpoint.version, 1);
        let event = |key: Option<&str>| NewEvent {
            session_id: session.parse::<SessionId>().expect("session id"),
            run_id: Some(run_id),
            event_type: EventType::RunStarted,
            actor: Actor::worker("w"),
            payload: serde_json::json!({"n": 1.5}),
            derivation_key: key.map(str::to_owned),
            created_at: Timestamp::from_micros(7),
        };
        let repeat = tx.append_event(&event(Some(keys[0]))).expect("a repeat");
        assert_eq!(repeat.id, 1, "the stored event, not a second one");
        let next = tx.append_event(&event(Some("new:key"))).expect("append");
        assert_eq!(
            (next.id, next.sequence),
            (5, 5),
            "ids and sequence continue"
        );
        tx.finish().expect("the journal row");
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM journal", [], |row| row.get(0))
            .expect("count");
        assert_eq!(
            rows, 6,
            "four events and a checkpoint moved, one row appended"
        );
    }

    /// Applies the remaining migrations (`label` names them) and checks that the upgraded store
    /// holds exactly the schema a new file gets.
    fn upgrade_to_a_new_files_schema(conn: &mut Connection, label: &str) {
        migrations().to_latest(conn).expect(label);
        assert_eq!(
            objects(conn).expect("objects"),
            expected_objects().expect("expected"),
            "an upgraded store has a new file's schema ({label})"
        );
    }

    /// Inserts a run row of `session` with just the columns M1 requires, and its planner input
    /// where the schema keeps it (in the row before M15, in `run_inputs` since).
    fn insert_run(
        conn: &Connection,
        id: &str,
        session: &str,
        kind: &str,
        status: &str,
    ) -> rusqlite::Result<usize> {
        let input_in_row: bool = conn.query_row(
            "SELECT COUNT(*) > 0 FROM pragma_table_info('runs') WHERE name = 'planner_input'",
            [],
            |row| row.get(0),
        )?;
        let (input_column, input_value) = if input_in_row {
            (", planner_input", ", '{}'")
        } else {
            ("", "")
        };
        let inserted = conn.execute(
            &format!(
                "INSERT INTO runs (id, session_id, tenant_id, principal_id, principal_scopes, \
                 origin_trust, planner_kind, status, limits, created_at, updated_at\
                 {input_column}) \
                 VALUES (?1, ?2, 't', 'p', '[]', 'user', ?3, ?4, '{{}}', 1, 1{input_value})"
            ),
            rusqlite::params![id, session, kind, status],
        )?;
        if input_in_row {
            return Ok(inserted);
        }
        conn.execute(
            "INSERT INTO run_inputs (run_id, planner_input) VALUES (?1, '{}')",
            [id],
        )
    }

    /// M7 upgrades a store of M6 in place: its connections become conversations that have seen
    /// no call since they opened, untainted, and the schema is exactly a new file's; then call
    /// runs share a session while other runs still do not.
    #[test]
    fn m7_upgrades_an_m6_store_in_place() {
        let mut conn = Connection::open_in_memory().expect("open");
        Migrations::new(all_migrations().into_iter().take(6).collect())
            .to_latest(&mut conn)
            .expect("M1..M6");
        conn.execute_batch(
            "INSERT INTO sessions (id, tenant_id, principal_id, created_at) \
                 VALUES ('00000000-0000-0000-0000-000000000001', 't', 'p', 1);
             INSERT INTO connections (id, tenant_id, principal_id, session_id, gateway_id, \
                 status, alive_until, opened_at) \
                 VALUES ('00000000-0000-0000-0000-0000000000c1', 't', 'p', \
                 '00000000-0000-0000-0000-000000000001', 'g', 'open', 900, 123);",
        )
        .expect("M6 rows");
        upgrade_to_a_new_files_schema(&mut conn, "M7");
        let upgraded = conn
            .query_row(
                &format!(
                    "SELECT {} FROM connections",
                    crate::rows::CONNECTION_COLUMNS
                ),
                [],
                crate::rows::connection,
            )
            .expect("decode");
        assert_eq!(upgraded.taint, None);
        assert_eq!(upgraded.call_count, 0);
        assert_eq!(upgraded.last_seen_at, upgraded.opened_at);
        assert_eq!(upgraded.opened_at.as_micros(), 123);

        let session = "00000000-0000-0000-0000-000000000001";
        for (id, kind, status) in [
            ("r1", "mcp", "WAITING_FOR_APPROVAL"),
            ("r2", "mcp", "QUEUED"),
            ("r3", "scripted", "QUEUED"),
        ] {
            insert_run(&conn, id, session, kind, status)
                .unwrap_or_else(|e| panic!("{id}: {kind} {status} beside the others: {e}"));
        }
        let second = insert_run(&conn, "r4", session, "scripted", "QUEUED");
        assert!(
            second.is_err(),
            "a second non-mcp active run of the session: {second:?}"
        );
        let taint_alone = conn.execute(
            "UPDATE connections SET tainted_at = 5 WHERE tainted_by IS NULL",
            [],
        );
        assert!(taint_alone.is_err(), "tainted_at without tainted_by");
        let negative = conn.execute("UPDATE connections SET call_count = -1", []);
        assert!(negative.is_err(), "a negative call count");
    }
}
