-- airlock's PostgreSQL schema (SPEC §14 and §17.2, enforced by PostgreSQL itself, SPEC §18).
-- The same tables, columns, constraint names and append-only rules as the SQLite store's M1 and
-- M2: times are BIGINT microseconds since the Unix epoch (UTC), ids lowercase hyphenated UUID
-- TEXT, JSON TEXT (stored byte for byte: a result item must come back byte-identical, which
-- jsonb's normalization would not guarantee).

CREATE TABLE sessions (
    id                  TEXT    NOT NULL PRIMARY KEY,
    tenant_id           TEXT    NOT NULL,
    principal_id        TEXT    NOT NULL,
    next_event_sequence BIGINT  NOT NULL DEFAULT 1
        CONSTRAINT ck_sessions_next_event_sequence CHECK (next_event_sequence >= 1),
    created_at          BIGINT  NOT NULL
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
    step_count          BIGINT  NOT NULL DEFAULT 0,
    tool_call_count     BIGINT  NOT NULL DEFAULT 0,
    limits              TEXT    NOT NULL,
    deadline_at         BIGINT,
    lease_owner         TEXT,
    lease_epoch         BIGINT  NOT NULL DEFAULT 0,
    lease_expires_at    BIGINT,
    attempts            BIGINT  NOT NULL DEFAULT 0,
    scheduled_for       BIGINT,
    cancel_requested_at BIGINT,
    failure             TEXT,
    final_message       TEXT,
    created_at          BIGINT  NOT NULL,
    updated_at          BIGINT  NOT NULL,
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
CREATE INDEX ix_runs_status ON runs (status);

CREATE TABLE checkpoints (
    run_id     TEXT    NOT NULL REFERENCES runs (id),
    version    BIGINT  NOT NULL CONSTRAINT ck_checkpoints_version CHECK (version >= 1),
    "trigger"  TEXT    NOT NULL
        CONSTRAINT ck_checkpoints_trigger CHECK ("trigger" IN ('seed', 'tool_pending', 'tool_batch',
                                                                'suspended', 'final')),
    state      TEXT    NOT NULL,
    created_at BIGINT  NOT NULL,
    CONSTRAINT pk_checkpoints PRIMARY KEY (run_id, version)
);

CREATE TABLE step_records (
    run_id     TEXT    NOT NULL REFERENCES runs (id),
    step       BIGINT  NOT NULL CONSTRAINT ck_step_records_step CHECK (step >= 1),
    calls      TEXT    NOT NULL,
    results    TEXT    NOT NULL,
    created_at BIGINT  NOT NULL,
    CONSTRAINT pk_step_records PRIMARY KEY (run_id, step)
);

CREATE TABLE tool_invocations (
    id                        TEXT    NOT NULL PRIMARY KEY,
    run_id                    TEXT    NOT NULL REFERENCES runs (id),
    session_id                TEXT    NOT NULL REFERENCES sessions (id),
    tenant_id                 TEXT    NOT NULL,
    step_number               BIGINT  NOT NULL,
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
    created_at                BIGINT  NOT NULL,
    status                    TEXT    NOT NULL
        CONSTRAINT ck_tool_invocations_status
        CHECK (status IN ('PROPOSED', 'AUTHORIZED', 'WAITING_FOR_APPROVAL', 'RUNNING',
                          'SUCCEEDED', 'FAILED', 'DENIED', 'UNCERTAIN')),
    policy_decision           TEXT,
    effect_sent_at            BIGINT,
    suspended_kind            TEXT
        CONSTRAINT ck_tool_invocations_suspended_kind CHECK (suspended_kind IN ('approval')),
    suspended_ref             TEXT,
    structured_result         TEXT,
    output_bytes              BIGINT,
    outcome                   TEXT,
    result_item               TEXT,
    outcome_status            TEXT
        CONSTRAINT ck_tool_invocations_outcome_status
        CHECK (outcome_status IN ('succeeded', 'failed', 'denied', 'uncertain')),
    reason_code               TEXT,
    updated_at                BIGINT  NOT NULL,
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
CREATE INDEX ix_tool_invocations_run_status ON tool_invocations (run_id, status);

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
    expires_at                 BIGINT  NOT NULL,
    created_at                 BIGINT  NOT NULL,
    requested_at               BIGINT,
    resolved_at                BIGINT,
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

-- `id` comes from an identity column: ids only order and page events, and a gap is harmless.
-- `sequence` never does (SPEC §18): it is taken from `sessions.next_event_sequence`, whose row
-- the appending statement updates, so appends to one session also serialize on that row and
-- their ids grow in commit order.
CREATE TABLE events (
    id                     BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id             TEXT    NOT NULL REFERENCES sessions (id),
    run_id                 TEXT    REFERENCES runs (id),
    sequence               BIGINT  NOT NULL CONSTRAINT ck_events_sequence CHECK (sequence >= 1),
    event_type             TEXT    NOT NULL,
    payload_schema_version BIGINT  NOT NULL,
    actor_type             TEXT    NOT NULL
        CONSTRAINT ck_events_actor_type
        CHECK (actor_type IN ('principal', 'worker', 'application', 'maintenance', 'process')),
    actor_id               TEXT,
    payload                TEXT    NOT NULL,
    derivation_key         TEXT,
    created_at             BIGINT  NOT NULL,
    CONSTRAINT uq_events_session_sequence UNIQUE (session_id, sequence),
    CONSTRAINT uq_events_derivation_key UNIQUE (derivation_key)
);
CREATE INDEX ix_events_run ON events (run_id, id);

-- `position` orders the stream (SQLite's rowid); `id` is the event's UUID.
CREATE TABLE process_events (
    position               BIGINT  GENERATED ALWAYS AS IDENTITY,
    id                     TEXT    NOT NULL PRIMARY KEY,
    event_type             TEXT    NOT NULL,
    payload_schema_version BIGINT  NOT NULL,
    actor_type             TEXT    NOT NULL
        CONSTRAINT ck_process_events_actor_type
        CHECK (actor_type IN ('principal', 'worker', 'application', 'maintenance', 'process')),
    actor_id               TEXT,
    payload                TEXT    NOT NULL,
    derivation_key         TEXT    NOT NULL,
    created_at             BIGINT  NOT NULL,
    CONSTRAINT uq_process_events_derivation_key UNIQUE (derivation_key)
);
CREATE INDEX ix_process_events_type ON process_events (event_type, created_at);

CREATE TABLE policy_profiles (
    policy_version  TEXT    NOT NULL PRIMARY KEY,
    profile_name    TEXT    NOT NULL,
    profile_sha256  TEXT    NOT NULL,
    hardline_sha256 TEXT    NOT NULL,
    rule_count      BIGINT  NOT NULL,
    loaded_at       BIGINT  NOT NULL,
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
    settled_at    BIGINT  NOT NULL,
    CONSTRAINT uq_uncertain_settlements_invocation UNIQUE (invocation_id)
);

-- Append-only audit tables: UPDATE and DELETE are rejected by the database itself, whoever
-- connects (TRUNCATE too: it bypasses row triggers).
CREATE FUNCTION airlock_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% are append-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER process_events_append_only BEFORE UPDATE OR DELETE ON process_events
    FOR EACH ROW EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER process_events_no_truncate BEFORE TRUNCATE ON process_events
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER policy_profiles_append_only BEFORE UPDATE OR DELETE ON policy_profiles
    FOR EACH ROW EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER policy_profiles_no_truncate BEFORE TRUNCATE ON policy_profiles
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER uncertain_settlements_append_only BEFORE UPDATE OR DELETE ON uncertain_settlements
    FOR EACH ROW EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER uncertain_settlements_no_truncate BEFORE TRUNCATE ON uncertain_settlements
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER step_records_append_only BEFORE UPDATE OR DELETE ON step_records
    FOR EACH ROW EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER step_records_no_truncate BEFORE TRUNCATE ON step_records
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_append_only();

-- Versions of checkpoints and steps of step records are contiguous per run. The store checks
-- it first (with its own message); these triggers keep the rule for any other writer. Two
-- concurrent inserts of the same next number meet the primary key instead.
CREATE FUNCTION airlock_checkpoint_contiguous() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.version <> 1 + COALESCE((SELECT MAX(version) FROM checkpoints
                                    WHERE run_id = NEW.run_id), 0) THEN
        RAISE EXCEPTION 'checkpoints: versions are contiguous (not contiguous)'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER checkpoints_versions_contiguous BEFORE INSERT ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION airlock_checkpoint_contiguous();

CREATE FUNCTION airlock_step_record_contiguous() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.step <> 1 + COALESCE((SELECT MAX(step) FROM step_records
                                 WHERE run_id = NEW.run_id), 0) THEN
        RAISE EXCEPTION 'step_records: steps are contiguous (not contiguous)'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER step_records_contiguous BEFORE INSERT ON step_records
    FOR EACH ROW EXECUTE FUNCTION airlock_step_record_contiguous();
