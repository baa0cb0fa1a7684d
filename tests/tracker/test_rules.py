"""The tracker's rules hold in the database itself: plain clients (sqlite3, psycopg, shells) are held to them.

Every test runs on both backends (the ``tracker_backend`` fixture): SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.helpers.backends import PlainClient, integrity_errors
from tracker.ids import new_run_id
from tracker.testing import ExampleTracker

_EVIDENCE = (
    "INSERT INTO evidence (run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope, gate,"
    " recorded_at, devices)"
    " VALUES (?, ?, '/nowhere.aos', ?, ?, 100, 5, ?, ?, 'distributed-device', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),"
    " '[]')"
)


@pytest.fixture
def t(example_built: tuple[str, ExampleTracker], example_copy: str) -> Iterator[ExampleTracker]:
    """A fresh copy of the example tracker (runs: static completed, physical pass, open running),
    opened with a plain client of its backend (sqlite3: no foreign keys, no busy timeout)."""
    _source, proto = example_built
    db = example_copy
    conn = PlainClient(db)
    yield ExampleTracker(db, conn, proto.static_run, proto.physical_run, proto.open_run, {}, proto.stream_ids)  # type: ignore[arg-type]
    conn.close()


def new_run(conn: PlainClient) -> str:
    """A running run of lane distributed-device, inserted with plain SQL."""
    run = new_run_id()
    conn.execute("INSERT INTO runs (id, lane) VALUES (?, 'distributed-device')", (run,))
    return run


def refused(conn: PlainClient, sql: str, args: tuple[object, ...] = ()) -> str:
    """Run ``sql`` expecting the database to refuse it; return the refusal's message."""
    with pytest.raises(integrity_errors()) as info:
        conn.execute(sql, args)
    conn.rollback()
    return str(info.value)


def link(conn: PlainClient, item: str, run: str) -> None:
    conn.execute(
        "INSERT INTO item_evidence (item_id, evidence_id) SELECT ?, id FROM evidence WHERE run_id = ?", (item, run)
    )


def digest(c: str) -> str:
    return c * 64


