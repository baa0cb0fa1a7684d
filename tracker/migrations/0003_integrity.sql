-- alpha tracker schema, migration 3: text run ids, the journal, evidence that
-- belongs to its run, and no row ever replaced.
--
-- THE CURRENT RULES ARE ALL IN THIS FILE. Migrations 1 and 2 created the first
-- triggers; this one drops every one of them and creates the whole set again
-- (rebuilding `runs` and the tables that point at it would otherwise break
-- them). A port to another database (PL/pgSQL) starts here: each trigger is
-- preceded by a comment stating its rule, and its RAISE names the refusal.
--
-- What changes:
--
-- * Run ids are text, globally unique (UUIDv7: the start time in milliseconds,
--   then random bits), so trackers can be merged. Existing runs get a UUIDv7
--   from their start time and keep their old number as `legacy_id` (the CLI
--   still finds run 3 by "3"); evidence, measurements and device links are
--   re-pointed at the new ids.
-- * `runs` records the CI job it ran in (provider, job URL, commit).
-- * `evidence` gains `url` (the store URL a stream was attached from, s3:// or
--   file://; `path` then holds the URL too, as there is no lasting local copy),
--   `recorded_at`
--   (the stream.open event's wall time, UTC, milliseconds) and `devices` (a
--   JSON array of the GPU UUIDs the recorder observed). Rows attached before
--   this migration have them null.
-- * `journal`: the append-only, hash-chained record of every change made
--   through the tool (tracker/journal.py writes it; docs/TRACKER.md).
--
-- Migration runs with foreign keys off (tracker/db.py), as SQLite's table
-- rebuild procedure requires, and checks them before it commits.

DROP TRIGGER IF EXISTS items_milestone_known_insert;
DROP TRIGGER IF EXISTS items_milestone_known_update;
DROP TRIGGER IF EXISTS items_id_fixed;
DROP TRIGGER IF EXISTS items_verified_insert;
DROP TRIGGER IF EXISTS items_verified_update;
DROP TRIGGER IF EXISTS items_delete;
DROP TRIGGER IF EXISTS item_deps_insert;
DROP TRIGGER IF EXISTS item_deps_update;
DROP TRIGGER IF EXISTS runs_insert;
DROP TRIGGER IF EXISTS runs_update;
DROP TRIGGER IF EXISTS runs_delete;
DROP TRIGGER IF EXISTS evidence_insert;
DROP TRIGGER IF EXISTS evidence_update;
DROP TRIGGER IF EXISTS evidence_delete;
DROP TRIGGER IF EXISTS item_evidence_insert;
DROP TRIGGER IF EXISTS item_evidence_update;
DROP TRIGGER IF EXISTS item_evidence_delete;
DROP TRIGGER IF EXISTS measurements_insert;
DROP TRIGGER IF EXISTS measurements_update;
DROP TRIGGER IF EXISTS measurements_delete;
DROP TRIGGER IF EXISTS run_devices_insert;
DROP TRIGGER IF EXISTS run_devices_update;
DROP TRIGGER IF EXISTS run_devices_delete;
DROP TRIGGER IF EXISTS devices_update;
DROP TRIGGER IF EXISTS devices_delete;
DROP TRIGGER IF EXISTS experiments_delete;
DROP TRIGGER IF EXISTS experiments_update_id;
DROP TRIGGER IF EXISTS trusted_keys_update;
DROP TRIGGER IF EXISTS trusted_keys_delete;
DROP TRIGGER IF EXISTS milestones_delete;
DROP TRIGGER IF EXISTS milestones_update_id;
DROP TRIGGER IF EXISTS experiments_item_known;

-- ---------------------------------------------------------------------------
-- Tables rebuilt with text run ids
-- ---------------------------------------------------------------------------

-- A run id is a UUID in its 36-character text form (new ones are version 7).
CREATE TABLE runs_v3 (
    id             TEXT PRIMARY KEY CHECK (
                       length(id) = 36 AND NOT id GLOB '*[^0-9a-f-]*'
                       AND substr(id, 9, 1) = '-' AND substr(id, 14, 1) = '-'
                       AND substr(id, 19, 1) = '-' AND substr(id, 24, 1) = '-'),
    legacy_id      INTEGER UNIQUE,
    experiment_id  INTEGER REFERENCES experiments(id),
    lane           TEXT,
    state          TEXT NOT NULL DEFAULT 'running'
                   CHECK (state IN ('running', 'completed', 'failed', 'inconclusive')),
    physical_pass  INTEGER NOT NULL DEFAULT 0 CHECK (physical_pass IN (0, 1)),
    note           TEXT,
    started_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    finished_at    TEXT,
    ci_provider    TEXT CHECK (ci_provider IN ('github', 'gitlab', 'buildkite')),
    ci_job_url     TEXT,
    ci_commit      TEXT,
    CHECK (ci_provider IS NOT NULL OR (ci_job_url IS NULL AND ci_commit IS NULL))
) STRICT;

-- Old integer ids become UUIDv7 text: 48 bits of the start time in ms, the
-- version nibble 7, 12 random bits, the variant bits 10, 62 random bits.
INSERT INTO runs_v3 (id, legacy_id, experiment_id, lane, state, physical_pass, note, started_at, finished_at)
SELECT printf('%08x-%04x-7%03x-%04x-%012x',
              ms >> 16, ms & 65535, random() & 4095, 32768 + (random() & 16383),
              random() & 281474976710655),
       id, experiment_id, lane, state, physical_pass, note, started_at, finished_at
FROM (SELECT *, coalesce(CAST(round((julianday(started_at) - 2440587.5) * 86400000.0) AS INTEGER), 0) AS ms
      FROM runs);

CREATE TABLE run_devices_v3 (
    run_id     TEXT NOT NULL REFERENCES runs(id),
    device_id  INTEGER NOT NULL REFERENCES devices(id),
    role       TEXT,
    PRIMARY KEY (run_id, device_id)
) STRICT;

INSERT INTO run_devices_v3 (run_id, device_id, role)
SELECT (SELECT r.id FROM runs_v3 r WHERE r.legacy_id = d.run_id), d.device_id, d.role FROM run_devices d;

-- One attached stream. Every column from stream_id to devices is derived from
-- the verified stream (`audit` derives them again and names any that differ);
-- path and url say where it was read.
CREATE TABLE evidence_v3 (
    id           INTEGER PRIMARY KEY CHECK (id > 0),
    run_id       TEXT NOT NULL REFERENCES runs(id),
    stream_id    TEXT NOT NULL UNIQUE CHECK (length(stream_id) > 0),
    path         TEXT NOT NULL,
    url          TEXT CHECK (url IS NULL OR url LIKE 's3://%' OR url LIKE 'file://%'),
    seal_head    TEXT NOT NULL CHECK (length(seal_head) = 64),
    file_digest  TEXT NOT NULL CHECK (length(file_digest) = 64),
    size         INTEGER NOT NULL CHECK (size >= 0),
    events       INTEGER NOT NULL CHECK (events >= 0),
    verdict      TEXT CHECK (verdict IN ('pass', 'fail', 'inconclusive')),
    scope        TEXT,
    gate         TEXT,
    signed       INTEGER NOT NULL DEFAULT 0 CHECK (signed IN (0, 1)),
    key_id       TEXT,
    recorded_at  TEXT,
    devices      TEXT,
    attached_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK (verdict IS NOT NULL OR scope IS NULL)
) STRICT;

INSERT INTO evidence_v3 (id, run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope, gate,
                         signed, key_id, attached_at)
SELECT e.id, (SELECT r.id FROM runs_v3 r WHERE r.legacy_id = e.run_id), e.stream_id, e.path, e.seal_head,
       e.file_digest, e.size, e.events, e.verdict, e.scope, e.gate, e.signed, e.key_id, e.attached_at
FROM evidence e;

CREATE TABLE measurements_v3 (
    id           INTEGER PRIMARY KEY CHECK (id > 0),
    run_id       TEXT NOT NULL REFERENCES runs(id),
    name         TEXT NOT NULL CHECK (length(name) > 0),
    value        REAL NOT NULL CHECK (abs(value) <= 1.7976931348623157e308),
    unit         TEXT,
    recorded_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

INSERT INTO measurements_v3 (id, run_id, name, value, unit, recorded_at)
SELECT m.id, (SELECT r.id FROM runs_v3 r WHERE r.legacy_id = m.run_id), m.name, m.value, m.unit, m.recorded_at
FROM measurements m;

DROP TABLE measurements;
DROP TABLE evidence;
DROP TABLE run_devices;
DROP TABLE runs;
ALTER TABLE runs_v3 RENAME TO runs;
ALTER TABLE run_devices_v3 RENAME TO run_devices;
ALTER TABLE evidence_v3 RENAME TO evidence;
ALTER TABLE measurements_v3 RENAME TO measurements;

CREATE INDEX runs_started ON runs(started_at);
CREATE INDEX evidence_run ON evidence(run_id);
CREATE INDEX measurements_run ON measurements(run_id);
CREATE INDEX run_devices_device ON run_devices(device_id);

-- The journal: one row per change made through the tool, in order. `entry` is
-- the canonical JSON of what was done and every row it wrote; `hash` is
-- BLAKE3 over a domain tag, `prev` and `entry` (tracker/journal.py), so each
-- entry commits to all before it. With a signing key, `signature` is Ed25519
-- over the hash, by `key_id`.
CREATE TABLE journal (
    seq        INTEGER PRIMARY KEY CHECK (seq >= 0),
    prev       TEXT NOT NULL CHECK (length(prev) = 64),
    hash       TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
    entry      TEXT NOT NULL,
    key_id     TEXT,
    signature  TEXT,
    CHECK ((key_id IS NULL) = (signature IS NULL))
) STRICT;

-- ===========================================================================
-- The rules. A trigger refuses with RAISE(ABORT, 'NAME: detail'), NAME being
-- the refusal (tracker/refusals.py). "Never replaced": SQLite's REPLACE
-- conflict resolution (INSERT OR REPLACE, UPDATE OR REPLACE, REPLACE INTO)
-- deletes the conflicting row WITHOUT firing its delete triggers (unless
-- recursive_triggers is on), so every BEFORE INSERT trigger refuses a row
-- whose key is taken, and every key that may change is checked on update.
-- A plain duplicate gets the same refusal (tracker-exists) it got before.
-- ===========================================================================

-- ---------------------------------------------------------------------------
-- Milestones
-- ---------------------------------------------------------------------------

-- Rule: a milestone id is never replaced.
CREATE TRIGGER milestones_insert BEFORE INSERT ON milestones
WHEN EXISTS (SELECT 1 FROM milestones WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'tracker-exists: this milestone id is taken (a row is never replaced)'); END;

-- Rules: a milestone with work items keeps its id; a new id is not taken.
CREATE TRIGGER milestones_update BEFORE UPDATE ON milestones
WHEN NEW.id IS NOT OLD.id
BEGIN
    SELECT RAISE(ABORT, 'tracker-invalid: a milestone with work items keeps its id')
    WHERE EXISTS (SELECT 1 FROM items WHERE milestone_id = OLD.id);
    SELECT RAISE(ABORT, 'tracker-exists: this milestone id is taken (a row is never replaced)')
    WHERE EXISTS (SELECT 1 FROM milestones WHERE id = NEW.id);
END;

-- Rule: a milestone with work items is never deleted.
CREATE TRIGGER milestones_delete BEFORE DELETE ON milestones
WHEN EXISTS (SELECT 1 FROM items WHERE milestone_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-invalid: a milestone with work items cannot be deleted'); END;

-- ---------------------------------------------------------------------------
-- Items and dependencies
-- ---------------------------------------------------------------------------

-- Rules: an item id is never replaced; its milestone exists; an item is never
-- born verified.
CREATE TRIGGER items_insert BEFORE INSERT ON items
BEGIN
    SELECT RAISE(ABORT, 'tracker-exists: this work item id is taken (a row is never replaced)')
    WHERE EXISTS (SELECT 1 FROM items WHERE id = NEW.id);
    SELECT RAISE(ABORT, 'tracker-unknown: no such milestone')
    WHERE NOT EXISTS (SELECT 1 FROM milestones WHERE id = NEW.milestone_id);
    SELECT RAISE(ABORT, 'tracker-evidence-required: a work item is verified only with passing evidence from a completed run linked to it')
    WHERE NEW.status = 'verified';
END;

-- Rules: an item id never changes; its milestone exists. Verified means
-- acceptance evidence is linked: a stream whose sealed verdict is pass, from a
-- completed run EVERY stream of which passed (one pass among fails is not
-- acceptance); for a hardware item that stream's scope is physical.
-- Re-checked on every update that leaves the item verified.
CREATE TRIGGER items_update BEFORE UPDATE ON items
BEGIN
    SELECT RAISE(ABORT, 'tracker-invalid: a work item id never changes')
    WHERE NEW.id IS NOT OLD.id;
    SELECT RAISE(ABORT, 'tracker-unknown: no such milestone')
    WHERE NEW.milestone_id IS NOT OLD.milestone_id
      AND NOT EXISTS (SELECT 1 FROM milestones WHERE id = NEW.milestone_id);
    SELECT RAISE(ABORT, 'tracker-evidence-required: a work item is verified only with passing evidence from a completed run linked to it')
    WHERE NEW.status = 'verified' AND NOT EXISTS (
        SELECT 1 FROM item_evidence l
        JOIN evidence e ON e.id = l.evidence_id
        JOIN runs r ON r.id = e.run_id
        WHERE l.item_id = NEW.id AND e.verdict = 'pass' AND r.state = 'completed'
          AND NOT EXISTS (SELECT 1 FROM evidence o WHERE o.run_id = r.id AND o.verdict IS NOT 'pass'));
    SELECT RAISE(ABORT, 'tracker-hardware-evidence: a hardware work item is verified only with a sealed pass of scope physical from a completed run')
    WHERE NEW.status = 'verified' AND NEW.hardware <> 0 AND NOT EXISTS (
        SELECT 1 FROM item_evidence l
        JOIN evidence e ON e.id = l.evidence_id
        JOIN runs r ON r.id = e.run_id
        WHERE l.item_id = NEW.id AND e.verdict = 'pass' AND e.scope = 'physical' AND r.state = 'completed'
          AND NOT EXISTS (SELECT 1 FROM evidence o WHERE o.run_id = r.id AND o.verdict IS NOT 'pass'));
END;

-- Rule: an item that is verified, has evidence, dependants or experiments is
-- never deleted.
CREATE TRIGGER items_delete BEFORE DELETE ON items
WHEN OLD.status = 'verified'
  OR EXISTS (SELECT 1 FROM item_evidence WHERE item_id = OLD.id)
  OR EXISTS (SELECT 1 FROM item_deps WHERE depends_on = OLD.id)
  OR EXISTS (SELECT 1 FROM experiments WHERE item_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-invalid: a work item with evidence, dependants or experiments cannot be deleted'); END;

-- Rules: a dependency is never replaced; both items exist; no cycle.
CREATE TRIGGER item_deps_insert BEFORE INSERT ON item_deps
BEGIN
    SELECT RAISE(ABORT, 'tracker-exists: this dependency is recorded (a row is never replaced)')
    WHERE EXISTS (SELECT 1 FROM item_deps WHERE item_id = NEW.item_id AND depends_on = NEW.depends_on);
    SELECT RAISE(ABORT, 'tracker-unknown: no such work item')
    WHERE NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id)
       OR NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.depends_on);
    SELECT RAISE(ABORT, 'tracker-dependency-cycle: a work item cannot depend on itself, directly or through others')
    WHERE NEW.item_id = NEW.depends_on OR EXISTS (
        WITH RECURSIVE reach(x) AS (
            SELECT NEW.depends_on
            UNION SELECT d.depends_on FROM item_deps d JOIN reach ON d.item_id = reach.x)
        SELECT 1 FROM reach WHERE x = NEW.item_id);
END;

-- Rule: dependencies are added or removed, never edited.
CREATE TRIGGER item_deps_update BEFORE UPDATE ON item_deps
BEGIN SELECT RAISE(ABORT, 'tracker-invalid: dependencies are added or removed, never edited'); END;

-- ---------------------------------------------------------------------------
-- Experiments and devices
-- ---------------------------------------------------------------------------

-- Rules: neither id nor name is replaced; the item exists.
CREATE TRIGGER experiments_insert BEFORE INSERT ON experiments
BEGIN
    SELECT RAISE(ABORT, 'tracker-exists: this experiment id or name is taken (a row is never replaced)')
    WHERE EXISTS (SELECT 1 FROM experiments WHERE id = NEW.id OR name = NEW.name);
    SELECT RAISE(ABORT, 'tracker-unknown: no such work item')
    WHERE NEW.item_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id);
END;

-- Rules: an experiment with runs keeps its id; a new id or name is not taken;
-- the item exists.
CREATE TRIGGER experiments_update BEFORE UPDATE ON experiments
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: an experiment with runs keeps its id')
    WHERE NEW.id IS NOT OLD.id AND EXISTS (SELECT 1 FROM runs WHERE experiment_id = OLD.id);
    SELECT RAISE(ABORT, 'tracker-exists: this experiment id or name is taken (a row is never replaced)')
    WHERE (NEW.id IS NOT OLD.id AND EXISTS (SELECT 1 FROM experiments WHERE id = NEW.id))
       OR (NEW.name IS NOT OLD.name AND EXISTS (SELECT 1 FROM experiments WHERE name = NEW.name));
    SELECT RAISE(ABORT, 'tracker-unknown: no such work item')
    WHERE NEW.item_id IS NOT NULL AND NEW.item_id IS NOT OLD.item_id
      AND NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id);
