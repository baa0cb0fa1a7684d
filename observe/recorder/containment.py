"""The command's container: what the recorder ends as a whole, so that nothing outlives the recording.

Two kinds, the first that can be had (``process.start`` and ``process.stray``
name it as ``containment``, with ``guaranteed``):

- ``cgroup``: a cgroup v2 of the recording's own (observe.recorder.cgroup). The
  recorder steps into it for the instant of each fork (:meth:`Container.spawning`),
  so the command is inside before it runs a single instruction, and so is all
  it forks. It is ended with SIGTERM to every member, then, after the grace,
  frozen (no member can fork any more), listed, and killed with ``cgroup.kill``.
  The end is guaranteed once the kernel says the cgroup is empty and no process
  of the tree is found outside it: a member that wrote itself out of the cgroup
  (which needs the recorder's own write access, so a command running as root
  can) is swept, until the recorder's own children, read a few times in a row,
  agree and none is alive (:meth:`CgroupContainer.quiet`: a pid hopper cannot
  hide from that), and the end is then not guaranteed.
- ``sweep``: the recorder's process tree (it is the tree's subreaper), walked
  from its own children down: SIGTERM, then rounds that stop (SIGSTOP: a stopped
  process cannot fork) every live process found, then kill it, until
  ``EMPTY_SWEEPS`` rounds in a row find none. No sweep can rule out a process
  that forks and exits between two looks, so its end is never guaranteed.

A private PID namespace is not used: the command's first process would be the
namespace's init (which ignores SIGTERM unless it handles it, and must reap
orphans), its pids and ``/proc`` would no longer match what it sees of the
machine, NVML inside it lists only its own processes, and without root the user
namespace it needs maps the command to another user and breaks ``sudo``.
docs/TRUST.md says what each kind needs.

``ALPHA_OBSERVE_CONTAINMENT=sweep`` forces the sweep (tests of the fallback); the
default, ``auto``, takes a cgroup where one can be made.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from observe.env import RecorderVars
from observe.recorder.cgroup import PREFIX, Cgroup, CgroupUnavailable, make_cgroup
from observe.recorder.proctree import (
    ProcessInfo,
    argv_of,
    children,
    descendants,
    info,
    live,
    reap,
    signal_process,
    walk,
)

__all__ = ["CGROUP", "SWEEP", "Container", "End", "open_container"]

CGROUP = "cgroup"
SWEEP = "sweep"
#: Rounds in a row that must find no live process before a sweep ends.
EMPTY_SWEEPS = 5
#: Rounds in a row that must find no process of the tree outside the emptied cgroup.
ESCAPE_SWEEPS = 3
#: Reads in a row of the recorder's own children that must agree, with none of them alive, before a cgroup's
#: end is called guaranteed (see :meth:`CgroupContainer.quiet`).
QUIET_READS = 3
#: Seconds the killing may take at most, after the grace.
KILL_BOUND = 10.0
#: Seconds between two looks while waiting for processes to go.
POLL = 0.02


@dataclass
class End:
    """How the end went: what was ended, by which containment, and whether nothing can be left."""

    containment: str
    guaranteed: bool
    #: ``{"pid", "argv", "signal"}`` for each process ended (``signal`` the last one sent, or None).
    ended: list[dict[str, Any]] = field(default_factory=list)
    #: ``{"pid", "argv"}`` of each process still alive when the recorder gave up.
    survivors: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""


class _Ledger:
    """Every process the end found, by pid, with the last signal it was sent."""

    def __init__(self) -> None:
        self.entries: dict[int, dict[str, Any]] = {}

    def saw(self, proc: ProcessInfo, signum: int | None = None) -> None:
        entry = self.entries.get(proc.pid)
        if entry is None:
            argv = proc.argv or argv_of(proc.pid)
            entry = self.entries[proc.pid] = {"pid": proc.pid, "argv": list(argv), "signal": None}
        if signum is not None:
            entry["signal"] = signal.Signals(signum).name

    def listed(self) -> list[dict[str, Any]]:
        return [self.entries[pid] for pid in sorted(self.entries)]


class Container:
    """The sweep (the base of every kind): the recorder's process tree, less ``exclude``'s subtrees.

    ``exclude`` are the recorder's children from before the command (a library
    caller's own), never the command's to end. ``command`` in the methods below is
    the command's own pid: signalled like any member, never reaped or listed here
    (``process.exit`` records it).
    """

    kind = SWEEP

    def __init__(self, exclude: Collection[int] = (), note: str = "") -> None:
        self.root = os.getpid()
        self.exclude = frozenset(exclude)
        self.note = note
        self._lock = threading.Lock()
        #: The recorder's children whose exit status is another's to collect (the steps it runs): never reaped here.
        self.unreaped: Callable[[], Collection[int]] = frozenset

    @property
    def guaranteed(self) -> bool:
        """Whether this kind can end every process of the tree for certain."""
        return False

    def describe(self) -> dict[str, Any]:
        """``process.start``'s attrs for the containment."""
        return {"containment": self.kind, "guaranteed": self.guaranteed, "containment_note": self.note}

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """Around a fork of a process of the command's (the command, a step the recorder runs): it is inside."""
        with self._lock:
            yield

    def add(self, pid: int) -> bool:
        """Put the running process ``pid`` inside (what it forked before stays where it is): prefer
        :meth:`spawning`, which leaves no moment outside. True when it is inside."""
        return pid in {p.pid for p in descendants(self.root, self.exclude)}

    # -- what is inside --------------------------------------------------------------

    def members(self) -> list[ProcessInfo]:
        """The live processes inside now."""
        return [p for p in descendants(self.root, self.exclude) if live(p)]

    def signal_all(self, signum: int) -> list[ProcessInfo]:
        """``signum`` to every live process inside; the ones it reached."""
        return [p for p in self.members() if signal_process(p, signum)]

    def reap(self, command: int | None) -> None:
        """Collect the exit status of the tree's orphans that exited (never ``command``'s): each zombie holds a pid."""
        reap(self.root, self.exclude | set(self.unreaped()) | ({command} if command is not None else set()))

    # -- the end ---------------------------------------------------------------------

    def kill_now(self, command: int | None) -> list[dict[str, Any]]:
        """SIGKILL to everything inside, the command included, now (``--timeout``'s SIGKILL); what was killed
        (the command not listed)."""
        ledger = _Ledger()
        self._kill(ledger, command, EMPTY_SWEEPS)
        return [e for e in ledger.listed() if e["pid"] != command]

    def end(self, grace: float, command: int | None, first: int = signal.SIGTERM) -> End:
        """End everything inside: ``first`` (SIGTERM), then, after ``grace`` seconds, SIGKILL."""
        ledger = _Ledger()
        self._terminate(ledger, first, grace, command)
        self._kill(ledger, command, EMPTY_SWEEPS)  # also when the first look found none: make sure
        return self._result(ledger, command)

    def _result(self, ledger: _Ledger, command: int | None) -> End:
        self.reap(command)
        survivors = [{"pid": p.pid, "argv": list(p.argv)} for p in self.members() if p.pid != command]
        ended = [e for e in ledger.listed() if e["pid"] != command]
        note = "a sweep cannot rule out a process that forks and exits between two looks"
        return End(self.kind, False, ended, survivors, note)

    def _terminate(self, ledger: _Ledger, first: int, grace: float, command: int | None) -> bool:
        """``first`` to every live member, again to newcomers, until none is left or ``grace`` is over;
        True when some are still alive."""
        deadline = time.monotonic() + max(grace, 0.0)
        self.reap(command)
        while True:
            found = self.members()
            if not found:
                return False
            for p in found:
                ledger.saw(p, first if signal_process(p, first) else None)
            if time.monotonic() >= deadline:
                return True
            time.sleep(POLL)
            self.reap(command)

    def _kill(self, ledger: _Ledger, command: int | None, rounds: int) -> None:
        """Rounds that stop every live process found, top down, then kill them, until ``rounds`` in a
        row find none (or ``KILL_BOUND`` is over)."""
        deadline = time.monotonic() + KILL_BOUND
        empty = 0
        while empty < rounds:
            self.reap(command)
            stopped = self._stop_round(command)
            if not stopped:
                empty += 1
                time.sleep(0.0005)  # the next look a moment later: a process between two parents shows again
                continue
            empty = 0
            for p in stopped:
                ledger.saw(p, signal.SIGKILL if signal_process(p, signal.SIGKILL) else None)
            if time.monotonic() >= deadline:
                return

    def _stop_round(self, command: int | None) -> list[ProcessInfo]:
        """SIGSTOP to every live process of the tree, parents before their children; the ones stopped."""
        stopped: list[ProcessInfo] = []
        keep = {command, *self.unreaped()}

        def stop(pid: int) -> bool:
            proc = info(pid, with_argv=False)
            if proc is None:
                return False
            if not live(proc):
                if proc.ppid == self.root and pid not in keep:  # reaped as found: a long list slows every look
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(pid, os.WNOHANG)
                return False
            if signal_process(proc, signal.SIGSTOP):
                stopped.append(proc)
            return True

        walk(self.root, self.exclude, stop)
        return stopped

    def close(self) -> None:
        """Give back what the container holds (nothing, for a sweep)."""


