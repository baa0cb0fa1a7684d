-- alpha tracker schema for PostgreSQL, migration 7: a fleet session's members beside
-- its run (tracker/migrations/0007_session_members.sql says why). Written once, never
-- edited or removed; a physical pass is refused while any member is not proven.

CREATE TABLE session_members (
    origin       text COLLATE "C" NOT NULL CHECK (length(origin) > 0),
    member       text COLLATE "C" NOT NULL CHECK (length(member) > 0),
    run_id       text COLLATE "C" NOT NULL REFERENCES runs(id),
    position     bigint NOT NULL CHECK (position >= 0),
    path         text NOT NULL,
    root         text NOT NULL CHECK (length(root) > 0),
    kind         text NOT NULL CHECK (kind IN ('stream', 'session')),
    status       text NOT NULL CHECK (status IN ('proven', 'did-not-run', 'not-proven')),
    reason       text,
    digest       text CHECK (digest IS NULL OR length(digest) = 64),
    attached_at  text NOT NULL DEFAULT tracker_now(),
    PRIMARY KEY (origin, member),
    CHECK ((status = 'proven') = (reason IS NULL)),
    CHECK ((status = 'proven') = (digest IS NOT NULL))
);

CREATE INDEX session_members_run ON session_members(run_id);

CREATE FUNCTION session_members_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM session_members s WHERE s.origin = NEW.origin AND s.member = NEW.member
               AND (s.status IS DISTINCT FROM NEW.status OR s.digest IS DISTINCT FROM NEW.digest
                    OR s.root IS DISTINCT FROM NEW.root OR s.kind IS DISTINCT FROM NEW.kind)) THEN
        PERFORM tracker_refuse('tracker-stream-changed: this session member was attached before with another status, digest or root');
    END IF;
    IF EXISTS (SELECT 1 FROM session_members s WHERE s.origin = NEW.origin AND s.run_id <> NEW.run_id) THEN
        PERFORM tracker_refuse('tracker-stream-attached: this session is already evidence for another run');
    END IF;
    IF EXISTS (SELECT 1 FROM session_members s WHERE s.origin = NEW.origin AND s.member = NEW.member) THEN
        RETURN NULL;
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

CREATE TRIGGER session_members_insert BEFORE INSERT ON session_members FOR EACH ROW EXECUTE FUNCTION session_members_insert();

CREATE FUNCTION session_members_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT state FROM runs WHERE id = OLD.run_id) IS DISTINCT FROM 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    PERFORM tracker_refuse('tracker-evidence-immutable: a session''s attached members are never edited');
    RETURN NEW;
END
$$;

CREATE TRIGGER session_members_update BEFORE UPDATE ON session_members FOR EACH ROW EXECUTE FUNCTION session_members_update();

CREATE FUNCTION session_members_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT state FROM runs WHERE id = OLD.run_id) IS DISTINCT FROM 'running' THEN
        PERFORM tracker_refuse('tracker-run-immutable: a run is immutable once terminal (completed, failed or inconclusive)');
    END IF;
    PERFORM tracker_refuse('tracker-evidence-immutable: a session''s attached members are never removed');
    RETURN OLD;
END
$$;

CREATE TRIGGER session_members_delete BEFORE DELETE ON session_members FOR EACH ROW EXECUTE FUNCTION session_members_delete();

CREATE FUNCTION runs_update_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'running' AND NEW.physical_pass <> 0
       AND EXISTS (SELECT 1 FROM session_members s WHERE s.run_id = NEW.id AND s.status <> 'proven') THEN
        PERFORM tracker_refuse('tracker-session-unproven: a physical pass is recorded only when every member of the run''s sessions is proven');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER runs_update_sessions BEFORE UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION runs_update_sessions();
CREATE TRIGGER session_members_write_lock BEFORE INSERT OR DELETE OR UPDATE ON session_members FOR EACH STATEMENT EXECUTE FUNCTION tracker_write_lock_statement();
CREATE TRIGGER session_members_no_truncate BEFORE TRUNCATE ON session_members FOR EACH STATEMENT EXECUTE FUNCTION tracker_no_truncate();
