-- V9 (issue 32 item 3; the SQLite store's M11): each call keeps its whole proposed action, so
-- `policy replay` decides it again. The tool's target kind joins the fields the row already had
-- (NULL on rows written before), and calls are read in creation order across tenants.
ALTER TABLE tool_invocations ADD COLUMN target_kind TEXT;
-- Ids compare in byte order (COLLATE "C"), as the paging query orders them, whatever the
-- database's collation.
CREATE INDEX ix_tool_invocations_created ON tool_invocations (created_at, id COLLATE "C");
