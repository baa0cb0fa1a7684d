"""What ``gate`` and ``verdict`` write for CI: the verdict's JUnit, with every captured test carried through.

``--junit FILE`` holds one testsuite for the gate (a testcase per check,
``gates.report.junit_element``) and, beside it, the testsuites of each test-results
file a ``[[tests]]`` check read (the verdict names them, ``test_files``), built
from the bytes the recorder captured, so a CI test reporter shows every test,
not one testcase standing for thousands. A suite's ``file`` is the one source
file its cases name (never the results file), and a failure's text ends
``at FILE:LINE``, so reporters place each failing test at its own file and line
(the Jenkins schema has no ``file`` or ``line`` on a testcase). The document
stays valid against that schema and is written as ASCII (``gates.report.junit_text``).

Under GitHub Actions each failing test also gets an ``::error`` naming it, with
its file and line where the results name them (at most ``MAX_ANNOTATIONS``, then
one line with the count of the rest), and the job summary lists the failing tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

if TYPE_CHECKING:
    from gates.report import Facts
    from gates.testcases import TestCase, TestFile
    from gates.verdict import Verdict

__all__ = [
    "MAX_ANNOTATIONS",
    "CapturedSuite",
    "captured_suites",
    "failing_cases",
    "junit_report",
    "named_test_files",
    "stream_facts",
    "summary_markdown",
]

#: Failing tests annotated one by one under GitHub (then one line says how many more failed).
MAX_ANNOTATIONS = 50
#: Failing tests the job summary lists.
MAX_LISTED = 50


@dataclass(frozen=True)
class CapturedSuite:
    """One captured test-results file as a report shows it."""

    check: str
    seq: int
    path: str
    format: str
    parsed: TestFile | None
    problem: str | None = None

    def failing(self) -> list[TestCase]:
        return [c for c in self.parsed.cases if c.status in ("failed", "error")] if self.parsed else []


def named_test_files(v: Verdict) -> list[tuple[str, str, int]]:
    """``(check, format, artifact seq)`` for every file the verdict's ``[[tests]]`` checks read."""
    out: list[tuple[str, str, int]] = []
    entries = v.extra.get("test_files")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        check, fmt, seqs = entry.get("check"), entry.get("format"), entry.get("artifacts")
        if isinstance(check, str) and fmt in ("junit", "tap") and isinstance(seqs, list):
            out.extend((check, str(fmt), s) for s in seqs if isinstance(s, int) and not isinstance(s, bool))
    return out


def captured_suites(v: Verdict, facts: Facts | None) -> list[CapturedSuite]:
    """The captured files the verdict names, read from ``facts.files`` (each once)."""
    from gates.results import parse_test_file
    from gates.testcases import TestFileError

    out: list[CapturedSuite] = []
    seen: set[int] = set()
    for check, fmt, seq in named_test_files(v):
        if seq in seen:
            continue
        seen.add(seq)
        path, data = facts.files.get(seq, ("", None)) if facts is not None else ("", None)
        if data is None:
            out.append(CapturedSuite(check, seq, path or f"seq {seq}", fmt, None, "not captured whole"))
            continue
        try:
            out.append(CapturedSuite(check, seq, path, fmt, parse_test_file(data, fmt)))
        except TestFileError as exc:
            out.append(CapturedSuite(check, seq, path, fmt, None, str(exc)))
    return out


def stream_facts(stream: Path, v: Verdict) -> Facts | None:
    """Facts for reports, read again from a stream already verified, with the test-results files the
    verdict names (None when it cannot be read again)."""
    from aos.refusals import Refusal
    from gates.report import facts_from_events
    from observe.readback.events import iter_stream

    cited = {s for c in v.checks for s in c.evidence}
    try:
        return facts_from_events(iter_stream(stream, []), cited, [s for _, _, s in named_test_files(v)])
    except Refusal:
        return None


def _secs(value: float | None) -> str:
    return f"{max(value or 0.0, 0.0):.3f}"


def _where(case: TestCase) -> str:
    if case.file and case.line is not None:
        return f"{case.file}:{case.line}"
    return case.file or ""


def _suites(s: CapturedSuite) -> list[ET.Element]:
    """The captured file's testsuite (a list: the report appends what it gets)."""
    from gates.report import xml_text

    if s.parsed is None:
        suite = _suite_element(s, (), None)
        case = ET.SubElement(suite, "testcase", classname=xml_text(s.path), name="(test results)", time="0.000")
        el = ET.SubElement(case, "error", message=xml_text(f"not read as {s.format}: {s.problem}"), type="inconclusive")
        el.text = xml_text(f"{s.path} (artifact seq {s.seq}) is not read as {s.format}: {s.problem}")
        return [suite]
    files = {c.file for c in s.parsed.cases if c.file}
    suite = _suite_element(s, s.parsed.cases, files.pop() if len(files) == 1 else None)
    for c in s.parsed.cases:
        _case(suite, c, s.path)
    return [suite]


