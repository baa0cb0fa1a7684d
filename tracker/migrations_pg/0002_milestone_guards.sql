-- alpha tracker schema for PostgreSQL, migration 2: milestones keep their items
-- (tracker/migrations/0002_milestone_guards.sql). PostgreSQL enforces the
-- foreign keys as well; these triggers refuse first, with the tracker's names.

CREATE FUNCTION milestones_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM items WHERE milestone_id = OLD.id) THEN
        PERFORM tracker_refuse('tracker-invalid: a milestone with work items cannot be deleted');
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER milestones_delete BEFORE DELETE ON milestones FOR EACH ROW EXECUTE FUNCTION milestones_delete();

CREATE FUNCTION milestones_update_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id AND EXISTS (SELECT 1 FROM items WHERE milestone_id = OLD.id) THEN
        PERFORM tracker_refuse('tracker-invalid: a milestone with work items keeps its id');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER milestones_update_id BEFORE UPDATE OF id ON milestones FOR EACH ROW EXECUTE FUNCTION milestones_update_id();

CREATE FUNCTION experiments_item_known() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.item_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id) THEN
        PERFORM tracker_refuse('tracker-unknown: no such work item');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER experiments_item_known BEFORE INSERT ON experiments FOR EACH ROW EXECUTE FUNCTION experiments_item_known();
