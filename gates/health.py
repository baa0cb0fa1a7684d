"""A bound GPU's health while the run ran: what makes its physical part ``inconclusive``.

The recorder's observer reads each GPU's health through NVML (docs/FORMAT.md,
``device.observed``: each GPU's ``health`` and the observation's ``gpu_events``).
On a GPU the preflight binds, each of these makes the devices check
inconclusive, naming the GPU, the fact and the seq of the observation that
shows it (once per GPU and fact):

- a critical event NVML delivered: an XID critical error (``xid``) or a
  double-bit ECC error (``double_bit_ecc``);
- uncorrected ECC errors (volatile or aggregate) above the GPU's first
  observation's count;
- a row remap pending or failed (``remap_pending``, ``remap_failure``), or a
  retired page pending (``retired_pages_pending``).

A GPU no role is bound to is shown, never judged. A receipt can say nothing here:
only ``device.observed`` events, which only the recorder appends, are read.

A gate file's ``[[device]]`` tables (:func:`evaluate_device`) require facts of
the GPUs' health: ``ecc``, ``persistence``, ``mig`` (``"enabled"`` or
``"disabled"``), ``pcie_width_min`` (lanes), on the bound GPUs or all of them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from aos.attrs import json_int
from aos.event import Event
from gates.evidence import Evidence
from gates.typing import Findings, Outcome
from gates.wording import count

__all__ = ["DEVICE_REQUIREMENTS", "JUDGED_EVENTS", "bound_gpus", "evaluate_device", "health_findings"]

#: NVML's event types that make a bound GPU's run inconclusive (single-bit ECC errors are corrected: shown).
JUDGED_EVENTS = {"xid": "XID critical error", "double_bit_ecc": "double-bit ECC error"}
#: The counters whose growth makes it inconclusive.
_GROWTH = {"ecc_volatile_uncorrected": "volatile", "ecc_aggregate_uncorrected": "aggregate"}
#: The flags that make it inconclusive when true.
_FLAGS = {
    "remap_pending": "a row remap is pending",
    "remap_failure": "a row remap failed",
    "retired_pages_pending": "a retired page is pending",
}


def _gpus(o: Event) -> list[dict[str, Any]]:
    value = o.attrs.get("gpus")
    return [g for g in value if isinstance(g, dict)] if isinstance(value, list) else []


def bound_gpus(ev: Evidence) -> set[str]:
    """The UUIDs the lane's last ``preflight`` receipt binds (none without one): the GPUs whose health is judged.
    Judged before the observer is (a simulated fault is named beside "simulated")."""
    preflights = ev.receipts_named("preflight")
    gpus = preflights[-1].fields.get("gpus") if preflights else None
    return (
        {g["uuid"] for g in gpus if isinstance(g, dict) and isinstance(g.get("uuid"), str)}
        if isinstance(gpus, list)
        else set()
    )


def health_findings(obs: Sequence[Event], bound: Collection[str], f: Findings, where: str = "") -> None:
    """Inconclusive for each health fault of a ``bound`` GPU in ``obs`` (one machine's observations, in order);
    ``where`` prefixes each reason (``node NAME: ``)."""
    told: set[tuple[str, str]] = set()
    first: dict[tuple[str, str], int] = {}

    def tell(uuid: str, fact: str, o: Event, text: str) -> None:
        if (uuid, fact) not in told:
            told.add((uuid, fact))
            f.use([o.seq])
            f.inconclusive(f"{where}bound GPU {uuid}: {text} (seq {o.seq}): its health during the run is in doubt")

    for o in obs:
        events = o.attrs.get("gpu_events")
        for e in events if isinstance(events, list) else []:
            if not isinstance(e, dict) or e.get("gpu") not in bound or e.get("type") not in JUDGED_EVENTS:
                continue
            kind = str(e["type"])
            xid = json_int(e.get("xid"))
            said = f"XID {xid} (an XID critical error)" if kind == "xid" else f"a {JUDGED_EVENTS[kind]}"
            tell(str(e["gpu"]), f"{kind} {xid}", o, f"NVML delivered {said}")
        for g in _gpus(o):
            uuid, health = g.get("uuid"), g.get("health")
            if not isinstance(uuid, str) or uuid not in bound or not isinstance(health, dict):
                continue
            for fact, counter in _GROWTH.items():
                value = json_int(health.get(fact))
                if value is None:
                    continue
                before = first.setdefault((uuid, fact), value)
                if value > before:
                    tell(uuid, fact, o, f"uncorrected ECC errors ({counter}, {fact}) grew from {before} to {value}")
            for fact, text in _FLAGS.items():
                if health.get(fact) is True:
                    tell(uuid, fact, o, f"{text} ({fact})")


# -- [[device]]: health facts a gate file requires -------------------------------------------

#: Each key of a ``[[device]]`` table: the health fact it reads and how (``mode``: ``"enabled"`` or
#: ``"disabled"``, equal; ``min``: an integer, at least).
DEVICE_REQUIREMENTS: dict[str, tuple[str, str]] = {
    "ecc": ("ecc_mode", "mode"),
    "persistence": ("persistence", "mode"),
    "mig": ("mig_mode", "mode"),
    "pcie_width_min": ("pcie_width", "min"),
}


class DeviceRequirements(Protocol):
    """What :func:`evaluate_device` reads of a ``[[device]]`` rule (gates.language.DeviceRule)."""

    @property
    def gpus(self) -> str: ...
    @property
    def require(self) -> tuple[tuple[str, Any], ...]: ...
    @property
    def reason(self) -> str: ...


def _wanted(rule: DeviceRequirements, ev: Evidence, f: Findings) -> list[str]:
    """The GPUs a ``[[device]]`` rule judges (sorted), or none, with the finding that says why."""
    if rule.gpus == "bound":
        wanted = sorted(bound_gpus(ev))
        if not wanted:
            f.inconclusive("no preflight receipt binds a GPU: no bound GPU whose health to judge")
        return wanted
    wanted = sorted({g["uuid"] for o in ev.observations for g in _gpus(o) if isinstance(g.get("uuid"), str)})
    if not wanted:
        f.inconclusive("the recorder observed no GPU")
    return wanted


def _requirement_breach(health: dict[str, Any], key: str, want: Any) -> tuple[str, str] | None:
    """How one requirement fails on one health fact set: ``("inconclusive" | "fail", text)``, or None when it
    holds. The text names the fact and what it was; the caller adds the GPU and the seq."""
    fact, kind = DEVICE_REQUIREMENTS[key]
    codes = health.get("unsupported")
    unsupported: dict[str, Any] = codes if isinstance(codes, dict) else {}
    value = health.get(fact)
    if fact in unsupported or value is None:
        code = unsupported.get(fact)
        offered = f"{fact} is not offered" + (f" (NVML code {code})" if code is not None else "")
        return "inconclusive", offered
    ok = value == want if kind == "mode" else isinstance(value, int) and value >= want
    return None if ok else ("fail", f"{fact} was {value!r}")


def evaluate_device(rule: DeviceRequirements, ev: Evidence) -> Outcome:
    """``[[device]]``: each requirement holds on each selected GPU in every observation that carries its health.

    A value that breaks one fails (the GPU, the fact, the seq); a fact NVML does not offer there, a GPU never
    observed with its health, or (``gpus = "bound"``) no preflight: inconclusive.
    """
    f = Findings()
    wanted = _wanted(rule, ev, f)
    if not wanted:
        return f.outcome("")
    why = f" ({rule.reason})" if rule.reason else ""
    seen: dict[str, int] = {}
    told: set[tuple[str, str]] = set()
    for o in ev.observations:
        for g in _gpus(o):
            uuid, health = g.get("uuid"), g.get("health")
            if uuid not in wanted or not isinstance(health, dict):
                continue
            seen[uuid] = seen.get(uuid, 0) + 1
            f.use([o.seq] if seen[uuid] == 1 else [])
            for key, want in rule.require:
                breach = None if (uuid, key) in told else _requirement_breach(health, key, want)
                if breach is None:
                    continue
                told.add((uuid, key))
                f.use([o.seq])
                how, text = breach
                if how == "fail":
                    f.fail(f"GPU {uuid}: {text} (seq {o.seq}); the gate requires {key} = {want!r}{why}")
                else:
                    f.inconclusive(f"GPU {uuid}: {text} (seq {o.seq}), so {key} = {want!r} cannot be shown{why}")
    for uuid in wanted:
        if uuid not in seen:
            f.inconclusive(f"GPU {uuid}: no observation carries its health (recorded before issue 35, or simulated)")
    wanted_text = ", ".join(f"{k} = {v!r}" for k, v in rule.require)
    where = ", ".join(f"GPU {u} ({count(seen.get(u, 0), 'observation')})" for u in wanted)
    return f.outcome(f"{wanted_text} held on {where}" + why)
