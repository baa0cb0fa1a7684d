"""The recorder's sampler: devices and the process tree, observed on a thread of their own.

The thread starts as soon as the stream is open. It loads the device observer
(NVML's start-up stays off the main path) and takes the ``start``
observation, which the recorder appends before ``process.start`` when it is
ready within ``START_WAIT`` seconds (else the thread appends it as soon as it
is, after ``process.start``). While the command runs it appends, every
``--sample-interval`` seconds, a ``telemetry`` event and, when something
changed (the GPUs, the processes on them, the open steps: the one rule of
observe.devices.observing, which the node observer follows too), a
``device.observed`` ``sample``. After ``process.exit`` the recorder asks for the ``end``
observation and waits for it (at most ``END_WAIT`` seconds).

The recorded tree is every descendant of the recorder process, found by
walking ``/proc/PID/task/TID/children`` from the recorder (cheap: it reads only
the tree, whatever else runs on the machine), or with psutil where the kernel
has no such files. Per-process CPU and memory come from psutil, imported on the
first ``telemetry``: ``record -- true`` never loads it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aos import kinds
from observe.devices.namespace import namespace_facts
from observe.devices.observers import (
    ENV_SIMULATED,
    DeviceReading,
    NoObserver,
    NvmlObserver,
    Observer,
    Tree,
    gpu_telemetry,
    lane_configs,
)
from observe.devices.observing import Observing
from observe.recorder.sinks import Sink, logger

if TYPE_CHECKING:
    from observe.devices.remote import NodeLink

__all__ = ["END_WAIT", "NODE_END_GRACE", "NODE_START_WAIT", "START_WAIT", "ObserverOpening", "ProcessTree", "Sampler"]

#: Seconds the recorder waits for the start observation before it starts the command anyway.
START_WAIT = 5.0
#: Seconds the recorder waits for the end observation before it goes on without it.
END_WAIT = 10.0
#: Seconds more the recorder waits for a remote node's end observation after ``END_WAIT``: one that comes then is
#: appended marked ``late``; a node that sends none by then is ``node.lost``, named as never answering.
NODE_END_GRACE = 20.0
#: Seconds the recorder waits for each remote node's start observation (the SSH connection, the upload,
#: NVML on the node) before it starts the command anyway (the node's start follows when it comes).
NODE_START_WAIT = 15.0

OpenSteps = Callable[[], Sequence[tuple[str, int | None]]]


def _children_files(pid: int) -> list[int]:
    """The children of ``pid``, from ``/proc/PID/task/*/children`` (each thread lists those it forked)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            fd = os.open(f"/proc/{pid}/task/{tid}/children", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # the thread or the process is gone
        try:
            data = b""
            while chunk := os.read(fd, 65536):
                data += chunk
        except OSError:
            data = b""
        finally:
            os.close(fd)
        out.extend(int(x) for x in data.split())
    return out


class ProcessTree:
    """The recorder's descendants, and their CPU, memory and argv (psutil, loaded on first use)."""

    def __init__(self, root: int | None = None) -> None:
        self.root = root if root is not None else os.getpid()
        self.use_children_files = os.path.exists(f"/proc/{self.root}/task/{self.root}/children")
        self.expected: int | None = None  # the command's pid: the walk must find it while it is our child
        self._procs: dict[int, Any] = {}
        self._argv: dict[int, list[str] | None] = {}

    def snapshot(self) -> Tree:
        parents = self._walk() if self.use_children_files else None
        missed = parents is not None and self.expected is not None and self.expected not in parents
        if missed and self.expected is not None and self._is_our_child(self.expected):
            self.use_children_files = False  # the children files miss the command: trust psutil instead
            parents = None
        if parents is None:
            parents = self._walk_psutil()
        # argv is read at most once per process per sample, never kept across samples: a process
        # that exec()s keeps its pid and changes its argv.
        self._argv.clear()
        return Tree(parents=parents, argv=self.argv)

    def _walk(self) -> dict[int, int]:
        parents: dict[int, int] = {}
        todo = [self.root]
        while todo:
            pid = todo.pop()
            for kid in _children_files(pid):
                if kid not in parents and kid != self.root:
                    parents[kid] = pid
                    todo.append(kid)
        return parents

    def _is_our_child(self, pid: int) -> bool:
        """Whether ``pid`` is alive and a child of the root (from ``/proc/PID/stat``: no psutil on this path)."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            return int(stat[stat.rindex(b")") + 2 :].split()[1]) == self.root
        except (OSError, ValueError, IndexError):
            return False

    def _walk_psutil(self) -> dict[int, int]:
        import psutil

        parents: dict[int, int] = {}
        try:
            for proc in psutil.Process(self.root).children(recursive=True):
                try:
                    parents[proc.pid] = proc.ppid()
                except psutil.Error:
                    continue
        except psutil.Error:
            pass
        return parents

    def argv(self, pid: int) -> list[str] | None:
        """The argv of ``pid`` (read once per process in this sample; None when it cannot be read)."""
        if pid not in self._argv:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    raw = f.read()
                # Bytes that are not UTF-8 are kept visible as \xNN escapes: a command's odd argv
                # must never make an observation unwritable.
                self._argv[pid] = (
                    [a.decode("utf-8", "backslashreplace") for a in raw.split(b"\0")[:-1]] if raw else None
                )
            except OSError:
                self._argv[pid] = None
        return self._argv[pid]

    def usage(self, tree: Tree) -> dict[str, int]:
        """``processes``, ``cpu_ns`` (user+system of each live process and its reaped children) and ``rss``."""
        import psutil

        cpu_ns = 0
        rss = 0
        live = 0
        procs = self._procs
        for gone in set(procs) - set(tree.parents):
            del procs[gone]
        for pid in tree.parents:
            try:
                proc = procs.get(pid)
                if proc is None:
                    proc = procs[pid] = psutil.Process(pid)
                with proc.oneshot():
                    t = proc.cpu_times()
                    mem = proc.memory_info()
            except psutil.Error:
                continue
            live += 1
            cpu_ns += round((t.user + t.system + t.children_user + t.children_system) * 1e9)
            rss += int(mem.rss)
        return {"processes": live, "cpu_ns": cpu_ns, "rss": rss}


class ObserverOpening:
    """``open_observer`` started on a thread of its own, as early as the recorder can: loading NVML
    (~0.1 s on a GPU machine, mostly in C, without the GIL) overlaps the recorder's own start-up
    (pyarrow, the writer, the channel) instead of following it. The start observation is still taken
    before the command starts: ``Sampler.take_start`` waits for it, as before."""

    def __init__(self, mode: str, env: Mapping[str, str]) -> None:
        self.claimed = False  # a sampler took it: the sampler closes it
        self._result: Observer | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._open, args=(mode, dict(env)), name="aos-nvml-open", daemon=True)
        self._thread.start()

    def _open(self, mode: str, env: Mapping[str, str]) -> None:
        try:
            self._result = open_observer(mode, env)
        except BaseException as exc:  # noqa: BLE001 - handed to the sampler, which records it
            self._error = exc

    def result(self) -> Observer:
        """The observer (waits for the opening); raises what the opening raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def release(self) -> None:
        """If no sampler took it (the recording failed before its sampler started): close the observer
        once it is open (bounded wait)."""
        if self.claimed:
            return
        self._thread.join(START_WAIT)
        if self._result is not None:
            with contextlib.suppress(Exception):
                self._result.close()


class Sampler:
    """Observes devices and the process tree on its own thread; see the module's docstring."""

    def __init__(
        self,
        sink: Sink,
        *,
        mode: str,
        interval: float,
        env: Mapping[str, str],
        open_steps: OpenSteps,
        mask: Callable[[str], str],
        opening: ObserverOpening | None = None,
        cwd: str | None = None,
        observer_key: tuple[str, str, str] | None = None,
    ) -> None:
        self.opening = opening  # the observer, already being opened (None: open it on the thread)
        if opening is not None:
            opening.claimed = True
        self.sink = sink
        self.mode = mode
        self.interval = interval
        self.env = dict(env)
        self.open_steps = open_steps
        self.mask = mask
        self.tree = ProcessTree()
        self.observer: Observer | None = None
        self._lock = threading.Lock()
        self._start_ready = threading.Event()
        self._start_attrs: dict[str, Any] | None = None
        self._start_claimed = False
        self._wake = threading.Event()  # the command started, or the recording ends
        self._stop = threading.Event()
        self._abandoned = False
        self.observing: Observing | None = None  # the observer's observations, once it is open
        self._thread = threading.Thread(target=self._main, name="aos-sampler", daemon=True)
        self.cwd = cwd  # where the lane configs' paths are resolved (None: no remote nodes)
        self.observer_key = observer_key  # (source, label, text) of the nodes' observer key
        self.links: list[NodeLink] = []
        self._nodes_finished = False

    # -- called by the recorder --------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._open_nodes()

    def _open_nodes(self) -> None:
        """Connect to each remote node the lane configs name (observe.devices.remote), each on its own thread.
        Without a lane config in the environment nothing is imported."""
        if self.cwd is None or not lane_configs(self.env):
            return
        try:
            from observe.devices.remote import ObserverKey, open_links

            key = ObserverKey(*self.observer_key) if self.observer_key is not None else None
            self.links, problems = open_links(self.env, self.cwd, interval=self.interval, append=self._append, key=key)
        except Exception as exc:  # noqa: BLE001 - a broken node observer never stops a recording
            logger().error("the remote node observers failed to start", error=f"{type(exc).__name__}: {exc}")
            return
        for problem in problems:
            logger().warning("a lane config names no usable node", problem=problem)
        if self.links and self.observer_key is None:
            logger().warning(
                "the lane config names remote nodes, and no observer key was given: each is refused (no-key); "
                "give --observer-key-env NAME, a private key for the nodes' observer account"
            )

    def take_node_starts(self, timeout: float = NODE_START_WAIT) -> list[tuple[str, dict[str, Any]]]:
        """Each remote node's start observation ready within ``timeout`` (and what followed it already), as
        ``(kind, attrs)``; the others are appended as they come."""
        deadline = time.monotonic() + timeout
        found = []
        for link in self.links:
            found += link.take_start(max(deadline - time.monotonic(), 0.0))
        return found

    def take_start(self, timeout: float = START_WAIT) -> dict[str, Any] | None:
        """The start observation, for the recorder to append (None: not ready; the thread appends it later)."""
        self._start_ready.wait(timeout)
        with self._lock:
            self._start_claimed = True
            attrs, self._start_attrs = self._start_attrs, None
        return attrs

    def command_started(self, pid: int | None) -> None:
        """Begin sampling (``pid``: the command's process, which the tree walk must find)."""
        self.tree.expected = pid
        self._wake.set()

    def finish(self, timeout: float = END_WAIT) -> None:
        """Stop sampling and append the end observations, the nodes' too (bounded wait; idempotent)."""
        if not self._nodes_finished:
            self._nodes_finished = True
            for link in self.links:
                link.end()
            deadline = time.monotonic() + timeout
            self._finish_local(timeout)
            for link in self.links:
                link.done.wait(max(deadline - time.monotonic(), 0.0))
            late = [link for link in self.links if not link.done.is_set()]
            grace = time.monotonic() + NODE_END_GRACE
            for link in late:
                link.end_is_late()
            for link in late:
                if not link.done.wait(max(grace - time.monotonic(), 0.0)):
                    link.never_answered(timeout + NODE_END_GRACE)
            for link in self.links:
                link.close()
        else:
            self._finish_local(timeout)

    def _finish_local(self, timeout: float) -> None:
        if not self._thread.is_alive() and self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            with self._lock:
                self._abandoned = True
            logger().warning("the device observer did not answer; recording goes on without its end observation")

    # -- the thread ----------------------------------------------------------------------

    def _append(self, kind: str, attrs: dict[str, Any]) -> None:
        with self._lock:
            if not self._abandoned:
                self.sink.append(kind, attrs)

    def _main(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - a sampler bug is logged; the recording goes on without it
            logger().error("the device sampler failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._start_ready.set()

    def _run(self) -> None:
        try:
            observer = self.opening.result() if self.opening is not None else open_observer(self.mode, self.env)
        except Exception as exc:  # noqa: BLE001 - a broken observer never stops a recording
            observer = NoObserver(f"the device observer failed to start: {type(exc).__name__}: {exc}")
        self.observer = observer
        self.observing = Observing(observer, namespace_facts(self.env), mask=self.mask)
        start, _reading, _tree, key = self._observe("start")
        self.observing.changed(key)
        with self._lock:
            late = self._start_claimed
            if not late:
                self._start_attrs = start
        self._start_ready.set()
        if late:
            self._append(kinds.DEVICE_OBSERVED, start)
        self._wake.wait()
        next_at = time.monotonic() + self.interval
        failed = False
        while not self._stop.wait(max(next_at - time.monotonic(), 0.0)):
            next_at = max(next_at + self.interval, time.monotonic())
            try:
                self._sample()
            except Exception as exc:  # noqa: BLE001 - a sampler bug must not end the recording
                if not failed:
                    failed = True
                    logger().warning("a device sample failed", error=f"{type(exc).__name__}: {exc}")
        end, _reading, _tree, _key = self._observe("end")
        self._append(kinds.DEVICE_OBSERVED, end)
        try:
            observer.close()
        except Exception as exc:  # noqa: BLE001 - closing NVML must not fail the recording
            logger().warning("closing the device observer failed", error=f"{type(exc).__name__}: {exc}")

    def _observe(self, phase: str) -> tuple[dict[str, Any], DeviceReading, Tree, object]:
        """One observation (observe.devices.observing): its attrs, the reading and tree it rests on, its change key."""
        assert self.observing is not None
        return self.observing.observe(phase, self.tree.snapshot, open_steps=self.open_steps)

    def _sample(self) -> None:
        """A ``telemetry`` event, and a ``device.observed`` sample when something changed."""
        assert self.observing is not None
        attrs, reading, tree, key = self._observe("sample")
        self._append(kinds.TELEMETRY, {"tree": self.tree.usage(tree), "gpus": gpu_telemetry(reading)})
        if self.observing.changed(key):
            self._append(kinds.DEVICE_OBSERVED, attrs)


def open_observer(mode: str, env: Mapping[str, str]) -> Observer:
    """The observer for ``--observe-devices MODE`` (``auto`` or ``nvml``) given the recorder's ``env``.

    Never raises: whatever goes wrong is the observer ``none`` (or ``simulated``) with an ``error``.
    """
    simulated = env.get(ENV_SIMULATED)
    if simulated:
        from observe.devices.simulated import SimulatedObserver

        return SimulatedObserver(simulated)
    return NvmlObserver.open(required=mode == "nvml")