class TestRunImmutable:
    def test_terminal_run_cannot_be_updated(self, t: ExampleTracker) -> None:
        """No column of a completed run can change, its state included."""
        for sql in (
            "UPDATE runs SET state = 'failed' WHERE id = ?",
            "UPDATE runs SET note = 'edited' WHERE id = ?",
            "UPDATE runs SET state = 'running', finished_at = NULL WHERE id = ?",
        ):
            assert refused(t.conn, sql, (t.static_run,)).startswith("tracker-run-immutable: ")
        sql = "UPDATE runs SET physical_pass = 0 WHERE id = ?"
        assert refused(t.conn, sql, (t.physical_run,)).startswith("tracker-run-immutable: ")

    def test_terminal_run_cannot_be_deleted(self, t: ExampleTracker) -> None:
        """A completed run cannot be deleted."""
        assert refused(t.conn, "DELETE FROM runs WHERE id = ?", (t.static_run,)).startswith("tracker-run-immutable: ")

    def test_terminal_runs_evidence_cannot_change(self, t: ExampleTracker) -> None:
        """The evidence of a terminal run is neither edited, deleted nor added to."""
        assert refused(t.conn, "UPDATE evidence SET verdict = 'fail' WHERE run_id = ?", (t.static_run,)).startswith(
            "tracker-run-immutable"
        )
        sql = "UPDATE evidence SET path = '/elsewhere' WHERE run_id = ?"
        assert refused(t.conn, sql, (t.physical_run,)).startswith("tracker-run-immutable")
        sql = "DELETE FROM evidence WHERE run_id = ?"
        assert refused(t.conn, sql, (t.physical_run,)).startswith("tracker-run-immutable")
        message = refused(t.conn, _EVIDENCE, (t.static_run, "f" * 32, digest("a"), digest("b"), "pass", "physical"))
        assert message.startswith("tracker-run-immutable")

    def test_running_runs_evidence_is_never_removed(self, t: ExampleTracker) -> None:
        """Evidence of a running run stays too: a failing stream cannot be dropped before the run finishes."""
        sql = "DELETE FROM evidence WHERE run_id = ?"
        assert refused(t.conn, sql, (t.open_run,)).startswith("tracker-evidence-immutable: ")

    def test_terminal_runs_measurements_and_devices_freeze(self, t: ExampleTracker) -> None:
        """Measurements and devices of a terminal run are part of its record."""
        run = new_run(t.conn)
        t.conn.execute("INSERT INTO devices (product, uuid) VALUES ('RTX 3090', 'GPU-1')")
        t.conn.execute("INSERT INTO run_devices (run_id, device_id) VALUES (?, 1)", (run,))
        t.conn.execute("INSERT INTO measurements (run_id, name, value) VALUES (?, 'updates', 5)", (run,))
        t.conn.commit()
        t.conn.execute("UPDATE runs SET state = 'failed', finished_at = 'now' WHERE id = ?", (run,))
        t.conn.commit()
        sql = "INSERT INTO measurements (run_id, name, value) VALUES (?, 'x', 1)"
        assert refused(t.conn, sql, (run,)).startswith("tracker-run-immutable")
        assert refused(t.conn, "UPDATE measurements SET value = 6").startswith("tracker-run-immutable")
        assert refused(t.conn, "DELETE FROM run_devices").startswith("tracker-run-immutable")
        assert refused(t.conn, "UPDATE devices SET driver = '999'").startswith("tracker-run-immutable")

    def test_a_devices_serial_is_set_once_and_never_changes(self, t: ExampleTracker) -> None:
        """A GPU's serial beside its UUID (migration 6): set once from null, also on a device a terminal run used
        (nothing else of it); never changed or removed after; never empty."""
        run = new_run(t.conn)
        t.conn.execute("INSERT INTO devices (product, uuid) VALUES ('NVIDIA H200', 'GPU-serial')")
        dev = t.conn.execute("SELECT id FROM devices WHERE uuid = 'GPU-serial'").fetchone()[0]
        t.conn.execute("INSERT INTO run_devices (run_id, device_id) VALUES (?, ?)", (run, dev))
        t.conn.commit()
        t.conn.execute("UPDATE runs SET state = 'failed', finished_at = 'now' WHERE id = ?", (run,))
        t.conn.commit()
        sql = "UPDATE devices SET serial = '1653924043232', driver = '999' WHERE id = ?"
        assert refused(t.conn, sql, (dev,)).startswith("tracker-run-immutable")
        t.conn.execute("UPDATE devices SET serial = '1653924043232' WHERE id = ?", (dev,))
        t.conn.commit()
        for sql in (
            "UPDATE devices SET serial = 'forged' WHERE id = ?",
            "UPDATE devices SET serial = NULL WHERE id = ?",
        ):
            assert refused(t.conn, sql, (dev,)).startswith("tracker-device-serial")
        assert "1653924043232" == t.conn.execute("SELECT serial FROM devices WHERE id = ?", (dev,)).fetchone()[0]
        refused(t.conn, "INSERT INTO devices (product, uuid, serial) VALUES ('NVIDIA H200', 'GPU-empty', '')")

    def test_running_run_can_change(self, t: ExampleTracker) -> None:
        """A running run may be edited and finished (once)."""
        t.conn.execute("UPDATE runs SET note = 'retry' WHERE id = ?", (t.open_run,))
        t.conn.execute("UPDATE runs SET state = 'inconclusive', finished_at = 'now' WHERE id = ?", (t.open_run,))
        t.conn.commit()
        sql = "UPDATE runs SET state = 'completed' WHERE id = ?"
        assert refused(t.conn, sql, (t.open_run,)).startswith("tracker-run-immutable")

    def test_start_lane_and_id_fixed(self, t: ExampleTracker) -> None:
        """A running run's id and start time never change, nor its lane once it has evidence."""
        for sql, name in (
            ("UPDATE runs SET started_at = '2000-01-01T00:00:00.000Z' WHERE id = ?", "tracker-invalid"),
            ("UPDATE runs SET lane = 'exit-zero' WHERE id = ?", "tracker-evidence-lane"),
            ("UPDATE runs SET id = '" + new_run_id() + "' WHERE id = ?", "tracker-invalid"),
        ):
            assert refused(t.conn, sql, (t.open_run,)).startswith(f"{name}: ")

    def test_a_run_starts_running(self, t: ExampleTracker) -> None:
        """A run cannot be inserted already terminal."""
        sql = "INSERT INTO runs (id, state, finished_at) VALUES (?, 'completed', 'now')"
        assert refused(t.conn, sql, (new_run_id(),)).startswith("tracker-invalid: ")

    def test_run_ids_are_text_uuids(self, t: ExampleTracker) -> None:
        """A run id is a UUID's text: an integer or any other text is refused."""
        for value in (4, "4", "run-4", new_run_id().upper()):
            message = refused(t.conn, "INSERT INTO runs (id) VALUES (?)", (value,))
            assert re.search("CHECK constraint failed|violates check constraint", message)


