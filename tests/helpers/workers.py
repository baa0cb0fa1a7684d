"""Marks for the suite's workers: tests sharing one expensive fixture on one worker (pytest-xdist's
``loadgroup``), and the tests that run alone.

The suite runs one worker per core (``-n logical --dist loadgroup``, pyproject.toml's addopts); a session or module
fixture is built once in each worker that runs a test using it. Where that costs many
seconds, every test using it carries the same mark here, so one worker builds it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: tests/conftest.py's ``two_gpu_tracker``: the two-GPU tracker sample, run once (about 20 s).
TWO_GPU_TRACKER = pytest.mark.xdist_group("two-gpu-tracker")

#: Every test that starts or logs into the suite's real sshds (tests/helpers/sshd.py): one worker runs them in turn.
#: A node's observer reports the machine's other SSH sessions (a pod's other root login is a finding), and the
#: suite's nodes all share this machine, so another worker's sessions would be findings too. tests/conftest.py
#: gives this mark to every test using an sshd fixture (``SSHD_FIXTURES``); the lanes over SSH, recorded once
#: (about 45 s), and samples/pod/local-pod.sh carry it themselves.
SSHD = pytest.mark.xdist_group("sshd")
LANES_OVER_SSH = SSHD

#: tests/observe/cli/test_resource.py: its limited processes run as one account (tests.helpers.accounts), whose
#: threads its thread limit counts: one test at a time (another such process ending gave one room to start some
#: of its threads; DuckDB then crashed with SIGSEGV, 2 in 30 with two at once), with the test that records as
#: ``nobody`` (tests/observe/recorder/test_trust_boundary.py).
RESOURCE_LIMITS = pytest.mark.xdist_group("resource-limits")

#: tests/observe/interop/test_otlp_phoenix.py's ``phoenix``: a Phoenix server (about 13 s to start).
PHOENIX = pytest.mark.xdist_group("phoenix")

#: A test that loads the whole machine (every pid it can fork, as the pid hopper does) runs with no test of any
#: other worker beside it: under two workers, another worker's fork or thread start failed with EAGAIN while
#: 10 hoppers ran. See :func:`turn`.
ALONE = pytest.mark.alone


def groups_in_node_ids(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each ``xdist_group`` test's group in its node id, where ``--dist loadgroup`` looks for it.

    pytest-xdist (3.8) suffixes ``@GROUP`` to ``item._nodeid``; pytest 9 reads a node's id from ``item._id``, so
    without this the suffix is lost and a group's tests run on every worker (a four-test group with a session
    fixture ran on gw0 and gw1). Under pytest 8, which reads ``_nodeid``, xdist's own suffix is in effect and this
    does nothing. tests/conftest.py calls it from its ``pytest_collection_modifyitems``, after the marks are set.
    """
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import coerce_node_id  # pytest 9
    except ImportError:
        return
    for item in items:
        groups = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        if groups and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")


def _lock_files(run: str) -> tuple[Path, Path]:
    """The turnstile and the lock of the run whose pytest-xdist test run id is ``run``."""
    folder = Path(tempfile.gettempdir())
    return folder / f"alpha-observe-tests-{run}.turnstile", folder / f"alpha-observe-tests-{run}.lock"


def forget(run: str) -> None:
    """Remove the run's two lock files: by its controller, once every worker has ended."""
    for path in _lock_files(run):
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def turn(alone: bool) -> Iterator[None]:
    """Run one test: beside other workers' tests, or ``alone`` with none (a readers-writer lock on two files
    shared by the run's workers; the turnstile makes a waiting ``alone`` test go next instead of starving).
    Outside pytest-xdist there is nothing to share, and nothing is locked."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        yield
        return
    gate_path, lock_path = _lock_files(run)
    with gate_path.open("a") as gate, lock_path.open("a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)
