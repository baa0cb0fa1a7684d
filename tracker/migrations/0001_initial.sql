-- alpha tracker schema, migration 1.
--
-- Every rule that keeps the tracker honest lives here, in triggers, so that any
-- SQLite client is held to it (a plain `sqlite3` shell too, which by default does
-- not even enforce foreign keys: the rules below never rely on them).
-- A trigger refuses with RAISE(ABORT, 'NAME: detail'); NAME is the refusal's
-- contract name (tracker/refusals.py), which the CLI prints as
-- `refused: NAME: detail`.

CREATE TABLE milestones (
    id          TEXT PRIMARY KEY CHECK (length(id) > 0),
    title       TEXT NOT NULL,
    position    INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

-- A work item: id like N10 (never all digits, so `show 3` always means run 3).
CREATE TABLE items (
    id           TEXT PRIMARY KEY CHECK (length(id) > 0 AND id GLOB '*[^0-9]*'),
    title        TEXT NOT NULL,
    milestone_id TEXT NOT NULL REFERENCES milestones(id),
    hardware     INTEGER NOT NULL DEFAULT 0 CHECK (hardware IN (0, 1)),
    status       TEXT NOT NULL DEFAULT 'planned'
                 CHECK (status IN ('planned', 'in-progress', 'implemented', 'verified')),
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

CREATE TABLE item_deps (
    item_id     TEXT NOT NULL REFERENCES items(id),
    depends_on  TEXT NOT NULL REFERENCES items(id),
    PRIMARY KEY (item_id, depends_on)
) STRICT;

CREATE TABLE experiments (
    id           INTEGER PRIMARY KEY,
    name         TEXT NOT NULL UNIQUE CHECK (length(name) > 0),
    item_id      TEXT REFERENCES items(id),
    description  TEXT,
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

CREATE TABLE devices (
    id          INTEGER PRIMARY KEY,
    product     TEXT NOT NULL,
    uuid        TEXT NOT NULL UNIQUE CHECK (length(uuid) > 0),
    driver      TEXT,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

-- A run. `physical_pass` = 1 records a physical pass; it can be set only in the
-- update that completes the run, and only with a linked stream whose sealed
-- verdict is pass with scope physical.
CREATE TABLE runs (
    id             INTEGER PRIMARY KEY,
    experiment_id  INTEGER REFERENCES experiments(id),
    lane           TEXT,
    state          TEXT NOT NULL DEFAULT 'running'
                   CHECK (state IN ('running', 'completed', 'failed', 'inconclusive')),
    physical_pass  INTEGER NOT NULL DEFAULT 0 CHECK (physical_pass IN (0, 1)),
    note           TEXT,
    started_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    finished_at    TEXT
) STRICT;

CREATE TABLE run_devices (
    run_id     INTEGER NOT NULL REFERENCES runs(id),
    device_id  INTEGER NOT NULL REFERENCES devices(id),
    role       TEXT,
    PRIMARY KEY (run_id, device_id)
) STRICT;

-- One attached stream. stream_id is unique: a stream is evidence for one run.
-- seal_head / file_digest (BLAKE3 of the whole file) / size are what `attach`
-- verified; `audit` re-reads the file against them.
CREATE TABLE evidence (
    id           INTEGER PRIMARY KEY,
    run_id       INTEGER NOT NULL REFERENCES runs(id),
    stream_id    TEXT NOT NULL UNIQUE CHECK (length(stream_id) > 0),
    path         TEXT NOT NULL,
    seal_head    TEXT NOT NULL CHECK (length(seal_head) = 64),
    file_digest  TEXT NOT NULL CHECK (length(file_digest) = 64),
    size         INTEGER NOT NULL CHECK (size > 0),
    events       INTEGER NOT NULL CHECK (events > 0),
    verdict      TEXT CHECK (verdict IS NULL OR verdict IN ('pass', 'fail', 'inconclusive')),
    scope        TEXT,
    gate         TEXT,
    signed       INTEGER NOT NULL DEFAULT 0 CHECK (signed IN (0, 1)),
    key_id       TEXT,
    attached_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK (verdict IS NOT NULL OR scope IS NULL)
) STRICT;

-- Which evidence an item's status rests on.
CREATE TABLE item_evidence (
    item_id      TEXT NOT NULL REFERENCES items(id),
    evidence_id  INTEGER NOT NULL REFERENCES evidence(id),
    linked_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (item_id, evidence_id)
) STRICT;

CREATE TABLE measurements (
    id           INTEGER PRIMARY KEY,
    run_id       INTEGER NOT NULL REFERENCES runs(id),
    name         TEXT NOT NULL CHECK (length(name) > 0),
    value        REAL NOT NULL,
    unit         TEXT,
    recorded_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

-- Public keys the tracker trusts; with any present, attached streams must be
-- signed by one of them.
CREATE TABLE trusted_keys (
    key_id    TEXT PRIMARY KEY CHECK (length(key_id) > 0),
    pem       TEXT NOT NULL,
    added_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

CREATE INDEX evidence_run ON evidence(run_id);
CREATE INDEX measurements_run ON measurements(run_id);
CREATE INDEX items_milestone ON items(milestone_id);

-- ---------------------------------------------------------------------------
-- Items and dependencies
-- ---------------------------------------------------------------------------

CREATE TRIGGER items_milestone_known_insert BEFORE INSERT ON items
WHEN NOT EXISTS (SELECT 1 FROM milestones WHERE id = NEW.milestone_id)
BEGIN SELECT RAISE(ABORT, 'tracker-unknown: no such milestone'); END;

CREATE TRIGGER items_milestone_known_update BEFORE UPDATE OF milestone_id ON items
WHEN NOT EXISTS (SELECT 1 FROM milestones WHERE id = NEW.milestone_id)
BEGIN SELECT RAISE(ABORT, 'tracker-unknown: no such milestone'); END;

CREATE TRIGGER items_id_fixed BEFORE UPDATE OF id ON items
BEGIN SELECT RAISE(ABORT, 'tracker-invalid: a work item id never changes'); END;

-- Verified means acceptance evidence is linked: a passing sealed verdict from a
-- completed run; for a hardware item, that verdict's scope must be physical.
-- Re-checked on every update that leaves the item verified (also a change of
-- its hardware flag).
CREATE TRIGGER items_verified_insert BEFORE INSERT ON items
WHEN NEW.status = 'verified'
BEGIN SELECT RAISE(ABORT, 'tracker-evidence-required: a work item is verified only with passing evidence from a completed run linked to it'); END;

CREATE TRIGGER items_verified_update BEFORE UPDATE ON items
WHEN NEW.status = 'verified'
BEGIN
    SELECT RAISE(ABORT, 'tracker-evidence-required: a work item is verified only with passing evidence from a completed run linked to it')
    WHERE NOT EXISTS (
        SELECT 1 FROM item_evidence l
        JOIN evidence e ON e.id = l.evidence_id
        JOIN runs r ON r.id = e.run_id
        WHERE l.item_id = NEW.id AND e.verdict = 'pass' AND r.state = 'completed');
    SELECT RAISE(ABORT, 'tracker-hardware-evidence: a hardware work item is verified only with a sealed pass of scope physical from a completed run')
    WHERE NEW.hardware <> 0 AND NOT EXISTS (
        SELECT 1 FROM item_evidence l
        JOIN evidence e ON e.id = l.evidence_id
        JOIN runs r ON r.id = e.run_id
        WHERE l.item_id = NEW.id AND e.verdict = 'pass' AND e.scope = 'physical' AND r.state = 'completed');
END;

CREATE TRIGGER items_delete BEFORE DELETE ON items
WHEN OLD.status = 'verified'
  OR EXISTS (SELECT 1 FROM item_evidence WHERE item_id = OLD.id)
  OR EXISTS (SELECT 1 FROM item_deps WHERE depends_on = OLD.id)
  OR EXISTS (SELECT 1 FROM experiments WHERE item_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-invalid: a work item with evidence, dependants or experiments cannot be deleted'); END;

CREATE TRIGGER item_deps_insert BEFORE INSERT ON item_deps
BEGIN
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

CREATE TRIGGER item_deps_update BEFORE UPDATE ON item_deps
BEGIN SELECT RAISE(ABORT, 'tracker-invalid: dependencies are added or removed, never edited'); END;

-- ---------------------------------------------------------------------------
-- Runs: immutable once terminal
-- ---------------------------------------------------------------------------

CREATE TRIGGER runs_insert BEFORE INSERT ON runs
BEGIN
    SELECT RAISE(ABORT, 'tracker-invalid: a run starts in state running')
    WHERE NEW.state <> 'running' OR NEW.finished_at IS NOT NULL;
    SELECT RAISE(ABORT, 'tracker-physical-pass: a physical pass is recorded only when a completed run has a sealed pass of scope physical attached')
    WHERE NEW.physical_pass <> 0;
    SELECT RAISE(ABORT, 'tracker-unknown: no such experiment')
    WHERE NEW.experiment_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM experiments WHERE id = NEW.experiment_id);
END;

CREATE TRIGGER runs_update BEFORE UPDATE ON runs
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE OLD.state <> 'running';
    SELECT RAISE(ABORT, 'tracker-invalid: a run id never changes')
    WHERE NEW.id IS NOT OLD.id;
    SELECT RAISE(ABORT, 'tracker-invalid: a finished run has a finish time, a running one none')
    WHERE (NEW.state = 'running') <> (NEW.finished_at IS NULL);
    SELECT RAISE(ABORT, 'tracker-physical-pass: a physical pass is recorded only when a completed run has a sealed pass of scope physical attached')
    WHERE NEW.physical_pass <> 0 AND (NEW.state <> 'completed' OR NOT EXISTS (
        SELECT 1 FROM evidence e
        WHERE e.run_id = NEW.id AND e.verdict = 'pass' AND e.scope = 'physical'));
    SELECT RAISE(ABORT, 'tracker-unknown: no such experiment')
    WHERE NEW.experiment_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM experiments WHERE id = NEW.experiment_id);
END;

CREATE TRIGGER runs_delete BEFORE DELETE ON runs
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE OLD.state <> 'running';
    SELECT RAISE(ABORT, 'tracker-invalid: a run with evidence, measurements or devices cannot be deleted')
    WHERE EXISTS (SELECT 1 FROM evidence WHERE run_id = OLD.id)
       OR EXISTS (SELECT 1 FROM measurements WHERE run_id = OLD.id)
       OR EXISTS (SELECT 1 FROM run_devices WHERE run_id = OLD.id);
END;

-- ---------------------------------------------------------------------------
-- Evidence: never edited; attached only to a running run; a stream id keeps the
-- seal and digest it was first attached with.
-- ---------------------------------------------------------------------------

CREATE TRIGGER evidence_insert BEFORE INSERT ON evidence
BEGIN
    SELECT RAISE(ABORT, 'tracker-stream-changed: this stream was attached before with a different seal or file digest')
    WHERE EXISTS (SELECT 1 FROM evidence e WHERE e.stream_id = NEW.stream_id
                  AND (e.seal_head <> NEW.seal_head OR e.file_digest <> NEW.file_digest));
    SELECT RAISE(ABORT, 'tracker-stream-attached: this stream is already evidence for another run')
    WHERE EXISTS (SELECT 1 FROM evidence e WHERE e.stream_id = NEW.stream_id AND e.run_id <> NEW.run_id);
    -- The same stream, unchanged, on the same run: nothing to do.
    SELECT RAISE(IGNORE)
    WHERE EXISTS (SELECT 1 FROM evidence e WHERE e.stream_id = NEW.stream_id);
    SELECT RAISE(ABORT, 'tracker-unknown: no such run')
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id);
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running';
    SELECT RAISE(ABORT, 'tracker-key-untrusted: the tracker holds trusted keys and this stream is not signed by one of them')
    WHERE EXISTS (SELECT 1 FROM trusted_keys)
      AND (NEW.signed = 0 OR NOT EXISTS (SELECT 1 FROM trusted_keys k WHERE k.key_id = NEW.key_id));
END;

CREATE TRIGGER evidence_update BEFORE UPDATE ON evidence
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running';
    SELECT RAISE(ABORT, 'tracker-evidence-immutable: attached evidence is never edited; detach it while the run is running and attach again');
END;

CREATE TRIGGER evidence_delete BEFORE DELETE ON evidence
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running';
    SELECT RAISE(ABORT, 'tracker-evidence-required: this evidence is linked to a work item')
    WHERE EXISTS (SELECT 1 FROM item_evidence WHERE evidence_id = OLD.id);
END;

CREATE TRIGGER item_evidence_insert BEFORE INSERT ON item_evidence
BEGIN
    SELECT RAISE(ABORT, 'tracker-unknown: no such work item')
    WHERE NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id);
    SELECT RAISE(ABORT, 'tracker-unknown: no such evidence')
    WHERE NOT EXISTS (SELECT 1 FROM evidence WHERE id = NEW.evidence_id);
END;

CREATE TRIGGER item_evidence_update BEFORE UPDATE ON item_evidence
BEGIN SELECT RAISE(ABORT, 'tracker-evidence-immutable: evidence links are added or removed, never edited'); END;

CREATE TRIGGER item_evidence_delete BEFORE DELETE ON item_evidence
WHEN (SELECT status FROM items WHERE id = OLD.item_id) = 'verified'
BEGIN SELECT RAISE(ABORT, 'tracker-evidence-required: a verified work item keeps the evidence it was verified with'); END;

-- ---------------------------------------------------------------------------
-- What belongs to a run freezes with it: measurements, devices, the device rows
-- a terminal run used.
-- ---------------------------------------------------------------------------

CREATE TRIGGER measurements_insert BEFORE INSERT ON measurements
BEGIN
    SELECT RAISE(ABORT, 'tracker-unknown: no such run')
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id);
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running';
END;

CREATE TRIGGER measurements_update BEFORE UPDATE ON measurements
WHEN (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running'
  OR (SELECT state FROM runs WHERE id = NEW.run_id) IS NOT 'running'
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)'); END;

CREATE TRIGGER measurements_delete BEFORE DELETE ON measurements
WHEN (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running'
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)'); END;

CREATE TRIGGER run_devices_insert BEFORE INSERT ON run_devices
BEGIN
    SELECT RAISE(ABORT, 'tracker-unknown: no such run or device')
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id)
       OR NOT EXISTS (SELECT 1 FROM devices WHERE id = NEW.device_id);
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running';
END;

CREATE TRIGGER run_devices_update BEFORE UPDATE ON run_devices
WHEN (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running'
  OR (SELECT state FROM runs WHERE id = NEW.run_id) IS NOT 'running'
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)'); END;

CREATE TRIGGER run_devices_delete BEFORE DELETE ON run_devices
WHEN (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running'
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)'); END;

CREATE TRIGGER devices_update BEFORE UPDATE ON devices
WHEN EXISTS (SELECT 1 FROM run_devices rd JOIN runs r ON r.id = rd.run_id
             WHERE rd.device_id = OLD.id AND r.state <> 'running')
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: a device used by a terminal run is part of its record'); END;

CREATE TRIGGER devices_delete BEFORE DELETE ON devices
WHEN EXISTS (SELECT 1 FROM run_devices WHERE device_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: a device used by a run is part of its record'); END;

CREATE TRIGGER experiments_delete BEFORE DELETE ON experiments
WHEN EXISTS (SELECT 1 FROM runs WHERE experiment_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: an experiment with runs cannot be deleted'); END;

CREATE TRIGGER experiments_update_id BEFORE UPDATE OF id ON experiments
WHEN EXISTS (SELECT 1 FROM runs WHERE experiment_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-run-immutable: an experiment with runs keeps its id'); END;

-- Trusted keys are added, never edited; one that signed attached evidence stays.
CREATE TRIGGER trusted_keys_update BEFORE UPDATE ON trusted_keys
BEGIN SELECT RAISE(ABORT, 'tracker-key-untrusted: trusted keys are added, never edited'); END;

CREATE TRIGGER trusted_keys_delete BEFORE DELETE ON trusted_keys
WHEN EXISTS (SELECT 1 FROM evidence WHERE key_id = OLD.key_id)
BEGIN SELECT RAISE(ABORT, 'tracker-key-untrusted: a key that signed attached evidence stays trusted'); END;
