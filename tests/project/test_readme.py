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
        record, inside, tracker = _blocks()
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
