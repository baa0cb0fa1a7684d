"""Evaluating a gate without ever raising: the verdict must still be sealed.

``gates`` is a library over events: it never records, and it never decides
where events come from. The recorder hands it the events its own writer
appended (``observe.gating``); ``evaluate_stream`` is for a stream file read
back later, e.g. to check that a sealed verdict equals a fresh evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aos.event import Event
    from aos.refusals import Refusal
    from gates.language import Gate
    from gates.verdict import Verdict

__all__ = ["evaluate_events", "evaluate_stream", "inconclusive"]


def inconclusive(gate: Gate, check: str, reason: str) -> Verdict:
    """A verdict of one inconclusive check: the evidence could not be evaluated."""
    from gates.verdict import Check, Verdict

    return Verdict.of(gate.name, gate.scope, [Check(check, "inconclusive", reason)], f"inconclusive: {reason}")


def evaluate_events(gate: Gate, events: Sequence[Event], damage: Refusal | None = None) -> Verdict:
    """Evaluate ``gate`` over ``events``; never raises.

    ``damage`` (what followed the last event that could be read) adds an
    inconclusive ``stream-readback`` check; a gate whose evaluation breaks
    gives an inconclusive ``gate-engine`` verdict saying why.
    """
    from gates.engine import evaluate
    from gates.verdict import Check, Verdict

    try:
        v = evaluate(gate, list(events))
    except Exception as exc:  # noqa: BLE001 - the verdict must still be sealed
        return inconclusive(gate, "gate-engine", f"the gate could not be evaluated: {type(exc).__name__}: {exc}")
    if damage is not None:
        extra = Check("stream-readback", "inconclusive", f"the stream read back damaged: {damage}")
        checks = [*v.checks, extra]
        # The summary is rewritten from the new checks: the engine's began with its own verdict
        # ("pass (scope ...)"), which the damage has just made inconclusive.
        passed = sum(1 for c in checks if c.status == "pass")
        redone = Verdict.of(v.gate, v.scope, checks)
        head = f"{redone.verdict} (scope {v.scope}): {passed}/{len(checks)} checks passed; the stream read back damaged"
        _, sep, rest = v.summary.partition("; ")
        v = Verdict.of(v.gate, v.scope, checks, head + (sep + rest if sep else ""), **v.extra)
    return v


def evaluate_stream(gate: Gate, path: Path) -> Verdict:
    """Read a (possibly unsealed) stream file back and evaluate ``gate`` over it; never raises."""
    from aos.reader import read_stream
    from aos.refusals import Refusal

    try:
        contents = read_stream(path)
    except Refusal as exc:
        return inconclusive(gate, "stream-readback", f"the stream cannot be read: {exc}")
    return evaluate_events(gate, contents.events, contents.damage)
