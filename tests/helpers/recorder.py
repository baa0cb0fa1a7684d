"""Helpers for the recorder's tests: record with the real CLI (tests.helpers.run), read back what it recorded."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aos.event import Event
from aos.reader import StreamContents, read_stream
from tests.helpers.run import ALPHA, alpha, child_env


def record(
    tmp_path: Path, argv: Sequence[str], *opts: str, env: dict[str, str] | None = None, timeout: float = 60, **kw: Any
) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    """``alpha observe record --out TMP/run.aos OPTS -- ARGV``; returns the process and the stream path."""
    out = tmp_path / f"run-{time.monotonic_ns()}.aos"
    proc = alpha("observe", "record", "--out", str(out), *opts, "--", *argv, env=env, timeout=timeout, **kw)
    return proc, out


def events(path: Path) -> list[Event]:
    """Every event of the stream (it must read back without damage)."""
    contents = read_stream(path)
    assert contents.damage is None, contents.damage
    return contents.events


def kinds(evs: list[Event]) -> list[str]:
    return [e.kind for e in evs]


def output(evs: list[Event], kind: str = "stdout", step: str | object | None = ...) -> bytes:
    """The concatenated bytes of one output kind (optionally of one span only)."""
    return b"".join(e.data or b"" for e in evs if e.kind == kind and (step is ... or e.step == step))


def one(evs: list[Event], kind: str) -> Event:
    """The only event of ``kind``."""
    found = [e for e in evs if e.kind == kind]
    assert len(found) == 1, (kind, kinds(evs))
    return found[0]


def index(evs: list[Event], kind: str) -> int:
    return kinds(evs).index(kind)


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    """Poll ``predicate`` until true (fails the test after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def recorded_stdout_so_far(path: Path) -> bytes:
    """stdout recorded in a stream that may still be being written."""
    from aos.refusals import Refusal

    try:
        return output(read_stream(path).events)
    except Refusal:  # not there yet, or not even its schema written yet
        return b""


def kill_recorder_midway(out: Path, script: str, *, lines: int, env: dict[str, str] | None = None) -> StreamContents:
    """``record -- sh -c SCRIPT`` killed with SIGKILL once ``lines`` lines of stdout are recorded (the command's
    process group after it); returns what the stream holds: an unsealed prefix."""
    import contextlib
    import signal

    proc = subprocess.Popen(
        [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "sh", "-c", script],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=child_env(env),
    )
    try:
        wait_for(lambda: recorded_stdout_so_far(out).count(b"\n") >= lines, timeout=60)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        proc.kill()
    contents = read_stream(out)
    pgid = next(e for e in contents.events if e.kind == "process.start").attrs["pid"]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return contents
