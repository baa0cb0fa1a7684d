-- alpha tracker schema for PostgreSQL, migration 3: tracker/migrations/0003_integrity.sql
-- in PL/pgSQL. Text run ids (UUIDv7; old numbers kept as legacy_id), the CI job
-- of a run, evidence url/recorded_at/devices, the journal, evidence that belongs
-- to its run, evidence never removed, no row ever replaced. As there, every rule
-- trigger of migrations 1 and 2 is dropped and the whole set created again, each
-- under its SQLite namesake and raising the same `NAME: detail`.
--
-- PostgreSQL has no REPLACE conflict resolution (ON CONFLICT DO UPDATE fires the
-- update triggers), but the "never replaced" checks are kept so that a taken key
-- gets the same refusal, tracker-exists, from both backends. Integer ids are
-- SQLite's "largest + 1" (the <table>_id_default triggers; writers are serialised
-- by the lock row), so a row inserted with an explicit id never makes a later
-- insert collide. json_valid(text) and json_each(text) are SQLite's, for the
-- rules and the audit queries that read evidence.devices (a JSON array as text).

-- ---------------------------------------------------------------------------
-- The rules of migrations 1 and 2 go; the write lock and TRUNCATE guards stay.
-- ---------------------------------------------------------------------------

DROP TRIGGER items_milestone_known_insert ON items;
DROP TRIGGER items_milestone_known_update ON items;
DROP TRIGGER items_id_fixed ON items;
DROP TRIGGER items_verified_insert ON items;
DROP TRIGGER items_verified_update ON items;
DROP TRIGGER items_delete ON items;
DROP TRIGGER item_deps_insert ON item_deps;
DROP TRIGGER item_deps_update ON item_deps;
DROP TRIGGER item_evidence_insert ON item_evidence;
DROP TRIGGER item_evidence_update ON item_evidence;
DROP TRIGGER item_evidence_delete ON item_evidence;
DROP TRIGGER devices_update ON devices;
DROP TRIGGER devices_delete ON devices;
DROP TRIGGER experiments_delete ON experiments;
DROP TRIGGER experiments_update_id ON experiments;
DROP TRIGGER experiments_item_known ON experiments;
DROP TRIGGER trusted_keys_update ON trusted_keys;
DROP TRIGGER trusted_keys_delete ON trusted_keys;
DROP TRIGGER milestones_delete ON milestones;
DROP TRIGGER milestones_update_id ON milestones;
-- (the triggers on runs, run_devices, evidence and measurements go with their tables below)

DROP FUNCTION items_milestone_known();
DROP FUNCTION items_id_fixed();
DROP FUNCTION items_verified_insert();
DROP FUNCTION items_verified_update();
DROP FUNCTION items_delete();
DROP FUNCTION item_deps_insert();
DROP FUNCTION item_deps_update();
DROP FUNCTION item_evidence_insert();
DROP FUNCTION item_evidence_update();
DROP FUNCTION item_evidence_delete();
DROP FUNCTION devices_update();
DROP FUNCTION devices_delete();
DROP FUNCTION experiments_delete();
DROP FUNCTION experiments_update_id();
DROP FUNCTION experiments_item_known();
DROP FUNCTION trusted_keys_update();
DROP FUNCTION trusted_keys_delete();
DROP FUNCTION milestones_delete();
DROP FUNCTION milestones_update_id();

-- ---------------------------------------------------------------------------
-- SQLite's JSON helpers, as the rules use them
-- ---------------------------------------------------------------------------

CREATE FUNCTION json_valid(doc text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM doc::jsonb;
    RETURN doc IS NOT NULL;
EXCEPTION WHEN others THEN
    RETURN false;
END
$$;

CREATE FUNCTION json_each(doc text) RETURNS TABLE (value text) LANGUAGE sql IMMUTABLE AS $$
    SELECT e.value FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(doc::jsonb) = 'array' THEN doc::jsonb ELSE '[]'::jsonb END) AS e(value)
    UNION ALL
    SELECT o.value FROM jsonb_each_text(CASE WHEN jsonb_typeof(doc::jsonb) = 'object' THEN doc::jsonb ELSE '{}'::jsonb END) AS o(key, value)
$$;