END;

-- Rule: an experiment with runs is never deleted.
CREATE TRIGGER experiments_delete BEFORE DELETE ON experiments
WHEN EXISTS (SELECT 1 FROM runs WHERE experiment_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: an experiment with runs cannot be deleted'); END;

-- Rule: neither a device id nor its UUID is replaced.
CREATE TRIGGER devices_insert BEFORE INSERT ON devices
WHEN EXISTS (SELECT 1 FROM devices WHERE id = NEW.id OR uuid = NEW.uuid)
BEGIN SELECT RAISE(ABORT, 'tracker-exists: this device id or UUID is taken (a row is never replaced)'); END;

-- Rules: a device used by a terminal run is part of its record; a device id
-- never changes; a new UUID is not taken.
CREATE TRIGGER devices_update BEFORE UPDATE ON devices
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a device used by a terminal run is part of its record')
    WHERE EXISTS (SELECT 1 FROM run_devices rd JOIN runs r ON r.id = rd.run_id
                  WHERE rd.device_id = OLD.id AND r.state <> 'running');
    SELECT RAISE(ABORT, 'tracker-invalid: a device id never changes')
    WHERE NEW.id IS NOT OLD.id;
    SELECT RAISE(ABORT, 'tracker-exists: this device id or UUID is taken (a row is never replaced)')
    WHERE NEW.uuid IS NOT OLD.uuid AND EXISTS (SELECT 1 FROM devices WHERE uuid = NEW.uuid);
END;

-- Rule: a device used by a run is never deleted.
CREATE TRIGGER devices_delete BEFORE DELETE ON devices
WHEN EXISTS (SELECT 1 FROM run_devices WHERE device_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: a device used by a run is part of its record'); END;

-- ---------------------------------------------------------------------------
-- Runs: immutable once terminal
-- ---------------------------------------------------------------------------

-- Rules: a run id (and legacy number) is never replaced; a run starts
-- running, without a physical pass; its experiment exists.
CREATE TRIGGER runs_insert BEFORE INSERT ON runs
BEGIN
    SELECT RAISE(ABORT, 'tracker-exists: this run id is taken (a row is never replaced)')
    WHERE EXISTS (SELECT 1 FROM runs WHERE id = NEW.id OR legacy_id = NEW.legacy_id);
    SELECT RAISE(ABORT, 'tracker-invalid: a run starts in state running')
    WHERE NEW.state <> 'running' OR NEW.finished_at IS NOT NULL;
    SELECT RAISE(ABORT, 'tracker-physical-pass: a physical pass is recorded only when a completed run has a sealed pass of scope physical attached')
    WHERE NEW.physical_pass <> 0;
    SELECT RAISE(ABORT, 'tracker-unknown: no such experiment')
    WHERE NEW.experiment_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM experiments WHERE id = NEW.experiment_id);
END;

-- Rules: a terminal run never changes. Its id, legacy number and start time
-- never change; its lane does not change once it has evidence. A finished
-- run has a finish time, a running one none. A physical pass is recorded only
-- on a completed run with a stream whose sealed verdict is pass with scope
-- physical, and EVERY stream of which passed. The experiment exists.
CREATE TRIGGER runs_update BEFORE UPDATE ON runs
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE OLD.state <> 'running';
    SELECT RAISE(ABORT, 'tracker-invalid: a run id never changes')
    WHERE NEW.id IS NOT OLD.id OR NEW.legacy_id IS NOT OLD.legacy_id;
    SELECT RAISE(ABORT, 'tracker-invalid: a run''s start time never changes')
    WHERE NEW.started_at IS NOT OLD.started_at;
    SELECT RAISE(ABORT, 'tracker-evidence-lane: a run''s lane never changes once it has evidence')
    WHERE NEW.lane IS NOT OLD.lane AND EXISTS (SELECT 1 FROM evidence WHERE run_id = OLD.id);
    SELECT RAISE(ABORT, 'tracker-invalid: a finished run has a finish time, a running one none')
    WHERE (NEW.state = 'running') <> (NEW.finished_at IS NULL);
    SELECT RAISE(ABORT, 'tracker-physical-pass: a physical pass is recorded only when a completed run has a sealed pass of scope physical attached, and every stream of the run passed')
    WHERE NEW.physical_pass <> 0 AND (
        NEW.state <> 'completed'
        OR NOT EXISTS (SELECT 1 FROM evidence e WHERE e.run_id = NEW.id AND e.verdict = 'pass' AND e.scope = 'physical')
        OR EXISTS (SELECT 1 FROM evidence e WHERE e.run_id = NEW.id AND e.verdict IS NOT 'pass'));
    SELECT RAISE(ABORT, 'tracker-unknown: no such experiment')
    WHERE NEW.experiment_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM experiments WHERE id = NEW.experiment_id);
