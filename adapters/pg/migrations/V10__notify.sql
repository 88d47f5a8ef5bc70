-- V10 (issue 32 item 1; the SQLite store's M12): each tenant's notification targets with their
-- delivery cursor, and the lease that lets one process at a time deliver a tenant's
-- notifications. A target is never deleted (it is the record of where notifications went); only
-- its removal, once, and its progress change.
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
    created_at     BIGINT  NOT NULL,
    removed_at     BIGINT,
    after_event_id BIGINT  NOT NULL
        CONSTRAINT ck_notify_targets_after CHECK (after_event_id >= 0),
    attempts       BIGINT  NOT NULL
        CONSTRAINT ck_notify_targets_attempts CHECK (attempts >= 0),
    retry_at       BIGINT
);
CREATE INDEX ix_notify_targets_tenant ON notify_targets (tenant_id, created_at, id);

CREATE FUNCTION airlock_notify_target_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'notify_targets: only removal, once, and delivery progress change'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RAISE EXCEPTION 'notify_targets are kept: remove a target instead'
        USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER notify_targets_only_removal_and_progress BEFORE UPDATE ON notify_targets
    FOR EACH ROW
    WHEN (NEW.id IS DISTINCT FROM OLD.id OR NEW.tenant_id IS DISTINCT FROM OLD.tenant_id
          OR NEW.url IS DISTINCT FROM OLD.url OR NEW.events IS DISTINCT FROM OLD.events
          OR NEW.format IS DISTINCT FROM OLD.format OR NEW.secret IS DISTINCT FROM OLD.secret
          OR NEW.label IS DISTINCT FROM OLD.label
          OR NEW.created_by IS DISTINCT FROM OLD.created_by
          OR NEW.created_at IS DISTINCT FROM OLD.created_at
          OR (OLD.removed_at IS NOT NULL AND NEW.removed_at IS DISTINCT FROM OLD.removed_at))
    EXECUTE FUNCTION airlock_notify_target_change();
CREATE TRIGGER notify_targets_no_delete BEFORE DELETE ON notify_targets
    FOR EACH ROW EXECUTE FUNCTION airlock_notify_target_change();
CREATE TRIGGER notify_targets_no_truncate BEFORE TRUNCATE ON notify_targets
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_append_only();

CREATE TABLE notify_leases (
    tenant_id  TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_at BIGINT  NOT NULL
);
