"""Named Python checks, for what the gate language cannot say.

A gate file refers to one with ``[[check]] name = "..." uses = "..."``.
Register your own with ``@register("name")``; a check gets the evidence index
and the rule's ``args`` table and returns an ``Outcome``. Like every rule, a
check must answer ``inconclusive`` where evidence is missing and ``fail``
where evidence contradicts a claim.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import Any

from aos import kinds
from gates.captured import same_bytes
from gates.devices_nodes import devices_observed_anywhere
from gates.evidence import Artifact, Evidence, Receipt, glob_match
from gates.typing import CheckFunction, Findings, Outcome
from gates.wording import count

__all__ = ["CHECKS", "DEFAULT_DRIVER", "DEFAULT_PRODUCTS", "register"]

#: Every registered check, by name.
CHECKS: dict[str, CheckFunction] = {}

#: The preflight allow-lists when the lane config names none (docs/GATES.md).
DEFAULT_PRODUCTS: tuple[str, ...] = ("NVIDIA GeForce RTX 3070", "NVIDIA GeForce RTX 3090")
DEFAULT_DRIVER: tuple[str, ...] = ("580",)


def register(name: str) -> Callable[[CheckFunction], CheckFunction]:
    """Register a check under ``name`` (a decorator)."""

    def deco(fn: CheckFunction) -> CheckFunction:
        CHECKS[name] = fn
        return fn

    return deco


def _last(ev: Evidence, name: str, f: Findings) -> Receipt | None:
    rs = ev.receipts_named(name)
    if not rs:
        late = " (one arrived after the command exited and does not count)" if ev.late_named(name) else ""
        f.inconclusive(f"no {name!r} receipt{late}")
        return None
    f.use(r.seq for r in rs)
    if len(rs) > 1:
        f.fail(f"{len(rs)} {name!r} receipts; the lane reports one")
    return rs[-1]


def _json_artifact(ev: Evidence, path: str, f: Findings, what: str) -> tuple[Artifact | None, Any]:
    art = ev.artifact(path)
    if art is None:
        f.inconclusive(f"{what} {path} was not captured as an artifact")
        return None, None
    f.use(art.seqs)
    try:
        return art, art.json()
    except ValueError as exc:
        f.add("inconclusive" if "not captured" in str(exc) else "fail", f"{what} {art.path} is not JSON: {exc}")
        return art, None


def _gpus(receipt: Receipt, f: Findings) -> list[dict[str, Any]] | None:
    gpus = receipt.fields.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, dict) for g in gpus):
        f.fail(f"preflight (seq {receipt.seq}) has no list of GPUs")
        return None
    return gpus


def _hosts(cfg: Any) -> int:
    """How many hosts a captured lane config spreads its roles over (``ssh-tunnel``'s ``nodes``; else one)."""
    if isinstance(cfg, dict) and cfg.get("transport") == "ssh-tunnel" and isinstance(cfg.get("nodes"), list):
        return len(cfg["nodes"])
    return 1


def _allowed(value: Any, default: tuple[str, ...]) -> tuple[str, ...]:
    if value is None:
        return default
    if isinstance(value, str | int | float):
        return (str(value),)
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return default


@register("device-preflight")
def device_preflight(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """Preflight rules: a binding per role, unique minors and UUIDs, allowed products and driver, no other process.

    The allow-lists come from the recorder's own capture of the lane config
    (``origin: recorder``, ``env`` = ``args.config_env``); without it they are
    unknown and the rule is inconclusive, never judged against the defaults.
    """
    f = Findings()
    receipt = _last(ev, "preflight", f)
    config_env = args.get("config_env")
    configs: list[Artifact] = []
    products, drivers = DEFAULT_PRODUCTS, DEFAULT_DRIVER
    known = False
    if not isinstance(config_env, str) or not config_env:
        f.fail("args.config_env must name the lane config variable whose file the recorder captured")
    else:
        # Only the recorder's own capture of the file the variable named at the start counts:
        # a copy the lane captured is a claim it chose.
        configs = ev.artifacts_matching("**", {"origin": "recorder", "env": config_env})
        if not configs:
            f.inconclusive(f"the recorder did not capture the lane config (${config_env}): the allow-lists are unknown")
    if configs:
        cfg_art = configs[-1]
        f.use(cfg_art.seqs)
        try:
            cfg = cfg_art.json()
        except ValueError as exc:
            cfg = None
            f.add("inconclusive" if "not captured" in str(exc) else "fail", f"lane config {cfg_art.path}: {exc}")
        if isinstance(cfg, dict):
            known = True
            products = _allowed(cfg.get("products"), DEFAULT_PRODUCTS)
            drivers = _allowed(cfg.get("driver"), DEFAULT_DRIVER)
        elif cfg is not None:
            f.fail(f"lane config {cfg_art.path} is not a JSON object")
    if receipt is None:
        return f.outcome("")
    gpus = _gpus(receipt, f)
    if gpus is None:
        return f.outcome("")
    roles = sorted({str(r.fields.get("role")) for r in ev.receipts_named("static-build")})
    f.use(r.seq for r in ev.receipts_named("static-build"))
    if roles and len(gpus) != len(roles):
        f.fail(f"preflight binds {count(len(gpus), 'GPU')} for {count(len(roles), 'role')} ({', '.join(roles)})")
    minors = [str(g.get("minor")) for g in gpus]
    uuids = [g.get("uuid") for g in gpus]
    if any(not isinstance(u, str) or not u for u in uuids):
        f.fail(f"a binding lacks its UUID: {uuids}")
    else:
        # A minor names one card of its host and a card has one minor: anything else contradicts itself.
        # Across the hosts of an ``ssh-tunnel`` config the recorder captured, each host counts its own minors
        # from 0 (a binding names its ``node``); elsewhere a binding's ``node`` is a claim that changes nothing.
        if _hosts(cfg if known else None) > 1:
            minors = [f"{g.get('node')}:{m}" for g, m in zip(gpus, minors, strict=True)]
        pairs = set(zip(minors, map(str, uuids), strict=True))
        if len({m for m, _ in pairs}) != len(pairs) or len({u for _, u in pairs}) != len(pairs):
            f.fail(f"minors and UUIDs do not pair one to one: {sorted(pairs)}")
        elif len(set(uuids)) != len(uuids):
            # One card bound to several roles: not wrong, but it cannot show the lane on distinct devices.
            f.inconclusive(f"the roles share a GPU (UUIDs not distinct: {uuids}), so the lane ran on fewer devices")
    for g in gpus if known else ():
        # Judged only against the allow-lists of a config the recorder captured: unknown lists contradict nothing.
        product, driver = g.get("product"), str(g.get("driver", ""))
        if product not in products:
            f.fail(f"GPU {g.get('uuid')} is a {product!r}, not one of {list(products)}")
        release = driver.split(".", 1)[0]
        if release not in drivers and driver not in drivers:
            f.fail(f"GPU {g.get('uuid')} runs driver {driver!r}, not release {'/'.join(drivers)}")
    procs = receipt.fields.get("compute_processes")
    if not isinstance(procs, list):
        f.inconclusive("preflight does not list the compute processes")
    elif procs:
        names = ", ".join(f"{p.get('name')} (pid {p.get('pid')})" for p in procs if isinstance(p, dict))
        f.inconclusive(f"the device is busy: other compute process(es) {names}")
    return f.outcome(
        f"{count(len(gpus), 'GPU')} {', '.join(str(g.get('product')) for g in gpus)}; products and driver allowed by "
        "the lane config the recorder captured (the defaults where it names none); minors and UUIDs distinct; "
        "no other compute process"
    )


@register("preflight-binding")
def preflight_binding(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """The captured binding.json names exactly the GPUs the preflight receipt reports."""
    f = Findings()
    receipt = _last(ev, "preflight", f)
    if receipt is None:
        return f.outcome("")
    path = receipt.fields.get("binding")
    if not isinstance(path, str) or not path:
        f.fail(f"preflight (seq {receipt.seq}) does not name its binding file")
        return f.outcome("")
    _art, doc = _json_artifact(ev, path, f, "binding")
    gpus = _gpus(receipt, f)
    if doc is not None and gpus is not None:
        captured = doc.get("gpus") if isinstance(doc, dict) else None
        if captured != gpus:
            f.fail(f"the captured {path} names GPUs {captured!r}, the preflight receipt {gpus!r}")
    return f.outcome(f"the captured {path} names the receipt's {count(len(gpus or []), 'GPU')}")


@register("qualification-files")
def qualification_files(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """Every file qualification.json names is captured with that SHA-256, and every captured file beside it is named."""
    f = Findings()
    receipt = _last(ev, "qualification", f)
    if receipt is None:
        return f.outcome("")
    path = receipt.fields.get("path")
    if not isinstance(path, str) or not path:
        f.fail(f"qualification (seq {receipt.seq}) does not name qualification.json")
        return f.outcome("")
    art, doc = _json_artifact(ev, path, f, "qualification record")
    if art is None or doc is None:
        return f.outcome("")
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list) or not files:
        f.fail(f"{art.path} names no files")
        return f.outcome("")
    base = posixpath.dirname(art.path)
    named: set[str] = set()
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            f.fail(f"{art.path} holds a malformed entry {entry!r}")
            continue
        rel = posixpath.normpath(posixpath.join(base, entry["path"])) if base else posixpath.normpath(entry["path"])
        named.add(rel)
        claimed = entry.get("sha256")
        captured = ev.artifact(rel)
        if captured is None:
            f.inconclusive(f"{art.path} names {rel}, which was not captured")
            continue
        f.use(captured.seqs)
        actual, how = captured.sha256()
        if actual is None:
            f.add("fail" if "hash to" in how else "inconclusive", f"{rel}: {how}")
        elif not isinstance(claimed, str) or claimed.lower() != actual:
            f.fail(f"{art.path} says {rel} has sha256 {claimed} but the captured file hashes to {actual}")
    exempt = [str(g) for g in args.get("exempt", ["**/lane-config.json"])]
    for other in ev.artifacts:
        p = other.path
        if p == art.path or p in named or other.origin == "recorder" or any(glob_match(g, p) for g in exempt):
            continue
        if base and not p.startswith(base + "/"):
            continue
        f.inconclusive(f"{p} was captured beside {art.path} but it does not name it")
    return f.outcome(f"{art.path} names {count(len(named), 'file')}, each captured with that SHA-256")


register("devices-observed")(devices_observed_anywhere)
register("same-bytes")(same_bytes)


@register("output-free-of")
def output_free_of(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """None of the regular expressions in ``patterns`` occurs in the recorded output (``streams``: stdout, stderr)."""
    from gates.patterns import compile_pattern

    f = Findings()
    patterns = args.get("patterns", [])
    streams = args.get("streams", list(kinds.OUTPUT))
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
        f.fail("args.patterns must be a non-empty list of regular expressions")
        return f.outcome("")
    # RE2: the output is the command's, so matching must take linear time whatever the pattern.
    compiled = [compile_pattern(p.encode()) for p in patterns]
    seen = 0
    for e in ev.events:
        if e.kind in streams and e.data:
            seen += 1
    # Output can split a match across reads: search each stream's bytes whole.
    for kind in streams:
        events = [e for e in ev.events if e.kind == kind and e.data]
        whole = b"".join(e.data or b"" for e in events)
        for rx in compiled:
            m = rx.search(whole)
            if m is None:
                continue
            pos, at = 0, events[0].seq
            for e in events:
                pos += len(e.data or b"")
                if pos > m.start():
                    at = e.seq
                    break
            f.use([at])
            f.fail(f"{kind} shows {m.group(0)[:80].decode(errors='replace')!r} (seq {at})")
    if ev.exit is None:
        f.inconclusive("the command never finished, so its whole output was not seen")
    return f.outcome(f"none of {count(len(patterns), 'pattern')} in {count(seen, 'output event')}")


@register("source-identity")
def source_identity(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """The source the recording describes (commit, branch, clean or dirty), as the recorder recorded it."""
    from gates.rebuild import source_identity as check

    return check(ev, args)


@register("process-containment")
def process_containment(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """A physical scope needs the command ended as a whole with the recording (gates/containment.py)."""
    from gates.containment import process_containment as check

    return check(ev, args)
