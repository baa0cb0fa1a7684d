-- alpha tracker schema, migration 7: a fleet session's members beside its run (issue 37).
--
-- Attaching a session (its folder, or its coordinating stream `session.aos`) to
-- a run records every member the session expected, at any depth (`rack-0/node-3`),
-- as `alpha observe session verify` judged it from the folder: `proven` (its
-- stream's BLAKE3 in `digest`), `did-not-run` or `not-proven` (the reason). So the
-- run says what has run, on what, and what has not. The rows are written once:
-- the same member attached again unchanged is a no-op, with another status or
-- digest `tracker-stream-changed`, on another run `tracker-stream-attached`; never
-- edited or removed; a terminal run takes none. A physical pass is refused while
-- any member of the run's sessions is not proven (`tracker-session-unproven`).

CREATE TABLE session_members (
    origin       TEXT NOT NULL CHECK (length(origin) > 0),
    member       TEXT NOT NULL CHECK (length(member) > 0),
    run_id       TEXT NOT NULL REFERENCES runs(id),
    position     INTEGER NOT NULL CHECK (position >= 0),
    path         TEXT NOT NULL,
    root         TEXT NOT NULL CHECK (length(root) > 0),
    kind         TEXT NOT NULL CHECK (kind IN ('stream', 'session')),
    status       TEXT NOT NULL CHECK (status IN ('proven', 'did-not-run', 'not-proven')),
    reason       TEXT,
    digest       TEXT CHECK (digest IS NULL OR length(digest) = 64),
    attached_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (origin, member),
    CHECK ((status = 'proven') = (reason IS NULL)),
    CHECK ((status = 'proven') = (digest IS NOT NULL))
) STRICT;

CREATE INDEX session_members_run ON session_members(run_id);

-- Rules, in order: a member keeps the status and digest it was first attached
-- with; a session is evidence for one run; the same unchanged member on the same
-- run is a no-op; the run exists and is running.
CREATE TRIGGER session_members_insert BEFORE INSERT ON session_members
BEGIN
    SELECT RAISE(ABORT, 'tracker-stream-changed: this session member was attached before with another status, digest or root')
    WHERE EXISTS (SELECT 1 FROM session_members s WHERE s.origin = NEW.origin AND s.member = NEW.member
                  AND (s.status IS NOT NEW.status OR s.digest IS NOT NEW.digest OR s.root IS NOT NEW.root
                       OR s.kind IS NOT NEW.kind));
    SELECT RAISE(ABORT, 'tracker-stream-attached: this session is already evidence for another run')
    WHERE EXISTS (SELECT 1 FROM session_members s WHERE s.origin = NEW.origin AND s.run_id <> NEW.run_id);
    SELECT RAISE(IGNORE)
    WHERE EXISTS (SELECT 1 FROM session_members s WHERE s.origin = NEW.origin AND s.member = NEW.member);
    SELECT RAISE(ABORT, 'tracker-unknown: no such run')
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id);
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = NEW.run_id) <> 'running';
END;

-- Rule: a session's members, once attached, are never edited.
CREATE TRIGGER session_members_update BEFORE UPDATE ON session_members
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running';
    SELECT RAISE(ABORT, 'tracker-evidence-immutable: a session''s attached members are never edited');
END;

-- Rule: a session's members are never removed (one that did not run stays counted).
CREATE TRIGGER session_members_delete BEFORE DELETE ON session_members
BEGIN
    SELECT RAISE(ABORT, 'tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)')
    WHERE (SELECT state FROM runs WHERE id = OLD.run_id) IS NOT 'running';
    SELECT RAISE(ABORT, 'tracker-evidence-immutable: a session''s attached members are never removed');
END;

-- Rule: a physical pass is recorded only when every member of the run's sessions is proven.
CREATE TRIGGER runs_update_sessions BEFORE UPDATE ON runs
WHEN OLD.state = 'running' AND NEW.physical_pass <> 0
BEGIN
    SELECT RAISE(ABORT, 'tracker-session-unproven: a physical pass is recorded only when every member of the run''s sessions is proven')
    WHERE EXISTS (SELECT 1 FROM session_members s WHERE s.run_id = NEW.id AND s.status <> 'proven');
END;
