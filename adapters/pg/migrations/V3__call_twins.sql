-- V3 (SPEC §19.7, the SQLite store's M5): the repeat check of every call (`StoreTx::twins`)
-- looks up the tenant's RUNNING and UNCERTAIN invocations of one tool and effective arguments
-- hash inside the call's first transaction; a partial index keeps that lookup to those rows,
-- however long the tenant's history grows.
CREATE INDEX ix_tool_invocations_twins ON tool_invocations
    (tenant_id, tool_name, effective_arguments_hash) WHERE status IN ('RUNNING', 'UNCERTAIN');