-- Integer ids: the largest + 1 when none is given (SQLite's INTEGER PRIMARY KEY).
CREATE FUNCTION tracker_next_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS NULL THEN
        EXECUTE format('SELECT coalesce(max(id), 0) + 1 FROM %I', TG_TABLE_NAME) INTO NEW.id;
    END IF;
    RETURN NEW;
END
$$;

ALTER TABLE experiments ALTER COLUMN id DROP IDENTITY;
ALTER TABLE devices ALTER COLUMN id DROP IDENTITY;

-- ---------------------------------------------------------------------------
-- Tables rebuilt with text run ids
-- ---------------------------------------------------------------------------

CREATE TABLE runs_v3 (
    id             text COLLATE "C" PRIMARY KEY CHECK (
                       length(id) = 36 AND id !~ '[^0-9a-f-]'
                       AND substr(id, 9, 1) = '-' AND substr(id, 14, 1) = '-'
                       AND substr(id, 19, 1) = '-' AND substr(id, 24, 1) = '-'),
    legacy_id      bigint UNIQUE,
    experiment_id  bigint REFERENCES experiments(id),
    lane           text,
    state          text NOT NULL DEFAULT 'running'
                   CHECK (state IN ('running', 'completed', 'failed', 'inconclusive')),
    physical_pass  integer NOT NULL DEFAULT 0 CHECK (physical_pass IN (0, 1)),
    note           text,
    started_at     text NOT NULL DEFAULT tracker_now(),
    finished_at    text,
    ci_provider    text CHECK (ci_provider IN ('github', 'gitlab', 'buildkite')),
    ci_job_url     text,
    ci_commit      text,
    CHECK (ci_provider IS NOT NULL OR (ci_job_url IS NULL AND ci_commit IS NULL))
);

-- Old integer ids become UUIDv7 text from the start time (ms), random bits after it.
INSERT INTO runs_v3 (id, legacy_id, experiment_id, lane, state, physical_pass, note, started_at, finished_at)
SELECT lpad(to_hex(ms >> 16), 8, '0') || '-' || lpad(to_hex(ms & 65535), 4, '0') || '-7'
       || lpad(to_hex(floor(random() * 4096)::int), 3, '0') || '-' || to_hex(32768 + floor(random() * 16384)::int)
       || '-' || lpad(to_hex(floor(random() * 281474976710656)::bigint), 12, '0'),
       id, experiment_id, lane, state, physical_pass, note, started_at, finished_at
FROM (SELECT *, coalesce(floor(extract(epoch FROM started_at::timestamptz) * 1000)::bigint, 0) AS ms FROM runs) AS old;

CREATE TABLE run_devices_v3 (
    run_id     text COLLATE "C" NOT NULL REFERENCES runs_v3(id),
    device_id  bigint NOT NULL REFERENCES devices(id),
    role       text,
    PRIMARY KEY (run_id, device_id)
);

INSERT INTO run_devices_v3 (run_id, device_id, role)
SELECT (SELECT r.id FROM runs_v3 r WHERE r.legacy_id = d.run_id), d.device_id, d.role FROM run_devices d;

CREATE TABLE evidence_v3 (
    id           bigint PRIMARY KEY CHECK (id > 0),
    run_id       text COLLATE "C" NOT NULL REFERENCES runs_v3(id),
    stream_id    text COLLATE "C" NOT NULL UNIQUE CHECK (length(stream_id) > 0),
    path         text NOT NULL,
    url          text CHECK (url IS NULL OR url LIKE 's3://%' OR url LIKE 'file://%'),
    seal_head    text NOT NULL CHECK (length(seal_head) = 64),
    file_digest  text NOT NULL CHECK (length(file_digest) = 64),
    size         bigint NOT NULL CHECK (size >= 0),
    events       bigint NOT NULL CHECK (events >= 0),
    verdict      text CHECK (verdict IN ('pass', 'fail', 'inconclusive')),
    scope        text,
    gate         text,
    signed       integer NOT NULL DEFAULT 0 CHECK (signed IN (0, 1)),
    key_id       text,
    recorded_at  text,
    devices      text,
    attached_at  text NOT NULL DEFAULT tracker_now(),
    CHECK (verdict IS NOT NULL OR scope IS NULL)
);

INSERT INTO evidence_v3 (id, run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope, gate,
                         signed, key_id, attached_at)
SELECT e.id, (SELECT r.id FROM runs_v3 r WHERE r.legacy_id = e.run_id), e.stream_id, e.path, e.seal_head,
       e.file_digest, e.size, e.events, e.verdict, e.scope, e.gate, e.signed, e.key_id, e.attached_at
FROM evidence e;

CREATE TABLE measurements_v3 (
    id           bigint PRIMARY KEY CHECK (id > 0),
    run_id       text COLLATE "C" NOT NULL REFERENCES runs_v3(id),
    name         text NOT NULL CHECK (length(name) > 0),
    value        double precision NOT NULL CHECK (abs(value) <= 1.7976931348623157e308),
    unit         text,
    recorded_at  text NOT NULL DEFAULT tracker_now()
);

INSERT INTO measurements_v3 (id, run_id, name, value, unit, recorded_at)
SELECT m.id, (SELECT r.id FROM runs_v3 r WHERE r.legacy_id = m.run_id), m.name, m.value, m.unit, m.recorded_at
FROM measurements m;

-- CASCADE: item_evidence's foreign key to the old evidence goes too (added again below).
DROP TABLE measurements, evidence, run_devices, runs CASCADE;
DROP FUNCTION runs_insert();
DROP FUNCTION runs_update();
DROP FUNCTION runs_delete();
DROP FUNCTION evidence_insert();
DROP FUNCTION evidence_update();
DROP FUNCTION evidence_delete();
DROP FUNCTION measurements_insert();
DROP FUNCTION run_part_frozen();
DROP FUNCTION run_devices_insert();
ALTER TABLE runs_v3 RENAME TO runs;
ALTER TABLE run_devices_v3 RENAME TO run_devices;
ALTER TABLE evidence_v3 RENAME TO evidence;
ALTER TABLE measurements_v3 RENAME TO measurements;
ALTER TABLE item_evidence ADD FOREIGN KEY (evidence_id) REFERENCES evidence(id);

CREATE INDEX runs_started ON runs(started_at);
CREATE INDEX runs_experiment ON runs(experiment_id);
CREATE INDEX evidence_run ON evidence(run_id);
CREATE INDEX evidence_key ON evidence(key_id);
CREATE INDEX measurements_run ON measurements(run_id);
CREATE INDEX run_devices_device ON run_devices(device_id);

-- The journal (tracker/journal.py writes it; docs/TRACKER.md).
CREATE TABLE journal (
    seq        bigint PRIMARY KEY CHECK (seq >= 0),
    prev       text NOT NULL CHECK (length(prev) = 64),
    hash       text NOT NULL UNIQUE CHECK (length(hash) = 64),
    entry      text NOT NULL,
    key_id     text,
    signature  text,
    CHECK ((key_id IS NULL) = (signature IS NULL))
);

-- ---------------------------------------------------------------------------
-- The write lock and TRUNCATE guards on the new tables, the journal and the
-- record of migrations; largest + 1 ids.
-- ---------------------------------------------------------------------------

CREATE TRIGGER runs_write_lock BEFORE INSERT OR DELETE OR UPDATE ON runs FOR EACH STATEMENT EXECUTE FUNCTION tracker_write_lock_statement();
CREATE TRIGGER run_devices_write_lock BEFORE INSERT OR DELETE OR UPDATE ON run_devices FOR EACH STATEMENT EXECUTE FUNCTION tracker_write_lock_statement();
CREATE TRIGGER evidence_write_lock BEFORE INSERT OR DELETE OR UPDATE ON evidence FOR EACH STATEMENT EXECUTE FUNCTION tracker_write_lock_statement();
CREATE TRIGGER measurements_write_lock BEFORE INSERT OR DELETE OR UPDATE ON measurements FOR EACH STATEMENT EXECUTE FUNCTION tracker_write_lock_statement();
CREATE TRIGGER journal_write_lock BEFORE INSERT OR DELETE OR UPDATE ON journal FOR EACH STATEMENT EXECUTE FUNCTION tracker_write_lock_statement();
CREATE TRIGGER schema_migrations_write_lock BEFORE INSERT OR DELETE OR UPDATE ON schema_migrations FOR EACH STATEMENT EXECUTE FUNCTION tracker_write_lock_statement();
CREATE TRIGGER runs_no_truncate BEFORE TRUNCATE ON runs FOR EACH STATEMENT EXECUTE FUNCTION tracker_no_truncate();
CREATE TRIGGER run_devices_no_truncate BEFORE TRUNCATE ON run_devices FOR EACH STATEMENT EXECUTE FUNCTION tracker_no_truncate();
CREATE TRIGGER evidence_no_truncate BEFORE TRUNCATE ON evidence FOR EACH STATEMENT EXECUTE FUNCTION tracker_no_truncate();
CREATE TRIGGER measurements_no_truncate BEFORE TRUNCATE ON measurements FOR EACH STATEMENT EXECUTE FUNCTION tracker_no_truncate();
CREATE TRIGGER journal_no_truncate BEFORE TRUNCATE ON journal FOR EACH STATEMENT EXECUTE FUNCTION tracker_no_truncate();
CREATE TRIGGER schema_migrations_no_truncate BEFORE TRUNCATE ON schema_migrations FOR EACH STATEMENT EXECUTE FUNCTION tracker_no_truncate();
CREATE TRIGGER experiments_id_default BEFORE INSERT ON experiments FOR EACH ROW EXECUTE FUNCTION tracker_next_id();
CREATE TRIGGER devices_id_default BEFORE INSERT ON devices FOR EACH ROW EXECUTE FUNCTION tracker_next_id();
CREATE TRIGGER evidence_id_default BEFORE INSERT ON evidence FOR EACH ROW EXECUTE FUNCTION tracker_next_id();
CREATE TRIGGER measurements_id_default BEFORE INSERT ON measurements FOR EACH ROW EXECUTE FUNCTION tracker_next_id();

-- ===========================================================================
-- The rules (as tracker/migrations/0003_integrity.sql states each)
-- ===========================================================================

-- Milestones: an id is never replaced; one with work items keeps its id and is never deleted.
CREATE FUNCTION milestones_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM milestones WHERE id = NEW.id) THEN
        PERFORM tracker_refuse('tracker-exists: this milestone id is taken (a row is never replaced)');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER milestones_insert BEFORE INSERT ON milestones FOR EACH ROW EXECUTE FUNCTION milestones_insert();

