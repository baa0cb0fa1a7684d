"""The tracker's shared fixtures: the example tracker built once per module and backend, a fresh copy per test.

The backends themselves (``tracker_backend``, ``pg_server``, ``tracker_db``) are in tests/conftest.py:
samples/ uses them too. ``conn`` is the tracker most attach tests start from (one running run, ``run``); a
module that starts elsewhere (no run yet, known devices, SQLite only) defines its own ``conn``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracker import records
from tracker.backends import Connection
from tracker.db import init
from tracker.testing import ExampleTracker, example_tracker


@pytest.fixture(scope="module")
def example_built(
    tracker_backend: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> tuple[str, ExampleTracker]:
    """The example tracker (runs: static completed, physical pass, open running), built once per backend;
    each test gets a copy (``example_copy``)."""
    work = tmp_path_factory.mktemp("tracker")
    if tracker_backend == "postgresql":
        db = request.getfixturevalue("pg_server").url(f"built_{work.name.replace('-', '_')}")
    else:
        db = str(work / "progress.sqlite3")
    t = example_tracker(db, work)
    if tracker_backend == "sqlite":
        t.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    t.conn.close()
    return db, t


@pytest.fixture
def example_copy(
    example_built: tuple[str, ExampleTracker], tracker_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[str]:
    """The location of a fresh copy of ``example_built`` (streams keep their absolute paths in the built folder);
    a PostgreSQL copy is dropped after the test."""
    source, _proto = example_built
    server = None
    if tracker_backend == "postgresql":
        server = request.getfixturevalue("pg_server")
        name = f"t_{tmp_path.name.replace('-', '_')}"[:60]
        db = server.create_database(name, template=source.split("?")[0].rsplit("/", 1)[1])
    else:
        db = str(tmp_path / "progress.sqlite3")
        shutil.copy(source, db)
    yield db
    if server is not None:
        server.drop_database(name)


@pytest.fixture
def conn(tracker_db: str) -> Iterator[Connection]:
    """An empty tracker with one running run of lane distributed-device."""
    c = init(tracker_db)
    records.start_run(c, lane="distributed-device")
    yield c
    c.close()


@pytest.fixture
def run(conn: Connection) -> str:
    """The id of the tracker's one run."""
    return str(conn.execute("SELECT id FROM runs").fetchone()[0])
