-- alpha tracker schema, migration 5: a stream's store location can be added.
--
-- A stream attached from a path (the runner's file) and pushed to a store after
-- can be given its store URL (`alpha observe attach URL --run RUN` again), so
-- `audit` re-fetches it from the store once the runner's files are gone; a
-- stream's URL can also be moved to another store. It is the only edit evidence
-- ever takes, on a finished run too, since it changes nothing the evidence says:
-- the URL must name the row's own file digest (STORE/<file_digest>.aos), and a
-- store only serves, under that name, bytes whose BLAKE3 it is (fetch checks
-- every byte). So no client, a plain SQL one included, can point evidence at
-- other bytes. Every column but `url` is compared, one by one.

DROP TRIGGER IF EXISTS evidence_update;

-- Rules, in order: only `url` may change (terminal run: tracker-run-immutable;
-- else tracker-evidence-immutable), to a store URL whose name is the row's file
-- digest (tracker-stream-changed otherwise).
CREATE TRIGGER evidence_update BEFORE UPDATE ON evidence
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running'
      AND NOT (NEW.id IS OLD.id AND NEW.run_id IS OLD.run_id AND NEW.stream_id IS OLD.stream_id
               AND NEW.path IS OLD.path AND NEW.seal_head IS OLD.seal_head AND NEW.file_digest IS OLD.file_digest
               AND NEW.size IS OLD.size AND NEW.events IS OLD.events AND NEW.verdict IS OLD.verdict
               AND NEW.scope IS OLD.scope AND NEW.gate IS OLD.gate AND NEW.signed IS OLD.signed
               AND NEW.key_id IS OLD.key_id AND NEW.recorded_at IS OLD.recorded_at AND NEW.devices IS OLD.devices
               AND NEW.attached_at IS OLD.attached_at AND NEW.source_commit IS OLD.source_commit
               AND NEW.url IS NOT NULL AND NEW.url IS NOT OLD.url);
    SELECT RAISE(ABORT, 'tracker-evidence-immutable: attached evidence is never edited (only a store URL can be added)')
    WHERE NOT (NEW.id IS OLD.id AND NEW.run_id IS OLD.run_id AND NEW.stream_id IS OLD.stream_id
               AND NEW.path IS OLD.path AND NEW.seal_head IS OLD.seal_head AND NEW.file_digest IS OLD.file_digest
               AND NEW.size IS OLD.size AND NEW.events IS OLD.events AND NEW.verdict IS OLD.verdict
               AND NEW.scope IS OLD.scope AND NEW.gate IS OLD.gate AND NEW.signed IS OLD.signed
               AND NEW.key_id IS OLD.key_id AND NEW.recorded_at IS OLD.recorded_at AND NEW.devices IS OLD.devices
               AND NEW.attached_at IS OLD.attached_at AND NEW.source_commit IS OLD.source_commit
               AND NEW.url IS NOT NULL AND NEW.url IS NOT OLD.url);
    SELECT RAISE(ABORT, 'tracker-stream-changed: a store URL names its stream''s file digest (STORE/<file_digest>.aos); this one names other bytes')
    WHERE substr(NEW.url, -69) IS NOT '/' || OLD.file_digest || '.aos';
END;
