-- V5 (SPEC §22.1, §22.2; the SQLite store's M7): a connection row is also the MCP
-- conversation, the unit of taint and `[limits]`, and every `tools/call` becomes its own run
-- (`planner_kind = 'mcp'`) in the conversation's session, so several of them are active at once.
--
-- In place: the new columns are added, existing connections get the values of a conversation
-- that has seen no call since it opened (untainted, no calls, last seen when it opened), and
-- only then is `last_seen_at` made NOT NULL. The fill is the one write a closed connection ever
-- gets, so `connections_guarded` (which refuses any change of a closed row) is off for exactly
-- that statement, inside this migration's transaction. `airlock_connection_change` itself needs
-- no change: the new columns are mutable while the connection is open, and a closed one still
-- never changes.
ALTER TABLE connections
    ADD COLUMN tainted_at   BIGINT,
    ADD COLUMN tainted_by   TEXT,
    ADD COLUMN call_count   BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN last_seen_at BIGINT,
    ADD CONSTRAINT ck_connections_taint_together
        CHECK ((tainted_at IS NULL) = (tainted_by IS NULL)),
    ADD CONSTRAINT ck_connections_call_count CHECK (call_count >= 0);
ALTER TABLE connections DISABLE TRIGGER connections_guarded;
UPDATE connections SET last_seen_at = opened_at;
ALTER TABLE connections ENABLE TRIGGER connections_guarded;
ALTER TABLE connections ALTER COLUMN last_seen_at SET NOT NULL;
-- `connections_of_tenant`, newest first (a backward scan).
CREATE INDEX ix_connections_tenant_opened ON connections (tenant_id, opened_at, id);

-- One active run per session, except a conversation's call runs: a non-mcp run still conflicts
-- with another non-mcp active run of its session. Same name, so a violation's message still
-- names the rule. `active_runs_in_session` can no longer use it (its WHERE no longer implies
-- the index's), so `ix_runs_active_by_session` serves that lookup, in the answer's order.
DROP INDEX uq_runs_one_active_per_session;
CREATE UNIQUE INDEX uq_runs_one_active_per_session ON runs (session_id)
    WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') AND planner_kind <> 'mcp';
CREATE INDEX ix_runs_active_by_session ON runs (session_id, created_at, id)
    WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED');
