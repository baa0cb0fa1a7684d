"""The preflight: the devices queried (here, or on each node over SSH), judged, bound in binding.json."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from .config import TRANSPORTS, ConfigError, MinorTwiceError, load_config, write_json
from .device import APPS_QUERY, GPU_QUERY, parse_compute_apps, parse_gpu_csv
from .placement import Placement, describe
from .receipts import artifact, receipt, rel
from .refusals import LaneConfig, LaneRefusal, MinorBoundTwice, MinorMissing
from .spec import owners_of

__all__ = ["DEFAULT_DRIVER", "DEFAULT_PRODUCTS", "preflight"]

DEFAULT_PRODUCTS = ["NVIDIA GeForce RTX 3070", "NVIDIA GeForce RTX 3090"]
DEFAULT_DRIVER = ["580"]


def _allowed(config: dict[str, Any], key: str, default: list[str]) -> list[str]:
    value = config.get(key, default)
    return [str(v) for v in (value if isinstance(value, list) else [value])]


def _release_ok(driver: str, allowed: list[str]) -> bool:
    return any(driver == a or driver.startswith(a + ".") for a in allowed)


# What the physical half writes under OUT; an earlier run's copies are removed first,
# so qualification.json never names a file this run did not produce.
PHYSICAL_OUTPUTS = (
    "lane-config.json",
    "preflight",
    "binding.json",
    "build",
    "refusal",
    "uninterrupted",
    "split",
    "host-shadow",
    "evaluation",
    "corrupted",
    "qualification.json",
)


def _clear_physical_outputs(out: str) -> None:
    for name in PHYSICAL_OUTPUTS:
        path = os.path.join(out, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)


def _query(place: Placement, pre: str) -> tuple[dict[str, list[str | None]], dict[str, Any]]:
    """Capture nvidia-smi's CSV, XML and compute apps on every node (under ``pre``, per node when several)."""
    captures = {
        "csv": (GPU_QUERY, "nvidia-smi.csv"),
        "xml": (["nvidia-smi", "-q", "-x"], "nvidia-smi.xml"),
        "compute_apps": (APPS_QUERY, "compute-apps.csv"),
    }
    answers = place.smi([argv for argv, _ in captures.values()])
    texts: dict[str, list[str | None]] = {}
    sources: dict[str, Any] = {}
    many = len(place.nodes) > 1
    for k, (key, (_argv, name)) in enumerate(captures.items()):
        texts[key] = [node[k] for node in answers]
        found = []
        for index, text in enumerate(texts[key]):
            if text is None:
                continue
            path = os.path.join(pre, f"node-{index}", name) if many else os.path.join(pre, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            artifact(path)
            found.append(rel(path))
        if found:
            sources[key] = found if many else found[0]
    return texts, sources


def preflight(lane: str, out: str, config_path: str | None = None) -> int:
    """Query the devices (here, or on each node over SSH), judge them against the config, write binding.json."""
    paths = {"config": os.path.join(out, "lane-config.json"), "binding": os.path.join(out, "binding.json")}
    os.makedirs(out, exist_ok=True)
    _clear_physical_outputs(out)
    if config_path and os.path.exists(config_path):
        shutil.copyfile(config_path, paths["config"])
        artifact(paths["config"])
    try:
        config = load_config(str(config_path))
    except MinorTwiceError as exc:
        return _refused(MinorBoundTwice(str(exc)))
    except ConfigError as exc:
        return _refused(LaneConfig(str(exc)))
    owners = owners_of(len(config["minors"]))
    if config.get("transport") not in TRANSPORTS:
        reason = (
            f"transport {config.get('transport')!r} is not supported by the reference lane ({' or '.join(TRANSPORTS)})"
        )
        return _refused(LaneConfig(reason))
    pre = os.path.join(out, "preflight")
    os.makedirs(pre, exist_ok=True)
    try:
        with Placement(config, lane, out) as place:
            texts, sources = _query(place, pre)
    except LaneRefusal as exc:
        # An unknown or changed host key, or a node that cannot be reached: nothing was asked there.
        return _refused(exc)
    missing = [
        "this machine" if place.local else place.nodes[i].label
        for i, (csv_text, apps_text) in enumerate(zip(texts["csv"], texts["compute_apps"], strict=True))
        if csv_text is None or apps_text is None
    ]
    if missing:
        reason = f"nvidia-smi cannot be queried on {', '.join(missing)}"
        print(f"preflight: {reason}", file=sys.stderr)
        receipt("preflight", "inconclusive", gpus=[], compute_processes=[], reason=reason)
        return 1
    products = _allowed(config, "products", DEFAULT_PRODUCTS)
    drivers = _allowed(config, "driver", DEFAULT_DRIVER)
    failures: list[str] = []
    absent: list[str] = []  # roles whose minor selects no GPU: a refusal of the setup (minor-missing)
    gpus: list[dict[str, Any]] = []
    bound: dict[int, list[str]] = {}
    for role, minor in zip(owners, config["minors"], strict=True):
        node = place.node_of(role)
        found = [g for g in parse_gpu_csv(texts["csv"][node] or "") if g["minor"] == minor]
        where = "" if len(place.nodes) < 2 else f" on {place.where(role)}"
        if len(found) != 1:
            failures.append(f"{role}: minor {minor}{where} selects {len(found)} GPUs, not exactly one")
            if not found:
                absent.append(f"{role}: minor {minor}{where} selects no GPU")
            continue
        gpu = found[0] if len(place.nodes) < 2 else {**found[0], "node": place.where(role)}  # minors are per host
        gpus.append(gpu)
        bound.setdefault(node, []).append(str(gpu["uuid"]))
        if gpu["product"] not in products:
            failures.append(f"{role}: product {gpu['product']!r} is not allowed ({products})")
        if not _release_ok(str(gpu["driver"]), drivers):
            failures.append(f"{role}: driver {gpu['driver']} is not a {'/'.join(drivers)} release")
    uuids = [g["uuid"] for g in gpus]
    apps = [
        a
        for node, text in enumerate(texts["compute_apps"])
        for a in parse_compute_apps(text or "")
        if a["uuid"] in bound.get(node, [])
    ]
    undecided: list[str] = []
    if apps:
        undecided.append(f"{len(apps)} other compute process(es) on the bound GPUs")
    if len(set(uuids)) != len(uuids):
        undecided.append("the UUIDs do not differ (two roles are bound to one GPU)")
    status = "fail" if failures else ("inconclusive" if undecided else "pass")
    roles: dict[str, Any] = {}
    for role, gpu in zip(owners, gpus, strict=False):
        roles[role] = {"kind": "gpu", "minor": gpu["minor"], "uuid": gpu["uuid"], "product": gpu["product"]}
    binding = {
        "format": "alpha-lane-binding/1",
        "lane": lane,
        "gpus": gpus,
        "compute_processes": apps,
        "roles": roles,
        "coordinator": {"started_from": "owner-0", "arithmetic": "host binary64", "binding": "owner-0's"},
        "allowed": {"products": products, "driver": drivers},
        "host": config.get("host"),
        "transport": config.get("transport"),
        "remote_root": config.get("remote_root"),
        "nodes": describe(place),
        "sources": sources,
        "findings": failures + undecided,
    }
    write_json(paths["binding"], binding)
    artifact(paths["binding"])
    for line in failures + undecided:
        print(f"preflight: {line}", file=sys.stderr)
    receipt(
        "preflight",
        status,
        gpus=gpus,
        compute_processes=apps,
        binding=rel(paths["binding"]),
        findings=failures + undecided,
    )
    if absent:
        print(MinorMissing("; ".join(absent)).diagnostics(), file=sys.stderr, flush=True)
        return MinorMissing.exit_code
    # A busy device or shared UUIDs leave the verdict open, but the lane still runs to gather evidence.
    return 1 if failures or len(gpus) != len(owners) else 0


def _refused(exc: LaneRefusal) -> int:
    """A refusal of the lane's own setup, before any device was asked: said, receipted inconclusive, its code."""
    print(exc.diagnostics(), file=sys.stderr, flush=True)
    receipt("preflight", "inconclusive", gpus=[], compute_processes=[], reason=exc.diagnostics())
    return exc.exit_code
