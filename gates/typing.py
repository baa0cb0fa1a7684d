"""Extension points: what a named Python check is and returns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gates.cited import Cited
from gates.verdict import MAX_EVIDENCE

if TYPE_CHECKING:
    from gates.evidence import Evidence
    from gates.verdict import Status

__all__ = ["CheckFunction", "Findings", "Outcome"]


@dataclass(frozen=True)
class Outcome:
    """What one rule concluded (the engine names it after the rule)."""

    status: Status
    reason: str
    evidence: tuple[int, ...] = ()
    evidence_omitted: int = 0  # seqs cited beyond ``evidence`` (``Findings`` keeps the lowest ``MAX_EVIDENCE``)


class CheckFunction(Protocol):
    """A named Python check: evidence and the rule's ``args`` in, an outcome out."""

    def __call__(self, evidence: Evidence, args: Mapping[str, Any], /) -> Outcome: ...


@dataclass
class Findings:
    """Collects what a rule found; the worst finding decides the outcome.

    ``fail`` for contradicting evidence, ``inconclusive`` for missing evidence,
    ``note`` for what a pass should say; ``use`` records evidence seqs (a
    ``Cited`` set: a rule citing a million output events holds no object per
    seq; its outcome gives the lowest ``MAX_EVIDENCE`` and counts the rest, as
    the sealed verdict does).
    """

    fails: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seqs: Cited = field(default_factory=Cited)

    def fail(self, reason: str) -> None:
        self.fails.append(reason)

    def inconclusive(self, reason: str) -> None:
        self.missing.append(reason)

    def add(self, status: str, reason: str) -> None:
        """Record ``reason`` as a failure or missing evidence, by ``status``."""
        (self.fails if status == "fail" else self.missing).append(reason)

    def note(self, reason: str) -> None:
        self.notes.append(reason)

    def use(self, seqs: Iterable[int]) -> None:
        self.seqs.add(seqs)

    @property
    def ok(self) -> bool:
        return not self.fails and not self.missing

    def outcome(self, passed: str) -> Outcome:
        """The outcome: failures first, then missing evidence, else ``passed``."""
        cited = tuple(self.seqs.lowest(MAX_EVIDENCE))
        omitted = len(self.seqs) - len(cited)
        if self.fails:
            return Outcome("fail", _join(self.fails), cited, omitted)
        if self.missing:
            return Outcome("inconclusive", _join(self.missing), cited, omitted)
        text = passed + ("; " + "; ".join(self.notes) if self.notes else "")
        return Outcome("pass", text, cited, omitted)


def _join(reasons: list[str], limit: int = 3) -> str:
    uniq = list(dict.fromkeys(reasons))
    text = "; ".join(uniq[:limit])
    if len(uniq) > limit:
        text += f" (and {len(uniq) - limit} more)"
    return text
