"""The worked example in samples/tracker runs, shows its refusals, and runs again in the same place."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "samples" / "tracker" / "example.sh"


def run_example(work: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALPHA_")}
    proc = subprocess.run(
        ["bash", str(EXAMPLE), str(work)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False
    )
    assert 0 == proc.returncode, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_worked_example(tmp_path: Path) -> None:
    """The example attaches a static pass; the tracker refuses a physical pass and a hardware verification with it."""
    work = tmp_path / "example"
    for _ in range(2):  # re-runnable in the same place
        out = run_example(work)
        assert re.search(r"refused: tracker-physical-pass: run [0-9a-f]{8}-[0-9a-f-]{27}: ", out)
        assert "refused: tracker-hardware-evidence: item N10: " in out
        assert "4 work items across 2 milestones: 1 implemented, 2 planned; 1 verified" in out
        assert "audit: 1 stream: 1 intact, 0 changed, 0 missing; rules intact; journal intact" in out
    conn = sqlite3.connect(work / "progress.sqlite3")
    try:
        assert [("completed", 0)] == conn.execute("SELECT state, physical_pass FROM runs").fetchall()
        assert [("pass", "static", "distributed-device")] == conn.execute(
            "SELECT verdict, scope, gate FROM evidence"
        ).fetchall()
        statuses = dict(conn.execute("SELECT id, status FROM items").fetchall())
        assert {"N1": "implemented", "N2": "verified", "N10": "planned", "N11": "planned"} == statuses
    finally:
        conn.close()
    readme = (EXAMPLE.parent / "README.md").read_text()
    assert "bash samples/tracker/example.sh" in readme
