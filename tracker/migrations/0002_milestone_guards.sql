-- alpha tracker schema, migration 2: milestones keep their items.
--
-- Without foreign keys (a plain `sqlite3` shell), deleting or renaming a
-- milestone would orphan its items; an experiment could name an item that
-- does not exist.

CREATE TRIGGER milestones_delete BEFORE DELETE ON milestones
WHEN EXISTS (SELECT 1 FROM items WHERE milestone_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-invalid: a milestone with work items cannot be deleted'); END;

CREATE TRIGGER milestones_update_id BEFORE UPDATE OF id ON milestones
WHEN NEW.id IS NOT OLD.id AND EXISTS (SELECT 1 FROM items WHERE milestone_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'tracker-invalid: a milestone with work items keeps its id'); END;

CREATE TRIGGER experiments_item_known BEFORE INSERT ON experiments
WHEN NEW.item_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM items WHERE id = NEW.item_id)
BEGIN SELECT RAISE(ABORT, 'tracker-unknown: no such work item'); END;