END;

-- Rules: a terminal run is never deleted; nor one with evidence, measurements
-- or devices.
CREATE TRIGGER runs_delete BEFORE DELETE ON runs
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE OLD.state <> 'running';
    SELECT RAISE(ABORT, 'tracker-invalid: a run with evidence, measurements or devices cannot be deleted')
    WHERE EXISTS (SELECT 1 FROM evidence WHERE run_id = OLD.id)
       OR EXISTS (SELECT 1 FROM measurements WHERE run_id = OLD.id)
       OR EXISTS (SELECT 1 FROM run_devices WHERE run_id = OLD.id);
END;

-- Rules: a device link is never replaced; run and device exist; a terminal
-- run takes none; a device the run's evidence was not observed on is not
-- added after the fact.
CREATE TRIGGER run_devices_insert BEFORE INSERT ON run_devices
BEGIN
    SELECT RAISE(ABORT, 'tracker-exists: this device is linked to the run (a row is never replaced)')
    WHERE EXISTS (SELECT 1 FROM run_devices WHERE run_id = NEW.run_id AND device_id = NEW.device_id);
    SELECT RAISE(ABORT, 'tracker-unknown: no such run or device')
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id)
       OR NOT EXISTS (SELECT 1 FROM devices WHERE id = NEW.device_id);
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running';
    SELECT RAISE(ABORT, 'tracker-evidence-devices: the run has evidence that was not observed on this device')
    WHERE EXISTS (
        SELECT 1 FROM evidence e WHERE e.run_id = NEW.run_id AND NOT EXISTS (
            SELECT 1 FROM json_each(CASE WHEN json_valid(e.devices) THEN e.devices ELSE '[]' END) j
            WHERE j.value = (SELECT uuid FROM devices WHERE id = NEW.device_id)));