def _suite_element(s: CapturedSuite, cases: Sequence[TestCase], file: str | None) -> ET.Element:
    """A testsuite for ``cases`` of ``s`` (none: the file could not be read); ``file``: the one source file
    its cases name, when they name one.

    A reporter places a case without a ``file`` of its own (the Jenkins schema has none) at its suite's
    ``file``; without one, mikepenz/action-junit-report takes the file from the case's classname and
    the line from the last ``FILE:LINE`` of the failure's text, which ends ``at FILE:LINE``. The suite's
    ``file`` is never the results file (every test would be placed there, at line 1): that one is in
    the ``artifact`` property."""
    from gates.report import xml_text

    counts = {k: sum(1 for c in cases if c.status == k) for k in ("failed", "error", "skipped")}
    unread = 1 if s.parsed is None else 0
    attrs = {
        "name": xml_text(s.path),
        "tests": str(len(cases) + unread),
        "failures": str(counts["failed"]),
        "errors": str(counts["error"] + unread),
        "skipped": str(counts["skipped"]),
        "time": _secs(sum(c.time or 0.0 for c in cases)),
    }
    if file:
        attrs["file"] = xml_text(file)
    suite = ET.Element("testsuite", attrs)
    props = ET.SubElement(suite, "properties")
    for key, value in (("check", s.check), ("format", s.format), ("artifact", s.path), ("artifact_seq", str(s.seq))):
        ET.SubElement(props, "property", name=key, value=xml_text(value))
    return suite


def _case(suite: ET.Element, c: TestCase, path: str) -> None:
    from gates.report import xml_text

    el = ET.SubElement(
        suite, "testcase", classname=xml_text(c.classname or c.suite or path), name=xml_text(c.name), time=_secs(c.time)
    )
    where = _where(c)
    if c.status in ("failed", "error"):
        tag = "failure" if c.status == "failed" else "error"
        problem = ET.SubElement(el, tag, message=xml_text(c.message), type=c.status)
        problem.text = xml_text("\n".join(p for p in (c.detail or c.message, f"at {where}" if where else "") if p))
    elif c.status == "skipped":
        ET.SubElement(el, "skipped", message=xml_text(c.message))
    if c.flaky:
        ET.SubElement(el, "flakyFailure", type="flaky", message=f"passed after {c.flaky} failed run(s)")
    if c.output:
        ET.SubElement(el, "system-out").text = xml_text(c.output)


def junit_report(v: Verdict, *, stream: str | None, facts: Facts | None) -> str:
    """The ``--junit`` document: the gate's checks, then one testsuite per captured test-results file."""
    from gates.report import junit_element, junit_text

    root = junit_element(v, stream=stream, facts=facts)
    for s in captured_suites(v, facts):
        root.extend(_suites(s))
    for key in ("tests", "failures", "errors"):
        root.set(key, str(sum(int(suite.get(key, "0")) for suite in root.iter("testsuite"))))
    return junit_text(root)


def failing_cases(suites: list[CapturedSuite]) -> Iterator[tuple[CapturedSuite, TestCase]]:
    """Each failing test case of ``suites``, with its suite."""
    for s in suites:
        for c in s.failing():
            yield s, c


def summary_markdown(
    v: Verdict, *, stream: str | None, stream_id: str | None, facts: Facts | None, key_id: str | None = None
) -> str:
    """The job summary (``gates.report.markdown``, naming the key that signed the seal), then the failing
    tests of the captured files."""
    from gates.report import markdown, md_text

    text = markdown(v, stream=stream, stream_id=stream_id, key_id=key_id)
    suites = captured_suites(v, facts)
    if not suites:
        return text
    failing = list(failing_cases(suites))
    total = sum(len(s.parsed.cases) for s in suites if s.parsed is not None)
    lines = [f"**Tests:** {total} captured in {len(suites)} file(s), {len(failing)} failing.", ""]
    for s, c in failing[:MAX_LISTED]:
        where = f" ({md_text(_where(c))})" if _where(c) else ""
        lines.append(f"- ❌ {md_text(c.id)}{where}: {md_text(c.message[:300])} \\[{md_text(s.path)}\\]")
    if len(failing) > MAX_LISTED:
        lines.append(f"- and {len(failing) - MAX_LISTED} more failing test(s)")
    for s in suites:
        if s.parsed is None:
            lines.append(f"- ⚠️ {md_text(s.path)} not read as {s.format}: {md_text(s.problem or '')}")
    return text + "\n".join(lines) + "\n\n"
