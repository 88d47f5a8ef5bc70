-- V4 (the SQLite store's M6): `runs list` pages a tenant's runs newest first.
CREATE INDEX ix_runs_tenant_created ON runs (tenant_id, created_at, id);
