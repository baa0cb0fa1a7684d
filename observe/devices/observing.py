"""Observing devices once, and the one rule for "this observation changed": the sampler and the node observer.

The recorder's sampler (observe.recorder.sampler) observes its own machine; the
node observer (observe.devices.node_observer) observes a remote node. Both take
an observation the same way (:meth:`Observing.observe`: read the devices, keep
the start's memory as the baseline and when each GPU last listed a process, and
build the ``device.observed`` attrs) and append a ``sample`` under the same rule
(:func:`change_key`): when the GPUs, the processes on them (pid, GPU, of the
tree or not, the steps they run, what they execute), a GPU's compute mode or what
its listed processes do not explain (memory in steps of ``BUSY_MEMORY``, activity
or none), a GPU's health facts but those that move with load
(observe.devices.health.health_key), the open steps, the attribution or the error
changed, or when NVML delivered a GPU event (every observation holding one is
recorded).

Bundled for the nodes (observe.devices.bundle): standard library and bundled
modules only, Python 3.9.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from observe.devices.health import health_key
from observe.devices.identity import Identities
from observe.devices.observers import BUSY_MEMORY, QUIET_SECONDS, DeviceReading, Observer, Tree, observation

__all__ = ["Observing", "change_key"]

OpenSteps = Callable[[], Sequence[tuple[str, "int | None"]]]


def _digest(file: Any) -> Any:
    return file.get("sha256") if isinstance(file, dict) else None


def _shared(gpu: Mapping[str, Any]) -> tuple[int | None, bool]:
    """Memory (in steps of ``BUSY_MEMORY``) and activity this GPU's listed processes do not explain: a change
    of either is a change to record."""
    memory = gpu.get("unexplained_memory")
    return (memory // BUSY_MEMORY if isinstance(memory, int) else None, bool(gpu.get("unexplained_utilization")))


def change_key(attrs: Mapping[str, Any], open_steps: Sequence[tuple[str, int | None]] = ()) -> object:
    """What a ``sample`` is recorded for (see the module): two observations with equal keys are one."""
    return (
        tuple(g["uuid"] for g in attrs["gpus"]),
        tuple(
            (p["pid"], p["gpu"], p["in_tree"], tuple(p["steps"]), _digest(p["exe"]), _digest(p["script"]))
            for p in attrs["processes"]
        ),
        tuple((g["uuid"], g["compute_mode"], _shared(g), health_key(g.get("health"))) for g in attrs["gpus"]),
        object() if attrs.get("gpu_events") else None,  # never equal to another: an event is always recorded
        tuple(open_steps),
        attrs["attribution"],
        attrs["error"],
    )


class Observing:
    """One observer's observations, taken one at a time, and whether each changed since the last recorded one."""

    def __init__(
        self,
        observer: Observer,
        namespace: Mapping[str, Any] | None,
        *,
        mask: Callable[[str], str],
        everyone: bool = False,
    ) -> None:
        self.observer = observer
        self.namespace = namespace
        self.mask = mask
        self.everyone = everyone  # a node's observer: identify every listed process (no recorded tree there)
        self.identities = Identities()
        self.baseline: dict[str, int] = {}
        self.listed_at: dict[str, float] = {}  # GPU uuid -> when it last listed a process (monotonic)
        self.last_key: object = None

    def observe(
        self,
        phase: str,
        read_tree: Callable[[], Tree],
        tree: Tree | None = None,
        open_steps: OpenSteps = tuple,
    ) -> tuple[dict[str, Any], DeviceReading, Tree, object]:
        """One observation: its attrs, the reading and the tree it rests on, and its :func:`change_key`.

        ``read_tree`` is the tree the observer reads the devices with (the recorded tree); ``tree`` the one
        processes are attributed to (None: the same). A failure is recorded in the observation, never raised.
        """
        failure = None
        read = Tree()
        reading = DeviceReading()
        try:
            read = read_tree()
            reading = self.observer.read(read)
        except Exception as exc:  # noqa: BLE001 - recorded in the observation, never raised
            failure = f"the device observer failed: {type(exc).__name__}: {exc}"
        if phase == "start":
            self.baseline = {g.uuid: g.memory_used for g in reading.gpus if g.memory_used is not None}
        now = time.monotonic()
        for _pid, uuid, _used in reading.processes:
            self.listed_at[uuid] = now
        recent = {u for u, at in self.listed_at.items() if now - at <= QUIET_SECONDS}
        steps = list(open_steps())
        attrs = observation(
            phase,
            self.observer,
            reading,
            tree if tree is not None else read,
            steps,
            baseline=self.baseline,
            mask=self.mask,
            extra_error=failure,
            identities=self.identities,
            namespace=self.namespace,
            recent=recent,
            everyone=self.everyone,
        )
        return attrs, reading, read, change_key(attrs, steps)

    def changed(self, key: object) -> bool:
        """Whether ``key`` differs from the last one (which it then becomes)."""
        if key == self.last_key:
            return False
        self.last_key = key
        return True
