"""The tracker database: versioned migrations, connection settings, and what is not a tracker."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from aos.refusals import Refusal, refusal_by_name
from tests.helpers.paths import DOCS
from tracker.db import APPLICATION_ID, BUSY_TIMEOUT_MS, connect, init, migrations, schema_version
from tracker.refusals import from_sqlite_error


class TestMigrations:
    def test_recorded_in_the_database(self, tmp_path: Path) -> None:
        """Each applied migration is recorded with its digest, and user_version is the latest."""
        conn = init(tmp_path / "t.sqlite3")
        shipped = migrations()
        assert len(shipped) == schema_version(conn)
        rows = conn.execute("SELECT version, name, sql_blake3 FROM schema_migrations ORDER BY version").fetchall()
        assert [(m.version, m.name, m.digest) for m in shipped] == [tuple(r) for r in rows]
        assert APPLICATION_ID == conn.execute("PRAGMA application_id").fetchone()[0]

    def test_init_twice_is_harmless(self, tmp_path: Path) -> None:
        """Running init on an existing tracker changes nothing."""
        init(tmp_path / "t.sqlite3").close()
        conn = init(tmp_path / "t.sqlite3")
        assert len(migrations()) == conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]

    def test_older_tracker_migrated_forward(self, tmp_path: Path) -> None:
        """A tracker at schema version 1 is brought to the latest on open, its rows kept and the new rules in force."""
        old = init(tmp_path / "t.sqlite3", target=1)
        old.execute("INSERT INTO milestones (id, title) VALUES ('M1', 'first')")
        old.execute("INSERT INTO items (id, title, milestone_id) VALUES ('N1', 'one', 'M1')")
        old.close()
        conn = connect(tmp_path / "t.sqlite3")
        assert len(migrations()) == schema_version(conn) >= 2
        assert [("N1", "M1")] == [tuple(r) for r in conn.execute("SELECT id, milestone_id FROM items")]
        with pytest.raises(sqlite3.IntegrityError, match=r"^tracker-invalid: a milestone with work items"):
            conn.execute("DELETE FROM milestones WHERE id = 'M1'")

    def test_newer_schema_refused(self, tmp_path: Path) -> None:
        """A tracker from a newer tool is refused as tracker-schema, not guessed at."""
        init(tmp_path / "t.sqlite3").close()
        raw = sqlite3.connect(tmp_path / "t.sqlite3")
        raw.execute("PRAGMA user_version = 99")
        raw.close()
        with pytest.raises(Refusal) as info:
            connect(tmp_path / "t.sqlite3")
        assert "tracker-schema" == info.value.name

    def test_other_database_refused(self, tmp_path: Path) -> None:
        """Another application's SQLite file, or a file that is not SQLite, is refused as tracker-schema."""
        raw = sqlite3.connect(tmp_path / "other.sqlite3")
        raw.execute("CREATE TABLE t (x)")
        raw.close()
        (tmp_path / "text.sqlite3").write_text("hello, this is not a database at all" * 10)
        for name in ("other.sqlite3", "text.sqlite3"):
            with pytest.raises(Refusal) as info:
                init(tmp_path / name)
            assert "tracker-schema" == info.value.name


class TestConnection:
    def test_settings(self, tmp_path: Path) -> None:
        """Connections use WAL, a busy timeout and foreign keys."""
        init(tmp_path / "t.sqlite3").close()
        conn = connect(tmp_path / "t.sqlite3")
        assert "wal" == conn.execute("PRAGMA journal_mode").fetchone()[0]
        assert BUSY_TIMEOUT_MS == conn.execute("PRAGMA busy_timeout").fetchone()[0]
        assert 1 == conn.execute("PRAGMA foreign_keys").fetchone()[0]

    def test_missing(self, tmp_path: Path) -> None:
        """Opening a tracker that does not exist creates nothing."""
        with pytest.raises(Refusal) as info:
            connect(tmp_path / "absent.sqlite3")
        assert "tracker-missing" == info.value.name
        assert not (tmp_path / "absent.sqlite3").exists()


class TestRefusalMapping:
    def test_trigger_message_maps_to_its_class(self) -> None:
        """A trigger's `NAME: detail` becomes that refusal, with context before the detail."""
        exc = from_sqlite_error(sqlite3.IntegrityError("tracker-physical-pass: no stream"), "run 3")
        assert isinstance(exc, refusal_by_name("tracker-physical-pass"))
        assert "refused: tracker-physical-pass: run 3: no stream" == exc.diagnostics()

    def test_every_trigger_name_is_a_refusal(self) -> None:
        """Every name a trigger raises is a known tracker refusal."""
        import re

        names = set()
        for m in migrations():
            names |= set(re.findall(r"RAISE\(ABORT, '(tracker-[a-z-]+): ", m.sql))
        assert names
        for name in names:
            assert name == refusal_by_name(name).name


def test_docs_name_every_refusal() -> None:
    """docs/TRACKER.md names every tracker refusal, and names none that does not exist."""
    import re

    from tracker import refusals

    doc = (DOCS / "TRACKER.md").read_text()
    named = set(re.findall(r"`(tracker-[a-z-]+)`", doc))
    known = {
        cls.name for cls in vars(refusals).values() if isinstance(cls, type) and cls.__module__ == refusals.__name__
    }
    known.discard("tracker-refused")
    assert known == named