CREATE FUNCTION milestones_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id THEN
        IF EXISTS (SELECT 1 FROM items WHERE milestone_id = OLD.id) THEN
            PERFORM tracker_refuse('tracker-invalid: a milestone with work items keeps its id');
        END IF;
        IF EXISTS (SELECT 1 FROM milestones WHERE id = NEW.id) THEN
            PERFORM tracker_refuse('tracker-exists: this milestone id is taken (a row is never replaced)');
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER milestones_update BEFORE UPDATE ON milestones FOR EACH ROW EXECUTE FUNCTION milestones_update();

CREATE FUNCTION milestones_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM items WHERE milestone_id = OLD.id) THEN
        PERFORM tracker_refuse('tracker-invalid: a milestone with work items cannot be deleted');
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER milestones_delete BEFORE DELETE ON milestones FOR EACH ROW EXECUTE FUNCTION milestones_delete();

-- Items: an id is never replaced; its milestone exists; never born verified.
CREATE FUNCTION items_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM items WHERE id = NEW.id) THEN
        PERFORM tracker_refuse('tracker-exists: this work item id is taken (a row is never replaced)');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM milestones WHERE id = NEW.milestone_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such milestone');
    END IF;
    IF NEW.status = 'verified' THEN
        PERFORM tracker_refuse('tracker-evidence-required: a work item is verified only with passing evidence from a completed run linked to it');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER items_insert BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION items_insert();

