"""Nothing outlives the recording: the command runs in a container the recorder ends as a whole (issue 21).

The known-bad command is tests/attacks/pid_hopper.py: it ignores SIGTERM/SIGHUP/SIGINT,
calls ``setsid`` and hops from pid to pid (``fork``; the parent exits) for some seconds,
then writes its pid to a mark file and, under GitHub Actions, ``verdict=pass`` and
``scope=physical`` to ``$GITHUB_OUTPUT``. A recorder that takes one ``/proc`` snapshot per
sweep and stops at the first empty one lets it survive most recordings; each containment
the machine allows must leave no survivor in 20 of 20, under ``--timeout`` too.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from aos.event import Event
from observe.env import GitHubVars, RecorderVars
from observe.recorder.cgroup import CgroupUnavailable, make_cgroup
from tests.helpers.paths import ATTACKS
from tests.helpers.recorder import events, one, output
from tests.helpers.run import ALPHA, child_env
from tests.helpers.workers import ALONE

HOPPER = ATTACKS / "pid_hopper.py"
#: Seconds the hopper hops before it writes its mark: past each recording's end (a mark written before
#: the recorder exited is not a survivor: the recording was still watching).
HOP_SECONDS = 10.0
#: Recordings run side by side: each hopper forks flat out, so ten at once on two cores slowed some recorder
#: past HOP_SECONDS (the hopper then ended on its own, before the recorder could end it).
BATCH = 5


def cgroup_possible() -> bool:
    """Whether this machine lets the recorder make a cgroup v2 of its own (root or a delegated subtree)."""
    try:
        cg = make_cgroup(f"alpha-observe-probe-{os.getpid()}")
    except CgroupUnavailable:
        return False
    cg.remove()
    return True


#: (ALPHA_OBSERVE_CONTAINMENT, recordings): 20 for the containment the recorder takes where it can; 10 for the
#: forced fallback (its end is never called guaranteed, and the suite's time is short).
CONTAINMENTS = [
    pytest.param(
        "auto",
        20,
        marks=pytest.mark.skipif(not cgroup_possible(), reason="no cgroup v2 of its own can be made here"),
        id="cgroup",
    ),
    pytest.param("sweep", 10, id="sweep"),
]


@dataclass
class Trial:
    """One recording of the hopper: where its stream, mark and GitHub output file are."""

    proc: subprocess.Popen[bytes]
    out: Path
    mark: Path
    github_output: Path | None
    timeout: bool
    ended: float = 0.0  # time.time() once the recorder had exited

    def survivor(self) -> str | None:
        """The hopper's mark, when it wrote it after the recorder exited (it outlived the recording)."""
        if not self.mark.exists():
            return None
        text = self.mark.read_text()
        return text if float(text.split()[1]) > self.ended else None


def _hopper(mark: Path) -> list[str]:
    """The hopper's argv (isolated and without site: a quicker start)."""
    return [sys.executable, "-I", "-S", str(HOPPER), str(HOP_SECONDS), str(mark)]


