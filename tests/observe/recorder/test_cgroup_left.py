"""No recording leaves its cgroup behind: not one that ended, nor (once another recording starts beside it)
one whose recorder was killed with SIGKILL."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aos.event import Event
from observe.env import RecorderVars
from tests.helpers.recorder import events, kill_recorder_midway, one
from tests.helpers.run import ALPHA, child_env
from tests.observe.recorder.test_containment import cgroup_possible


def cgroup_of(evs: list[Event]) -> list[Path]:
    """Where the recording's cgroup (process.start's ``containment_note``) is, under each cgroup2 mount."""
    start = one(evs, "process.start").attrs
    assert "cgroup" == start["containment"], start
    path = str(start["containment_note"]).removeprefix("cgroup ")
    with open("/proc/self/mountinfo") as fh:
        mounts = [line.split(" - ")[0].split()[4] for line in fh if " - cgroup2 " in line]
    return [Path(m + path) for m in mounts]


def test_a_killed_recorders_cgroup_is_removed_by_the_next_recording(tmp_path: Path) -> None:
    """A recorder killed with SIGKILL ends nothing; once its command is gone, the next recording beside it
    removes its empty cgroup at once (not ten minutes later), and leaves none of its own."""
    if not cgroup_possible():
        pytest.skip("no cgroup v2 of its own can be made here")
    killed = kill_recorder_midway(tmp_path / "killed.aos", "while :; do echo x; sleep 0.05; done", lines=2)
    left = cgroup_of(killed.events)
    assert any(p.exists() for p in left)  # what SIGKILL leaves: the recorder could not remove it
    out = tmp_path / "next.aos"
    proc = subprocess.run(
        [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "true"],
        env=child_env({RecorderVars.CONTAINMENT: None}),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr
    assert [] == [p for p in left if p.exists()]
    assert [] == [p for p in cgroup_of(events(out)) if p.exists()]
