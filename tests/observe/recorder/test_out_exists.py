"""An --out that exists is refused by name (out-exists, exit 2) before the command runs; the file is kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


@pytest.mark.parametrize("words", [["record"], ["gate", "exit-zero"]], ids=["record", "gate"])
def test_existing_out_is_refused_and_kept(words: list[str], tmp_path: Path) -> None:
    """record/gate over an existing --out exit 2 (`refused: out-exists`), run nothing, keep the file."""
    out = tmp_path / "run.aos"
    out.write_bytes(b"earlier evidence")
    marker = tmp_path / "ran"
    argv = ["alpha", "observe", *words, "--out", str(out), "--", "touch", str(marker)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert 2 == done.returncode, done.stderr
    assert done.stderr.startswith(f"refused: out-exists: {out} exists: a stream is never overwritten"), done.stderr
    assert (b"earlier evidence", False) == (out.read_bytes(), marker.exists())


def test_a_folder_that_cannot_be_written_is_still_the_recorder(tmp_path: Path) -> None:
    """An --out in a folder that does not exist stays stream-write, exit 125 (only an existing file is out-exists)."""
    argv = ["alpha", "observe", "record", "--out", str(tmp_path / "no" / "run.aos"), "--", "true"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert (125, True) == (done.returncode, done.stderr.startswith("refused: stream-write: "))
