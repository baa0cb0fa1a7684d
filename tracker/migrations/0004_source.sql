-- alpha tracker schema, migration 4: evidence names the commit it describes.
--
-- * `evidence.source_commit`: the commit the recorder recorded in the stream's
--   stream.open (`source.commit`; null when the stream names none: recorded
--   outside a git repository, or by a recorder that did not record sources).
--   Derived from the verified stream like every evidence column; rows attached
--   before this migration have it null ("not recorded").
-- * evidence_insert is created again with one rule more, the last: when the
--   run names a commit (its CI job's), the stream must have been recorded at
--   that commit (tracker-evidence-source). Every other rule is migration 3's.

ALTER TABLE evidence ADD COLUMN source_commit TEXT;

DROP TRIGGER IF EXISTS evidence_insert;

-- Rules, in order: an evidence id is never replaced; a stream id keeps its
-- first seal head and file digest; a stream is evidence for one run; the same
-- unchanged stream on the same run is a no-op; the run exists and is
-- running; the stream has a sealed verdict (gate, verdict, scope); with
-- trusted keys, it is signed by one. Evidence belongs to its run: its gate is
-- the run's lane; it was recorded (stream.open) at or after the run started;
-- it was observed on every device the run names; when the run names a commit,
-- it was recorded at that commit.
CREATE TRIGGER evidence_insert BEFORE INSERT ON evidence
BEGIN
    SELECT RAISE(ABORT, 'tracker-exists: this evidence id is taken (a row is never replaced)')
    WHERE EXISTS (SELECT 1 FROM evidence WHERE id = NEW.id);
    SELECT RAISE(ABORT, 'tracker-stream-changed: this stream was attached before with a different seal or file digest')
    WHERE EXISTS (SELECT 1 FROM evidence e WHERE e.stream_id = NEW.stream_id
                  AND (e.seal_head <> NEW.seal_head OR e.file_digest <> NEW.file_digest));
    SELECT RAISE(ABORT, 'tracker-stream-attached: this stream is already evidence for another run')
    WHERE EXISTS (SELECT 1 FROM evidence e WHERE e.stream_id = NEW.stream_id AND e.run_id <> NEW.run_id);
    SELECT RAISE(IGNORE)
    WHERE EXISTS (SELECT 1 FROM evidence e WHERE e.stream_id = NEW.stream_id);
    SELECT RAISE(ABORT, 'tracker-unknown: no such run')
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id);
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running';
    SELECT RAISE(ABORT, 'stream-verdict: evidence is a stream with one well-formed sealed verdict (gate, verdict, scope)')
    WHERE NEW.verdict IS NULL OR NEW.scope IS NULL OR NEW.gate IS NULL;
    SELECT RAISE(ABORT, 'tracker-key-untrusted: the tracker holds trusted keys and this stream is not signed by one of them')
    WHERE EXISTS (SELECT 1 FROM trusted_keys)
      AND (NEW.signed = 0 OR NOT EXISTS (SELECT 1 FROM trusted_keys k WHERE k.key_id = NEW.key_id));
    SELECT RAISE(ABORT, 'tracker-evidence-lane: the stream''s gate is not the run''s lane')
    WHERE NEW.gate IS NOT (SELECT lane FROM runs WHERE id = NEW.run_id);
    SELECT RAISE(ABORT, 'tracker-evidence-time: the stream was recorded before the run started')
    WHERE NEW.recorded_at IS NULL OR NEW.recorded_at < (SELECT started_at FROM runs WHERE id = NEW.run_id);
    SELECT RAISE(ABORT, 'tracker-evidence-devices: the stream was not observed on every device the run names')
    WHERE NEW.devices IS NULL OR NOT json_valid(NEW.devices) OR EXISTS (
        SELECT 1 FROM run_devices rd JOIN devices d ON d.id = rd.device_id
        WHERE rd.run_id = NEW.run_id AND NOT EXISTS (
            SELECT 1 FROM json_each(CASE WHEN json_valid(NEW.devices) THEN NEW.devices ELSE '[]' END) j
            WHERE j.value = d.uuid));
    SELECT RAISE(ABORT, 'tracker-evidence-source: the stream was not recorded at the run''s commit')
    WHERE (SELECT ci_commit FROM runs WHERE id = NEW.run_id) IS NOT NULL
      AND (NEW.source_commit IS NULL
           OR lower(NEW.source_commit) <> lower((SELECT ci_commit FROM runs WHERE id = NEW.run_id)));
END;
