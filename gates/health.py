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
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from aos.attrs import json_int
from aos.event import Event
from gates.evidence import Evidence
from gates.typing import Findings

__all__ = ["JUDGED_EVENTS", "bound_gpus", "health_findings"]

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
