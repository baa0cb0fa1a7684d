"""Evidence of a run that names a commit (its CI job's) was recorded at that commit (tracker-evidence-source)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.backends import integrity_errors
from tests.helpers.refusals import refused
from tracker import records
from tracker.attach import attach
from tracker.audit import audit
from tracker.backends import Connection, is_postgres_url
from tracker.db import init
from tracker.testing import sealed_stream

COMMIT = "1" * 40
OTHER = "2" * 40
CI = {"GITHUB_ACTIONS": "true", "GITHUB_SHA": COMMIT, "GITHUB_RUN_ID": "7"}


@pytest.fixture
def conn(tracker_db: str) -> Iterator[Connection]:
    """An empty tracker."""
    c = init(tracker_db)
    yield c
    c.close()


def _source(commit: str) -> dict[str, Any]:
    return {"commit": commit, "tree": "3" * 40, "branch": "main", "remote": None, "dirty": False}


class TestAttach:
    def test_run_records_its_ci_jobs_commit(self, conn: Connection) -> None:
        """`run start` under GitHub Actions records $GITHUB_SHA as the run's commit."""
        run = records.start_run(conn, lane="distributed-device", environ=CI)
        assert COMMIT == conn.execute("SELECT ci_commit FROM runs WHERE id = ?", (run,)).fetchone()[0]

    def test_stream_at_the_runs_commit_accepted(self, conn: Connection, tmp_path: Path) -> None:
        """A stream whose recorded source is the run's commit is evidence for it, and the row names the commit."""
        run = records.start_run(conn, lane="distributed-device", environ=CI)
        sealed_stream(tmp_path / "s.aos", source=_source(COMMIT.upper()))
        attach(conn, tmp_path / "s.aos", run)
        row = conn.execute("SELECT source_commit FROM evidence").fetchone()
        assert COMMIT.upper() == row[0]

    def test_stream_at_another_commit_refused(self, conn: Connection, tmp_path: Path) -> None:
        """A stream recorded at another commit than the run's is refused, and nothing is recorded."""
        run = records.start_run(conn, lane="distributed-device", environ=CI)
        sealed_stream(tmp_path / "s.aos", source=_source(OTHER))
        assert "tracker-evidence-source" == refused(attach, conn, tmp_path / "s.aos", run).name
        assert 0 == conn.execute("SELECT count(*) FROM evidence").fetchone()[0]

    def test_stream_naming_no_commit_refused(self, conn: Connection, tmp_path: Path) -> None:
        """A stream recorded outside a repository (source null), or with none recorded, is refused for such a run."""
        run = records.start_run(conn, lane="distributed-device", environ=CI)
        sealed_stream(tmp_path / "a.aos")
        assert "tracker-evidence-source" == refused(attach, conn, tmp_path / "a.aos", run).name

    def test_run_without_a_commit_takes_any(self, conn: Connection, tmp_path: Path) -> None:
        """A run outside CI names no commit: any stream of its lane is evidence for it."""
        run = records.start_run(conn, lane="distributed-device", environ={})
        sealed_stream(tmp_path / "s.aos", source=_source(OTHER))
        assert attach(conn, tmp_path / "s.aos", run).new


class TestDatabase:
    def test_plain_sql_insert_at_another_commit_refused(self, conn: Connection, tracker_db: str) -> None:
        """A plain SQL client inserting evidence of another commit (or none) is refused by the database itself."""
        run = records.start_run(conn, lane="distributed-device", environ=CI)
        row = {
            "run_id": run,
            "stream_id": "f" * 32,
            "path": "/nowhere.aos",
            "seal_head": "a" * 64,
            "file_digest": "b" * 64,
            "size": 100,
            "events": 5,
            "verdict": "pass",
            "scope": "static",
            "gate": "distributed-device",
            "recorded_at": "2999-01-01T00:00:00.000Z",
            "devices": "[]",
        }
        sql = "INSERT INTO evidence ({}) VALUES ({})"
        for commit in (OTHER, None):
            values = {**row, "source_commit": commit}
            statement = sql.format(", ".join(values), ", ".join("?" * len(values)))
            if is_postgres_url(tracker_db):
                with pytest.raises(integrity_errors(), match=r"^tracker-evidence-source: "):
                    conn.execute(statement, tuple(values.values()))
            else:
                plain = sqlite3.connect(tracker_db)
                try:
                    with pytest.raises(sqlite3.IntegrityError, match=r"^tracker-evidence-source: "):
                        plain.execute(statement, tuple(values.values()))
                finally:
                    plain.close()
        values = {**row, "source_commit": COMMIT}
        conn.execute(sql.format(", ".join(values), ", ".join("?" * len(values))), tuple(values.values()))
        assert 1 == conn.execute("SELECT count(*) FROM evidence").fetchone()[0]

    def test_audit_derives_the_commit_again(self, conn: Connection, tmp_path: Path) -> None:
        """Audit derives the commit from the stream again: an attached stream at the run's commit audits clean."""
        run = records.start_run(conn, lane="distributed-device", environ=CI)
        sealed_stream(tmp_path / "s.aos", source=_source(COMMIT))
        attach(conn, tmp_path / "s.aos", run)
        report = audit(conn)
        assert (True, ["ok"]) == (report.ok, [f.state for f in report.streams])
