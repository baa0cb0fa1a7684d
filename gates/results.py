"""The ``[[tests]]`` rule: the test results the recorder captured, read case by case.

The files are the stream's own artifacts (``artifact`` and ``artifact.chunk``
events), never a file read again from disk and never a receipt: a receipt that
says the tests passed proves nothing here. Counts come from the test cases
(``gates.junit``, ``gates.tap``), never from a suite's totals attributes. A file
that was not captured whole, or is not valid JUnit/TAP, makes the check
``inconclusive`` with the reason named; failures, errors or skips beyond the
rule's limits, or a required test that did not pass, make it ``fail``. The
check cites every event of the files it read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gates.evidence import Artifact, Evidence
from gates.language import TestsRule
from gates.testcases import MAX_BYTES, TestCase, TestFile, TestFileError
from gates.typing import Findings, Outcome
from gates.verdict import Verdict
from gates.wording import count

__all__ = ["FIRST_IDS", "FileResult", "captured_files", "evaluate_tests", "file_bytes", "parse_test_file", "read_file"]

#: How many failing test ids a reason names.
FIRST_IDS = 5


@dataclass(frozen=True)
class FileResult:
    """One captured file as read: its cases, or why it could not be read."""

    artifact: Artifact
    parsed: TestFile | None
    problem: str | None = None  # "not captured whole: ..." or "junit-entity: ..."

    @property
    def path(self) -> str:
        return self.artifact.path


def parse_test_file(data: bytes, fmt: str) -> TestFile:
    """The cases of ``data`` read as ``fmt`` (``junit`` or ``tap``); ``TestFileError`` when it is not that."""
    if len(data) > MAX_BYTES:
        raise TestFileError(f"{fmt}-size", f"{len(data)} bytes, more than the {MAX_BYTES} read")
    if fmt == "junit":
        from gates.junit import parse_junit

        return parse_junit(data)
    if fmt == "tap":
        from gates.tap import parse_tap

        return parse_tap(data)
    raise ValueError(f"unknown test-results format {fmt!r}")


def read_file(ev: Evidence, art: Artifact, fmt: str) -> FileResult:
    """The captured bytes of ``art`` read as ``fmt`` (once per evidence: the reports read them again)."""
    key = ("tests", art.event.seq, fmt)
    memo: dict[Any, Any] = ev.memo
    if key not in memo:
        memo[key] = _read(art, fmt)
    result: FileResult = memo[key]
    return result


def _read(art: Artifact, fmt: str) -> FileResult:
    kind = art.event.attrs.get("kind", "file")
    if kind != "file":
        return FileResult(art, None, f"captured as {kind!r}, not a file ({art.event.attrs.get('error', 'no bytes')})")
    if not art.inline:
        why = "it held a masked value" if art.event.attrs.get("masked") else "it was larger than the capture limit"
        return FileResult(art, None, f"its content was not captured ({why})")
    data = art.content
    if data is None:
        return FileResult(art, None, "its captured bytes are incomplete")
    actual, how = art.sha256()
    if actual is None:
        return FileResult(art, None, how)
    try:
        return FileResult(art, parse_test_file(data, fmt))
    except TestFileError as exc:
        return FileResult(art, None, str(exc))


def captured_files(rule: TestsRule, ev: Evidence) -> tuple[list[Artifact], str | None]:
    """The captures the rule reads, and why there are none when there are none."""
    arts = sorted(ev.artifacts_matching(rule.glob), key=lambda a: a.event.seq)
    if not arts:
        return [], f"no captured artifact matches {rule.glob!r} (capture it with --artifact or alpha observe artifact)"
    if rule.step is None:
        return arts, None
    steps = ev.steps_named(rule.step)
    if not steps:
        return [], f"step {rule.step!r} was never recorded, so no file can have been captured during it"
    inside = [a for a in arts if any(_during(a, s.span, s.start.seq, s.end.seq if s.end else None) for s in steps)]
    if not inside:
        return [], f"{len(arts)} capture(s) match {rule.glob!r}, none made during step {rule.step!r}"
    return inside, None


def _during(a: Artifact, span: str, start: int, end: int | None) -> bool:
    return a.event.step == span and start < a.event.seq and (end is None or a.event.seq < end)


def _glob(pattern: str) -> str:
    out = []
    for c in pattern:
        out.append(".*" if c == "*" else "." if c == "?" else re.escape(c))
    return "^(?:" + "".join(out) + r")\z"


def _matches(entry: str, case: TestCase) -> bool:
    names = case.names()
    if not any(c in entry for c in "*?"):
        return entry in names
    from gates.patterns import search

    regex = _glob(entry)
    return any(search(regex, n) for n in names)


def _counts(cases: Sequence[TestCase]) -> dict[str, int]:
    out = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for c in cases:
        out[c.status] += 1
    return out


def _describe(n: dict[str, int], total: int, flaky: int) -> str:
    text = (
        f"{count(total, 'test')}: {n['passed']} passed, {n['failed']} failed, {count(n['error'], 'error')}, "
        f"{n['skipped']} skipped"
    )
    return text + (f" ({flaky} passed only on a re-run)" if flaky else "")


def evaluate_tests(rule: TestsRule, ev: Evidence) -> Outcome:
    """The ``[[tests]]`` check over ``ev``."""
    f = Findings()
    arts, none_why = captured_files(rule, ev)
    if none_why is not None:
        f.inconclusive(none_why)
        return f.outcome("")
    cases: list[TestCase] = []
    for art in arts:
        f.use(art.seqs)
        result = read_file(ev, art, rule.format)
        if result.parsed is None:
            f.inconclusive(f"{art.path} (seq {art.event.seq}) is not read as {rule.format}: {result.problem}")
        else:
            cases.extend(result.parsed.cases)
    n = _counts(cases)
    flaky = sum(1 for c in cases if c.flaky and c.status == "passed")
    summary = _describe(n, len(cases), flaky)
    files = ", ".join(a.path for a in arts)
    where = f"{files}: " if len(arts) == 1 else f"{len(arts)} files ({files}): "
    failing = [c.id for c in cases if c.status in ("failed", "error")]
    first = ""
    if failing:
        first = "; failing: " + ", ".join(failing[:FIRST_IDS])
        first += f" (and {len(failing) - FIRST_IDS} more)" if len(failing) > FIRST_IDS else ""
    if n["failed"] > rule.failures or n["error"] > rule.errors:
        allowed = f"at most {count(rule.failures, 'failure')} and {count(rule.errors, 'error')} allowed"
        f.fail(f"{where}{summary}, {allowed}{first}")
    if rule.max_skipped is not None and n["skipped"] > rule.max_skipped:
        f.fail(f"{where}{summary}, at most {rule.max_skipped} skipped allowed")
    for entry in rule.require:
        found = [c for c in cases if _matches(entry, c)]
        if not found:
            f.inconclusive(f"required test {entry!r} is not among the {count(len(cases), 'test')} captured")
        bad = [c for c in found if c.status != "passed"]
        if bad:
            f.fail(f"required test {entry!r}: {bad[0].id} {bad[0].status}")
    if len(cases) < rule.min_tests and not f.fails:
        f.inconclusive(f"{where}{summary}; at least {rule.min_tests} required")
    return f.outcome(f"{where}{summary}{first}")


def file_bytes(ev: Evidence, v: Verdict) -> dict[int, tuple[str, bytes | None]]:
    """The captured bytes of every file the verdict's ``[[tests]]`` checks read, by ``artifact`` seq."""
    wanted: set[int] = set()
    entries = v.extra.get("test_files")
    for entry in entries if isinstance(entries, list) else []:
        seqs = entry.get("artifacts") if isinstance(entry, dict) else None
        wanted.update(s for s in seqs or [] if isinstance(s, int))
    return {a.event.seq: (a.path, a.content) for a in ev.artifacts if a.event.seq in wanted}
