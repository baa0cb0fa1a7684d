"""Device discovery and the start-up binding check.

A binding is ``{"kind": "gpu" | "host", "minor": int, "uuid": str, "product": str}``.
A GPU binding is compared with ``nvidia-smi``'s view of the card at that minor;
a host binding (the CPU path, where there is no GPU) with the declared host
device :data:`HOST_DEVICE`. The UUID is compared first (``device-uuid``), then
the product (``nvidia-plan-host``). Nothing is written before this check.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess

from .refusals import DeviceUuid, NvidiaPlanHost

__all__ = [
    "GPU_QUERY",
    "HOST_DEVICE",
    "check_binding",
    "host_binding",
    "parse_compute_apps",
    "parse_gpu_csv",
    "query_gpus",
]

GPU_QUERY = ["nvidia-smi", "--query-gpu=index,uuid,name,driver_version", "--format=csv,noheader"]
APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,process_name,gpu_uuid", "--format=csv,noheader"]

# The declared device of the CPU path: binary64 arithmetic on this host.
HOST_DEVICE: dict[str, object] = {"minor": 0, "uuid": "HOST-binary64-0", "product": "host binary64", "driver": "none"}


def host_binding(**overrides: object) -> dict[str, object]:
    """The binding of a role that runs on the host (tests override fields to force refusals)."""
    binding: dict[str, object] = {
        "kind": "host",
        "minor": HOST_DEVICE["minor"],
        "uuid": HOST_DEVICE["uuid"],
        "product": HOST_DEVICE["product"],
    }
    binding.update(overrides)
    return binding


def _rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(text)) if row and any(row)]


def parse_gpu_csv(text: str) -> list[dict[str, object]]:
    """Rows of ``index,uuid,name,driver_version`` as ``{minor, uuid, product, driver}``."""
    gpus: list[dict[str, object]] = []
    for row in _rows(text):
        if len(row) < 4:
            continue
        try:
            minor = int(row[0])
        except ValueError:
            continue
        gpus.append({"minor": minor, "uuid": row[1], "product": row[2], "driver": row[3]})
    return gpus


def parse_compute_apps(text: str) -> list[dict[str, object]]:
    """Rows of ``pid,process_name,gpu_uuid`` as ``{pid, name, uuid}``."""
    apps: list[dict[str, object]] = []
    for row in _rows(text):
        if len(row) < 3 or "No running" in row[0]:
            continue
        try:
            pid: object = int(row[0])
        except ValueError:
            pid = row[0]
        apps.append({"pid": pid, "name": row[1], "uuid": row[2]})
    return apps


def run_smi(args: list[str], timeout: float = 60.0) -> str | None:
    """Run an ``nvidia-smi`` query; None when there is no nvidia-smi or it fails."""
    if shutil.which(args[0]) is None:
        return None
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def query_gpus() -> list[dict[str, object]] | None:
    """Every GPU nvidia-smi reports, or None when it cannot be asked."""
    text = run_smi(GPU_QUERY)
    return None if text is None else parse_gpu_csv(text)


def check_binding(binding: dict[str, object]) -> dict[str, object]:
    """Return the actual device matching ``binding``; refuse by name when it does not."""
    kind = binding.get("kind")
    minor = binding.get("minor")
    if kind == "host":
        actual: dict[str, object] | None = dict(HOST_DEVICE) if minor == HOST_DEVICE["minor"] else None
        where = "host"
    elif kind == "gpu":
        gpus = query_gpus()
        if gpus is None:
            raise DeviceUuid(f"bound to GPU minor {minor} {binding.get('uuid')}, but nvidia-smi cannot be queried")
        matches = [g for g in gpus if g["minor"] == minor]
        actual = matches[0] if len(matches) == 1 else None
        where = "nvidia-smi"
    else:
        raise DeviceUuid(f"binding of unknown kind {kind!r}")
    if actual is None:
        raise DeviceUuid(f"no device at minor {minor} ({where}); bound to {binding.get('uuid')}")
    if actual["uuid"] != binding.get("uuid"):
        raise DeviceUuid(f"minor {minor} is {actual['uuid']}, the role is bound to {binding.get('uuid')}")
    if actual["product"] != binding.get("product"):
        raise NvidiaPlanHost(
            f"minor {minor} ({actual['uuid']}) is {actual['product']!r}, "
            f"the role was built for {binding.get('product')!r}"
        )
    return actual
