-- V6 (SPEC §22.1, §23; the SQLite store's M8): a sessionless 2026-07-28 HTTP conversation is the
-- connection row of its key (the hash of principal, token id and client name), which any
-- gateway process of the store joins. `uq_connections_open_key` keeps one open row per tenant
-- and key, so two processes opening the key's conversation at once cannot both commit (the
-- second's insert waits for the first and fails; it retries and joins). Existing rows are
-- connections of their own (NULL key), which the index leaves out.
--
-- The key never changes once written: `airlock_connection_change` gains it among the
-- immutable fields.
ALTER TABLE connections
    ADD COLUMN conversation_key TEXT,
    ADD CONSTRAINT ck_connections_conversation_key
        CHECK (conversation_key IS NULL OR length(conversation_key) = 64);
CREATE UNIQUE INDEX uq_connections_open_key ON connections (tenant_id, conversation_key)
    WHERE status = 'open' AND conversation_key IS NOT NULL;

CREATE OR REPLACE FUNCTION airlock_connection_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'connections are kept: close a connection instead'
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF OLD.status = 'closed' THEN
        RAISE EXCEPTION 'connections: closed connection % never changes', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id OR NEW.tenant_id IS DISTINCT FROM OLD.tenant_id
       OR NEW.principal_id IS DISTINCT FROM OLD.principal_id
       OR NEW.session_id IS DISTINCT FROM OLD.session_id
       OR NEW.gateway_id IS DISTINCT FROM OLD.gateway_id
       OR NEW.opened_at IS DISTINCT FROM OLD.opened_at
       OR NEW.conversation_key IS DISTINCT FROM OLD.conversation_key THEN
        RAISE EXCEPTION 'connections: an immutable field of connection % changed', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$;