-- Items: an id never changes; the milestone exists; verified needs a linked pass from a
-- completed run EVERY stream of which passed (physical scope for a hardware item).
CREATE FUNCTION items_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id THEN
        PERFORM tracker_refuse('tracker-invalid: a work item id never changes');
    END IF;
    IF NEW.milestone_id IS DISTINCT FROM OLD.milestone_id
       AND NOT EXISTS (SELECT 1 FROM milestones WHERE id = NEW.milestone_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such milestone');
    END IF;
    IF NEW.status = 'verified' AND NOT EXISTS (
        SELECT 1 FROM item_evidence l
        JOIN evidence e ON e.id = l.evidence_id
        JOIN runs r ON r.id = e.run_id
        WHERE l.item_id = NEW.id AND e.verdict = 'pass' AND r.state = 'completed'
          AND NOT EXISTS (SELECT 1 FROM evidence o WHERE o.run_id = r.id AND o.verdict IS DISTINCT FROM 'pass')) THEN
        PERFORM tracker_refuse('tracker-evidence-required: a work item is verified only with passing evidence from a completed run linked to it');
    END IF;
    IF NEW.status = 'verified' AND NEW.hardware <> 0 AND NOT EXISTS (
        SELECT 1 FROM item_evidence l
        JOIN evidence e ON e.id = l.evidence_id
        JOIN runs r ON r.id = e.run_id
        WHERE l.item_id = NEW.id AND e.verdict = 'pass' AND e.scope = 'physical' AND r.state = 'completed'
          AND NOT EXISTS (SELECT 1 FROM evidence o WHERE o.run_id = r.id AND o.verdict IS DISTINCT FROM 'pass')) THEN
        PERFORM tracker_refuse('tracker-hardware-evidence: a hardware work item is verified only with a sealed pass of scope physical from a completed run');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER items_update BEFORE UPDATE ON items FOR EACH ROW EXECUTE FUNCTION items_update();

CREATE FUNCTION items_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'verified'
       OR EXISTS (SELECT 1 FROM item_evidence WHERE item_id = OLD.id)
       OR EXISTS (SELECT 1 FROM item_deps WHERE depends_on = OLD.id)
       OR EXISTS (SELECT 1 FROM experiments WHERE item_id = OLD.id) THEN
        PERFORM tracker_refuse('tracker-invalid: a work item with evidence, dependants or experiments cannot be deleted');
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER items_delete BEFORE DELETE ON items FOR EACH ROW EXECUTE FUNCTION items_delete();

-- Dependencies: never replaced; both items exist; no cycle; never edited.
CREATE FUNCTION item_deps_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM item_deps WHERE item_id = NEW.item_id AND depends_on = NEW.depends_on) THEN
        PERFORM tracker_refuse('tracker-exists: this dependency is recorded (a row is never replaced)');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id)
       OR NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.depends_on) THEN
        PERFORM tracker_refuse('tracker-unknown: no such work item');
    END IF;
    IF NEW.item_id = NEW.depends_on OR EXISTS (
        WITH RECURSIVE reach(x) AS (
            SELECT NEW.depends_on
            UNION SELECT d.depends_on FROM item_deps d JOIN reach ON d.item_id = reach.x)
        SELECT 1 FROM reach WHERE x = NEW.item_id) THEN
        PERFORM tracker_refuse('tracker-dependency-cycle: a work item cannot depend on itself, directly or through others');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER item_deps_insert BEFORE INSERT ON item_deps FOR EACH ROW EXECUTE FUNCTION item_deps_insert();

