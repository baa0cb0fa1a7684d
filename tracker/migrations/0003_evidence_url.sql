-- alpha tracker schema, migration 3: evidence attached from a stream store keeps its URL.
--
-- `alpha observe attach URL` (s3:// or file://, observe/store.py) fetches the
-- stream, verifying it, and records the URL here; `audit` re-fetches from it,
-- so a tracker on another machine audits with no local copies. NULL for a
-- stream attached from a local path. Immutable like every evidence column
-- (the evidence_update trigger refuses any edit).

ALTER TABLE evidence ADD COLUMN url TEXT CHECK (url IS NULL OR url LIKE 's3://%' OR url LIKE 'file://%');
