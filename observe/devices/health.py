"""A GPU's health as the recorder reads it through NVML: the facts, the events, and which of them a sample is for.

Each GPU of a ``device.observed`` event carries ``health`` (docs/FORMAT.md): every
fact of :data:`FACTS`, its value or null, and ``unsupported``, which names each
fact NVML did not give with NVML's own return code (``3`` NotSupported, ``4``
NoPermission, ``13`` FunctionNotFound, ...): never a guessed value, never a zero.
The facts of :data:`STATIC` are read once, when the observer starts; the others at
every observation. A fact NVML answered ``NotSupported`` or ``FunctionNotFound``
for is not asked again (the card will not grow it during a recording).

NVML's events (XID critical errors, double- and single-bit ECC errors) are read
from one event set the observer registers every GPU in, where NVML supports it;
each observation drains what came since the last one into its ``gpu_events``. The
fact ``events`` names the event types registered on the GPU, or is unsupported
with the code registration returned (said once, in every observation).

Bundled for the nodes (observe.devices.bundle): standard library only, Python 3.9.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "CLOCKS_EVENT_REASONS",
    "EVENT_TYPES",
    "FACTS",
    "JUDGED_EVENTS",
    "SLOWDOWNS",
    "STATIC",
    "VOLATILE",
    "HealthReader",
    "describe_event",
    "describe_health",
    "health_changes",
    "health_key",
]

#: Every health fact of a GPU, in the order docs/FORMAT.md lists them.
FACTS: tuple[str, ...] = (
    "serial",
    "board_part_number",
    "vbios",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
    "persistence",
    "mig_mode",
    "ecc_mode",
    "ecc_volatile_corrected",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_corrected",
    "ecc_aggregate_uncorrected",
    "retired_pages_single",
    "retired_pages_double",
    "retired_pages_pending",
    "remapped_correctable",
    "remapped_uncorrectable",
    "remap_pending",
    "remap_failure",
    "clocks_event_reasons",
    "power_draw",
    "power_limit",
    "temperature",
    "sm_clock",
    "memory_clock",
    "events",
)
#: The facts read once, when the observer starts.
STATIC: tuple[str, ...] = ("serial", "board_part_number", "vbios", "pcie_gen_max", "pcie_width_max")
#: The facts that move with load; a change of them alone records no ``sample`` (``telemetry`` has the load).
VOLATILE: tuple[str, ...] = ("pcie_gen", "power_draw", "temperature", "sm_clock", "memory_clock")
#: NVML's clocks-event (throttle) reasons, by bit.
CLOCKS_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: The reasons that are a slowdown of the card (a change of them records a ``sample``); the others follow load.
SLOWDOWNS: frozenset[str] = frozenset(
    {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)
#: NVML's event types the observer registers for, by bit.
EVENT_TYPES: dict[int, str] = {0x8: "xid", 0x2: "double_bit_ecc", 0x1: "single_bit_ecc"}
#: The event types a gate judges on a bound GPU (NVML's critical XIDs, double-bit ECC errors).
JUDGED_EVENTS: frozenset[str] = frozenset({"xid", "double_bit_ecc"})

_NOT_SUPPORTED = 3
_FUNCTION_NOT_FOUND = 13
_TIMEOUT = 10
_NO_PERMISSION = 4
#: Codes that say the card or driver does not offer the fact: it is not asked again.
_STABLE = (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND)
#: The most events drained in one observation (the rest wait for the next).
EVENTS_PER_OBSERVATION = 64


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _mode(value: Any) -> str:
    return "enabled" if int(value) == 1 else "disabled" if int(value) == 0 else str(value)


def _reasons(mask: Any) -> list[str]:
    mask = int(mask)
    names = [name for bit, name in CLOCKS_EVENT_REASONS.items() if mask & bit]
    rest = mask & ~sum(CLOCKS_EVENT_REASONS)
    names += [f"bit_{b}" for b in range(64) if rest >> b & 1]
    return names


def _ecc(nv: Any, handle: Any, error_type: int, counter: int) -> int:
    return int(nv.nvmlDeviceGetTotalEccErrors(handle, error_type, counter))


def health_key(health: Any) -> object:
    """What of one GPU's ``health`` a ``sample`` is recorded for: every fact but the :data:`VOLATILE` ones,
    and of the clocks-event reasons only the slowdowns."""
    if not isinstance(health, Mapping):
        return None
    reasons = health.get("clocks_event_reasons")
    slow = tuple(r for r in reasons if r in SLOWDOWNS) if isinstance(reasons, list) else None
    facts = tuple(
        (k, repr(health.get(k))) for k in FACTS if k not in VOLATILE and k not in ("clocks_event_reasons", "events")
    )
    unsupported = health.get("unsupported")
    codes = tuple(sorted(unsupported.items())) if isinstance(unsupported, Mapping) else None
    return (facts, slow, codes)


class HealthReader:
    """The health facts of each GPU through NVML (``nvml``: the pynvml module), and its event set."""

    def __init__(self, nvml: Any) -> None:
        self.nv = nvml
        self.static: dict[str, dict[str, Any]] = {}  # uuid -> the STATIC facts (and their codes)
        self.gone: dict[str, dict[str, int]] = {}  # uuid -> the facts NVML does not offer on it, and its code
        self.registered: dict[str, Any] = {}  # uuid -> the event types registered, or the code refusing them
        self.event_set: Any = None
        self.errors: list[str] = []  # errors other than "not offered", for the observation's error

    # -- one fact -------------------------------------------------------------------------

    def _ask(self, uuid: str, fact: str, fn: Callable[[], Any], facts: dict[str, Any], codes: dict[str, int]) -> None:
        gone = self.gone.setdefault(uuid, {})
        if fact in gone:
            facts[fact], codes[fact] = None, gone[fact]
            return
        nv = self.nv
        try:
            facts[fact] = fn()
        except nv.NVMLError as exc:
            code = int(exc.value)
            facts[fact], codes[fact] = None, code
            if code in _STABLE:
                gone[fact] = code
        except AttributeError:  # this nvidia-ml-py has no such function
            facts[fact], codes[fact] = None, _FUNCTION_NOT_FOUND
            gone[fact] = _FUNCTION_NOT_FOUND

    def describe(self, handle: Any, uuid: str) -> None:
        """The facts of :data:`STATIC`, read once; and the GPU registered in the event set."""
        nv = self.nv
        facts: dict[str, Any] = {}
        codes: dict[str, int] = {}
        self._ask(uuid, "serial", lambda: _text(nv.nvmlDeviceGetSerial(handle)), facts, codes)
        self._ask(uuid, "board_part_number", lambda: _text(nv.nvmlDeviceGetBoardPartNumber(handle)), facts, codes)
        self._ask(uuid, "vbios", lambda: _text(nv.nvmlDeviceGetVbiosVersion(handle)), facts, codes)
        self._ask(uuid, "pcie_gen_max", lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(handle)), facts, codes)
        self._ask(uuid, "pcie_width_max", lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(handle)), facts, codes)
        self.static[uuid] = {"facts": facts, "codes": codes}
        self._register(handle, uuid)

    def _register(self, handle: Any, uuid: str) -> None:
        nv = self.nv
        try:
            if self.event_set is None:
                self.event_set = nv.nvmlEventSetCreate()
            supported = int(nv.nvmlDeviceGetSupportedEventTypes(handle))
            wanted = sum(bit for bit in EVENT_TYPES if supported & bit)
            if not wanted:
                self.registered[uuid] = _NOT_SUPPORTED
                return
            nv.nvmlDeviceRegisterEvents(handle, wanted, self.event_set)
            self.registered[uuid] = [name for bit, name in EVENT_TYPES.items() if wanted & bit]
        except nv.NVMLError as exc:
            self.registered[uuid] = int(exc.value)
        except AttributeError:
            self.registered[uuid] = _FUNCTION_NOT_FOUND

    # -- one observation ---------------------------------------------------------------------

    def read(self, handle: Any, uuid: str) -> dict[str, Any]:
        """This GPU's ``health`` now (docs/FORMAT.md)."""
        nv = self.nv
        static = self.static.get(uuid, {"facts": {}, "codes": {}})
        facts: dict[str, Any] = dict(static["facts"])
        codes: dict[str, int] = dict(static["codes"])

        def ask(fact: str, fn: Callable[[], Any]) -> None:
            self._ask(uuid, fact, fn, facts, codes)

        ask("pcie_gen", lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(handle)))
        ask("pcie_width", lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(handle)))
        ask("persistence", lambda: _mode(nv.nvmlDeviceGetPersistenceMode(handle)))
        ask("mig_mode", lambda: _mode(nv.nvmlDeviceGetMigMode(handle)[0]))
        ask("ecc_mode", lambda: _mode(nv.nvmlDeviceGetEccMode(handle)[0]))
        for fact, error_type, counter in (
            ("ecc_volatile_corrected", 0, 0),
            ("ecc_volatile_uncorrected", 1, 0),
            ("ecc_aggregate_corrected", 0, 1),
            ("ecc_aggregate_uncorrected", 1, 1),
        ):
            ask(fact, functools.partial(_ecc, nv, handle, error_type, counter))
        ask("retired_pages_single", lambda: len(nv.nvmlDeviceGetRetiredPages(handle, 0)))
        ask("retired_pages_double", lambda: len(nv.nvmlDeviceGetRetiredPages(handle, 1)))
        ask("retired_pages_pending", lambda: int(nv.nvmlDeviceGetRetiredPagesPendingStatus(handle)) == 1)
        rows: dict[str, Any] = {}
        ask("remapped_correctable", lambda: rows.setdefault("r", nv.nvmlDeviceGetRemappedRows(handle))[0])
        if "remapped_correctable" in codes:
            for fact in ("remapped_uncorrectable", "remap_pending", "remap_failure"):
                facts[fact], codes[fact] = None, codes["remapped_correctable"]
        else:
            corr, unc, pending, failure = rows["r"]
            facts["remapped_correctable"] = int(corr)
            facts["remapped_uncorrectable"] = int(unc)
            facts["remap_pending"] = int(pending) == 1
            facts["remap_failure"] = int(failure) == 1
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)  # older: ...ThrottleReasons
        ask(
            "clocks_event_reasons",
            lambda: _reasons((reasons or nv.nvmlDeviceGetCurrentClocksThrottleReasons)(handle)),
        )
        ask("power_draw", lambda: int(nv.nvmlDeviceGetPowerUsage(handle)))
        ask("power_limit", lambda: int(nv.nvmlDeviceGetEnforcedPowerLimit(handle)))
        ask("temperature", lambda: int(nv.nvmlDeviceGetTemperature(handle, 0)))
        ask("sm_clock", lambda: int(nv.nvmlDeviceGetClockInfo(handle, 1)))
        ask("memory_clock", lambda: int(nv.nvmlDeviceGetClockInfo(handle, 2)))
        registered = self.registered.get(uuid, _NOT_SUPPORTED)
        if isinstance(registered, list):
            facts["events"] = list(registered)
        else:
            facts["events"], codes["events"] = None, registered
        odd = {k: c for k, c in codes.items() if c not in (*_STABLE, _NO_PERMISSION) and k != "events"}
        if odd:  # one error per GPU and observation, beside the codes: NVML failed, not "not offered"
            self.errors.append(f"GPU {uuid} health: NVML errors " + ", ".join(f"{k} {c}" for k, c in odd.items()))
        return shaped(facts, codes)

    def events(self, uuid_of: Callable[[Any], str]) -> list[dict[str, Any]]:
        """The events NVML delivered since the last call (``uuid_of``: a handle's UUID), at most
        :data:`EVENTS_PER_OBSERVATION`."""
        nv = self.nv
        found: list[dict[str, Any]] = []
        if self.event_set is None:
            return found
        while len(found) < EVENTS_PER_OBSERVATION:
            try:
                data = nv.nvmlEventSetWait_v2(self.event_set, 0)
            except nv.NVMLError as exc:
                if int(exc.value) != _TIMEOUT:
                    self.errors.append(f"NVML events: NVML error {int(exc.value)} ({exc})")
                break
            kind = EVENT_TYPES.get(int(data.eventType), f"type_{int(data.eventType)}")
            try:
                gpu = uuid_of(data.device)
            except nv.NVMLError:
                gpu = "?"
            found.append(
                {
                    "gpu": gpu,
                    "type": kind,
                    "xid": int(data.eventData) if kind == "xid" else None,
                    "data": int(data.eventData),
                }
            )
        return found

    def close(self) -> None:
        if self.event_set is not None:
            with contextlib.suppress(self.nv.NVMLError):
                self.nv.nvmlEventSetFree(self.event_set)
            self.event_set = None


