"""Where the recorder runs: the initial PID namespace, or a container that hides other tenants from NVML.

NVML queried inside a PID namespace lists only that namespace's processes, under
namespace-local pids: a CUDA process of another tenant is not listed at all.
``device.observed`` therefore records ``namespace`` (read once, when the
observer starts):

- ``pid``: ``"initial"`` when ``/proc/self/ns/pid`` is the initial PID namespace
  (the kernel gives it the fixed inode ``PROC_PID_INIT_INO``, 0xEFFFFFFC), else
  ``"other"``; ``"unknown"`` when the link cannot be read;
- ``ns``: that link's target; ``pid1_ns``: ``/proc/1/ns/pid``'s (null where it
  cannot be read, as for an unprivileged user);
- ``nspid``: the ``NSpid`` line of ``/proc/self/status`` (one pid per nested
  namespace that the mounted ``/proc`` shows);
- ``markers``: what marks a container here: ``/.dockerenv``,
  ``/run/.containerenv``, ``/proc/1/cgroup`` naming docker, kubepods, containerd,
  libpod or lxc, and a ``container`` variable in the recorder's environment.

None of this is a verdict on its own: the shared-GPU rule rests on memory and
activity that listed processes do not explain (docs/GATES.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["PROC_PID_INIT_INO", "namespace_facts"]

#: The inode of the initial PID namespace (include/linux/proc_ns.h).
PROC_PID_INIT_INO = 0xEFFFFFFC
_CGROUP_MARKERS = re.compile(r"docker|kubepods|containerd|libpod|lxc|crio")


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _read(path: str, limit: int = 65536) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def namespace_facts(env: Mapping[str, str], root: str = "") -> dict[str, Any]:
    """The ``namespace`` object of ``device.observed`` (``root`` prefixes every path: tests)."""
    ns = _link(f"{root}/proc/self/ns/pid")
    pid1 = _link(f"{root}/proc/1/ns/pid")
    where = "unknown" if ns is None else "initial" if ns == f"pid:[{PROC_PID_INIT_INO}]" else "other"
    nspid: list[int] | None = None
    status = _read(f"{root}/proc/self/status")
    for line in (status or "").splitlines():
        if line.startswith("NSpid:"):
            nspid = [int(x) for x in line.split()[1:] if x.isdigit()]
    markers = [p for p in ("/.dockerenv", "/run/.containerenv") if os.path.exists(f"{root}{p}")]
    cgroup = _read(f"{root}/proc/1/cgroup")
    if cgroup is not None and _CGROUP_MARKERS.search(cgroup):
        markers.append("/proc/1/cgroup: " + _CGROUP_MARKERS.findall(cgroup)[0])
    if env.get("container"):
        markers.append(f"container={env['container']}")
    return {"pid": where, "ns": ns, "pid1_ns": pid1, "nspid": nspid, "markers": markers}
