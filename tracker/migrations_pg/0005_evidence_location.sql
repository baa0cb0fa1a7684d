-- alpha tracker schema for PostgreSQL, migration 5: a stream's store location can
-- be added (tracker/migrations/0005_evidence_location.sql says why). Only `url`
-- may change, to a store URL whose name is the row's own file digest, on a
-- finished run too; every other column is compared, one by one.

CREATE OR REPLACE FUNCTION evidence_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    location_only boolean := NEW.id IS NOT DISTINCT FROM OLD.id AND NEW.run_id IS NOT DISTINCT FROM OLD.run_id
        AND NEW.stream_id IS NOT DISTINCT FROM OLD.stream_id AND NEW.path IS NOT DISTINCT FROM OLD.path
        AND NEW.seal_head IS NOT DISTINCT FROM OLD.seal_head AND NEW.file_digest IS NOT DISTINCT FROM OLD.file_digest
        AND NEW.size IS NOT DISTINCT FROM OLD.size AND NEW.events IS NOT DISTINCT FROM OLD.events
        AND NEW.verdict IS NOT DISTINCT FROM OLD.verdict AND NEW.scope IS NOT DISTINCT FROM OLD.scope
        AND NEW.gate IS NOT DISTINCT FROM OLD.gate AND NEW.signed IS NOT DISTINCT FROM OLD.signed
        AND NEW.key_id IS NOT DISTINCT FROM OLD.key_id AND NEW.recorded_at IS NOT DISTINCT FROM OLD.recorded_at
        AND NEW.devices IS NOT DISTINCT FROM OLD.devices AND NEW.attached_at IS NOT DISTINCT FROM OLD.attached_at
        AND NEW.source_commit IS NOT DISTINCT FROM OLD.source_commit
        AND NEW.url IS NOT NULL AND NEW.url IS DISTINCT FROM OLD.url;
BEGIN
    IF NOT location_only AND (SELECT state FROM runs WHERE id = OLD.run_id) IS DISTINCT FROM 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    IF NOT location_only THEN
        PERFORM tracker_refuse('tracker-evidence-immutable: attached evidence is never edited (only a store URL can be added)');
    END IF;
    IF right(NEW.url, 69) IS DISTINCT FROM '/' || OLD.file_digest || '.aos' THEN
        PERFORM tracker_refuse('tracker-stream-changed: a store URL names its stream''s file digest (STORE/<file_digest>.aos); this one names other bytes');
    END IF;
    RETURN NEW;
END
$$;