class TestVerified:
    def test_item_needs_evidence(self, t: ExampleTracker) -> None:
        """An item without linked evidence cannot become verified."""
        message = refused(t.conn, "UPDATE items SET status = 'verified' WHERE id = 'N2'")
        assert message.startswith("tracker-evidence-required: ")

    def test_item_cannot_be_inserted_verified(self, t: ExampleTracker) -> None:
        """An item cannot be born verified."""
        sql = "INSERT INTO items (id, title, milestone_id, status) VALUES ('N9', 't', 'M1', 'verified')"
        assert refused(t.conn, sql).startswith("tracker-evidence-required: ")

    def test_evidence_of_a_running_run_does_not_verify(self, t: ExampleTracker) -> None:
        """Evidence counts only once its run completed."""
        link(t.conn, "N2", t.open_run)
        assert refused(t.conn, "UPDATE items SET status = 'verified' WHERE id = 'N2'").startswith(
            "tracker-evidence-required"
        )

    def test_failing_evidence_does_not_verify(self, t: ExampleTracker) -> None:
        """A sealed fail is evidence, but not of acceptance."""
        run = new_run(t.conn)
        t.conn.execute(_EVIDENCE, (run, "e" * 32, digest("a"), digest("b"), "fail", "static"))
        t.conn.execute("UPDATE runs SET state = 'completed', finished_at = 'now' WHERE id = ?", (run,))
        link(t.conn, "N2", run)
        assert refused(t.conn, "UPDATE items SET status = 'verified' WHERE id = 'N2'").startswith(
            "tracker-evidence-required"
        )

    def test_one_pass_among_fails_does_not_verify(self, t: ExampleTracker) -> None:
        """A pass linked from a run that also has a failing stream is not acceptance (every stream must pass)."""
        run = new_run(t.conn)
        t.conn.execute(_EVIDENCE, (run, "e" * 32, digest("a"), digest("b"), "fail", "physical"))
        t.conn.execute(_EVIDENCE, (run, "d" * 32, digest("c"), digest("d"), "pass", "physical"))
        t.conn.execute("UPDATE runs SET state = 'completed', finished_at = 'now' WHERE id = ?", (run,))
        t.conn.execute(
            "INSERT INTO item_evidence (item_id, evidence_id) SELECT 'H1', id FROM evidence WHERE stream_id = ?",
            ("d" * 32,),
        )
        assert refused(t.conn, "UPDATE items SET status = 'verified' WHERE id = 'H1'").startswith(
            "tracker-evidence-required"
        )

    def test_passing_evidence_verifies(self, t: ExampleTracker) -> None:
        """A passing static stream from a completed run verifies a non-hardware item."""
        link(t.conn, "N2", t.static_run)
        t.conn.execute("UPDATE items SET status = 'verified' WHERE id = 'N2'")
        t.conn.commit()
        assert "verified" == t.conn.execute("SELECT status FROM items WHERE id = 'N2'").fetchone()[0]

    def test_hardware_item_refuses_static_pass(self, t: ExampleTracker) -> None:
        """A hardware item is not verified by a static-scope pass."""
        link(t.conn, "H1", t.static_run)
        message = refused(t.conn, "UPDATE items SET status = 'verified' WHERE id = 'H1'")
        assert message.startswith("tracker-hardware-evidence: ")

    def test_hardware_item_accepts_physical_pass(self, t: ExampleTracker) -> None:
        """A hardware item is verified by a physical pass from a completed run."""
        link(t.conn, "H1", t.physical_run)
        t.conn.execute("UPDATE items SET status = 'verified' WHERE id = 'H1'")
        t.conn.commit()

    def test_verified_item_cannot_become_hardware(self, t: ExampleTracker) -> None:
        """Turning a statically verified item into a hardware item is refused: its evidence no longer suffices."""
        link(t.conn, "N2", t.static_run)
        t.conn.execute("UPDATE items SET status = 'verified' WHERE id = 'N2'")
        t.conn.commit()
        message = refused(t.conn, "UPDATE items SET hardware = 1 WHERE id = 'N2'")
        assert message.startswith("tracker-hardware-evidence: ")

    def test_verified_item_keeps_its_evidence(self, t: ExampleTracker) -> None:
        """The evidence link of a verified item cannot be removed or edited."""
        link(t.conn, "N2", t.static_run)
        t.conn.execute("UPDATE items SET status = 'verified' WHERE id = 'N2'")
        t.conn.commit()
        assert refused(t.conn, "DELETE FROM item_evidence WHERE item_id = 'N2'").startswith("tracker-evidence-required")
        assert refused(t.conn, "UPDATE item_evidence SET evidence_id = 3").startswith("tracker-evidence-immutable")
        assert refused(t.conn, "DELETE FROM items WHERE id = 'N2'").startswith("tracker-invalid")