def shaped(facts: Mapping[str, Any], codes: Mapping[str, int]) -> dict[str, Any]:
    """A ``health`` object: each fact of :data:`FACTS` (null where absent) and ``unsupported`` (its codes); a fact
    with a code is null, whatever ``facts`` says."""
    out: dict[str, Any] = {k: (None if k in codes else facts.get(k)) for k in FACTS}
    out["unsupported"] = {k: int(codes[k]) for k in FACTS if k in codes}
    return out


def health_problem(value: Any) -> str | None:
    """What keeps ``value`` from being a ``health`` object (or null); None when it is one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return "health is not an object"
    if set(value) != {*FACTS, "unsupported"}:
        return f"health has keys {sorted(value)}"
    unsupported = value["unsupported"]
    if not isinstance(unsupported, dict) or not all(
        k in FACTS and isinstance(c, int) and not isinstance(c, bool) and value[k] is None
        for k, c in unsupported.items()
    ):
        return "health.unsupported is not {FACT: CODE} of null facts"
    return None


# -- said to people: show, the report, the site -----------------------------------------------


def _said(health: Mapping[str, Any], fact: str) -> str:
    code = (health.get("unsupported") or {}).get(fact)
    if code is not None:
        return f"unsupported (NVML {code})"
    value = health.get(fact)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return "?" if value is None else str(value)


def describe_health(health: Mapping[str, Any]) -> list[tuple[str, str]]:
    """One GPU's ``health`` as ``(what, value)`` rows for people, every fact once, in :data:`FACTS` order
    (grouped: the PCIe link, ECC, retired pages, remapped rows, power)."""

    def s(fact: str) -> str:
        return _said(health, fact)

    return [
        ("serial", s("serial")),
        ("board part number", s("board_part_number")),
        ("VBIOS", s("vbios")),
        ("PCIe link", f"gen {s('pcie_gen')} of {s('pcie_gen_max')}, x{s('pcie_width')} of x{s('pcie_width_max')}"),
        ("persistence / MIG / ECC mode", f"{s('persistence')} / {s('mig_mode')} / {s('ecc_mode')}"),
        (
            "ECC errors (corrected, uncorrected)",
            f"volatile {s('ecc_volatile_corrected')}, {s('ecc_volatile_uncorrected')}; "
            f"aggregate {s('ecc_aggregate_corrected')}, {s('ecc_aggregate_uncorrected')}",
        ),
        (
            "retired pages (single, double, pending)",
            f"{s('retired_pages_single')}, {s('retired_pages_double')}, {s('retired_pages_pending')}",
        ),
        (
            "remapped rows (correctable, uncorrectable, pending, failure)",
            f"{s('remapped_correctable')}, {s('remapped_uncorrectable')}, {s('remap_pending')}, {s('remap_failure')}",
        ),
        ("clocks-event reasons", s("clocks_event_reasons")),
        ("power (mW, of limit)", f"{s('power_draw')} of {s('power_limit')}"),
        ("temperature (C), SM / memory clock (MHz)", f"{s('temperature')}, {s('sm_clock')} / {s('memory_clock')}"),
        ("events registered", s("events")),
    ]


def health_changes(first: Mapping[str, Any], later: Mapping[str, Any]) -> list[str]:
    """The facts of ``later`` that are not what they were in ``first``, but those that follow load
    (:data:`VOLATILE`), as ``fact: before -> after``."""
    changed = [
        f"{fact}: {_said(first, fact)} -> {_said(later, fact)}"
        for fact in FACTS
        if fact not in (*VOLATILE, "clocks_event_reasons") and _said(first, fact) != _said(later, fact)
    ]
    slow = [_slowdowns(h) for h in (first, later)]
    if slow[0] != slow[1]:
        changed.append(f"slowdowns: {', '.join(slow[0]) or 'none'} -> {', '.join(slow[1]) or 'none'}")
    return changed


def _slowdowns(health: Mapping[str, Any]) -> list[str]:
    reasons = health.get("clocks_event_reasons")
    return [r for r in reasons if r in SLOWDOWNS] if isinstance(reasons, list) else []


def describe_event(event: Mapping[str, Any]) -> str:
    """One GPU event for people: ``XID 79 on GPU-...`` or ``double_bit_ecc on GPU-...``."""
    what = f"XID {event.get('xid')}" if event.get("type") == "xid" else str(event.get("type"))
    return f"{what} on {event.get('gpu')}"