END;

-- Rules: a terminal run's device links never change; a link is never edited.
CREATE TRIGGER run_devices_update BEFORE UPDATE ON run_devices
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running'
       OR (SELECT state FROM runs WHERE id = NEW.run_id) IS NOT 'running';
    SELECT RAISE(ABORT, 'tracker-invalid: device links are added or removed, never edited');
END;

-- Rule: a terminal run's device links are never removed.
CREATE TRIGGER run_devices_delete BEFORE DELETE ON run_devices
WHEN (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running'
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)'); END;

-- ---------------------------------------------------------------------------
-- Evidence: belongs to its run; never edited, never removed; a stream id keeps
-- the seal and digest it was first attached with.
-- ---------------------------------------------------------------------------

-- Rules, in order: an evidence id is never replaced; a stream id keeps its
-- first seal head and file digest; a stream is evidence for one run; the same
-- unchanged stream on the same run is a no-op; the run exists and is
-- running; the stream has a sealed verdict (gate, verdict, scope); with
-- trusted keys, it is signed by one. Evidence belongs to its run: its gate is
-- the run's lane; it was recorded (stream.open) at or after the run started;
-- it was observed on every device the run names.
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
END;

-- Rule: attached evidence is never edited.
CREATE TRIGGER evidence_update BEFORE UPDATE ON evidence
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running';
    SELECT RAISE(ABORT, 'tracker-evidence-immutable: attached evidence is never edited');