class TestPhysicalPass:
    _FINISH = "UPDATE runs SET state = 'completed', finished_at = 'now', physical_pass = 1 WHERE id = ?"

    def test_needs_a_physical_stream(self, t: ExampleTracker) -> None:
        """A run with only a static pass attached cannot be recorded as a physical pass."""
        assert refused(t.conn, self._FINISH, (t.open_run,)).startswith("tracker-physical-pass: ")

    def test_needs_completed(self, t: ExampleTracker) -> None:
        """A physical pass is recorded only on a completed run."""
        run = new_run(t.conn)
        t.conn.execute(_EVIDENCE, (run, "d" * 32, digest("a"), digest("b"), "pass", "physical"))
        t.conn.commit()
        for state in ("failed", "inconclusive", "running"):
            finished = "NULL" if state == "running" else "'now'"
            sql = f"UPDATE runs SET state = '{state}', finished_at = {finished}, physical_pass = 1 WHERE id = ?"
            assert refused(t.conn, sql, (run,)).startswith("tracker-physical-pass: ")

    def test_physical_stream_must_pass(self, t: ExampleTracker) -> None:
        """An inconclusive physical-scope stream is not a physical pass."""
        run = new_run(t.conn)
        t.conn.execute(_EVIDENCE, (run, "d" * 32, digest("a"), digest("b"), "inconclusive", "physical"))
        assert refused(t.conn, self._FINISH, (run,)).startswith("tracker-physical-pass: ")

    def test_every_stream_must_pass(self, t: ExampleTracker) -> None:
        """A physical pass among failing streams of the same run is not a physical pass."""
        run = new_run(t.conn)
        t.conn.execute(_EVIDENCE, (run, "d" * 32, digest("a"), digest("b"), "pass", "physical"))
        t.conn.execute(_EVIDENCE, (run, "e" * 32, digest("c"), digest("d"), "fail", "physical"))
        assert refused(t.conn, self._FINISH, (run,)).startswith("tracker-physical-pass: ")

    def test_cannot_be_inserted(self, t: ExampleTracker) -> None:
        """A run cannot be inserted as a physical pass."""
        sql = "INSERT INTO runs (id, physical_pass) VALUES (?, 1)"
        assert refused(t.conn, sql, (new_run_id(),)).startswith("tracker-physical-pass: ")

    def test_with_a_physical_stream(self, t: ExampleTracker) -> None:
        """With a passing physical stream attached, completing as a physical pass is accepted."""
        run = new_run(t.conn)
        t.conn.execute(_EVIDENCE, (run, "d" * 32, digest("a"), digest("b"), "pass", "physical"))
        t.conn.execute(self._FINISH, (run,))
        t.conn.commit()


class TestStreamSeal:
    def test_same_stream_different_head_refused(self, t: ExampleTracker) -> None:
        """A stream id attached before cannot come back with another seal head."""
        sid = t.stream_ids["open"]
        digest_now = t.conn.execute("SELECT file_digest FROM evidence WHERE stream_id = ?", (sid,)).fetchone()[0]
        message = refused(t.conn, _EVIDENCE, (t.open_run, sid, digest("0"), digest_now, "pass", "static"))
        assert message.startswith("tracker-stream-changed: ")

    def test_same_stream_different_file_digest_refused(self, t: ExampleTracker) -> None:
        """A stream id attached before cannot come back with another file digest."""
        sid = t.stream_ids["open"]
        head = t.conn.execute("SELECT seal_head FROM evidence WHERE stream_id = ?", (sid,)).fetchone()[0]
        message = refused(t.conn, _EVIDENCE, (t.open_run, sid, head, digest("0"), "pass", "static"))
        assert message.startswith("tracker-stream-changed: ")

    def test_same_stream_other_run_refused(self, t: ExampleTracker) -> None:
        """A stream is evidence for one run only."""
        row = t.conn.execute("SELECT seal_head, file_digest FROM evidence WHERE run_id = ?", (t.open_run,)).fetchone()
        run = new_run(t.conn)
        message = refused(t.conn, _EVIDENCE, (run, t.stream_ids["open"], row[0], row[1], "pass", "static"))
        assert message.startswith("tracker-stream-attached: ")

    def test_same_stream_unchanged_is_a_no_op(self, t: ExampleTracker) -> None:
        """Attaching the identical stream to the same run again inserts nothing."""
        row = t.conn.execute(
            "SELECT stream_id, seal_head, file_digest FROM evidence WHERE run_id = ?", (t.open_run,)
        ).fetchone()
        cur = t.conn.execute(_EVIDENCE, (t.open_run, row[0], row[1], row[2], "pass", "static"))
        assert 0 == cur.rowcount
        assert 3 == t.conn.execute("SELECT count(*) FROM evidence").fetchone()[0]

    def test_evidence_is_never_edited(self, t: ExampleTracker) -> None:
        """Evidence of a running run is not edited either."""
        message = refused(t.conn, "UPDATE evidence SET scope = 'physical' WHERE run_id = ?", (t.open_run,))
        assert message.startswith("tracker-evidence-immutable: ")


