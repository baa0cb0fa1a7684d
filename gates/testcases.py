"""Test cases read from a captured test-results file (JUnit XML or TAP), and the bounds on reading one.

A ``TestFile`` is what one captured file says, case by case: the counts a
``[[tests]]`` rule judges are derived from its ``cases``, never from a suite's
own totals attributes. A file that cannot be read as test results raises
``TestFileError`` with a ``kind`` (``junit-entity``, ``tap-syntax``, ...) that the
rule's reason names; reading is bounded (``MAX_BYTES``, ``MAX_DEPTH``,
``MAX_CASES``), so a hostile file is a named reason, never a hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "FORMATS",
    "MAX_BYTES",
    "MAX_CASES",
    "MAX_DEPTH",
    "MAX_DETAIL",
    "CaseStatus",
    "TestCase",
    "TestFile",
    "TestFileError",
    "clip",
]

#: A test-results file larger than this is not read (the capture holds it whole in memory).
MAX_BYTES = 64 << 20
#: Elements (JUnit) or subtest levels (TAP) nested deeper than this are refused.
MAX_DEPTH = 32
#: At most this many test cases are read from one file.
MAX_CASES = 1_000_000
#: Characters of a failure's message and of its body kept per case.
MAX_DETAIL = 8 << 10

FORMATS = ("junit", "tap")

CaseStatus = Literal["passed", "failed", "error", "skipped"]


class TestFileError(Exception):
    """A captured file that is not readable as test results; ``kind`` names why."""

    __test__ = False  # not a pytest class

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class TestCase:
    """One test as its runner reported it."""

    __test__ = False

    name: str
    classname: str = ""
    suite: str = ""
    status: CaseStatus = "passed"
    message: str = ""
    detail: str = ""
    file: str | None = None
    line: int | None = None
    time: float | None = None
    #: Failed runs before a pass (Surefire's and nextest's ``flakyFailure``/``flakyError``).
    flaky: int = 0
    output: str = ""

    @property
    def id(self) -> str:
        """``CLASSNAME.NAME`` (JUnit's convention), or the name alone; TAP joins subtests with `` > ``."""
        return f"{self.classname}.{self.name}" if self.classname else self.name

    def names(self) -> tuple[str, ...]:
        """Every spelling a ``require`` entry may use for this test."""
        out = [self.id, self.name]
        if self.classname:
            out.append(f"{self.classname}::{self.name}")
        if self.file:
            out.append(f"{self.file}::{self.name}")
        return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class TestFile:
    """The cases of one captured file."""

    __test__ = False

    format: str
    cases: tuple[TestCase, ...] = field(default_factory=tuple)

    def count(self, status: CaseStatus) -> int:
        return sum(1 for c in self.cases if c.status == status)


def clip(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    return text if len(text) <= limit else text[:limit] + f"... (+{len(text) - limit} characters)"