def _start(tmp_path: Path, n: int, mode: str, *, timeout: bool, github: bool) -> Trial:
    out, mark = tmp_path / f"run-{n}.aos", tmp_path / f"mark-{n}"
    hopper = [*_hopper(mark)]
    env: dict[str, str | None] = {
        RecorderVars.CONTAINMENT: mode,
        RecorderVars.KILL_GRACE: "0.2",
        RecorderVars.DRAIN: "0.1",
    }
    gh = None
    if github:
        gh = tmp_path / f"github-output-{n}"
        gh.write_text("")
        env.update({GitHubVars.ACTIONS: "true", GitHubVars.OUTPUT: str(gh)})
    # Under --timeout the command is still running at the deadline: the hopper is ended with it.
    wrapped = ["--timeout", "3", "--", "sh", "-c", '"$@"; exec sleep 60', "sh", *hopper]
    argv = wrapped if timeout else ["--", *hopper]
    verb = ["observe", "gate", "exit-zero"] if github else ["observe", "record"]
    proc = subprocess.Popen(
        [ALPHA, *verb, "--quiet", "--out", str(out), *argv],
        env=child_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return Trial(proc, out, mark, gh, timeout)


def _run_trials(tmp_path: Path, mode: str, count: int) -> tuple[list[Trial], float]:
    """``count`` recordings of the hopper (every other one under ``--timeout``, two under GitHub Actions),
    BATCH at a time; returns them and when the last hopper would write its mark."""
    trials: list[Trial] = []
    last_start = 0.0
    for first in range(0, count, BATCH):
        batch = []
        for n in range(first, min(first + BATCH, count)):
            batch.append(_start(tmp_path, n, mode, timeout=n % 2 == 1, github=n in (0, 2)))
            last_start = time.monotonic()
        for t in batch:
            _, err = t.proc.communicate(timeout=120)
            t.ended = time.time()
            assert t.proc.returncode == (124 if t.timeout else 0), err.decode(errors="replace")
        trials.extend(batch)
    return trials, last_start + HOP_SECONDS + 1.5


def _stray(evs: list[Event]) -> dict[str, object]:
    found = [e for e in evs if e.kind == "process.stray"]
    return dict(found[0].attrs) if found else {}


@ALONE  # its ten hoppers at a time take every pid they can: another worker's fork failed with EAGAIN
@pytest.mark.parametrize(("mode", "count"), CONTAINMENTS)
def test_the_pid_hopper_never_outlives_a_recording(tmp_path: Path, mode: str, count: int) -> None:
    """Every recording of the pid hopper (20 in a cgroup, 10 swept; half under --timeout) leaves no survivor,
    and process.stray says truthfully what was ended and how."""
    trials, marks_by = _run_trials(tmp_path, mode, count)
    kind = "cgroup" if mode == "auto" else "sweep"
    signals: set[object] = set()
    for t in trials:
        evs = events(t.out)
        start = one(evs, "process.start").attrs
        assert (kind, kind == "cgroup") == (start["containment"], start["guaranteed"])
        stray = _stray(evs)
        ended = stray.get("ended")
        assert isinstance(ended, list), stray
        assert ended, stray  # the hopper was found and ended
        hopper_argv = _hopper(t.mark)
        assert all(p["argv"] in ([], hopper_argv) for p in ended if p["argv"] != ["sleep", "60"]), ended
        if not t.timeout:  # (under --timeout, a slow start may see SIGTERM before it ignores it)
            signals |= {p["signal"] for p in ended}
        if "guaranteed" in stray:  # said whenever the end was less certain than promised, or anything ended
            assert [] == stray["survivors"]
            assert (kind, kind == "cgroup") == (stray["containment"], stray["guaranteed"])
    # A hopper ignores SIGTERM once it has started; one still starting when the command ended is ended by
    # SIGTERM (seen under load). Of the recordings without --timeout, the escalation to SIGKILL ended some.
    assert "SIGKILL" in signals, signals
    time.sleep(max(0.0, marks_by - time.monotonic()))
    survivors = [t.survivor() for t in trials if t.survivor() is not None]
    assert [] == survivors
    for t in trials:
        if t.github_output is not None:
            lines = t.github_output.read_text().splitlines()
            assert lines, t.github_output
            assert lines[-1].startswith("stream_id="), lines  # the recorder's lines are the last
            # the value a runner takes for a name is its last: the recorder's, never the hopper's
            assert "scope=physical" != [line for line in lines if line.startswith("scope=")][-1], lines
            if kind == "cgroup":  # guaranteed: the hopper never wrote at all (exit-zero gives scope none)
                assert "scope=physical" not in lines, lines
            # a sweep is not guaranteed: a hopper may write while it is being swept, before the recorder's lines


def test_the_command_is_in_its_cgroup_before_it_runs(tmp_path: Path) -> None:
    """The command's first instruction already runs inside the recording's cgroup, and the cgroup is gone after."""
    if not cgroup_possible():
        pytest.skip("no cgroup v2 of its own can be made here")
    out = tmp_path / "run.aos"
    proc = subprocess.run(
        [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "cat", "/proc/self/cgroup"],
        env=child_env({RecorderVars.CONTAINMENT: None}),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr
    evs = events(out)
    start = one(evs, "process.start").attrs
    stream_id = one(evs, "stream.open").attrs["stream_id"]
    path = str(start["containment_note"]).removeprefix("cgroup ")
    assert path.endswith(f"/alpha-observe-{stream_id}")
    v2 = [line[3:] for line in output(evs).decode().splitlines() if line.startswith("0::")]
    assert [path] == v2
    assert [] == [e for e in evs if e.kind == "process.stray"]  # a command that leaves nothing: no process.stray
    with open("/proc/self/mountinfo") as fh:
        mounts = [line.split(" - ")[0].split()[4] for line in fh if " - cgroup2 " in line]
    assert not any(os.path.exists(m + path) for m in mounts)  # removed at the end


def test_a_step_runs_in_the_cgroup_and_what_it_leaves_ends_with_it(tmp_path: Path) -> None:
    """A step the recorder runs is inside the command's cgroup before it runs, a setsid daemon it leaves is
    ended with the recording (guaranteed), and the step's own exit is still the recorder's observation."""
    if not cgroup_possible():
        pytest.skip("no cgroup v2 of its own can be made here")
    pidfile = tmp_path / "daemon"
    step = (
        f"sed -n 's/^0:://p' /proc/self/cgroup; setsid sh -c 'echo $$ > {pidfile}; exec sleep 300'"
        " </dev/null >/dev/null 2>&1 & exit 3"
    )
    script = f'{ALPHA} observe step build -- sh -c "$1"; echo "step=$?"; while [ ! -s {pidfile} ]; do sleep 0.01; done'
    out = tmp_path / "run.aos"
    try:
        proc = subprocess.run(
            [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "sh", "-c", script, "sh", step],
            env=child_env({RecorderVars.CONTAINMENT: None, RecorderVars.KILL_GRACE: "0.2"}),
            capture_output=True,
            timeout=60,
            check=False,
        )
    finally:
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pidfile.read_text()), 9)
    assert 0 == proc.returncode, proc.stderr
    evs = events(out)
    path = str(one(evs, "process.start").attrs["containment_note"]).removeprefix("cgroup ")
    printed = output(evs).decode().splitlines()
    assert [path, "step=3"] == printed
    assert 3 == one(evs, "step.end").attrs["exit_code"]
    stray = one(evs, "process.stray").attrs
    assert ("cgroup", True) == (stray["containment"], stray["guaranteed"])
    daemon = int(pidfile.read_text())
    assert daemon in [p["pid"] for p in stray["ended"]]
    assert not os.path.exists(f"/proc/{daemon}") or "Z" in Path(f"/proc/{daemon}/stat").read_text().split()[2]