CREATE FUNCTION item_deps_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tracker_refuse('tracker-invalid: dependencies are added or removed, never edited');
    RETURN NEW;
END
$$;

CREATE TRIGGER item_deps_update BEFORE UPDATE ON item_deps FOR EACH ROW EXECUTE FUNCTION item_deps_update();

-- Experiments: neither id nor name replaced; the item exists; one with runs keeps its id
-- and is never deleted.
CREATE FUNCTION experiments_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM experiments WHERE id = NEW.id OR name = NEW.name) THEN
        PERFORM tracker_refuse('tracker-exists: this experiment id or name is taken (a row is never replaced)');
    END IF;
    IF NEW.item_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such work item');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER experiments_insert BEFORE INSERT ON experiments FOR EACH ROW EXECUTE FUNCTION experiments_insert();

CREATE FUNCTION experiments_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id AND EXISTS (SELECT 1 FROM runs WHERE experiment_id = OLD.id) THEN
        PERFORM tracker_refuse('tracker-run-immutable: an experiment with runs keeps its id');
    END IF;
    IF (NEW.id IS DISTINCT FROM OLD.id AND EXISTS (SELECT 1 FROM experiments WHERE id = NEW.id))
       OR (NEW.name IS DISTINCT FROM OLD.name AND EXISTS (SELECT 1 FROM experiments WHERE name = NEW.name)) THEN
        PERFORM tracker_refuse('tracker-exists: this experiment id or name is taken (a row is never replaced)');
    END IF;
    IF NEW.item_id IS NOT NULL AND NEW.item_id IS DISTINCT FROM OLD.item_id
       AND NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such work item');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER experiments_update BEFORE UPDATE ON experiments FOR EACH ROW EXECUTE FUNCTION experiments_update();

CREATE FUNCTION experiments_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM runs WHERE experiment_id = OLD.id) THEN
        PERFORM tracker_refuse('tracker-run-immutable: an experiment with runs cannot be deleted');
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER experiments_delete BEFORE DELETE ON experiments FOR EACH ROW EXECUTE FUNCTION experiments_delete();

-- Devices: neither id nor UUID replaced; one used by a terminal run is part of its record;
-- an id never changes; one used by a run is never deleted.
CREATE FUNCTION devices_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM devices WHERE id = NEW.id OR uuid = NEW.uuid) THEN
        PERFORM tracker_refuse('tracker-exists: this device id or UUID is taken (a row is never replaced)');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER devices_insert BEFORE INSERT ON devices FOR EACH ROW EXECUTE FUNCTION devices_insert();

