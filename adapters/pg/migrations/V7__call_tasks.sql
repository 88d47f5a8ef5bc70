-- V7 (SPEC §22.3 item 1; the SQLite store's M9): approval tasks. A row binds the SHA-256 of a
-- task id (the client holds the id; the store never does) to its call run, one task per run,
-- with the tenant and principal every `tasks/*` request is checked against. Rows never change
-- or go (the task's status is its run's), so the table is append-only like the audit tables.
CREATE TABLE call_tasks (
    id_sha256    TEXT   NOT NULL PRIMARY KEY
        CONSTRAINT ck_call_tasks_id_sha256 CHECK (length(id_sha256) = 64),
    run_id       TEXT   NOT NULL REFERENCES runs (id),
    tenant_id    TEXT   NOT NULL,
    principal_id TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    CONSTRAINT uq_call_tasks_run UNIQUE (run_id)
);
CREATE TRIGGER call_tasks_append_only BEFORE UPDATE OR DELETE ON call_tasks
    FOR EACH ROW EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER call_tasks_no_truncate BEFORE TRUNCATE ON call_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_append_only();