END;

-- Rule: attached evidence is never removed (a failing stream stays counted;
-- finish the run and start another).
CREATE TRIGGER evidence_delete BEFORE DELETE ON evidence
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running';
    SELECT RAISE(ABORT, 'tracker-evidence-immutable: attached evidence is never removed');
END;

-- Rules: a link is never replaced; item and evidence exist.
CREATE TRIGGER item_evidence_insert BEFORE INSERT ON item_evidence
BEGIN
    SELECT RAISE(ABORT, 'tracker-exists: this evidence is linked to the item (a row is never replaced)')
    WHERE EXISTS (SELECT 1 FROM item_evidence WHERE item_id = NEW.item_id AND evidence_id = NEW.evidence_id);
    SELECT RAISE(ABORT, 'tracker-unknown: no such work item')
    WHERE NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id);
    SELECT RAISE(ABORT, 'tracker-unknown: no such evidence')
    WHERE NOT EXISTS (SELECT 1 FROM evidence WHERE id = NEW.evidence_id);
END;

-- Rule: evidence links are added or removed, never edited.
CREATE TRIGGER item_evidence_update BEFORE UPDATE ON item_evidence
BEGIN SELECT RAISE(ABORT, 'tracker-evidence-immutable: evidence links are added or removed, never edited'); END;