CREATE FUNCTION devices_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM run_devices rd JOIN runs r ON r.id = rd.run_id
               WHERE rd.device_id = OLD.id AND r.state <> 'running') THEN
        PERFORM tracker_refuse('tracker-run-immutable: a device used by a terminal run is part of its record');
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id THEN
        PERFORM tracker_refuse('tracker-invalid: a device id never changes');
    END IF;
    IF NEW.uuid IS DISTINCT FROM OLD.uuid AND EXISTS (SELECT 1 FROM devices WHERE uuid = NEW.uuid) THEN
        PERFORM tracker_refuse('tracker-exists: this device id or UUID is taken (a row is never replaced)');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER devices_update BEFORE UPDATE ON devices FOR EACH ROW EXECUTE FUNCTION devices_update();

CREATE FUNCTION devices_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM run_devices WHERE device_id = OLD.id) THEN
        PERFORM tracker_refuse('tracker-run-immutable: a device used by a run is part of its record');
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER devices_delete BEFORE DELETE ON devices FOR EACH ROW EXECUTE FUNCTION devices_delete();

-- Runs: an id (and legacy number) never replaced; starts running, without a physical pass;
-- the experiment exists.
CREATE FUNCTION runs_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM runs WHERE id = NEW.id OR legacy_id = NEW.legacy_id) THEN
        PERFORM tracker_refuse('tracker-exists: this run id is taken (a row is never replaced)');
    END IF;
    IF NEW.state <> 'running' OR NEW.finished_at IS NOT NULL THEN
        PERFORM tracker_refuse('tracker-invalid: a run starts in state running');
    END IF;
    IF NEW.physical_pass <> 0 THEN
        PERFORM tracker_refuse('tracker-physical-pass: a physical pass is recorded only when a completed run has a sealed pass of scope physical attached');
    END IF;
    IF NEW.experiment_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM experiments WHERE id = NEW.experiment_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such experiment');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER runs_insert BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION runs_insert();

-- Runs: a terminal run never changes; id, legacy number and start time never change; the
-- lane is fixed once there is evidence; finish time iff finished; a physical pass needs a
-- physical pass stream and every stream passing; the experiment exists.
CREATE FUNCTION runs_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id OR NEW.legacy_id IS DISTINCT FROM OLD.legacy_id THEN
        PERFORM tracker_refuse('tracker-invalid: a run id never changes');
    END IF;
    IF NEW.started_at IS DISTINCT FROM OLD.started_at THEN
        PERFORM tracker_refuse('tracker-invalid: a run''s start time never changes');
    END IF;
    IF NEW.lane IS DISTINCT FROM OLD.lane AND EXISTS (SELECT 1 FROM evidence WHERE run_id = OLD.id) THEN
        PERFORM tracker_refuse('tracker-evidence-lane: a run''s lane never changes once it has evidence');
    END IF;
    IF (NEW.state = 'running') <> (NEW.finished_at IS NULL) THEN
        PERFORM tracker_refuse('tracker-invalid: a finished run has a finish time, a running one none');
    END IF;
    IF NEW.physical_pass <> 0 AND (
        NEW.state <> 'completed'
        OR NOT EXISTS (SELECT 1 FROM evidence e WHERE e.run_id = NEW.id AND e.verdict = 'pass' AND e.scope = 'physical')
        OR EXISTS (SELECT 1 FROM evidence e WHERE e.run_id = NEW.id AND e.verdict IS DISTINCT FROM 'pass')) THEN
        PERFORM tracker_refuse('tracker-physical-pass: a physical pass is recorded only when a completed run has a sealed pass of scope physical attached, and every stream of the run passed');
    END IF;
    IF NEW.experiment_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM experiments WHERE id = NEW.experiment_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such experiment');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER runs_update BEFORE UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION runs_update();

CREATE FUNCTION runs_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    IF EXISTS (SELECT 1 FROM evidence WHERE run_id = OLD.id)
       OR EXISTS (SELECT 1 FROM measurements WHERE run_id = OLD.id)
       OR EXISTS (SELECT 1 FROM run_devices WHERE run_id = OLD.id) THEN
        PERFORM tracker_refuse('tracker-invalid: a run with evidence, measurements or devices cannot be deleted');
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER runs_delete BEFORE DELETE ON runs FOR EACH ROW EXECUTE FUNCTION runs_delete();

