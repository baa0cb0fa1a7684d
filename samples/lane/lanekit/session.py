"""Launch one run of a lane: a coordinator and N owners, each a fresh process.

The participants meet on a Unix socket in a private temporary folder (outside
every output folder). Each process's stdout and stderr are passed through to
ours, prefixed with its role, so a recording sees every refusal line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import IO

from .spec import COORDINATOR_HOST

__all__ = ["RunResult", "run_lane"]


@dataclass
class RunResult:
    """Exit codes (by role) and the captured output of one run."""

    exit_codes: dict[str, int]
    output: dict[str, str] = field(default_factory=dict)
    stdout: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every participant exited 0."""
        return all(code == 0 for code in self.exit_codes.values())


def _pump(role: str, stream: IO[bytes], sink: IO[str], keep: list[str], only: list[str]) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        keep.append(line)
        only.append(line)
        sink.write(line if line.startswith("refused: ") else f"[{role}] {line}")
        sink.flush()


def _wait_all(procs: dict[str, subprocess.Popen[bytes]], timeout: float, grace: float = 1.0) -> dict[str, int]:
    """Wait for every participant; once one fails, give the rest ``grace`` seconds, then kill them (by pid)."""
    deadline = time.monotonic() + timeout
    failed_at: float | None = None
    while True:
        codes = {role: proc.poll() for role, proc in procs.items()}
        if all(code is not None for code in codes.values()):
            return {role: int(code) for role, code in codes.items() if code is not None}
        now = time.monotonic()
        if failed_at is None and any(code not in (None, 0) for code in codes.values()):
            failed_at = now
        if now > deadline or (failed_at is not None and now > failed_at + grace):
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        time.sleep(0.01)


def run_lane(
    executables: dict[str, str],
    *,
    updates: int,
    epoch: int,
    checkpoint_out: str,
    trajectory_out: str,
    membership_out: str,
    resume: str | None = None,
    resume_membership: str | None = None,
    shadow: bool = False,
    timeout: float = 300.0,
    python: str = sys.executable,
) -> RunResult:
    """Run ``updates`` updates with fresh processes; return their exit codes and output.

    ``executables`` maps each role (owner-0 ... owner-{N-1}, in role order) to its executable; the
    coordinator is started from owner-0's.
    """
    tmp = tempfile.mkdtemp(prefix="lane-")
    sock = os.path.join(tmp, "coordinator.sock")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    pumps: list[threading.Thread] = []
    output: dict[str, list[str]] = {}
    stdout: dict[str, list[str]] = {}
    try:
        for role in ("coordinator", *executables):
            if role == "coordinator":
                argv = [python, executables[COORDINATOR_HOST], "coordinate"]
            else:
                argv = [python, executables[role], "serve"]
            argv += ["--socket", sock, "--epoch", str(epoch)]
            if role == "coordinator":
                argv += [
                    "--updates",
                    str(updates),
                    "--checkpoint-out",
                    checkpoint_out,
                    "--trajectory-out",
                    trajectory_out,
                    "--membership-out",
                    membership_out,
                ]
                if resume:
                    argv += ["--resume", resume]
                if resume_membership:
                    argv += ["--resume-membership", resume_membership]
            elif shadow:
                argv.append("--shadow")
            # A process group of its own: an interrupt of the phase ends the phase, which ends its roles (the
            # finally below), instead of reaching each role's Python wherever it is (a traceback, or worse).
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)
            procs[role] = proc
            for stream, sink, only in (
                (proc.stdout, sys.stdout, stdout.setdefault(role, [])),
                (proc.stderr, sys.stderr, []),
            ):
                keep = output.setdefault(role, [])
                t = threading.Thread(target=_pump, args=(role, stream, sink, keep, only), daemon=True)
                t.start()
                pumps.append(t)
        codes = _wait_all(procs, timeout)
        for t in pumps:
            t.join(5)
        return RunResult(
            codes,
            {role: "".join(lines) for role, lines in output.items()},
            {role: "".join(lines) for role, lines in stdout.items()},
        )
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
