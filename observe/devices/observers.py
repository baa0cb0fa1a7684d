"""Observing devices: what GPUs the recorder itself sees, never what the lane reports.

Three observers, chosen when the recording starts (``--observe-devices``):

- ``nvml``: NVML queried in-process through nvidia-ml-py (``pynvml``), never a
  ``nvidia-smi`` found on ``PATH``. It records the driver, the CUDA driver
  version, the resolved path and SHA-256 of the ``libnvidia-ml`` the recorder
  loaded (read from ``/proc/self/maps`` after ``nvmlInit``), each GPU and the
  compute processes running on it.
- ``simulated``: ``ALPHA_OBSERVE_SIMULATED_GPUS=FILE`` in the recorder's own
  environment names a JSON file of GPUs (test doubles; ``observe.devices.simulated``
  documents the file). A key of the file can never change the observer's name.
- ``none``: no NVML here (``auto`` on a machine without a driver), or NVML
  failed to start (then ``error`` says why).

An NVML error is recorded in the observation's ``error``, never raised: the
command runs and is recorded whatever the devices do.

This module imports nothing heavy at import time; ``pynvml`` loads only when
``libnvidia-ml.so.1`` itself can be loaded.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from observe.devices.health import HealthReader, health_problem
from observe.devices.identity import Identities
from observe.env import RecorderVars

__all__ = [
    "BUSY_MEMORY",
    "COMPUTE_MODES",
    "ENV_SIMULATED",
    "LANE_CONFIG",
    "QUIET_SECONDS",
    "DeviceReading",
    "GpuReading",
    "NoObserver",
    "NvmlObserver",
    "Observer",
    "Tree",
    "gpu_telemetry",
    "lane_configs",
    "observation",
]

ENV_SIMULATED = RecorderVars.SIMULATED_GPUS
#: The lane configuration variables whose files the recorder captures at start.
LANE_CONFIG = re.compile(f"^{RecorderVars.LANE_CONFIG_PREFIX}[A-Z0-9_]+{RecorderVars.LANE_CONFIG_SUFFIX}$")
#: A GPU that lists no process while its memory in use is this much above what the
#: start observation saw hides its processes (attribution ``unavailable``).
BUSY_MEMORY = 256 << 20
NVML_LIBRARY = "libnvidia-ml.so.1"
#: NVML's compute modes (nvmlComputeMode_t), by value.
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
#: Utilisation on a GPU that has listed no process for this long is unexplained: NVML's utilisation
#: covers its last sample period (1/6 s to 1 s), so a process that just exited still shows for up to 1 s.
QUIET_SECONDS = 2.0


@dataclass(frozen=True)
class Tree:
    """The recorded process tree at one moment: each descendant of the recorder and its parent."""

    parents: Mapping[int, int] = field(default_factory=dict)
    #: The argv of a process of the tree (None when it cannot be read).
    argv: Callable[[int], list[str] | None] = lambda _pid: None

    def ancestry(self, pid: int) -> list[int]:
        """``pid`` and its ancestors inside the tree, innermost first."""
        chain: list[int] = []
        while pid in self.parents and pid not in chain:
            chain.append(pid)
            pid = self.parents[pid]
        return chain


@dataclass
class GpuReading:
    """One GPU at one moment."""

    index: int
    minor: int
    uuid: str
    name: str
    memory: int
    pci_bus_id: str | None = None
    memory_used: int | None = None
    utilization: int | None = None
    temperature: int | None = None
    compute_mode: str | None = None
    #: The GPU's health facts (observe.devices.health); None when the observer reads none.
    health: dict[str, Any] | None = None


@dataclass
class DeviceReading:
    """What an observer saw at one moment."""

    gpus: list[GpuReading] = field(default_factory=list)
    #: (pid, gpu uuid, used memory or None) for each compute process listed.
    processes: list[tuple[int, str, int | None]] = field(default_factory=list)
    #: False when the observer cannot list processes at all.
    processes_listed: bool = True
    errors: list[str] = field(default_factory=list)
    #: The GPU events (XID, ECC) NVML delivered since the last reading: ``{"gpu", "type", "xid", "data"}``.
    events: list[dict[str, Any]] = field(default_factory=list)


class Observer(Protocol):
    """An observer of devices; ``read`` is called from the sampler's thread only."""

    name: str
    library: dict[str, str] | None
    driver: str | None
    cuda_driver: int | None
    simulated_from: dict[str, str] | None
    error: str | None

    def read(self, tree: Tree) -> DeviceReading: ...

    def close(self) -> None: ...


