"""Verdicts and checks: what a gate concluded, and the attrs that seal it.

A check is one rule's conclusion: ``pass``, ``fail`` or ``inconclusive``, a
reason a person can read, and the seqs of the events it relied on. A verdict
combines its checks: ``fail`` if any check failed, else ``inconclusive`` if
any could not conclude, else ``pass``. Missing evidence is never a pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from aos.refusals import StreamVerdict

__all__ = [
    "EXIT_CODES",
    "STATUSES",
    "Check",
    "Status",
    "Verdict",
    "combine",
]

Status = Literal["pass", "fail", "inconclusive"]

#: Every status, weakest claim last.
STATUSES: tuple[Status, ...] = ("pass", "inconclusive", "fail")

#: How ``gate`` and ``verdict`` exit for each verdict (README, exit codes; observe/exits.py).
EXIT_CODES: dict[str, int] = {"pass": 0, "fail": 1, "inconclusive": 3}


def combine(statuses: Iterable[str]) -> Status:
    """``fail`` if any failed, else ``inconclusive`` if any was, else ``pass``.

    No statuses at all is ``inconclusive``: nothing was checked, so nothing
    is established.
    """
    seen = set(statuses)
    if not seen:
        return "inconclusive"
    if "fail" in seen:
        return "fail"
    if seen - {"pass"}:
        return "inconclusive"
    return "pass"


@dataclass(frozen=True)
class Check:
    """One rule's conclusion over the recorded events."""

    name: str
    status: Status
    reason: str
    evidence: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # A reason may quote a recorded name or path that is not UTF-8 (FORMAT.md 3.7): it is
        # written as text (\xNN), so the verdict can always be sealed, and reads back equal.
        from aos.text import printable

        object.__setattr__(self, "reason", printable(self.reason))

    def to_attrs(self) -> dict[str, Any]:
        """The JSON object sealed in the verdict event."""
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "evidence": sorted(set(self.evidence)),
        }

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> Check:
        """Read a check back from a sealed verdict (``stream-verdict`` if malformed)."""
        name, status, reason = attrs.get("name"), attrs.get("status"), attrs.get("reason", "")
        evidence = attrs.get("evidence", [])
        if not isinstance(name, str) or status not in STATUSES or not isinstance(reason, str):
            raise StreamVerdict(f"the verdict holds a malformed check: {dict(attrs)!r}")
        if not isinstance(evidence, list) or not all(isinstance(s, int) for s in evidence):
            raise StreamVerdict(f"check {name!r} has malformed evidence: {evidence!r}")
        return cls(name, cast(Status, status), reason, tuple(evidence))


@dataclass(frozen=True)
class Verdict:
    """A gate's conclusion: the combined status, its scope, and every check."""

    gate: str
    verdict: Status
    scope: str
    checks: tuple[Check, ...]
    summary: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, gate: str, scope: str, checks: Iterable[Check], summary: str = "", **extra: Any) -> Verdict:
        """A verdict whose status is the combination of its checks."""
        checks = tuple(checks)
        return cls(gate, combine(c.status for c in checks), scope, checks, summary, dict(extra))

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail, 3 inconclusive."""
        return EXIT_CODES[self.verdict]

    def failing(self) -> list[Check]:
        """The checks that did not pass, failures first."""
        return [c for c in self.checks if c.status == "fail"] + [c for c in self.checks if c.status == "inconclusive"]

    def to_attrs(self) -> dict[str, Any]:
        """The attrs of the ``verdict`` event."""
        counts = {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}
        attrs: dict[str, Any] = dict(self.extra)
        attrs.update(
            {
                "gate": self.gate,
                "verdict": self.verdict,
                "scope": self.scope,
                "summary": self.summary,
                "counts": counts,
                "checks": [c.to_attrs() for c in self.checks],
            }
        )
        return attrs

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> Verdict:
        """Read a sealed verdict back; ``stream-verdict`` when it is malformed."""
        gate, verdict, scope = attrs.get("gate"), attrs.get("verdict"), attrs.get("scope")
        raw_checks = attrs.get("checks")
        if not isinstance(gate, str) or verdict not in STATUSES or not isinstance(scope, str):
            raise StreamVerdict(f"the sealed verdict is malformed: gate={gate!r} verdict={verdict!r} scope={scope!r}")
        if not isinstance(raw_checks, list) or not all(isinstance(c, dict) for c in raw_checks):
            raise StreamVerdict("the sealed verdict's checks are not a list of objects")
        checks = tuple(Check.from_attrs(c) for c in raw_checks)
        summary = attrs.get("summary", "")
        known = {"gate", "verdict", "scope", "summary", "checks", "counts"}
        extra = {k: v for k, v in attrs.items() if k not in known}
        return cls(gate, cast(Status, verdict), scope, checks, summary if isinstance(summary, str) else "", extra)
