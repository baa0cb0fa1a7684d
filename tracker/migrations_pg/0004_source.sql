-- alpha tracker schema for PostgreSQL, migration 4: tracker/migrations/0004_source.sql
-- in PL/pgSQL. evidence.source_commit (the commit the stream's stream.open names),
-- and evidence_insert with one rule more, the last: when the run names a commit
-- (its CI job's), the stream was recorded at it (tracker-evidence-source).

ALTER TABLE evidence ADD COLUMN source_commit TEXT;

-- Evidence, in order: an id is never replaced; a stream id keeps its first seal head and
-- file digest; one run per stream; the same unchanged stream on the same run is a no-op;
-- the run exists and is running; a sealed verdict; a trusted signer when keys are held;
-- the gate is the run's lane; recorded at or after the run started; observed on every
-- device the run names; recorded at the run's commit when it names one.
CREATE OR REPLACE FUNCTION evidence_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM evidence WHERE id = NEW.id) THEN
        PERFORM tracker_refuse('tracker-exists: this evidence id is taken (a row is never replaced)');
    END IF;
    IF EXISTS (SELECT 1 FROM evidence e WHERE e.stream_id = NEW.stream_id
               AND (e.seal_head <> NEW.seal_head OR e.file_digest <> NEW.file_digest)) THEN
        PERFORM tracker_refuse('tracker-stream-changed: this stream was attached before with a different seal or file digest');
    END IF;
    IF EXISTS (SELECT 1 FROM evidence e WHERE e.stream_id = NEW.stream_id AND e.run_id <> NEW.run_id) THEN
        PERFORM tracker_refuse('tracker-stream-attached: this stream is already evidence for another run');
    END IF;
    IF EXISTS (SELECT 1 FROM evidence e WHERE e.stream_id = NEW.stream_id) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such run');
    END IF;
    IF (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    IF NEW.verdict IS NULL OR NEW.scope IS NULL OR NEW.gate IS NULL THEN
        PERFORM tracker_refuse('stream-verdict: evidence is a stream with one well-formed sealed verdict (gate, verdict, scope)');
    END IF;
    IF EXISTS (SELECT 1 FROM trusted_keys)
       AND (NEW.signed = 0 OR NOT EXISTS (SELECT 1 FROM trusted_keys k WHERE k.key_id = NEW.key_id)) THEN
        PERFORM tracker_refuse('tracker-key-untrusted: the tracker holds trusted keys and this stream is not signed by one of them');
    END IF;
    IF NEW.gate IS DISTINCT FROM (SELECT lane FROM runs WHERE id = NEW.run_id) THEN
        PERFORM tracker_refuse('tracker-evidence-lane: the stream''s gate is not the run''s lane');
    END IF;
    IF NEW.recorded_at IS NULL OR NEW.recorded_at < (SELECT started_at FROM runs WHERE id = NEW.run_id) THEN
        PERFORM tracker_refuse('tracker-evidence-time: the stream was recorded before the run started');
    END IF;
    IF NEW.devices IS NULL OR NOT json_valid(NEW.devices) OR EXISTS (
        SELECT 1 FROM run_devices rd JOIN devices d ON d.id = rd.device_id
        WHERE rd.run_id = NEW.run_id AND NOT EXISTS (
            SELECT 1 FROM json_each(CASE WHEN json_valid(NEW.devices) THEN NEW.devices ELSE '[]' END) j
            WHERE j.value = d.uuid)) THEN
        PERFORM tracker_refuse('tracker-evidence-devices: the stream was not observed on every device the run names');
    END IF;
    IF (SELECT ci_commit FROM runs WHERE id = NEW.run_id) IS NOT NULL
       AND (NEW.source_commit IS NULL
            OR lower(NEW.source_commit) <> lower((SELECT ci_commit FROM runs WHERE id = NEW.run_id))) THEN
        PERFORM tracker_refuse('tracker-evidence-source: the stream was not recorded at the run''s commit');
    END IF;
    RETURN NEW;
END
$$;
