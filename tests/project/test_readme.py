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


def _bash(script: str, cwd: Path, *, inside_recording: bool = False) -> subprocess.CompletedProcess[str]:
    argv = ["bash", "-euo", "pipefail", "-c", script]
    if inside_recording:
        argv = ["alpha", "observe", "record", "--quiet", "--out", "inside.aos", "--", *argv]
    env = child_env()
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)


class TestReadmeTour:
    """Each of the tour's blocks runs in a fresh folder and does what its comments say."""

    def test_tour_blocks_run(self, tmp_path: Path) -> None:
        """The three blocks run in order with every command exiting 0, and leave the evidence they describe."""
        record, _tests, inside, tracker = _blocks()
        done = _bash(record, tmp_path)
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

    def test_tests_block_passes_or_fails_as_the_run_did(self, tmp_path: Path) -> None:
        """The test-results block passes on a passing suite; its gate fails, naming the test, on a failing one."""
        block = _blocks()[1]
        done = _bash(block, tmp_path)
        assert 0 == done.returncode, done.stdout + done.stderr
        assert "reports/junit.xml: 1 test(s): 1 passed, 0 failed, 0 error(s), 0 skipped" in done.stderr
        with (tmp_path / "test_app.py").open("a") as f:
            f.write("def test_fails():\n    assert 1 + 1 == 3\n")
        done = _bash(block.splitlines()[-1], tmp_path)
        assert 1 == done.returncode, done.stdout + done.stderr
        assert "failing: test_app.test_fails" in done.stderr