-- Rule: a verified item keeps the evidence it was verified with.
CREATE TRIGGER item_evidence_delete BEFORE DELETE ON item_evidence
WHEN (SELECT status FROM items WHERE id = OLD.item_id) = 'verified'
BEGIN SELECT RAISE(ABORT, 'tracker-evidence-required: a verified work item keeps the evidence it was verified with'); END;

-- ---------------------------------------------------------------------------
-- Measurements freeze with their run
-- ---------------------------------------------------------------------------

-- Rules: a measurement id is never replaced; the run exists and is running.
CREATE TRIGGER measurements_insert BEFORE INSERT ON measurements
BEGIN
    SELECT RAISE(ABORT, 'tracker-exists: this measurement id is taken (a row is never replaced)')
    WHERE EXISTS (SELECT 1 FROM measurements WHERE id = NEW.id);
    SELECT RAISE(ABORT, 'tracker-unknown: no such run')
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id);
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running';
END;

-- Rules: a terminal run's measurements never change; an id never changes.
CREATE TRIGGER measurements_update BEFORE UPDATE ON measurements
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running'
       OR (SELECT state FROM runs WHERE id = NEW.run_id) IS NOT 'running';
    SELECT RAISE(ABORT, 'tracker-invalid: a measurement id never changes')
    WHERE NEW.id IS NOT OLD.id;
