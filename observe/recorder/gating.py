"""Gating a command: the recorder and the gate engine, composed.

``alpha observe gate`` is a thin layer over ``run_gate``; tests and programs
can call it directly::

    outcome = run_gate(resolve_gate("exit-zero"), ["make", "test"], RecordOptions(out=Path("t.aos")))
    assert outcome.verdict is not None and outcome.verdict.verdict == "pass"

The trust boundary (docs/TRUST.md): the gate evaluates the events the recorder's
own writer appended, read back from the writer's private copy, never the
stream file at its path, which the recorded command can rename, replace or
rewrite while it runs. The verdict is appended and sealed through the
writer's own descriptor, so the sealed verdict is always what those events
give, and a file that differs from them does not verify.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from aos import kinds
from observe.exits import Exit

if TYPE_CHECKING:
    from aos.event import Event
    from aos.writer import StreamWriter
    from gates.language import Gate
    from gates.report import Facts
    from gates.verdict import Verdict
    from observe.recorder.record import RecordOptions, RecordResult

__all__ = ["GateOutcome", "expected_refusals", "run_gate"]


def expected_refusals(gate: Gate) -> tuple[str, ...]:
    """The steps ``gate`` requires to exit non-zero (a lane's refusal controls), in the gate's order."""
    from gates.language import StepRule

    names: dict[str, None] = {}
    for rule in gate.rules:
        if isinstance(rule, StepRule) and rule.exit not in (0, "any"):
            names.setdefault(rule.name, None)
    return tuple(names)


@dataclass(frozen=True)
class GateOutcome:
    """The recording and the verdict sealed into it (None when the recorder failed first)."""

    record: RecordResult
    verdict: Verdict | None
    facts: Facts | None = None  # what reports quote (times, host, stderr tails), from the same events

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail, 3 inconclusive; 125 when the recorder failed (no sealed verdict, or one sealed
        ``inconclusive`` because the machine failed the tool); 123 when the command replaced or edited the
        stream at its path and the recorder put it back (whatever the verdict)."""
        if self.record.recorder_failed or self.verdict is None:
            return Exit.RECORDER
        if self.record.path_restored:
            return Exit.RESTORED
        return self.verdict.exit_code


def run_gate(gate: Gate, argv: Sequence[str], options: RecordOptions) -> GateOutcome:
    """Record ``argv`` under ``gate``: the verdict is appended just before the seal.

    Raises what ``observe.recorder.record.record`` raises before the command runs
    (``stream-write`` for an unwritable ``--out``, ``stream-signature`` for a bad key).
    """
    from aos.refusals import StreamWrite
    from gates.evaluation import RESOURCE_CHECK, evaluate_with_evidence, inconclusive, machine_failure
    from gates.report import FactsGatherer
    from observe.recorder.rebuild import rebuild_for_gate
    from observe.recorder.record import record
    from observe.refusals import Resource

    sealed: list[Verdict] = []
    facts: list[Facts] = []
    machine: list[Verdict] = []  # sealed inconclusive because the machine failed the tool: exit 125

    def before_seal(writer: StreamWriter) -> None:
        rebuild_for_gate(gate, writer, replace(options, gate=gate.name))  # [[rebuild]]: the recorder builds again first
        # One pass over the private copy: the evidence keeps what the gate reads, the facts
        # bounded tails. The copy is checked (digest, chain, count) only when the pass ends, so
        # the iterator is always read to its end before anything is appended.
        gather = FactsGatherer()
        failed: list[StreamWrite] = []
        lacked: list[Verdict] = []

        def read_back() -> Iterator[Event]:
            try:
                for ev in writer.iter_written_events():
                    gather.add(ev)
                    yield ev
            except StreamWrite as exc:
                failed.append(exc)
            except BaseException as exc:  # a thread or memory the machine could not give: not damage
                found = machine_failure(gate, exc)
                if found is None:
                    raise
                lacked.append(found)

        events = read_back()
        v, evidence = evaluate_with_evidence(gate, events)
        for _ in events:  # an evaluation that broke off early: finish the read, and so its checks
            pass
        broke_for_want = evidence is None and [c.name for c in v.checks] == [RESOURCE_CHECK]
        if lacked or broke_for_want:
            v = lacked[0] if lacked else v
            gather, evidence = FactsGatherer(), None
            machine.append(v)
        elif failed:
            v = inconclusive(gate, "stream-readback", f"the recorder cannot read back what it wrote: {failed[0]}")
            gather, evidence = FactsGatherer(), None
        writer.append(kinds.VERDICT, v.to_attrs())
        sealed.append(v)
        if machine:  # sealed, then said: the recording ends as the recorder's failure (125)
            raise Resource(v.checks[0].reason)
        f = gather.facts
        cited = {s for c in v.checks for s in c.evidence}
        if evidence is not None and cited:
            f.cited = evidence.cite(cited)
        if evidence is not None:
            from gates.results import file_bytes

            f.files = file_bytes(evidence, v)  # the captured test results, for --junit and the job summary
        facts.append(f)

    labelled = replace(options, gate=gate.name, expected_refusals=expected_refusals(gate))
    result = record(list(argv), labelled, before_seal=before_seal)
    ok = sealed and not result.recorder_failed
    if machine and result.seal is not None:  # the inconclusive verdict is sealed; the exit code is 125
        return GateOutcome(result, machine[0])
    return GateOutcome(result, sealed[0] if ok else None, facts[0] if ok and facts else None)
