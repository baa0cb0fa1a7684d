"""A command that can write itself out of its cgroup (root can) never gets an end called guaranteed for it.

The known-bad command is tests/attacks/cgroup_escaper.py: its child writes itself into the
cgroup above the command's (the recorder's own), then hops from pid to pid for some seconds
and writes a mark. Outside the cgroup, ``cgroup.kill`` misses it; a few sweeps of the
recorder's tree slipped past it, and the end was sealed ``guaranteed: true, survivors: 0``
while it lived on. The recorder must find it (its own children never hold still while it
hops), end it, and say the end was not guaranteed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from observe.env import RecorderVars
from tests.helpers.paths import ATTACKS
from tests.helpers.recorder import events, one
from tests.helpers.run import ALPHA, child_env
from tests.helpers.workers import ALONE
from tests.observe.recorder.test_containment import cgroup_possible

ESCAPER = ATTACKS / "cgroup_escaper.py"
#: Seconds the escaper hops before it writes its mark: past each recording's end.
HOP_SECONDS = 8.0
#: Recordings side by side, and the hoppers of each (they fork flat out).
RECORDINGS = 3
HOPPERS = 6

#: Its hoppers take every pid they can: no other worker's test runs beside it.
pytestmark = ALONE


def cgroup_gone(evs: list) -> bool:
    """Whether the recording's cgroup (process.start's ``containment_note``) no longer exists."""
    path = str(one(evs, "process.start").attrs["containment_note"]).removeprefix("cgroup ")
    with open("/proc/self/mountinfo") as fh:
        mounts = [line.split(" - ")[0].split()[4] for line in fh if " - cgroup2 " in line]
    return not any(Path(m + path).exists() for m in mounts)


@pytest.mark.parametrize("hoppers", [HOPPERS, 0], ids=["hopping", "zombie-leader"])
def test_a_command_that_leaves_its_cgroup_is_found_and_never_guaranteed(tmp_path: Path, hoppers: int) -> None:
    """Every recording of the escaper ends it (no mark after the recorder exited), says the end was not
    guaranteed and why, and leaves its cgroup removed: whether it hops from pid to pid, or ended its main
    thread so that /proc shows it a zombie while another thread runs on."""
    if not cgroup_possible():
        pytest.skip("no cgroup v2 of its own can be made here")
    env = child_env({RecorderVars.CONTAINMENT: None, RecorderVars.KILL_GRACE: "0.2", RecorderVars.DRAIN: "0.1"})
    runs = []
    for n in range(RECORDINGS):
        out, mark = tmp_path / f"run-{n}.aos", tmp_path / f"mark-{n}"
        argv = [sys.executable, "-I", "-S", str(ESCAPER), str(HOP_SECONDS), str(mark), str(hoppers)]
        proc = subprocess.Popen(
            [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        runs.append((proc, out, mark))
    marks_by = time.monotonic() + HOP_SECONDS + 1.5
    ended = {}
    for proc, out, _mark in runs:
        _, err = proc.communicate(timeout=120)
        ended[out] = time.time()
        assert 0 == proc.returncode, err.decode(errors="replace")
    for _proc, out, _mark in runs:
        evs = events(out)
        start = one(evs, "process.start").attrs
        assert ("cgroup", True) == (start["containment"], start["guaranteed"])  # what it promised at the start
        stray = one(evs, "process.stray").attrs
        assert ("cgroup", False, []) == (stray["containment"], stray["guaranteed"], stray["survivors"]), stray
        assert "left the cgroup" in str(stray["containment_note"]), stray
        assert cgroup_gone(evs)
    time.sleep(max(0.0, marks_by - time.monotonic()))
    marks = [(line, ended[out]) for _p, out, m in runs if m.exists() for line in m.read_text().splitlines()]
    survivors = [line for line, end in marks if float(line.split()[1]) > end]
    assert [] == survivors
