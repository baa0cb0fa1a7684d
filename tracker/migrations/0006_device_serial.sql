-- alpha tracker schema, migration 6: a GPU's serial beside its UUID (issue 35).
--
-- `devices.serial` is the card's serial as the recorder read it through NVML
-- (`device.observed`, each GPU's `health.serial`) in the first stream attached
-- that shows it, so a card is followed across runs (and across a UUID that
-- changes, should a card ever be re-flashed). It is set once, from null, also on
-- a device a finished run used (it changes nothing the run's record says: that
-- card had that serial); once set it never changes (tracker-device-serial).
-- Every other column of a device a terminal run used stays frozen, and a device's
-- id and UUID are never replaced, as migration 3 made them.

ALTER TABLE devices ADD COLUMN serial TEXT CHECK (serial IS NULL OR length(serial) > 0);

DROP TRIGGER IF EXISTS devices_update;

CREATE TRIGGER devices_update BEFORE UPDATE ON devices
BEGIN
    SELECT RAISE(ABORT, 'tracker-device-serial: a GPU''s serial, once recorded beside its UUID, never changes')
    WHERE OLD.serial IS NOT NULL AND NEW.serial IS NOT OLD.serial;
    SELECT RAISE(ABORT, 'tracker-run-immutable: a device used by a terminal run is part of its record')
    WHERE EXISTS (SELECT 1 FROM run_devices rd JOIN runs r ON r.id = rd.run_id
                  WHERE rd.device_id = OLD.id AND r.state <> 'running')
      AND NOT (NEW.id IS OLD.id AND NEW.product IS OLD.product AND NEW.uuid IS OLD.uuid
               AND NEW.driver IS OLD.driver AND NEW.created_at IS OLD.created_at
               AND OLD.serial IS NULL AND NEW.serial IS NOT NULL);
    SELECT RAISE(ABORT, 'tracker-invalid: a device id never changes')
    WHERE NEW.id IS NOT OLD.id;
    SELECT RAISE(ABORT, 'tracker-exists: this device id or UUID is taken (a row is never replaced)')
    WHERE NEW.uuid IS NOT OLD.uuid AND EXISTS (SELECT 1 FROM devices WHERE uuid = NEW.uuid);
END;
