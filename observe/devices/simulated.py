"""The simulated device observer: GPUs from a file, for test doubles; always recorded as ``simulated``.

``ALPHA_OBSERVE_SIMULATED_GPUS=FILE`` in the recorder's own environment names a
JSON file, read once when the recording starts (at most 1 MiB). Only these keys
are read; any other key (``"observer"``, ``"library"``, ...) is ignored, so the
file can never make an observation anything but ``simulated``, and the
simulated observer can never yield scope ``physical``::

    {"driver": STR, "cuda_driver": INT,                       # cuda_driver optional
     "gpus": [{"index": INT, "minor": INT, "uuid": STR, "name": STR, "memory": INT,
               "memory_used": INT, "utilization": INT, "temperature": INT,   # optional, default 0/0/null
               "pci_bus_id": STR, "compute_mode": STR,                      # optional
               "health": {FACT: VALUE, ..., "unsupported": {FACT: CODE}}}],  # optional
     "processes": [{"gpu": UUID, "pid": "tree" | INT, "used_memory": INT,
                    "argv_contains": STR, "utilization": INT,
                    "listed": BOOL}],                                        # optional
     "faults": [{"gpu": UUID, "argv_contains": STR,
                 "xid": INT, "health": {FACT: VALUE}}],                     # optional
     "attribution": "unavailable"}                                           # optional

A process with ``"pid": "tree"`` stands for each innermost process of the
recorded tree whose argv (joined by spaces) contains ``argv_contains``, while
such a process is alive: that is how a CPU test simulates a lane process
running on a GPU. Its ``used_memory`` is added to the GPU's ``memory_used`` and
its ``utilization`` to the GPU's, while it is seen. An integer ``pid`` is listed
as it is. ``"listed": false`` (default true) adds the process's memory and
utilisation to its GPU but lists no process: a tenant of another PID namespace,
as NVML inside a container sees it. ``compute_mode`` defaults to ``"default"``.
``"attribution": "unavailable"`` simulates an NVML that cannot list
processes.

A GPU's ``health`` gives its health facts (observe.devices.health.FACTS); a fact
it neither gives nor names in ``unsupported`` is unsupported with NVML's code 3
(NotSupported); without ``health`` the GPU's health is null (not read). A fault
applies while a process of the recorded tree whose argv contains its
``argv_contains`` is alive: its ``health`` facts replace the GPU's, and its
``xid`` is delivered once, as NVML delivers an XID critical error event (the
injections the gate's health rules are tested with). A file that cannot be read
or parsed gives no GPUs and the ``error``.

On a remote node (observe.devices.node_observer) the recorder sends the file's
bytes to the node's observer, where ``"pid": "tree"`` stands for the node's own
processes (no process there is of the recorded tree), and an optional
``"nodes": {"USER@ADDRESS:PORT": {...}}`` gives one node GPUs of its own: the
object under the node's key (its config's ``host`` and ``port``) replaces the
file's top level there.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from aos.attrs import json_int
from observe.devices.health import FACTS, shaped
from observe.devices.observers import ENV_SIMULATED, DeviceReading, GpuReading, Tree

__all__ = ["SIMULATED_MAX_BYTES", "SimulatedObserver"]

#: The largest simulated-GPU file read.
SIMULATED_MAX_BYTES = 1 << 20


class SimulatedError(ValueError):
    """The simulated-GPU file is not what this module documents."""


def _int(obj: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = json_int(obj.get(key, default))
    if value is None:
        raise SimulatedError(f"{where}: {key!r} must be an integer")
    return value


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise SimulatedError(f"{where}: {key!r} must be a string")
    return value


class SimulatedObserver:
    """GPUs from ``ALPHA_OBSERVE_SIMULATED_GPUS`` (test doubles): always recorded as ``simulated``."""

    name = "simulated"
    library: dict[str, str] | None = None

    def __init__(self, path: str, data: bytes | None = None, node: str | None = None) -> None:
        self.driver: str | None = None
        self.cuda_driver: int | None = None
        self.error: str | None = None
        self.simulated_from: dict[str, str] | None = None
        self.gpus: list[GpuReading] = []
        self.processes: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.fired: set[int] = set()  # the faults whose XID was delivered
        self.listed = True
        absolute = os.path.abspath(path)
        if data is None:
            try:
                fd = os.open(absolute, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                try:
                    data = os.read(fd, SIMULATED_MAX_BYTES + 1)
                finally:
                    os.close(fd)
            except OSError as exc:
                self.error = f"{ENV_SIMULATED}: cannot read {absolute}: {exc.strerror or exc}"
                return
        self.simulated_from = {"path": absolute, "sha256": hashlib.sha256(data).hexdigest()}
        try:
            if len(data) > SIMULATED_MAX_BYTES:
                raise SimulatedError(f"larger than {SIMULATED_MAX_BYTES} bytes")
            self._parse(data, node)
        except (SimulatedError, ValueError, RecursionError) as exc:
            self.gpus, self.processes, self.driver, self.cuda_driver = [], [], None, None
            self.error = f"{ENV_SIMULATED}: {absolute}: {exc}"

    def _parse(self, data: bytes, node: str | None) -> None:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise SimulatedError("not a JSON object")
        nodes = doc.get("nodes")
        if node is not None and isinstance(nodes, dict) and isinstance(nodes.get(node), dict):
            doc = nodes[node]  # this remote node's own GPUs
        self.driver = _str(doc, "driver", "the file")
        if "cuda_driver" in doc:
            self.cuda_driver = _int(doc, "cuda_driver", "the file")
        gpus = doc.get("gpus")
        if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
            raise SimulatedError("'gpus' must be a list of objects")
        for i, g in enumerate(gpus):
            where = f"gpus[{i}]"
            pci = g.get("pci_bus_id")
            if pci is not None and not isinstance(pci, str):
                raise SimulatedError(f"{where}: 'pci_bus_id' must be a string")
            temperature = g.get("temperature")
            mode = g.get("compute_mode", "default")
            if not isinstance(mode, str):
                raise SimulatedError(f"{where}: 'compute_mode' must be a string")
            self.gpus.append(
                GpuReading(
                    index=_int(g, "index", where),
                    minor=_int(g, "minor", where),
                    uuid=_str(g, "uuid", where),
                    name=_str(g, "name", where),
                    memory=_int(g, "memory", where),
                    pci_bus_id=pci,
                    memory_used=_int(g, "memory_used", where, 0),
                    utilization=_int(g, "utilization", where, 0),
                    temperature=None if temperature is None else _int(g, "temperature", where),
                    compute_mode=mode,
                    health=_health(g["health"], where) if "health" in g else None,
                )
            )
        faults = doc.get("faults", [])
        if not isinstance(faults, list) or not all(isinstance(f, dict) for f in faults):
            raise SimulatedError("'faults' must be a list of objects")
        for i, f in enumerate(faults):
            where = f"faults[{i}]"
            override = f.get("health", {})
            if not isinstance(override, dict) or not set(override) <= set(FACTS):
                raise SimulatedError(f"{where}: 'health' must be an object of health facts")
            self.faults.append(
                {
                    "gpu": _str(f, "gpu", where),
                    "argv_contains": _str(f, "argv_contains", where),
                    "xid": _int(f, "xid", where) if "xid" in f else None,
                    "health": override,
                }
            )
        procs = doc.get("processes", [])
        if not isinstance(procs, list) or not all(isinstance(p, dict) for p in procs):
            raise SimulatedError("'processes' must be a list of objects")
        for i, p in enumerate(procs):
            where = f"processes[{i}]"
            entry = {
                "gpu": _str(p, "gpu", where),
                "used_memory": _int(p, "used_memory", where, 0),
                "utilization": _int(p, "utilization", where, 0),
                "listed": p.get("listed", True),
            }
            if not isinstance(entry["listed"], bool):
                raise SimulatedError(f"{where}: 'listed' must be true or false")
            if p.get("pid") == "tree":
                entry["pid"] = "tree"
                entry["argv_contains"] = _str(p, "argv_contains", where)
            else:
                entry["pid"] = _int(p, "pid", where)
            self.processes.append(entry)
        attribution = doc.get("attribution", "pids")
        if attribution not in ("pids", "unavailable"):
            raise SimulatedError('\'attribution\' must be "pids" or "unavailable"')
        self.listed = attribution == "pids"

    def read(self, tree: Tree) -> DeviceReading:
        gpus = {g.uuid: GpuReading(**vars(g)) for g in self.gpus}
        reading = DeviceReading(gpus=list(gpus.values()), processes_listed=self.listed)
        for entry in self.processes:
            gpu = gpus.get(entry["gpu"])
            pids = _matching(tree, entry["argv_contains"]) if entry["pid"] == "tree" else [entry["pid"]]
            for pid in pids:
                if gpu is not None:
                    gpu.memory_used = (gpu.memory_used or 0) + entry["used_memory"]
                    gpu.utilization = min(100, (gpu.utilization or 0) + entry["utilization"])
                if self.listed and entry["listed"]:
                    reading.processes.append((pid, entry["gpu"], entry["used_memory"]))
        for i, fault in enumerate(self.faults):
            gpu = gpus.get(fault["gpu"])
            if gpu is None or not _matching(tree, fault["argv_contains"]):
                continue
            if gpu.health is not None and fault["health"]:
                codes = {k: c for k, c in gpu.health["unsupported"].items() if k not in fault["health"]}
                gpu.health = shaped({**gpu.health, **fault["health"]}, codes)
            if fault["xid"] is not None and i not in self.fired:
                self.fired.add(i)
                reading.events.append({"gpu": gpu.uuid, "type": "xid", "xid": fault["xid"], "data": fault["xid"]})
        return reading

    def close(self) -> None:
        pass


def _health(value: Any, where: str) -> dict[str, Any]:
    """A GPU's simulated ``health``: the facts given, each other one unsupported (code 3, NotSupported)."""
    if not isinstance(value, dict):
        raise SimulatedError(f"{where}: 'health' must be an object")
    unsupported = value.get("unsupported", {})
    facts = {k: v for k, v in value.items() if k != "unsupported"}
    if not set(facts) <= set(FACTS):
        raise SimulatedError(f"{where}: 'health' names no such fact: {sorted(set(facts) - set(FACTS))}")
    if not isinstance(unsupported, dict) or not all(
        k in FACTS and json_int(c) is not None for k, c in unsupported.items()
    ):
        raise SimulatedError(f"{where}: 'health.unsupported' must be {{FACT: CODE}}")
    codes = {k: 3 for k in FACTS if k not in facts}
    codes.update({k: int(c) for k, c in unsupported.items()})
    return shaped(facts, codes)


def _matching(tree: Tree, needle: str) -> list[int]:
    """The innermost processes of ``tree`` whose argv contains ``needle`` (none of their descendants does)."""
    found = set()
    for pid in tree.parents:
        argv = tree.argv(pid)
        if argv is not None and needle in " ".join(argv):
            found.add(pid)
    inner = set(found)
    for pid in found:
        for ancestor in tree.ancestry(pid)[1:]:
            inner.discard(ancestor)
    return sorted(inner)
