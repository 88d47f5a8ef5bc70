-- V11 (issue 33): every taken derivation key of one subject — the text after the key's first
-- `:`, an invocation, an approval or a refused call — in one index read. A write transaction
-- reads them once per subject, so that its later appends of that subject are known to be new
-- and can be sent without waiting for an answer (`appends` in the store's source).
CREATE INDEX ix_events_key_subject
    ON events ((substr(derivation_key, strpos(derivation_key, ':') + 1)))
    WHERE derivation_key IS NOT NULL;