END;

-- Rule: a terminal run's measurements are never removed.
CREATE TRIGGER measurements_delete BEFORE DELETE ON measurements
WHEN (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running'
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)'); END;

-- ---------------------------------------------------------------------------
-- Trusted keys: added, never edited; one that signed evidence stays
-- ---------------------------------------------------------------------------

-- Rule: a trusted key is never replaced.
CREATE TRIGGER trusted_keys_insert BEFORE INSERT ON trusted_keys
WHEN EXISTS (SELECT 1 FROM trusted_keys WHERE key_id = NEW.key_id)
BEGIN SELECT RAISE(ABORT, 'tracker-exists: this key is trusted already (a row is never replaced)'); END;

-- Rule: trusted keys are never edited.
CREATE TRIGGER trusted_keys_update BEFORE UPDATE ON trusted_keys
BEGIN SELECT RAISE(ABORT, 'tracker-key-untrusted: trusted keys are added, never edited'); END;

-- Rule: a key that signed attached evidence stays trusted.
CREATE TRIGGER trusted_keys_delete BEFORE DELETE ON trusted_keys
WHEN EXISTS (SELECT 1 FROM evidence WHERE key_id = OLD.key_id)
BEGIN SELECT RAISE(ABORT, 'tracker-key-untrusted: a key that signed attached evidence stays trusted'); END;

