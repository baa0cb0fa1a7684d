"""Benchmark what containing the command costs at its start and at its end (issue 21).

    python bench/bench_containment.py

Measures, in one run, each beside its baseline measured in the same run (it asserts nothing):
- the command's start-up in the recorder's own process: ``observe.recorder.spawn.spawn``
  of ``true`` until it has exec'd (what it was before containment: no container), then
  in the cgroup of its own (the recorder enters it for the fork and leaves it) and with
  the sweep (nothing to do at the start); median of ``ALPHA_BENCH_SPAWNS`` (default 200);
- the end of a command that left nothing running: the container's ``end`` (the cgroup's
  check that it is empty and that nothing left it, or the sweep's empty rounds), against
  one walk of the tree (what the end cost before: one ``/proc`` sweep that found nothing);
- ``alpha observe record --quiet -- true`` with ``ALPHA_OBSERVE_CONTAINMENT=sweep``
  versus the default (a cgroup where one can be made), interleaved, median of
  ``ALPHA_BENCH_STARTS`` (default 10); with ``ALPHA_BENCH_BASELINE=DIR`` (a checkout of
  the recorder before containment, put first on ``PYTHONPATH``) also against that.

Ends with one ``ROW`` line per target, tab-separated, for ``bench/table.py``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from observe.env import RecorderVars
from observe.recorder.containment import Container, open_container
from observe.recorder.proctree import _table as proctree_scan  # the end before containment
from observe.recorder.spawn import Spawned, become_subreaper, spawn

ALPHA = shutil.which("alpha", path=str(Path(sys.executable).parent)) or shutil.which("alpha") or "alpha"
ROWS: list[tuple[str, str, str, bool]] = []


def _median_ms(fn: Callable[[], float], n: int) -> float:
    return statistics.median(fn() for _ in range(n)) * 1e3


def _spawn_once(container: Container | None) -> float:
    t = time.perf_counter()
    got = spawn(["true"], dict(os.environ), container=container)
    took = time.perf_counter() - t
    assert isinstance(got, Spawned), got
    got.proc.wait()
    for fd in (got.out_fd, got.err_fd):
        if fd is not None:
            os.close(fd)
    return took


def start_up(n: int) -> None:
    cgroup = open_container(f"bench-{os.getpid()}")
    sweep = open_container("bench", env={RecorderVars.CONTAINMENT: "sweep"})
    kinds: dict[str, list[float]] = {"none": [], cgroup.kind: [], "sweep": []}
    try:
        for _ in range(n):  # interleaved: the machine's noise hits each alike
            kinds["none"].append(_spawn_once(None))
            kinds[cgroup.kind].append(_spawn_once(cgroup))
            kinds["sweep"].append(_spawn_once(sweep))
    finally:
        cgroup.close()
    base = statistics.median(kinds["none"]) * 1e3
    for kind in (cgroup.kind, "sweep"):
        ms = statistics.median(kinds[kind]) * 1e3
        print(f"start-up in the recorder: no container {base:.2f} ms, {kind} {ms:.2f} ms: {ms - base:+.2f} ms")
        print(f"  ratio {ms / base:.2f} (median of {n})")
        row(f"command start-up, {kind} vs none", f"{ms - base:+.2f} ms", "<= +10 ms", ms - base <= 10)


def end_cost(n: int) -> None:
    before = _median_ms(lambda: _timed(proctree_scan), n)
    for env in ({}, {RecorderVars.CONTAINMENT: "sweep"}):
        times = []
        for _ in range(n):
            c = open_container(f"bench-end-{os.getpid()}", env=env)
            try:
                times.append(_timed(lambda c=c: c.end(0.0, None)))  # type: ignore[misc]
            finally:
                c.close()
        ms = statistics.median(times) * 1e3
        print(f"end of a command that left nothing: one /proc scan {before:.2f} ms, {c.kind} end {ms:.2f} ms")
        row(f"end, nothing left, {c.kind} vs one /proc scan", f"{ms - before:+.2f} ms", "<= +10 ms", ms - before <= 10)


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def record(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "true.aos"
        argv = [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "true"]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        envs = {
            "auto": env,
            "sweep": {**env, RecorderVars.CONTAINMENT: "sweep"},
        }
        baseline = os.environ.get("ALPHA_BENCH_BASELINE")  # another checkout: the recorder before containment
        if baseline:
            envs["before"] = {**env, "PYTHONPATH": baseline}
        runs: dict[str, list[float]] = {mode: [] for mode in envs}
        for mode_env in envs.values():
            out.unlink(missing_ok=True)
            subprocess.run(argv, env=mode_env, check=True)  # warm-up: bytecode caches
        for _ in range(n):  # interleaved
            for mode, mode_env in envs.items():
                out.unlink(missing_ok=True)
                t = time.perf_counter()
                subprocess.run(argv, env=mode_env, check=True)
                runs[mode].append(time.perf_counter() - t)
    ms = {m: statistics.median(runs[m]) * 1e3 for m in runs}
    said = ", ".join(f"{m} {v:.0f} ms" for m, v in ms.items())
    print(f"record -- true: {said} (median of {n}, load {os.getloadavg()[0]:.1f})")
    ref = ms.get("before", ms["sweep"])
    name = "before" if "before" in ms else "sweep"
    row(f"`record -- true`, auto vs {name}", f"{ms['auto'] - ref:+.0f} ms", "<= +10 ms", ms["auto"] - ref <= 10)


def row(measurement: str, value: str, target: str, met: bool) -> None:
    ROWS.append((measurement, value, target, met))


def main() -> None:
    restore = become_subreaper()  # as the recorder is: the sweep walks this process's tree
    try:
        start_up(int(os.environ.get("ALPHA_BENCH_SPAWNS", "200")))
        end_cost(max(int(os.environ.get("ALPHA_BENCH_SPAWNS", "200")) // 4, 5))
    finally:
        restore()
    record(int(os.environ.get("ALPHA_BENCH_STARTS", "10")))
    for measurement, value, target, met in ROWS:
        print(f"ROW\t{measurement}\t{value}\t{target}\t{'met' if met else 'missed'}")


if __name__ == "__main__":
    main()