class TestWithoutForeignKeys:
    def test_unknown_references_refused(self, t: ExampleTracker) -> None:
        """Triggers refuse dangling references even with foreign keys off."""
        if t.conn.backend == "sqlite":
            assert 0 == t.conn.execute("PRAGMA foreign_keys").fetchone()[0]
        message = refused(t.conn, _EVIDENCE, (new_run_id(), "c" * 32, digest("a"), digest("b"), "pass", "physical"))
        assert message.startswith("tracker-unknown: ")
        sql = "INSERT INTO items (id, title, milestone_id) VALUES ('N8', 't', 'M9')"
        assert refused(t.conn, sql).startswith("tracker-unknown: ")

    def test_dependency_cycle_refused(self, t: ExampleTracker) -> None:
        """A dependency that closes a cycle is refused."""
        assert refused(t.conn, "INSERT INTO item_deps VALUES ('N1', 'N3')").startswith("tracker-dependency-cycle: ")
        assert refused(t.conn, "INSERT INTO item_deps VALUES ('N1', 'N1')").startswith("tracker-dependency-cycle: ")


def shell(db: str) -> list[str]:
    """The backend's stock shell, taking one SQL string as its last argument: `sqlite3 DB`, or `psql URL -c`."""
    if db.startswith("postgresql://"):
        from tracker.pglocal import server_binaries

        return [str(server_binaries() / "psql"), "--no-psqlrc", "-v", "ON_ERROR_STOP=1", db, "-c"]
    if shutil.which("sqlite3") is None:
        pytest.skip("no sqlite3 shell")
    return ["sqlite3", db]


class TestShell:
    def test_shell_is_held_to_the_rules(self, t: ExampleTracker) -> None:
        """The stock shell (`sqlite3`, `psql`) cannot change a terminal run or fake a physical pass."""
        t.conn.close()
        db = str(t.db)
        static, physical, running = (f"'{r}'" for r in (t.static_run, t.physical_run, t.open_run))
        replace = (
            f"INSERT INTO runs (id, state) VALUES ({static}, 'running')"
            " ON CONFLICT (id) DO UPDATE SET state = 'running';"
            if db.startswith("postgresql://")
            else f"INSERT OR REPLACE INTO runs (id, state) VALUES ({static}, 'running');"
        )
        for sql, name in (
            (f"UPDATE runs SET state = 'failed' WHERE id = {static};", "tracker-run-immutable"),
            (f"DELETE FROM evidence WHERE run_id = {physical};", "tracker-run-immutable"),
            (f"DELETE FROM evidence WHERE run_id = {running};", "tracker-evidence-immutable"),
            ("UPDATE items SET status = 'verified' WHERE id = 'N2';", "tracker-evidence-required"),
            (
                "INSERT INTO item_evidence (item_id, evidence_id) SELECT 'H1', id FROM evidence"
                f" WHERE run_id = {static}; UPDATE items SET status = 'verified' WHERE id = 'H1';",
                "tracker-hardware-evidence",
            ),
            (
                f"UPDATE runs SET state = 'completed', finished_at = 'x', physical_pass = 1 WHERE id = {running};",
                "tracker-physical-pass",
            ),
            (replace, "tracker-exists"),
        ):
            proc = subprocess.run([*shell(db), sql], capture_output=True, text=True, check=False, timeout=60)
            assert 0 != proc.returncode
            assert f"{name}: " in proc.stderr
        after = PlainClient(db)
        try:
            states = dict(after.execute("SELECT id, state || ' ' || physical_pass FROM runs").fetchall())
            assert {t.static_run: "completed 0", t.physical_run: "completed 1", t.open_run: "running 0"} == states
            assert "planned" == after.execute("SELECT status FROM items WHERE id = 'H1'").fetchone()[0]
        finally:
            after.close()