class CgroupContainer(Container):
    """The command in a cgroup v2 of its own (see the module's docstring)."""

    kind = CGROUP

    def __init__(self, cgroup: Cgroup, exclude: Collection[int] = ()) -> None:
        super().__init__(exclude, f"cgroup {cgroup.path}")
        self.cgroup = cgroup
        #: Set when the cgroup could not be used after all: the end is a sweep then.
        self.broken: str | None = None
        self._recorder_inside = False

    @property
    def guaranteed(self) -> bool:
        return self.broken is None

    def describe(self) -> dict[str, Any]:
        if self.broken is None:
            return super().describe()
        return {"containment": SWEEP, "guaranteed": False, "containment_note": self.broken}

    def _break(self, why: str) -> None:
        self.broken = self.broken or f"{self.note}: {why}; fell back on the sweep"

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        with self._lock:
            if self.broken is not None:
                yield
                return
            try:
                self.cgroup.enter()
            except OSError as exc:
                self._break(f"the recorder could not enter it ({exc.strerror or exc})")
                yield
                return
            try:
                yield
            finally:
                self._leave()

    def _leave(self) -> None:
        for _ in range(3):
            try:
                self.cgroup.leave()
                return
            except OSError as exc:
                error = exc
        self._recorder_inside = True  # never cgroup.kill then: it would end the recorder too
        self._break(f"the recorder could not leave it ({error.strerror or error})")

    def add(self, pid: int) -> bool:
        if self.broken is not None:
            return super().add(pid)
        try:
            self.cgroup.add(pid)
            return True
        except OSError:
            return False

    def members(self) -> list[ProcessInfo]:
        if self.broken is not None:
            return super().members()
        found = (info(pid) for pid in self.cgroup.members())
        return [p for p in found if p is not None and live(p)]

    def kill_now(self, command: int | None) -> list[dict[str, Any]]:
        if self.broken is not None:
            return super().kill_now(command)
        ledger = _Ledger()
        self._kill_cgroup(ledger, command)
        return [e for e in ledger.listed() if e["pid"] != command]

    def end(self, grace: float, command: int | None, first: int = signal.SIGTERM) -> End:
        if self.broken is not None:
            return super().end(grace, command, first)
        ledger = _Ledger()
        if self._terminate(ledger, first, grace, command) or self.cgroup.populated:
            self._kill_cgroup(ledger, command)
        emptied = not self.cgroup.populated
        # A member that wrote itself out of the cgroup is still the recorder's descendant: sweep those, until
        # the recorder's own children show that none is left (a pid hopper can slip past a few sweeps).
        outside = _Ledger()
        Container._kill(self, outside, command, ESCAPE_SWEEPS)
        deadline = time.monotonic() + KILL_BOUND
        quiet = self.quiet()
        while not quiet and time.monotonic() < deadline:
            Container._kill(self, outside, command, ESCAPE_SWEEPS)
            quiet = self.quiet()
        self.reap(command)
        survivors = [{"pid": p.pid, "argv": list(p.argv)} for p in Container.members(self) if p.pid != command]
        for pid, entry in outside.entries.items():
            ledger.entries.setdefault(pid, entry)
        notes = []
        if not emptied:
            notes.append("the cgroup still held live processes when the recorder gave up")
        if outside.entries:
            notes.append(f"{len(outside.entries)} process(es) of the tree had left the cgroup and were swept")
        if not quiet:
            notes.append(
                "the recorder's own children never held still with none alive: a process that left the cgroup "
                "may have outlived the recording"
            )
        guaranteed = emptied and quiet and not outside.entries and not survivors
        ended = [e for e in ledger.listed() if e["pid"] != command]
        return End(CGROUP, guaranteed, ended, survivors, "; ".join(notes))

    def quiet(self) -> bool:
        """Whether no process of the tree is left, in the cgroup or out of it: ``QUIET_READS`` reads in a row of
        the recorder's own children (less ``exclude``) that agree, none of them alive, nothing reaped meanwhile.

        The recorder is the tree's subreaper, so a live process of the tree has a chain of live parents up to
        one of its children, and a process that hops from pid to pid (each parent exits) leaves a new child of
        the recorder's at every hop: a zombie stays listed until the recorder reaps it, its child is listed
        from the moment it is reparented. A command that can write itself out of its cgroup (it has the
        recorder's own write access to the cgroup above) is found so, whatever it does between two looks.
        """
        first = self._children_now()
        if first is None:
            return False
        for _ in range(QUIET_READS - 1):
            time.sleep(0.0005)
            if self._children_now() != first:
                return False
        return True

    def _children_now(self) -> tuple[tuple[int, int, str], ...] | None:
        """``(pid, start, state)`` of each of the recorder's children; None when one (bar ``exclude``) is alive."""
        found = []
        for pid in sorted(set(children(self.root)) - self.exclude):
            proc = info(pid, with_argv=False)
            if proc is None:
                found.append((pid, 0, "gone"))  # reaped meanwhile: the next read differs
            elif live(proc):
                return None
            else:
                found.append((pid, proc.start, proc.state))
        return tuple(found)

    def _kill_cgroup(self, ledger: _Ledger, command: int | None) -> None:
        """Freeze the cgroup (nothing inside can fork), list its members, kill them all, wait until it is empty."""
        self.cgroup.freeze(1.0)
        for proc in self.members():
            ledger.saw(proc, signal.SIGKILL)
        self.cgroup.kill()
        deadline = time.monotonic() + KILL_BOUND
        again = time.monotonic() + 0.5
        while self.cgroup.populated and time.monotonic() < deadline:
            self.reap(command)
            if time.monotonic() >= again:  # not frozen in time, and some forked meanwhile: again
                for proc in self.members():
                    ledger.saw(proc, signal.SIGKILL)
                self.cgroup.kill()
                again = time.monotonic() + 0.5
            time.sleep(0.002)
        self.cgroup.thaw()
        self.reap(command)

    def close(self) -> None:
        """Kill what is still inside and remove the cgroup (never while the recorder is inside it)."""
        if self._recorder_inside:
            return
        if self.cgroup.populated:
            self.cgroup.kill()
        self.cgroup.remove()


def open_container(stream_id: str, exclude: Collection[int] = (), env: Mapping[str, str] | None = None) -> Container:
    """The container for one recording: a cgroup of its own where one can be made, else the sweep.

    ``ALPHA_OBSERVE_CONTAINMENT`` (in ``env``, the recorder's environment) is ``auto``
    (the default) or ``sweep``; another value is ignored, with a warning.
    """
    mode = (env if env is not None else os.environ).get(RecorderVars.CONTAINMENT, "auto").strip() or "auto"
    if mode not in ("auto", SWEEP):
        from observe.recorder.sinks import logger

        logger().warning("ignoring a bad containment variable", variable=RecorderVars.CONTAINMENT, value=mode[:40])
        mode = "auto"
    if mode == SWEEP:
        return Container(exclude, f"{RecorderVars.CONTAINMENT}={SWEEP}")
    try:
        cgroup = make_cgroup(f"{PREFIX}{stream_id}")
    except CgroupUnavailable as exc:
        return Container(exclude, f"no cgroup of its own: {exc}")
    return CgroupContainer(cgroup, exclude)