def test_a_member_that_leaves_the_cgroup_makes_the_end_unguaranteed(tmp_path: Path) -> None:
    """A process that writes itself out of the command's cgroup (back to the recorder's) is still swept, and
    process.stray says the end was not guaranteed (forgery of the cgroup's guarantee)."""
    if not cgroup_possible():
        pytest.skip("no cgroup v2 of its own can be made here")
    pidfile = tmp_path / "pid"
    # The recorder's own cgroup is the parent of the command's: a child writes itself there, then lingers.
    script = (
        "dir=$(awk '/ - cgroup2 / {print $5; exit}' /proc/self/mountinfo)$(sed -n 's/^0:://p' /proc/self/cgroup);"
        f' sh -c \'echo $$ > "$1"/cgroup.procs && echo $$ > {pidfile} && exec sleep 300\' sh "$(dirname "$dir")"'
        " </dev/null >/dev/null 2>&1 &"
        f" while [ ! -s {pidfile} ]; do sleep 0.01; done"
    )
    out = tmp_path / "run.aos"
    try:
        proc = subprocess.run(
            [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "sh", "-c", script],
            env=child_env({RecorderVars.DRAIN: "0.1", RecorderVars.KILL_GRACE: "0.2"}),
            capture_output=True,
            timeout=60,
            check=False,
        )
    finally:
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pidfile.read_text()), 9)
    assert 0 == proc.returncode, proc.stderr
    stray = one(events(out), "process.stray").attrs
    assert ("cgroup", False) == (stray["containment"], stray["guaranteed"])
    assert int(pidfile.read_text()) in [p["pid"] for p in stray["ended"]]
    assert "left the cgroup" in stray["containment_note"]


def test_the_knob_forces_the_sweep_and_a_bad_value_is_ignored() -> None:
    """``ALPHA_OBSERVE_CONTAINMENT=sweep`` gives the sweep (never guaranteed); a value it does not know is
    ignored (the default: a cgroup where one can be made)."""
    from observe.recorder.containment import open_container

    forced = open_container("knob", env={RecorderVars.CONTAINMENT: "sweep"})
    assert ("sweep", False) == (forced.kind, forced.guaranteed)
    assert RecorderVars.CONTAINMENT in forced.describe()["containment_note"]
    bad = open_container(f"knob-{os.getpid()}", env={RecorderVars.CONTAINMENT: "none"})
    try:
        assert ("cgroup" if cgroup_possible() else "sweep") == bad.kind
    finally:
        bad.close()


def test_an_empty_cgroup_a_killed_recorder_left_is_removed_by_the_next() -> None:
    """An empty ``alpha-observe-*`` cgroup older than STALE_SECONDS (its recorder was SIGKILLed) goes when the
    next recorder makes its own; a fresh empty one (a recorder about to enter it) stays."""
    if not cgroup_possible():
        pytest.skip("no cgroup v2 of its own can be made here")
    from observe.recorder.cgroup import STALE_SECONDS

    stale = make_cgroup(f"alpha-observe-stale-{os.getpid()}")
    fresh = make_cgroup(f"alpha-observe-fresh-{os.getpid()}")
    try:
        old = time.time() - STALE_SECONDS - 60
        os.utime(stale.directory, (old, old))
        mine = make_cgroup(f"alpha-observe-next-{os.getpid()}")
        mine.remove()
        assert (False, True) == (os.path.isdir(stale.directory), os.path.isdir(fresh.directory))
    finally:
        stale.remove()
        fresh.remove()
