"""The strict tools hold for the whole tree: ruff (lint and format) and mypy --strict."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)


class TestTooling:
    """Lint, format and types are part of the suite, so CI holds every change to them."""

    def test_ruff_lint(self) -> None:
        """ruff check finds nothing (rules in pyproject.toml; each ignore is justified there)."""
        if shutil.which("ruff") is None:
            pytest.skip("ruff is not installed (it comes with the test extra)")
        done = _run("ruff", "check", ".")
        assert 0 == done.returncode, done.stdout + done.stderr

    def test_ruff_format(self) -> None:
        """Every Python file is formatted the way ruff format writes it."""
        if shutil.which("ruff") is None:
            pytest.skip("ruff is not installed (it comes with the test extra)")
        done = _run("ruff", "format", "--check", ".")
        assert 0 == done.returncode, done.stdout + done.stderr

    def test_mypy_strict(self) -> None:
        """mypy --strict finds no error in the packages."""
        done = _run(sys.executable, "-m", "mypy", "aos", "gates", "observe", "tracker")
        if "No module named mypy" in done.stderr:
            pytest.skip("mypy is not installed (it comes with the test extra)")
        assert 0 == done.returncode, done.stdout + done.stderr
