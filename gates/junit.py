"""Reading JUnit XML safely: the dialects every runner writes, and nothing a hostile file could make it do.

The file is parsed by ``defusedxml`` as a stream of start/end events: any
document type declaration is refused as it opens (``junit-dtd``; one naming a
DTD elsewhere, on the network, ``junit-external``), so no entity (the billion
laughs, an external entity naming ``/etc/passwd``) is ever declared, expanded
or fetched (``junit-entity`` should one get past), nesting is bounded (``MAX_DEPTH``) as the elements open,
and each test case is dropped once read, so memory follows the cases kept, not
the tree. Each refusal is a ``TestFileError`` whose ``kind`` names it:
``junit-entity``, ``junit-external``, ``junit-dtd``, ``junit-depth``,
``junit-size``, ``junit-syntax``, ``junit-schema``.

Dialects read (docs/GATES.md, "Test results"): pytest (``<skipped>`` for skips
and xfails, ``<error>`` for setup errors, ``file``/``line`` in xunit1),
Maven Surefire (``<flakyFailure>``/``<flakyError>`` for a test that passed on a
re-run, ``<rerunFailure>``/``<rerunError>``), gotestsum, jest-junit,
cargo-nextest, and the Jenkins schema's nested ``<testsuite>``s. Where a case
names no ``file``/``line``, the last ``path:line:`` of its failure body gives them.
"""

from __future__ import annotations

import io
import re
from typing import Any

from gates.testcases import MAX_CASES, MAX_DEPTH, CaseStatus, TestCase, TestFile, TestFileError, clip

__all__ = ["parse_junit"]

_ROOTS = ("testsuites", "testsuite")
_PROBLEMS = {"failure": "failed", "error": "error"}
_RERUNS = {"rerunFailure": "failed", "rerunError": "error"}
_FLAKY = ("flakyFailure", "flakyError")
_WHERE = re.compile(r"^\s*([^\s:]+\.[A-Za-z0-9]+):(\d+):", re.M)


def _tag(el: Any) -> str:
    tag = el.tag if isinstance(el.tag, str) else ""
    return tag.rsplit("}", 1)[-1]


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    try:
        return float(text.replace(",", "")) if text else None
    except ValueError:
        return None


def _text(el: Any) -> str:
    return "".join(el.itertext())


def _case(el: Any, suite: str, zero_based_lines: bool) -> TestCase:
    status: CaseStatus = "passed"
    message = detail = output = ""
    flaky = 0
    rerun: CaseStatus | None = None
    skipped = None
    for child in el:
        tag = _tag(child)
        if tag in _PROBLEMS:
            found: CaseStatus = "failed" if tag == "failure" else "error"
            if status == "passed" or (status == "error" and found == "failed"):
                status = found
                message = child.get("message") or ""
                detail = _text(child)
        elif tag in _RERUNS and rerun is None:
            rerun = "failed" if tag == "rerunFailure" else "error"
            message = message or child.get("message") or ""
            detail = detail or _text(child)
        elif tag in _FLAKY:
            flaky += 1
        elif tag == "skipped" and skipped is None:
            skipped = child
        elif tag in ("system-out", "system-err"):
            output += _text(child)
    if status == "passed" and rerun is not None:
        status = rerun  # a re-run that failed with no run that passed: the test did not pass
    elif status == "passed" and skipped is not None:
        status = "skipped"
        message = skipped.get("message") or _text(skipped)
    file, line = el.get("file"), _int(el.get("line"))
    if line is not None and zero_based_lines:
        line += 1
    if (file is None or line is None) and detail:
        spots = _WHERE.findall(detail)
        if spots:
            file, line = spots[-1][0], int(spots[-1][1])
    return TestCase(
        name=el.get("name") or "",
        classname=el.get("classname") or "",
        suite=suite,
        status=status,
        message=clip(message, 1024),
        detail=clip(detail),
        file=file,
        line=line,
        time=_float(el.get("time")),
        flaky=flaky,
        output=clip(output),
    )


def parse_junit(data: bytes) -> TestFile:
    """The test cases of a JUnit XML document (``TestFileError`` when it is not one, or is hostile)."""
    from xml.etree.ElementTree import ParseError

    import defusedxml  # type: ignore[import-untyped]
    from defusedxml.ElementTree import iterparse  # type: ignore[import-untyped]

    cases: list[TestCase] = []
    suites: list[str] = []
    depth = 0
    root_seen = False
    try:
        for event, el in iterparse(io.BytesIO(data), events=("start", "end"), forbid_dtd=True):
            tag = _tag(el)
            if event == "start":
                depth += 1
                if depth > MAX_DEPTH:
                    raise TestFileError("junit-depth", f"elements nested deeper than {MAX_DEPTH}")
                if not root_seen:
                    root_seen = True
                    if tag not in _ROOTS:
                        raise TestFileError(
                            "junit-schema", f"the root element is <{tag}>, not <testsuites> or <testsuite>"
                        )
                if tag == "testsuite":
                    suites.append(el.get("name") or "")
                continue
            depth -= 1
            if tag == "testsuite" and suites:
                suites.pop()
            elif tag == "testcase":
                suite = suites[-1] if suites else ""
                cases.append(_case(el, suite, zero_based_lines=suite == "pytest"))
                if len(cases) > MAX_CASES:
                    raise TestFileError("junit-size", f"more than {MAX_CASES} test cases")
                el.clear()
    except defusedxml.EntitiesForbidden as exc:
        raise TestFileError(
            "junit-entity", f"an entity declaration ({exc.name!r}) is refused, never expanded"
        ) from None
    except defusedxml.ExternalReferenceForbidden as exc:
        raise TestFileError(
            "junit-external", f"an external reference ({exc.sysid!r}) is refused, never fetched"
        ) from None
    except defusedxml.DTDForbidden as exc:
        if exc.sysid or exc.pubid:
            raise TestFileError(
                "junit-external", f"a DTD at {exc.sysid or exc.pubid!r} is refused, never fetched"
            ) from None
        raise TestFileError(
            "junit-dtd", "a document type declaration (entities, the billion laughs) is refused"
        ) from None
    except defusedxml.DefusedXmlException as exc:
        raise TestFileError("junit-dtd", f"refused: {exc}") from None
    except ParseError as exc:
        raise TestFileError("junit-syntax", f"not well-formed XML: {exc}") from None
    except (ValueError, LookupError, RecursionError, MemoryError) as exc:
        raise TestFileError("junit-syntax", f"not readable as XML: {type(exc).__name__}: {exc}") from None
    if not root_seen:
        raise TestFileError("junit-syntax", "no XML element")
    return TestFile("junit", tuple(cases))
