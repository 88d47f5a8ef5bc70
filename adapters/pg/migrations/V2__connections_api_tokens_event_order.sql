-- V2: what Part II added to the store after V1, in PostgreSQL's dialect: gateway connections
-- (SPEC §19.4, the SQLite store's M3), API tokens (SPEC §20, its M4), and the functions that
-- keep the tenant-wide event tail in commit order (SPEC §20's stream; see below).

-- Gateway connections: one per session (`uq_connections_session`); `alive_until` is set exactly
-- while open, `closed_at` and `close_reason` exactly while closed. A closed connection never
-- changes, and no connection is deleted: the store checks first (with its own message), the
-- trigger keeps the rule for any other writer.
CREATE TABLE connections (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant_id    TEXT    NOT NULL,
    principal_id TEXT    NOT NULL,
    session_id   TEXT    NOT NULL REFERENCES sessions (id),
    gateway_id   TEXT    NOT NULL,
    status       TEXT    NOT NULL
        CONSTRAINT ck_connections_status CHECK (status IN ('open', 'closed')),
    alive_until  BIGINT,
    closed_at    BIGINT,
    close_reason TEXT
        CONSTRAINT ck_connections_close_reason
            CHECK (close_reason IS NULL OR close_reason IN ('disconnected', 'expired')),
    opened_at    BIGINT  NOT NULL,
    CONSTRAINT ck_connections_alive_iff_open CHECK ((status = 'open') = (alive_until IS NOT NULL)),
    CONSTRAINT ck_connections_closed_iff_closed
        CHECK ((status = 'closed') = (closed_at IS NOT NULL AND close_reason IS NOT NULL))
);
CREATE UNIQUE INDEX uq_connections_session ON connections (session_id);
CREATE INDEX ix_connections_alive_until ON connections (alive_until, id) WHERE status = 'open';

CREATE FUNCTION airlock_connection_change() RETURNS trigger LANGUAGE plpgsql AS $$
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
       OR NEW.opened_at IS DISTINCT FROM OLD.opened_at THEN
        RAISE EXCEPTION 'connections: an immutable field of connection % changed', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER connections_guarded BEFORE UPDATE OR DELETE ON connections
    FOR EACH ROW EXECUTE FUNCTION airlock_connection_change();

-- API tokens: only the SHA-256 of a token is stored. Rows are never deleted and only
-- `revoked_at` ever changes, once: the table is the record of who could act through the HTTP
-- API, and when.
CREATE TABLE api_tokens (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant_id    TEXT    NOT NULL,
    principal_id TEXT    NOT NULL,
    scopes       TEXT    NOT NULL,
    token_sha256 TEXT    NOT NULL
        CONSTRAINT ck_api_tokens_token_sha256 CHECK (length(token_sha256) = 64),
    label        TEXT,
    created_at   BIGINT  NOT NULL,
    expires_at   BIGINT,
    revoked_at   BIGINT,
    CONSTRAINT uq_api_tokens_token_sha256 UNIQUE (token_sha256)
);
CREATE INDEX ix_api_tokens_tenant ON api_tokens (tenant_id, created_at, id);

CREATE FUNCTION airlock_api_token_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'api_tokens: only revoked_at changes, and only once'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RAISE EXCEPTION 'api_tokens are kept: revoke a token instead'
        USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER api_tokens_only_revocation BEFORE UPDATE ON api_tokens
    FOR EACH ROW
    WHEN (OLD.revoked_at IS NOT NULL OR NEW.revoked_at IS NULL
          OR NEW.id IS DISTINCT FROM OLD.id OR NEW.tenant_id IS DISTINCT FROM OLD.tenant_id
          OR NEW.principal_id IS DISTINCT FROM OLD.principal_id
          OR NEW.scopes IS DISTINCT FROM OLD.scopes
          OR NEW.token_sha256 IS DISTINCT FROM OLD.token_sha256
          OR NEW.label IS DISTINCT FROM OLD.label
          OR NEW.created_at IS DISTINCT FROM OLD.created_at
          OR NEW.expires_at IS DISTINCT FROM OLD.expires_at)
    EXECUTE FUNCTION airlock_api_token_change();
CREATE TRIGGER api_tokens_no_delete BEFORE DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION airlock_api_token_change();
CREATE TRIGGER api_tokens_no_truncate BEFORE TRUNCATE ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_append_only();

-- Event ids in commit order (the tenant tail of SPEC §20 must have no gaps).
--
-- `events.id` comes from the identity sequence when the row is inserted, and transactions on
-- different sessions commit in any order: a reader could see id 11 committed while id 10 is
-- still in flight, move its cursor past 11, and never see 10. Writers are not serialized to
-- prevent it; instead, a reader never returns an id that a transaction still in flight could
-- fill in below it:
--
-- * A write transaction, before it takes its first event id, REGISTERS: it takes the advisory
--   transaction lock (this schema's event space, its backend pid), exclusive, held until it
--   commits or rolls back (`airlock_event_register`). No two backends share a pid, so no
--   writer ever waits for another.
-- * A tail read first computes a HORIZON (`airlock_event_horizon`): the sequence's last value
--   L, then every backend registered at that moment (pg_locks), then it waits for each of
--   their transactions to end. Every id <= L was taken by a transaction that registered before
--   L was read, so it was in pg_locks when looked at, or had already ended; once the waits are
--   over, each id <= L is committed or will never be. The read then takes its snapshot and
--   returns ids up to L only. Later ids wait for the next read.
--
-- The wait takes the writer's lock shared inside a subtransaction that is rolled back at once,
-- which releases it: a reader holds nothing afterwards, and a writer's next transaction never
-- waits on a reader for longer than that instant. A writer stuck in an open transaction stalls
-- tail reads, which give up with an error after `lock_timeout` (10 s) rather than hang.
-- The sequence must hand out increasing values across sessions (CACHE 1, NO CYCLE: the
-- defaults; the schema check lists both).

-- The advisory-lock key space of this schema's event writers: one per schema, so deployments
-- (and tests) in other schemas of the database do not wait for each other. Two schemas whose
-- names hash alike only wait longer, never skip.
CREATE FUNCTION airlock_event_space() RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT hashtext('airlock.events.' || current_schema())
$$;

CREATE FUNCTION airlock_event_register() RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_advisory_xact_lock(airlock_event_space(), pg_backend_pid())
$$;

CREATE FUNCTION airlock_event_horizon() RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET lock_timeout = '10s' AS $$
DECLARE
    space  integer := airlock_event_space();
    last   bigint;
    writer integer;
BEGIN
    SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END INTO last
      FROM events_id_seq;
    FOR writer IN
        SELECT l.objid::bigint::integer
          FROM pg_locks l
         WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND l.classid::bigint = (space::bigint & 4294967295)
           AND l.pid IS DISTINCT FROM pg_backend_pid()
    LOOP
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(space, writer);
            RAISE SQLSTATE 'AL001';
        EXCEPTION WHEN SQLSTATE 'AL001' THEN
            NULL;
        END;
    END LOOP;
    RETURN last;
END;
$$;
