"""A gated command that tries the CI forgery: read the seal key from the job, and plant an ``alpha`` to run later.

Run as the command a CI job gates (``python3 key_probe.py ...``; standard library only, so any
Python runs it). While it runs it looks, as its own user, for the key in every other process of
the job (the runner's descendants, the recorder aside): in ``/proc/PID/environ`` and in the
process's memory (``/proc/PID/mem``, every mapped region it may read). Then it replaces each
``alpha`` the recorder was started as (a file named in an ancestor's command line, when it can
write it) with a script that appends to ``--marker``: a job that runs ``alpha`` after the command
runs the command's code; and, when that ``alpha`` is a virtual environment's under the temporary
folder (never another), appends the same mark to every Python module installed in it: a recorder
that first imports a module after the command started runs the command's code while it holds the
key. It writes what it found to ``--report`` as JSON: ``{"holders": [{"pid", "cmdline", "where"}],
"replaced": [PATH], "modules": N, "recorder": PID, "scanned": N}``.

The key's bytes are given hex-encoded (``--needle-hex``), so that the command line that carries
them never holds the needle itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import tempfile
from pathlib import Path

#: Regions larger than this are skipped (a job's shells and interpreters map far less).
MAX_REGION = 256 * 1024 * 1024


def _ppid(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[1])


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _ancestors(pid: int) -> list[int]:
    out = []
    while True:
        parent = _ppid(pid)
        if not parent:
            return out
        out.append(parent)
        pid = parent


def _runner(args: argparse.Namespace, ancestors: list[int]) -> int:
    if args.runner_pid:
        return int(args.runner_pid)
    for pid in ancestors:
        if any(args.runner_match in a for a in cmdline(pid)[:2]):  # the program, not its arguments
            return pid
    raise SystemExit(f"key_probe: no ancestor's command line holds {args.runner_match!r}")


def _is_recorder(cmdline: list[str]) -> bool:
    return any(Path(a).name == "alpha" for a in cmdline[:2]) and "observe" in cmdline


def _job_processes(runner: int) -> list[int]:
    """Every process whose ancestry reaches the runner (the runner itself not)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and runner in _ancestors(int(entry)):
            out.append(int(entry))
    return out


def in_memory(pid: int, needle: bytes) -> bool | None:
    """Whether the process's readable memory holds ``needle`` (None: its memory cannot be read, or none of it
    could). tests/helpers/node_key_probe.py uses it too."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", buffering=0)  # noqa: SIM115 - closed below
    except OSError:
        return None
    read_any = False
    with mem:
        for line in maps:
            match = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)", line)
            if not match or not match.group(3).startswith("r"):
                continue
            start, end = int(match.group(1), 16), int(match.group(2), 16)
            if end - start > MAX_REGION:
                continue
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            read_any = read_any or bool(data)
            if data and needle in data:
                return True
    return False if read_any else None


def _plant(path: Path, marker: Path) -> bool:
    """Replace ``path`` (when this user may) with a script that leaves a mark when it runs."""
    try:
        st = path.stat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
        return False
    planted = path.with_name(path.name + ".planted")
    planted.write_text(f'#!/bin/sh\necho "planted alpha ran: $*" >> {marker}\n')
    planted.chmod(0o755)
    os.replace(planted, path)
    return True


def _plant_modules(alpha: Path, marker: Path) -> int:
    """Append a mark to every module of the virtual environment ``alpha`` is in (one under the temporary folder)."""
    venv = alpha.parent.parent
    if not (venv / "pyvenv.cfg").is_file() or not str(venv.resolve()).startswith(tempfile.gettempdir() + "/"):
        return 0
    count = 0
    for module in venv.glob("lib/python*/site-packages/**/*.py"):
        if os.access(module, os.W_OK):
            with module.open("a") as f:
                f.write(f"\nopen({str(marker)!r}, 'a').write('planted module ran: ' + __name__ + '\\n')\n")
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--needle-hex", required=True)
    parser.add_argument("--runner-pid", type=int, default=0)
    parser.add_argument("--runner-match", default="")
    parser.add_argument("--report", required=True, type=Path)
    parser.add_argument("--marker", required=True, type=Path)
    args = parser.parse_args()
    needle = bytes.fromhex(args.needle_hex)
    me = os.getpid()
    ancestors = _ancestors(me)
    runner = _runner(args, ancestors)
    recorder = next((p for p in ancestors if _is_recorder(cmdline(p))), None)
    # planted first: a module the recorder imports from now on runs the command's code
    replaced = []
    modules = 0
    for pid in ancestors:
        if pid == runner:
            break
        for arg in cmdline(pid):
            if Path(arg).name == "alpha" and arg.startswith("/"):
                modules += _plant_modules(Path(arg), args.marker.resolve())
                if _plant(Path(arg), args.marker.resolve()):
                    replaced.append(arg)
    holders = []
    scanned = 0
    for pid in _job_processes(runner):
        if pid in (me, recorder):
            continue
        scanned += 1
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            environ = b""
        if needle in environ:
            holders.append({"pid": pid, "cmdline": cmdline(pid), "where": "environ"})
        if in_memory(pid, needle):
            holders.append({"pid": pid, "cmdline": cmdline(pid), "where": "memory"})
    report = {"holders": holders, "replaced": replaced, "modules": modules, "recorder": recorder, "scanned": scanned}
    args.report.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
