-- alpha tracker schema for PostgreSQL, migration 6: a GPU's serial beside its UUID
-- (tracker/migrations/0006_device_serial.sql says why). Set once, from null, also
-- on a device a finished run used; never changed after.

ALTER TABLE devices ADD COLUMN serial TEXT CHECK (serial IS NULL OR length(serial) > 0);

CREATE OR REPLACE FUNCTION devices_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    serial_only boolean := NEW.id IS NOT DISTINCT FROM OLD.id AND NEW.product IS NOT DISTINCT FROM OLD.product
        AND NEW.uuid IS NOT DISTINCT FROM OLD.uuid AND NEW.driver IS NOT DISTINCT FROM OLD.driver
        AND NEW.created_at IS NOT DISTINCT FROM OLD.created_at AND OLD.serial IS NULL AND NEW.serial IS NOT NULL;
BEGIN
    IF OLD.serial IS NOT NULL AND NEW.serial IS DISTINCT FROM OLD.serial THEN
        PERFORM tracker_refuse('tracker-device-serial: a GPU''s serial, once recorded beside its UUID, never changes');
    END IF;
    IF NOT serial_only AND EXISTS (SELECT 1 FROM run_devices rd JOIN runs r ON r.id = rd.run_id
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
