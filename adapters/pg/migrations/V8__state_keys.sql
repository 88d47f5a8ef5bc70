-- V8 (SPEC §22.3 item 2; the SQLite store's M10): the keys `requestState`s are sealed with, so
-- any gateway process of the store opens a state another sealed. Keys never change or go (a
-- rotated key still opens the states it sealed, which expire with their approvals), so the
-- table is append-only like the audit tables.
CREATE TABLE state_keys (
    id         TEXT   NOT NULL PRIMARY KEY,
    secret_hex TEXT   NOT NULL
        CONSTRAINT ck_state_keys_secret CHECK (length(secret_hex) = 64),
    created_at BIGINT NOT NULL
);
CREATE INDEX ix_state_keys_created ON state_keys (created_at, id);
CREATE TRIGGER state_keys_append_only BEFORE UPDATE OR DELETE ON state_keys
    FOR EACH ROW EXECUTE FUNCTION airlock_append_only();
CREATE TRIGGER state_keys_no_truncate BEFORE TRUNCATE ON state_keys
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_append_only();
