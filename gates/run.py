"""Gating a command, as a library call: record it, evaluate, seal the verdict.

``alpha observe gate`` is a thin layer over ``run_gate``; tests and programs
can call it directly::

    outcome = run_gate(resolve_gate("exit-zero"), ["make", "test"], RecordOptions(out=Path("t.aos")))
    assert outcome.verdict is not None and outcome.verdict.verdict == "pass"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aos.writer import StreamWriter
    from gates.language import Gate
    from gates.verdict import Verdict
    from observe.recorder import RecordOptions, RecordResult

__all__ = ["GateOutcome", "evaluate_stream", "run_gate"]


@dataclass(frozen=True)
class GateOutcome:
    """The recording and the verdict sealed into it (None when the recorder failed first)."""

    record: RecordResult
    verdict: Verdict | None

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail, 3 inconclusive; 125 when the recorder failed (no sealed verdict)."""
        if self.record.recorder_failed or self.verdict is None:
            return 125
        return self.verdict.exit_code


def evaluate_stream(gate: Gate, path: Path) -> Verdict:
    """Read a (possibly unsealed) stream back and evaluate ``gate`` over it.

    Never raises: a stream that cannot be read back whole, or a gate whose
    evaluation breaks, gives an ``inconclusive`` verdict saying why.
    """
    from aos.reader import read_stream
    from gates.engine import evaluate
    from gates.verdict import Check, Verdict

    try:
        contents = read_stream(path)
        v = evaluate(gate, contents.events)
        if contents.damage is not None:
            extra = Check("stream-readback", "inconclusive", f"the stream read back damaged: {contents.damage}")
            v = Verdict.of(v.gate, v.scope, [*v.checks, extra], v.summary, **v.extra)
        return v
    except Exception as exc:  # noqa: BLE001 - the verdict must still be sealed
        check = Check("gate-engine", "inconclusive", f"the gate could not be evaluated: {type(exc).__name__}: {exc}")
        return Verdict.of(gate.name, gate.scope, [check], "inconclusive: the gate could not be evaluated")


def run_gate(gate: Gate, argv: Sequence[str], options: RecordOptions) -> GateOutcome:
    """Record ``argv`` under ``gate``: the verdict is appended just before the seal.

    Raises what ``observe.recorder.record`` raises before the command runs
    (``stream-write`` for an unwritable ``--out``, ``stream-signature`` for a bad key).
    """
    from observe.recorder import record

    sealed: list[Verdict] = []

    def before_seal(path: Path, writer: StreamWriter) -> None:
        writer.flush()
        v = evaluate_stream(gate, path)
        writer.append("verdict", v.to_attrs())
        sealed.append(v)

    result = record(list(argv), replace(options, gate=gate.name), before_seal=before_seal)
    return GateOutcome(result, sealed[0] if sealed and not result.recorder_failed else None)
