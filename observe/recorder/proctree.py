"""The command's process tree as /proc shows it: its processes, their children, signals that miss no one.

The recorder is a child subreaper (observe.recorder.spawn.become_subreaper):
whatever the command starts and orphans is reparented to it, never to init, so
every live process of the tree has a chain of live parents up to one of the
recorder's own children. The tree is walked from those children down, through
``/proc/PID/task/TID/children`` (the kernel's own list, read per process and
thread), with a full ``/proc`` scan where the kernel has no such file.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Collection
from dataclasses import dataclass

__all__ = [
    "ProcessInfo",
    "children",
    "children_of",
    "descendants",
    "info",
    "live",
    "reap",
    "signal_process",
    "walk",
]


@dataclass(frozen=True)
class ProcessInfo:
    """One process of the command's tree, as /proc shows it."""

    pid: int
    ppid: int
    state: str
    start: int  # clock ticks since boot: tells a pid from its reuse
    argv: tuple[str, ...]


def _stat(pid: int) -> tuple[int, str, int] | None:
    """``(ppid, state, starttime)`` of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), fields[0].decode("ascii", "replace"), int(fields[19])
    except (IndexError, ValueError):
        return None


def argv_of(pid: int) -> tuple[str, ...]:
    """``pid``'s argv (what it wrote there: for display only), or () when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read(1 << 16)
    except OSError:
        return ()
    return tuple(a.decode("utf-8", "backslashreplace") for a in raw.split(b"\0") if a)


def _thread_state(pid: int) -> str:
    """The state of a thread of ``pid`` that still runs, or ``Z`` when none does: a process whose main thread
    ended (``pthread_exit``) shows ``Z`` in /proc/PID/stat while its other threads run on."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return "Z"
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        state = raw[raw.rfind(b")") + 2 :].split()[:1]
        if state and state[0] not in (b"Z", b"X"):
            return state[0].decode("ascii", "replace")
    return "Z"


def info(pid: int, *, with_argv: bool = True) -> ProcessInfo | None:
    """What /proc says of ``pid`` now, or None when it is gone; a zombie main thread whose process has a
    thread still running is that thread's state (the process is alive)."""
    st = _stat(pid)
    if st is None:
        return None
    state = _thread_state(pid) if st[1] == "Z" else st[1]
    return ProcessInfo(pid, st[0], state, st[2], argv_of(pid) if with_argv else ())


def live(proc: ProcessInfo) -> bool:
    """Running or stopped, not a zombie waiting to be reaped."""
    return proc.state not in ("Z", "X")


@dataclass(frozen=True)
class _Row:
    pid: int
    ppid: int
    state: str
    start: int


def _table() -> list[_Row]:
    out: list[_Row] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out.append(_Row(int(name), st[0], st[1], st[2]))
    return out


_HAS_CHILDREN_FILE: bool | None = None


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` now (every thread's children), from the kernel's list where it has one."""
    global _HAS_CHILDREN_FILE
    if _HAS_CHILDREN_FILE is None:
        _HAS_CHILDREN_FILE = os.path.exists(f"/proc/self/task/{os.getpid()}/children")
    if not _HAS_CHILDREN_FILE:
        return sorted(r.pid for r in _table() if r.ppid == pid)
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
            out.extend(int(p) for p in fh.read().split())
    return out


def children_of(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` now."""
    return set(children(pid))


#: Times a walk reads ``root``'s children again for processes reparented to it while it walked.
RELOOKS = 64


def walk(root: int, exclude: Collection[int], visit: Callable[[int], bool]) -> None:
    """Call ``visit`` on every pid below ``root`` (not ``root``), parents before their children, skipping the
    subtrees of ``exclude`` and those ``visit`` returns False for (a process that is gone).

    A process whose parent exits while the walk is between them is reparented to ``root`` (its subreaper)
    after the walk read ``root``'s children; so the walk reads them again, until no new pid shows (at most
    ``RELOOKS`` times): a process that keeps forking and exiting is chased rather than missed.
    """
    seen: set[int] = {root}
    for _ in range(RELOOKS):
        stack = [pid for pid in children(root) if pid not in seen and pid not in exclude]
        if not stack:
            return
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            if visit(pid):
                stack.extend(p for p in children(pid) if p not in seen and p not in exclude)


def descendants(root: int, exclude: Collection[int] = ()) -> list[ProcessInfo]:
    """Every process below ``root`` (not ``root``, zombies included), skipping the subtrees of ``exclude``."""
    out: list[ProcessInfo] = []

    def visit(pid: int) -> bool:
        proc = info(pid)
        if proc is not None:
            out.append(proc)
        return proc is not None and live(proc)  # a zombie's children are already someone else's

    walk(root, exclude, visit)
    return sorted(out, key=lambda p: p.pid)


def signal_process(proc: ProcessInfo, signum: int) -> bool:
    """Send ``signum`` to ``proc`` if it is still that process (not a reused pid)."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        st = _stat(proc.pid)
        if st is None or st[2] != proc.start:
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signum)
        else:  # pragma: no cover - kernels before 5.3
            os.kill(proc.pid, signum)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def reap(parent: int, skip: Collection[int]) -> None:
    """Collect the exit status of ``parent``'s exited children (reparented orphans), except ``skip``."""
    for pid in children(parent):
        if pid in skip:
            continue
        st = _stat(pid)
        if st is not None and st[1] == "Z":
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