-- Device links: never replaced; run and device exist; a terminal run takes none; not a
-- device the run's evidence was not observed on; never edited; a terminal run's stay.
CREATE FUNCTION run_devices_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM run_devices WHERE run_id = NEW.run_id AND device_id = NEW.device_id) THEN
        PERFORM tracker_refuse('tracker-exists: this device is linked to the run (a row is never replaced)');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id)
       OR NOT EXISTS (SELECT 1 FROM devices WHERE id = NEW.device_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such run or device');
    END IF;
    IF (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    IF EXISTS (
        SELECT 1 FROM evidence e WHERE e.run_id = NEW.run_id AND NOT EXISTS (
            SELECT 1 FROM json_each(CASE WHEN json_valid(e.devices) THEN e.devices ELSE '[]' END) j
            WHERE j.value = (SELECT uuid FROM devices WHERE id = NEW.device_id))) THEN
        PERFORM tracker_refuse('tracker-evidence-devices: the run has evidence that was not observed on this device');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER run_devices_insert BEFORE INSERT ON run_devices FOR EACH ROW EXECUTE FUNCTION run_devices_insert();

CREATE FUNCTION run_devices_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT state FROM runs WHERE id = OLD.run_id) IS DISTINCT FROM 'running'
       OR (SELECT state FROM runs WHERE id = NEW.run_id) IS DISTINCT FROM 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    PERFORM tracker_refuse('tracker-invalid: device links are added or removed, never edited');
    RETURN NEW;
END
$$;

CREATE TRIGGER run_devices_update BEFORE UPDATE ON run_devices FOR EACH ROW EXECUTE FUNCTION run_devices_update();

-- measurements_delete and run_devices_delete: what a terminal run had stays.
CREATE FUNCTION run_part_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT state FROM runs WHERE id = OLD.run_id) IS DISTINCT FROM 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER run_devices_delete BEFORE DELETE ON run_devices FOR EACH ROW EXECUTE FUNCTION run_part_delete();

-- Evidence, in order: an id is never replaced; a stream id keeps its first seal head and
-- file digest; one run per stream; the same unchanged stream on the same run is a no-op;
-- the run exists and is running; a sealed verdict; a trusted signer when keys are held;
-- the gate is the run's lane; recorded at or after the run started; observed on every
-- device the run names.
CREATE FUNCTION evidence_insert() RETURNS trigger LANGUAGE plpgsql AS $$
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
    RETURN NEW;
END
$$;

CREATE TRIGGER evidence_insert BEFORE INSERT ON evidence FOR EACH ROW EXECUTE FUNCTION evidence_insert();

CREATE FUNCTION evidence_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT state FROM runs WHERE id = OLD.run_id) IS DISTINCT FROM 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    PERFORM tracker_refuse('tracker-evidence-immutable: attached evidence is never edited');
    RETURN NEW;
END
$$;

CREATE TRIGGER evidence_update BEFORE UPDATE ON evidence FOR EACH ROW EXECUTE FUNCTION evidence_update();

CREATE FUNCTION evidence_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT state FROM runs WHERE id = OLD.run_id) IS DISTINCT FROM 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    PERFORM tracker_refuse('tracker-evidence-immutable: attached evidence is never removed');
    RETURN OLD;
END
$$;

CREATE TRIGGER evidence_delete BEFORE DELETE ON evidence FOR EACH ROW EXECUTE FUNCTION evidence_delete();

-- Evidence links: never replaced; item and evidence exist; never edited; a verified item
-- keeps the evidence it was verified with.
CREATE FUNCTION item_evidence_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM item_evidence WHERE item_id = NEW.item_id AND evidence_id = NEW.evidence_id) THEN
        PERFORM tracker_refuse('tracker-exists: this evidence is linked to the item (a row is never replaced)');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such work item');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM evidence WHERE id = NEW.evidence_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such evidence');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER item_evidence_insert BEFORE INSERT ON item_evidence FOR EACH ROW EXECUTE FUNCTION item_evidence_insert();

CREATE FUNCTION item_evidence_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tracker_refuse('tracker-evidence-immutable: evidence links are added or removed, never edited');
    RETURN NEW;
END
$$;

CREATE TRIGGER item_evidence_update BEFORE UPDATE ON item_evidence FOR EACH ROW EXECUTE FUNCTION item_evidence_update();

CREATE FUNCTION item_evidence_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT status FROM items WHERE id = OLD.item_id) = 'verified' THEN
        PERFORM tracker_refuse('tracker-evidence-required: a verified work item keeps the evidence it was verified with');
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER item_evidence_delete BEFORE DELETE ON item_evidence FOR EACH ROW EXECUTE FUNCTION item_evidence_delete();