class NoObserver:
    """No devices observed (no NVML here, or it failed to start: ``error`` says why)."""

    name = "none"
    library: dict[str, str] | None = None
    driver: str | None = None
    cuda_driver: int | None = None
    simulated_from: dict[str, str] | None = None

    def __init__(self, error: str | None = None) -> None:
        self.error = error

    def read(self, tree: Tree) -> DeviceReading:
        return DeviceReading()

    def close(self) -> None:
        pass


# -- NVML ------------------------------------------------------------------------------


def _text(value: object) -> str:
    """NVML strings come as bytes or str depending on the nvidia-ml-py version."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _loaded_library() -> str | None:
    """The resolved path of the ``libnvidia-ml`` mapped into this process (from ``/proc/self/maps``)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    path = parts[5].rstrip("\n")
                    if os.path.basename(path).startswith("libnvidia-ml.so"):
                        return path
    except OSError:
        return None
    return None


def _sha256_file(path: str) -> str:
    import hashlib  # OpenSSL's hashes: loaded when a file is hashed, not at start-up

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class NvmlObserver:
    """GPUs through NVML, in this process."""

    name = "nvml"
    simulated_from: dict[str, str] | None = None

    def __init__(self, nvml: Any, *, health: bool = True) -> None:
        self.nvml = nvml
        #: The health facts and events (None: not read, as recorders before them did; the sampler's benchmark).
        self.health: HealthReader | None = HealthReader(nvml) if health else None
        self.error: str | None = None
        self.library: dict[str, str] | None = None
        self.driver: str | None = None
        self.cuda_driver: int | None = None
        self.handles: list[tuple[Any, GpuReading]] = []

    @classmethod
    def open(cls, *, required: bool, health: bool = True) -> Observer:
        """Load and start NVML; without it the observer ``none`` (with an ``error`` when ``required``)."""
        if not required:
            import ctypes

            try:
                ctypes.CDLL(NVML_LIBRARY)  # what pynvml loads; failing here spares importing pynvml at all
            except OSError:
                return NoObserver()
        try:
            import pynvml
        except ImportError as exc:
            return NoObserver(f"nvidia-ml-py is not installed: {exc}")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            absent = exc.value in (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
            return NoObserver(None if absent and not required else f"nvmlInit failed: {_message(exc)}")
        observer = cls(pynvml, health=health)
        try:
            observer._describe()
        except Exception as exc:  # noqa: BLE001 - an NVML error (or an API it lacks) is recorded, never fatal
            observer.error = "; ".join(e for e in (observer.error, f"NVML: {_message(exc)}") if e)
        return observer

    def _describe(self) -> None:
        """What does not change during a recording: the library, driver and each GPU's identity."""
        nv = self.nvml
        path = _loaded_library()
        if path is None:
            self.error = "the loaded NVML library was not found in /proc/self/maps"
        else:
            try:
                self.library = {"path": path, "sha256": _sha256_file(path)}
            except OSError as exc:
                self.error = f"cannot read the NVML library {path}: {exc.strerror or exc}"
        self.driver = _text(nv.nvmlSystemGetDriverVersion())
        self.cuda_driver = self._optional(nv.nvmlSystemGetCudaDriverVersion)
        for index in range(int(nv.nvmlDeviceGetCount())):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            pci = self._optional(nv.nvmlDeviceGetPciInfo, handle)
            gpu = GpuReading(
                index=index,
                minor=int(nv.nvmlDeviceGetMinorNumber(handle)),
                uuid=_text(nv.nvmlDeviceGetUUID(handle)),
                name=_text(nv.nvmlDeviceGetName(handle)),
                memory=int(nv.nvmlDeviceGetMemoryInfo(handle).total),
                pci_bus_id=_text(pci.busId) if pci is not None else None,
            )
            self.handles.append((handle, gpu))
            if self.health is not None:
                self.health.describe(handle, gpu.uuid)

    def _optional(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None where NVML says the query is not supported here (or this driver lacks it)."""
        nv = self.nvml
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            unsupported = (
                nv.NVML_ERROR_NOT_SUPPORTED,
                nv.NVML_ERROR_NO_PERMISSION,
                getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", nv.NVML_ERROR_NOT_SUPPORTED),
            )
            if exc.value in unsupported:
                return None
            raise

    def read(self, tree: Tree) -> DeviceReading:
        nv = self.nvml
        reading = DeviceReading()
        for handle, static in self.handles:
            gpu = GpuReading(**vars(static))
            reading.gpus.append(gpu)
            try:
                gpu.memory_used = int(nv.nvmlDeviceGetMemoryInfo(handle).used)
                rates = self._optional(nv.nvmlDeviceGetUtilizationRates, handle)
                gpu.utilization = int(rates.gpu) if rates is not None else None
                temp = self._optional(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
                gpu.temperature = int(temp) if temp is not None else None
                mode = self._optional(nv.nvmlDeviceGetComputeMode, handle)
                gpu.compute_mode = COMPUTE_MODES.get(int(mode), str(mode)) if mode is not None else None
            except nv.NVMLError as exc:
                reading.errors.append(f"GPU {gpu.index}: {_message(exc)}")
            try:
                listed = self._optional(nv.nvmlDeviceGetComputeRunningProcesses, handle)
            except nv.NVMLError as exc:
                reading.errors.append(f"GPU {gpu.index} processes: {_message(exc)}")
                listed = None
            if listed is None:
                reading.processes_listed = False
                continue
            for proc in listed:
                used = getattr(proc, "usedGpuMemory", None)
                reading.processes.append((int(proc.pid), gpu.uuid, int(used) if used is not None else None))
        if self.health is not None:
            for i, gpu in enumerate(reading.gpus):  # one per handle, in order
                handle = self.handles[i][0]
                try:
                    gpu.health = self.health.read(handle, gpu.uuid)
                except nv.NVMLError as exc:
                    reading.errors.append(f"GPU {gpu.index} health: {_message(exc)}")
            reading.events = self.health.events(lambda h: _text(nv.nvmlDeviceGetUUID(h)))
            reading.errors.extend(self.health.errors)
            self.health.errors.clear()
        return reading

    def close(self) -> None:
        if self.health is not None:
            with contextlib.suppress(Exception):
                self.health.close()
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


# -- observations ---------------------------------------------------------------------


def lane_configs(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(NAME, path)`` for each ``ALPHA_*_DEVICE_CONFIG`` set (non-empty) in ``env``, by name."""
    return sorted((name, value) for name, value in env.items() if value and LANE_CONFIG.match(name))


def _explained(reading: DeviceReading, gpu: GpuReading, recent: Collection[str]) -> dict[str, int | None]:
    """What the listed processes do not explain on ``gpu``: memory beyond theirs, utilisation with none of them."""
    if not reading.processes_listed:
        return {"listed_memory": None, "unexplained_memory": None, "unexplained_utilization": None}
    listed = [used for _pid, uuid, used in reading.processes if uuid == gpu.uuid]
    known = None if any(u is None for u in listed) else sum(u or 0 for u in listed)
    unexplained = gpu.memory_used - known if gpu.memory_used is not None and known is not None else None
    idle_util = None if gpu.utilization is None else 0 if listed or gpu.uuid in recent else gpu.utilization
    return {"listed_memory": known, "unexplained_memory": unexplained, "unexplained_utilization": idle_util}


def observation(
    phase: str,
    observer: Observer,
    reading: DeviceReading,
    tree: Tree,
    open_steps: Sequence[tuple[str, int | None]],
    *,
    baseline: Mapping[str, int],
    mask: Callable[[str], str],
    extra_error: str | None = None,
    identities: Identities | None = None,
    namespace: Mapping[str, Any] | None = None,
    recent: Collection[str] = (),
    everyone: bool = False,
) -> dict[str, Any]:
    """The attrs of one ``device.observed`` event (docs/FORMAT.md).

    ``open_steps`` are ``(name, client pid)`` of the steps open now, outermost
    first; ``baseline`` each GPU's memory in use at the start observation;
    ``identities`` reads what each process of the tree executes; ``namespace``
    is where the recorder runs; ``recent`` the GPUs that listed a process within
    the last ``QUIET_SECONDS`` (their utilisation is still explained);
    ``everyone`` identifies every listed process, not only those of ``tree`` (a
    remote node's observer: no process there is of the recorded tree, and each is
    recognised by its digest alone).
    """
    by_pid: dict[int, list[str]] = {}
    for name, pid in open_steps:
        if pid is not None:
            by_pid.setdefault(pid, []).append(name)
    processes = []
    foreign = False
    known: dict[int, dict[str, Any]] = {}
    for pid, gpu, used in sorted(reading.processes, key=lambda p: (p[1], p[0])):
        in_tree = pid in tree.parents
        steps: list[str] = []
        for ancestor in reversed(tree.ancestry(pid)):  # outermost first: innermost step last
            steps.extend(by_pid.get(ancestor, []))
        argv = tree.argv(pid) if in_tree or everyone else None
        if (in_tree or everyone) and identities is not None and pid not in known:
            known[pid] = identities.read(pid, argv).attrs()
        who = known.get(pid, {"exe": None, "script": None})
        processes.append(
            {
                "pid": pid,
                "gpu": gpu,
                "used_memory": used,
                "in_tree": in_tree,
                "steps": steps,
                "exe": who["exe"],
                "script": who["script"],
                "argv": [mask(a) for a in argv] if argv is not None else None,
            }
        )
        if not in_tree and not os.path.exists(f"/proc/{pid}"):
            foreign = True  # a pid of another pid namespace: it cannot be matched to our tree
    hidden = any(
        gpu.memory_used is not None
        and gpu.memory_used - baseline.get(gpu.uuid, gpu.memory_used) >= BUSY_MEMORY
        and not any(p[1] == gpu.uuid for p in reading.processes)
        for gpu in reading.gpus
    )
    available = reading.processes_listed and not foreign and not hidden
    errors = [e for e in (observer.error, *reading.errors, extra_error) if e]
    return {
        "phase": phase,
        "observer": observer.name,
        "library": observer.library,
        "driver": observer.driver,
        "cuda_driver": observer.cuda_driver,
        "namespace": dict(namespace) if namespace is not None else None,
        "gpus": [
            {
                "index": g.index,
                "minor": g.minor,
                "uuid": g.uuid,
                "name": g.name,
                "memory": g.memory,
                "memory_used": g.memory_used,
                "utilization": g.utilization,
                "pci_bus_id": g.pci_bus_id,
                "compute_mode": g.compute_mode,
                **_explained(reading, g, recent),
                "health": g.health,
            }
            for g in reading.gpus
        ],
        "gpu_events": [dict(e) for e in reading.events],
        "processes": processes if reading.processes_listed else [],
        "attribution": "pids" if available else "unavailable",
        "simulated_from": observer.simulated_from,
        "error": "; ".join(errors) if errors else None,
    }


def gpu_telemetry(reading: DeviceReading) -> list[dict[str, Any]]:
    """The ``gpus`` part of a ``telemetry`` event."""
    return [
        {"uuid": g.uuid, "utilization": g.utilization, "memory_used": g.memory_used, "temperature": g.temperature}
        for g in reading.gpus
    ]


#: How far a GPU's reading must move before a remote node sends its ``telemetry`` again (observe.devices.node_observer):
#: utilisation in points, memory in bytes, temperature in degrees C. A node sends a sample only when its readings moved
#: (:func:`telemetry_moved`), and at least every :data:`TELEMETRY_HEARTBEAT` seconds.
TELEMETRY_STEP: dict[str, int] = {"utilization": 5, "memory_used": 256 << 20, "temperature": 2}
#: The longest a remote node goes without sending a ``telemetry`` sample (seconds).
TELEMETRY_HEARTBEAT = 30.0


def telemetry_moved(last: list[dict[str, Any]] | None, now: list[dict[str, Any]]) -> bool:
    """Whether ``now`` (a ``telemetry`` event's ``gpus``) is worth sending after ``last``, the last one sent: the
    first, other GPUs, a reading that appeared or went away, or one that moved by its :data:`TELEMETRY_STEP` or
    more."""
    if last is None or [g["uuid"] for g in last] != [g["uuid"] for g in now]:
        return True
    for i, before in enumerate(last):  # no zip(strict=): the node's python may be 3.9
        for key, step in TELEMETRY_STEP.items():
            a, b = before.get(key), now[i].get(key)
            if (a is None) != (b is None) or (a is not None and b is not None and abs(b - a) >= step):
                return True
    return False


# -- the schema of an observation (docs/FORMAT.md): what a remote node's observer must send ------------

_INT = (int,)
_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
_OPT_DICT = (dict, type(None))
#: Each key of a ``device.observed`` event's attrs (as :func:`observation` makes them) and its types.
OBSERVATION_SCHEMA: dict[str, tuple[type, ...]] = {
    "phase": (str,),
    "observer": (str,),
    "library": _OPT_DICT,
    "driver": _OPT_STR,
    "cuda_driver": (str, int, type(None)),
    "namespace": _OPT_DICT,
    "gpus": (list,),
    "gpu_events": (list,),
    "processes": (list,),
    "attribution": (str,),
    "simulated_from": (str, dict, type(None)),
    "error": _OPT_STR,
}
#: Each key of a GPU of an observation.
GPU_SCHEMA: dict[str, tuple[type, ...]] = {
    "index": _INT,
    "minor": _INT,
    "uuid": (str,),
    "name": (str,),
    "memory": _INT,
    "memory_used": _OPT_INT,
    "utilization": _OPT_INT,
    "pci_bus_id": _OPT_STR,
    "compute_mode": _OPT_STR,
    "listed_memory": _OPT_INT,
    "unexplained_memory": _OPT_INT,
    "unexplained_utilization": _OPT_INT,
    "health": _OPT_DICT,
}
#: Each key of a GPU event of an observation.
GPU_EVENT_SCHEMA: dict[str, tuple[type, ...]] = {"gpu": (str,), "type": (str,), "xid": _OPT_INT, "data": _INT}
#: Each key of a process of an observation.
PROCESS_SCHEMA: dict[str, tuple[type, ...]] = {
    "pid": _INT,
    "gpu": (str,),
    "used_memory": _OPT_INT,
    "in_tree": (bool,),
    "steps": (list,),
    "exe": _OPT_DICT,
    "script": _OPT_DICT,
    "argv": (list, type(None)),
}
#: Each key of a GPU of a ``telemetry`` event.
TELEMETRY_GPU_SCHEMA: dict[str, tuple[type, ...]] = {
    "uuid": (str,),
    "utilization": _OPT_INT,
    "memory_used": _OPT_INT,
    "temperature": _OPT_INT,
}
PHASES = ("start", "sample", "end")


def _shape(value: Any, schema: Mapping[str, tuple[type, ...]], what: str) -> str | None:
    if not isinstance(value, dict):
        return f"{what} is not an object"
    if set(value) != set(schema):
        return f"{what} has keys {sorted(value)}, not {sorted(schema)}"
    for key, types in schema.items():
        if not isinstance(value[key], types) or (isinstance(value[key], bool) and bool not in types):
            return f"{what}.{key} is a {type(value[key]).__name__}"
    return None


def schema_problem(kind: str, attrs: Any) -> str | None:
    """What keeps ``attrs`` from being a ``device.observed`` (or ``telemetry``: ``{"gpus": [...]}``) event's attrs
    of this recorder's own schema; None when they are."""
    if kind == "telemetry":
        if not isinstance(attrs, dict) or set(attrs) != {"gpus"} or not isinstance(attrs["gpus"], list):
            return 'telemetry attrs are not {"gpus": [...]}'
        for i, g in enumerate(attrs["gpus"]):
            if (found := _shape(g, TELEMETRY_GPU_SCHEMA, f"gpus[{i}]")) is not None:
                return found
        return None
    found = _shape(attrs, OBSERVATION_SCHEMA, "attrs")
    if found is not None:
        return found
    if attrs["phase"] not in PHASES:
        return f"phase {attrs['phase']!r} is none of {', '.join(PHASES)}"
    for i, g in enumerate(attrs["gpus"]):
        if (found := _shape(g, GPU_SCHEMA, f"gpus[{i}]")) is not None:
            return found
        if (found := health_problem(g["health"])) is not None:
            return f"gpus[{i}].{found}"
    for i, e in enumerate(attrs["gpu_events"]):
        if (found := _shape(e, GPU_EVENT_SCHEMA, f"gpu_events[{i}]")) is not None:
            return found
    for i, p in enumerate(attrs["processes"]):
        if (found := _shape(p, PROCESS_SCHEMA, f"processes[{i}]")) is not None:
            return found
    return None