-- ---------------------------------------------------------------------------
-- The journal: append-only, each entry after the last
-- ---------------------------------------------------------------------------

-- Rules: an entry is never replaced; it is the next seq and names the last
-- entry's hash as prev (64 zeros for the first).
CREATE TRIGGER journal_insert BEFORE INSERT ON journal
BEGIN
    SELECT RAISE(ABORT, 'tracker-journal: the journal is append-only (this entry is taken)')
    WHERE EXISTS (SELECT 1 FROM journal WHERE seq = NEW.seq OR hash = NEW.hash);
    SELECT RAISE(ABORT, 'tracker-journal: an entry follows the last one (the next seq, the last hash as prev)')
    WHERE NEW.seq IS NOT coalesce((SELECT max(seq) FROM journal), -1) + 1
       OR NEW.prev IS NOT coalesce((SELECT hash FROM journal ORDER BY seq DESC LIMIT 1),
                                   '0000000000000000000000000000000000000000000000000000000000000000');
END;

-- Rule: journal entries are never edited.
CREATE TRIGGER journal_update BEFORE UPDATE ON journal
BEGIN SELECT RAISE(ABORT, 'tracker-journal: the journal is append-only (entries are never edited)'); END;

-- Rule: journal entries are never removed.
CREATE TRIGGER journal_delete BEFORE DELETE ON journal
BEGIN SELECT RAISE(ABORT, 'tracker-journal: the journal is append-only (entries are never removed)'); END;

-- Rule: the record of applied migrations is never replaced, edited or removed.
CREATE TRIGGER schema_migrations_insert BEFORE INSERT ON schema_migrations
WHEN EXISTS (SELECT 1 FROM schema_migrations WHERE version = NEW.version)
BEGIN SELECT RAISE(ABORT, 'tracker-schema: this migration is recorded already'); END;

CREATE TRIGGER schema_migrations_update BEFORE UPDATE ON schema_migrations
BEGIN SELECT RAISE(ABORT, 'tracker-schema: applied migrations are never edited'); END;

CREATE TRIGGER schema_migrations_delete BEFORE DELETE ON schema_migrations
BEGIN SELECT RAISE(ABORT, 'tracker-schema: applied migrations are never removed'); END;
