"""The README's tour runs as written (docs checked against the code)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.helpers.paths import ROOT
from tests.helpers.run import child_env


def _blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = text[text.index("## A short tour") : text.index("## Documentation")]
    return re.findall(r"```sh\n(.*?)```", tour, flags=re.S)


def _following() -> str:
    """The one block of "Following the evidence": commands run against the tour's own files."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Following the evidence") : text.index("## In CI")]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return block


def _bash(
    script: str, cwd: Path, *, inside_recording: bool = False, tmpdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    argv = ["bash", "-euo", "pipefail", "-c", script]
    if inside_recording:
        argv = ["alpha", "observe", "record", "--quiet", "--out", "inside.aos", "--", *argv]
    env = child_env({"TMPDIR": str(tmpdir)} if tmpdir is not None else None)  # the tour's `mktemp -d` stays inside
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Quick start") : text.index("## Where it runs")]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S)]


class TestQuickStart:
    """The quick start is two commands, each safe on a Python that refuses pip outside a virtual environment."""

    def test_two_commands_each_in_a_venv(self) -> None:
        """Each of the two commands is one line that makes or reuses .venv, installs into it and runs from it."""
        main_job, suite = _quick_start()
        assert ["python3 -m venv .venv", ".venv/bin/python -m pip install ."] == main_job.split(" && ")[:2]
        assert main_job.split(" && ")[2].startswith(".venv/bin/alpha observe gate distributed-device -- ")
        assert [
            "python3 -m venv .venv",
            ".venv/bin/python -m pip install '.[test]'",
            ".venv/bin/python -m pytest",
        ] == suite.split(" && ")

    def test_ci_runs_the_same_test_command(self) -> None:
        """.ci/run installs exactly as the README's test command does and gates exactly its pytest (with
        only the durations report and the JUnit file the gate reads added: ``tests-pass`` judges the suite's
        own results, and the log names its 25 slowest tests)."""
        venv, install, test = _quick_start()[1].split(" && ")
        script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
        assert f"\n{venv} && {install} || exit 1\n" in script
        assert f' -- {test} --durations=25 --junitxml "$out/pytest.xml"\n' in script
        assert "pip install" not in script.replace(f"{venv} && {install}", "")

    def test_the_main_job_runs_as_written(self, tmp_path: Path) -> None:
        """The main job's gate, with the suite's own alpha in place of .venv/bin/alpha, passes with scope static."""
        gate = _quick_start()[0].split(" && ")[2].removeprefix(".venv/bin/")
        done = _bash(gate.replace(" -- ", f" --quiet --json --out {tmp_path / 'job.aos'} -- ", 1), ROOT)
        assert 0 == done.returncode, done.stderr[-2000:]
        import json

        doc = json.loads(done.stdout)
        assert ("pass", "static") == (doc["verdict"], doc["scope"])


class TestReadmeTour:
    """Each of the tour's blocks runs in a fresh folder and does what its comments say."""

    def test_the_tour_runs_again(self, tmp_path: Path) -> None:
        """Run twice from the same folder, the tour's first block passes both times (it makes its own folder)."""
        record = _blocks()[0]
        for _ in range(2):
            done = _bash(record, tmp_path, tmpdir=tmp_path)
            assert 0 == done.returncode, done.stdout + done.stderr
        assert [] == list(tmp_path.glob("*.aos"))

    def test_tour_blocks_run(self, tmp_path: Path) -> None:
        """The three blocks run in order with every command exiting 0, and leave the evidence they describe."""
        record, _tests, inside, tracker = _blocks()
        done = _bash(record, tmp_path, tmpdir=tmp_path)
        assert 0 == done.returncode, done.stdout + done.stderr
        assert "hello\n" in done.stdout
        assert "intact and sealed" in done.stdout

        done = _bash(inside, tmp_path, inside_recording=True)
        assert 0 == done.returncode, done.stdout + done.stderr
        shown = subprocess.run(
            ["alpha", "observe", "read", "inside.aos", "--json", "--kind", "receipt", "--kind", "artifact"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert '"name":"unit-tests"' in shown
        assert '"name":"lint"' in shown
        assert '"path":"app.txt"' in shown

        done = _bash(tracker, tmp_path)
        assert 0 == done.returncode, done.stdout + done.stderr
        assert "verdict pass, scope command (gate exit-zero)" in done.stdout
        assert "1 run: 1 completed; 0 physical passes recorded" in done.stdout

    def test_following_the_evidence_runs_against_the_tours_stream(self, tmp_path: Path) -> None:
        """The tour, then "Following the evidence", in order in the tour's own folder: every command exits 0 and
        shows what its comment says (once, ``read --seq 6,8,9`` and ``--step build`` failed on the tour's
        own stream)."""
        record = _blocks()[0]
        following = _following()
        commands = [line for line in following.splitlines() if line.strip()]
        assert 4 == len(commands)
        marked = "\n".join(f"echo '=== {i}'\n{line}" for i, line in enumerate(commands))
        done = _bash(record + "\n" + marked + "\n", tmp_path, tmpdir=tmp_path)
        assert 0 == done.returncode, done.stdout + done.stderr
        out = done.stdout.split("=== 0\n", 1)[1]
        show, seqs, stdout, stderr = re.split(r"=== \d\n", out)
        assert show.startswith("check      exit-code: pass (gate exit-zero, verdict pass)\n"), show
        assert "read them  alpha observe read ci.aos --seq " in show
        assert ["0", "2", "3"] == [line.split()[0] for line in seqs.splitlines()], seqs
        assert "tests pass\n" == stdout
        assert "" == stderr

    def test_the_tour_says_which_extra_a_command_needs(self) -> None:
        """Each tour command that needs an extra says so beside it (``query``: DuckDB)."""
        (line,) = [x for x in _blocks()[0].splitlines() if x.startswith("alpha observe query ")]
        assert "needs the query extra: pip install '.[query]'" in line

    def test_tests_block_passes_or_fails_as_the_run_did(self, tmp_path: Path) -> None:
        """The test-results block passes on a passing suite; its gate fails, naming the test, on a failing one."""
        block = _blocks()[1]
        done = _bash(block, tmp_path)
        assert 0 == done.returncode, done.stdout + done.stderr
        assert "reports/junit.xml: 1 test: 1 passed, 0 failed, 0 errors, 0 skipped" in done.stderr
        with (tmp_path / "test_app.py").open("a") as f:
            f.write("def test_fails():\n    assert 1 + 1 == 3\n")
        done = _bash(block.splitlines()[-1], tmp_path)
        assert 1 == done.returncode, done.stdout + done.stderr
        assert "failing: test_app.test_fails" in done.stderr


def _inner_loop() -> str:
    """The README's inner-loop command (inline, beside the quick start's test command)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Quick start") : text.index("## Where it runs")]
    (command,) = re.findall(r"The\s+inner loop is `([^`]+)`", section)
    return command


class TestInnerLoop:
    """``pytest -m "not slow"``, as the README writes it, leaves out exactly the tests that start real servers."""

    #: Three modules: tracker tests on both backends, tests that each start sshd, a lane over a pod of sshds.
    PATHS = (
        "tests/tracker/test_location.py",
        "tests/observe/devices/test_remote.py",
        "tests/samples/test_local_pod.py",
    )

    def _collected(self, command: str) -> list[str]:
        import shlex
        import sys

        argv = shlex.split(command)
        assert [".venv/bin/python", "-m", "pytest"] == argv[:3]
        argv = [sys.executable, *argv[1:], "--collect-only", "-q", *self.PATHS]
        done = subprocess.run(argv, cwd=ROOT, env=child_env(), capture_output=True, text=True, check=False)
        assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: nothing selected
        return [line for line in done.stdout.splitlines() if "::" in line]

    def test_not_slow_leaves_out_every_server(self) -> None:
        """The inner loop keeps the SQLite side of the tracker tests and none of PostgreSQL, sshd or the lane."""
        kept = self._collected(_inner_loop())
        assert any("[sqlite]" in test for test in kept), kept
        assert not [test for test in kept if "postgresql" in test or not test.startswith(self.PATHS[0])], kept

    def test_slow_is_the_rest(self) -> None:
        """``-m slow`` selects the PostgreSQL side and every test of the two SSH modules, and a SQLite test only
        when it was measured at 1 s or more (tests/durations.json)."""
        from tests.helpers.durations import slow_by_time

        command = _inner_loop().replace('"not slow"', "slow")
        slow = self._collected(command)
        assert not [test for test in slow if "[sqlite]" in test and slow_by_time(test) is None], slow
        assert any("[postgresql]" in test for test in slow), slow
        for path in self.PATHS[1:]:
            assert any(test.startswith(path) for test in slow), (path, slow)


class TestLaneNames:
    def test_the_table_names_each_lane_as_the_code_does(self) -> None:
        """Each row of the README's lane-names table is one lane: its gate exists and names the variable, and its
        script runs that lane with that variable."""
        from gates.registry import builtin_gates

        text = (ROOT / "README.md").read_text(encoding="utf-8")
        section = text[text.index("### The device lanes' names") : text.index("## Where it runs")]
        rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \|$", section, flags=re.M)
        gates = builtin_gates()
        device_gates = sorted(name for name in gates if name.endswith("-device"))
        assert device_gates == sorted(row[0] for row in rows)
        for gate, script, lane, variable in rows:
            assert variable in (gates[gate].description or ""), gate
            assert f"lane_main {lane} {variable} " in (ROOT / script).read_text(encoding="utf-8"), script