-- Measurements: an id never replaced; the run exists and is running; a terminal run's
-- never change; an id never changes.
CREATE FUNCTION measurements_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM measurements WHERE id = NEW.id) THEN
        PERFORM tracker_refuse('tracker-exists: this measurement id is taken (a row is never replaced)');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such run');
    END IF;
    IF (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER measurements_insert BEFORE INSERT ON measurements FOR EACH ROW EXECUTE FUNCTION measurements_insert();

CREATE FUNCTION measurements_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT state FROM runs WHERE id = OLD.run_id) IS DISTINCT FROM 'running'
       OR (SELECT state FROM runs WHERE id = NEW.run_id) IS DISTINCT FROM 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id THEN
        PERFORM tracker_refuse('tracker-invalid: a measurement id never changes');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER measurements_update BEFORE UPDATE ON measurements FOR EACH ROW EXECUTE FUNCTION measurements_update();
CREATE TRIGGER measurements_delete BEFORE DELETE ON measurements FOR EACH ROW EXECUTE FUNCTION run_part_delete();

-- Trusted keys: never replaced, never edited; one that signed evidence stays.
CREATE FUNCTION trusted_keys_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM trusted_keys WHERE key_id = NEW.key_id) THEN
        PERFORM tracker_refuse('tracker-exists: this key is trusted already (a row is never replaced)');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER trusted_keys_insert BEFORE INSERT ON trusted_keys FOR EACH ROW EXECUTE FUNCTION trusted_keys_insert();

CREATE FUNCTION trusted_keys_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tracker_refuse('tracker-key-untrusted: trusted keys are added, never edited');
    RETURN NEW;
END
$$;

CREATE TRIGGER trusted_keys_update BEFORE UPDATE ON trusted_keys FOR EACH ROW EXECUTE FUNCTION trusted_keys_update();

CREATE FUNCTION trusted_keys_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM evidence WHERE key_id = OLD.key_id) THEN
        PERFORM tracker_refuse('tracker-key-untrusted: a key that signed attached evidence stays trusted');
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER trusted_keys_delete BEFORE DELETE ON trusted_keys FOR EACH ROW EXECUTE FUNCTION trusted_keys_delete();

-- The journal: append-only, each entry after the last.
CREATE FUNCTION journal_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM journal WHERE seq = NEW.seq OR hash = NEW.hash) THEN
        PERFORM tracker_refuse('tracker-journal: the journal is append-only (this entry is taken)');
    END IF;
    IF NEW.seq IS DISTINCT FROM coalesce((SELECT max(seq) FROM journal), -1) + 1
       OR NEW.prev IS DISTINCT FROM coalesce((SELECT hash FROM journal ORDER BY seq DESC LIMIT 1),
                                             '0000000000000000000000000000000000000000000000000000000000000000') THEN
        PERFORM tracker_refuse('tracker-journal: an entry follows the last one (the next seq, the last hash as prev)');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER journal_insert BEFORE INSERT ON journal FOR EACH ROW EXECUTE FUNCTION journal_insert();

CREATE FUNCTION journal_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tracker_refuse('tracker-journal: the journal is append-only (entries are never edited)');
    RETURN NEW;
END
$$;

CREATE TRIGGER journal_update BEFORE UPDATE ON journal FOR EACH ROW EXECUTE FUNCTION journal_update();

CREATE FUNCTION journal_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tracker_refuse('tracker-journal: the journal is append-only (entries are never removed)');
    RETURN OLD;
END
$$;

CREATE TRIGGER journal_delete BEFORE DELETE ON journal FOR EACH ROW EXECUTE FUNCTION journal_delete();

-- The record of applied migrations is never replaced, edited or removed.
CREATE FUNCTION schema_migrations_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM schema_migrations WHERE version = NEW.version) THEN
        PERFORM tracker_refuse('tracker-schema: this migration is recorded already');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER schema_migrations_insert BEFORE INSERT ON schema_migrations FOR EACH ROW EXECUTE FUNCTION schema_migrations_insert();

CREATE FUNCTION schema_migrations_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tracker_refuse('tracker-schema: applied migrations are never edited');
    RETURN NEW;
END
$$;

CREATE TRIGGER schema_migrations_update BEFORE UPDATE ON schema_migrations FOR EACH ROW EXECUTE FUNCTION schema_migrations_update();

CREATE FUNCTION schema_migrations_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tracker_refuse('tracker-schema: applied migrations are never removed');
    RETURN OLD;
END
$$;

CREATE TRIGGER schema_migrations_delete BEFORE DELETE ON schema_migrations FOR EACH ROW EXECUTE FUNCTION schema_migrations_delete();
