"""The suite's workers: the ``alone`` turn excludes every other worker's test, ``slow`` comes from one registry and
the measured durations, and the durations file is read from JUnit as pytest names tests."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import SLOW_FIXTURES, slow_reason
from tests.helpers import durations
from tests.helpers.paths import ROOT
from tests.helpers.run import child_env
from tests.helpers.workers import forget

#: Takes a turn (alone or not) in a run named by argv, writes when it held it, holds it argv[3] seconds.
TURN = """
import sys, time
from tests.helpers.workers import turn
with turn(sys.argv[2] == "alone"):
    start = time.monotonic()
    time.sleep(float(sys.argv[3]))
    print(start, time.monotonic())
"""


def _take(run: str, how: str, hold: float) -> subprocess.Popen[str]:
    env = child_env({"PYTEST_XDIST_TESTRUNUID": run, "PYTHONPATH": str(ROOT)})
    argv = [sys.executable, "-c", TURN, run, how, str(hold)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)


def _held(proc: subprocess.Popen[str]) -> tuple[float, float]:
    out, _ = proc.communicate(timeout=60)
    start, end = (float(x) for x in out.split())
    return start, end


def test_an_alone_turn_shares_no_time_with_another_workers_test() -> None:
    """Two workers' tests share their time; a test marked ``alone`` waits for the one running and holds the
    machine to itself, and the test queued after it waits for it (no starvation, no overlap)."""
    run = uuid.uuid4().hex
    try:
        first = _take(run, "shared", 1.0)
        beside = _take(run, "shared", 1.0)
        time.sleep(0.3)  # both hold their shared turn by now (each sleeps 1 s inside it)
        alone = _take(run, "alone", 0.5)
        time.sleep(0.3)
        after = _take(run, "shared", 0.1)
        a, b, c, d = (_held(p) for p in (first, beside, alone, after))
    finally:
        forget(run)
    assert max(a[0], b[0]) < min(a[1], b[1]), "two shared turns ran side by side"
    assert c[0] >= max(a[1], b[1]), "the alone turn began before the shared ones ended"
    assert d[0] >= c[1], "a shared turn queued after the alone one ran beside it"


def test_the_run_forgets_its_lock_files() -> None:
    """A run under two workers leaves no lock file behind: its controller removes the run's two."""
    run = uuid.uuid4().hex
    one = "tests/project/test_workers.py::test_node_ids_are_read_from_junit_as_pytest_names_them"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "--testrunuid", run, one],
        capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=120, check=False,
    )  # fmt: skip
    assert 0 == proc.returncode, proc.stdout[-2000:]
    assert "1 passed" in proc.stdout
    assert [] == sorted(Path(tempfile.gettempdir()).glob(f"alpha-observe-tests-{run}.*"))


def test_outside_xdist_a_turn_locks_nothing() -> None:
    """In one process there is nothing to share: a turn takes no lock (two alone turns overlap)."""
    env = child_env({"PYTHONPATH": str(ROOT)})
    procs = [
        subprocess.Popen([sys.executable, "-c", TURN, "-", "alone", "0.8"], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    (a0, a1), (b0, b1) = (_held(p) for p in procs)
    assert max(a0, b0) < min(a1, b1)


def test_slow_is_a_fixture_a_parameter_or_a_measured_time() -> None:
    """A registered fixture or parameter makes a test slow whatever its time; else its measured time decides."""
    fast = next(n for n, s in durations.measured().items() if s < durations.SLOW_SECONDS)
    long = next(n for n, s in durations.measured().items() if s >= durations.SLOW_SECONDS)
    assert slow_reason([], {}, fast) is None
    assert f"measured {durations.measured()[long]} s" in str(slow_reason([], {}, long))
    assert slow_reason(["tmp_path", next(iter(SLOW_FIXTURES))], {}, fast) is not None
    assert slow_reason([], {"tracker_backend": "postgresql"}, fast) == "tracker_backend=postgresql"
    assert slow_reason([], {}, "tests/never/test_written.py::test_new") is None  # new: fast until measured


def test_node_ids_are_read_from_junit_as_pytest_names_them(tmp_path: Path) -> None:
    """Module, class and parametrised names map to pytest's node ids; skipped cases are not measurements."""
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.aos.test_fuzz.TestFuzz" name="test_a[x-1]" time="2.345"/>'
        '<testcase classname="tests.project.test_workers" name="test_b" time="0.1"/>'
        '<testcase classname="tests.observe.test_ssh" name="test_e[root@node]@sshd" time="3"/>'
        '<testcase classname="tests.observe.test_ssh" name="test_f@sshd" time="4"/>'
        '<testcase classname="tests.a.test_c" name="test_d" time="9"><skipped message="no"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert {
        "tests/aos/test_fuzz.py::TestFuzz::test_a[x-1]": 2.35,
        "tests/project/test_workers.py::test_b": 0.1,
        "tests/observe/test_ssh.py::test_e[root@node]": 3.0,
        "tests/observe/test_ssh.py::test_f": 4.0,
    } == durations.from_junit(report)


GROUPED = """
import os
from pathlib import Path

import pytest

from tests.helpers.workers import groups_in_node_ids


def pytest_collection_modifyitems(config, items):
    groups_in_node_ids(config, items)


@pytest.fixture
def where(request):
    yield
    ran = Path(os.environ["WHERE"]) / request.node.name
    ran.write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))
"""


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    """Under ``-n 2 --dist loadgroup`` the eight tests of one xdist_group run on one worker, with the suite's
    conftest hook (tests.helpers.workers.groups_in_node_ids); ungrouped tests go to both."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(GROUPED)
    tests = ["import time", "import pytest", ""]
    for i in range(8):
        tests += ['@pytest.mark.xdist_group("shared")', f"def test_grouped_{i}(where):", "    time.sleep(0.2)", ""]
    for i in range(8):
        tests += [f"def test_free_{i}(where):", "    time.sleep(0.2)", ""]
    (tmp_path / "test_groups.py").write_text("\n".join(tests))
    where = tmp_path / "where"
    where.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:phoenix", "-n", "2", "--dist",
         "loadgroup", "test_groups.py"],
        capture_output=True, text=True, cwd=tmp_path, env=child_env({"WHERE": str(where), "PYTHONPATH": str(ROOT)}),
        timeout=120, check=False,
    )  # fmt: skip
    assert 0 == proc.returncode, proc.stdout[-2000:]
    ran = {p.name: p.read_text() for p in where.iterdir()}
    assert 16 == len(ran)
    assert 1 == len({w for name, w in ran.items() if name.startswith("test_grouped_")}), ran
    assert {"gw0", "gw1"} == set(ran.values()), ran


@pytest.mark.slow  # collects the whole suite
def test_the_durations_file_names_todays_tests() -> None:
    """Most measured node ids are tests of today's tree (a rename leaves a stale one; refresh the file then)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider"],
        capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=300, check=False,
    )  # fmt: skip
    collected = {line for line in proc.stdout.splitlines() if "::" in line}
    measured = set(durations.measured())
    assert len(measured & collected) >= 0.9 * len(measured), sorted(measured - collected)[:20]
