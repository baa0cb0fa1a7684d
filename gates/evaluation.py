"""Evaluating a gate without ever raising: the verdict must still be sealed.

``gates`` is a library over events: it never records, and it never decides
where events come from. The recorder hands it the events its own writer
appended (``observe.recorder.gating``); ``evaluate_stream`` is for a stream file read
back later, e.g. to check that a sealed verdict equals a fresh evaluation.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aos.event import Event
    from aos.refusals import Refusal
    from gates.evidence import Evidence
    from gates.language import Gate
    from gates.verdict import Verdict

__all__ = [
    "RESOURCE_CHECK",
    "evaluate_events",
    "evaluate_stream",
    "evaluate_with_evidence",
    "inconclusive",
    "machine_failure",
    "with_damage",
]

#: The check of a verdict sealed when the machine failed the tool (a thread, memory, a descriptor): never damage.
RESOURCE_CHECK = "resource"


def inconclusive(gate: Gate, check: str, reason: str) -> Verdict:
    """A verdict of one inconclusive check: the evidence could not be evaluated."""
    from gates.verdict import Check, Verdict

    return Verdict.of(gate.name, gate.scope, [Check(check, "inconclusive", reason)], f"inconclusive: {reason}")


def machine_failure(gate: Gate, exc: BaseException) -> Verdict | None:
    """The inconclusive verdict for an error of the machine (``aos.resources``), naming the tool's own
    failure; None when ``exc`` is not one."""
    from aos.resources import machine_error

    lacked = machine_error(exc)
    if lacked is None:
        return None
    said = f"{type(exc).__name__}: {exc}"
    return inconclusive(gate, RESOURCE_CHECK, f"the tool's own failure, not the stream's: {lacked} ({said})")


def evaluate_events(gate: Gate, events: Iterable[Event], damage: Refusal | None = None) -> Verdict:
    """Evaluate ``gate`` over ``events`` (any iterable, read once); never raises.

    ``damage`` (what followed the last event that could be read) adds an
    inconclusive ``stream-readback`` check; a gate whose evaluation breaks
    gives an inconclusive ``gate-engine`` verdict saying why.
    """
    v, ev = evaluate_with_evidence(gate, events)
    return v if ev is None else with_damage(v, damage)


def evaluate_with_evidence(gate: Gate, events: Iterable[Event]) -> tuple[Verdict, Evidence | None]:
    """``evaluate_events`` without damage, also giving the evidence index it built (None when it broke).

    The index keeps only what the gate reads (``gates.engine.lean_evidence``): the
    events but the output unless a check reads it, and the stderr of the steps a rule searches.
    """
    from gates.engine import evaluate_evidence, lean_evidence

    try:
        ev = lean_evidence(gate, events)
        return evaluate_evidence(gate, ev), ev
    except BaseException as exc:
        machine = machine_failure(gate, exc)  # a thread or memory the machine could not give (a panic, too)
        if machine is not None:
            return machine, None
        if not isinstance(exc, Exception):
            raise
        return inconclusive(gate, "gate-engine", f"the gate could not be evaluated: {type(exc).__name__}: {exc}"), None


def with_damage(v: Verdict, damage: Refusal | None) -> Verdict:
    """``v`` with an inconclusive ``stream-readback`` check for ``damage`` (``v`` itself when None)."""
    from gates.verdict import Check, Verdict

    if damage is None:
        return v
    extra = Check("stream-readback", "inconclusive", f"the stream read back damaged: {damage}")
    checks = [*v.checks, extra]
    # The summary is rewritten from the new checks: the engine's began with its own verdict
    # ("pass (scope ...)"), which the damage has just made inconclusive.
    passed = sum(1 for c in checks if c.status == "pass")
    redone = Verdict.of(v.gate, v.scope, checks)
    head = f"{redone.verdict} (scope {v.scope}): {passed}/{len(checks)} checks passed; the stream read back damaged"
    _, sep, rest = v.summary.partition("; ")
    return Verdict.of(v.gate, v.scope, checks, head + (sep + rest if sep else ""), **v.extra)


def evaluate_stream(gate: Gate, path: Path) -> Verdict:
    """Read a (possibly unsealed) stream file back and evaluate ``gate`` over it; never raises.

    The file is read batch by batch into the evaluation: memory follows what the
    gate keeps (``evaluate_with_evidence``), not the file's size.
    """
    from aos.reader import StreamFile
    from aos.refusals import Refusal

    try:
        f = StreamFile(path)
    except Refusal as exc:
        return inconclusive(gate, "stream-readback", f"the stream cannot be read: {exc}")
    except Exception as exc:
        machine = machine_failure(gate, exc)
        if machine is None:
            raise
        return machine

    with f:
        v, ev = evaluate_with_evidence(gate, f.events())
        return v if ev is None else with_damage(v, f.damage)
