"""Reading TAP (the Test Anything Protocol, versions 12 to 14) into test cases.

Read as a harness (``prove``) reads it: ``ok``/``not ok`` test points, the plan
``1..N`` (first or last), ``# SKIP`` and ``# TODO`` directives (a ``not ok # TODO``
is not a failure; it counts as skipped), YAML diagnostic blocks (``---`` to
``...``; their ``message``/``error`` and ``location``/``at`` give a failure's
message, file and line), ``Bail out!`` and subtests: a test point's subtests
are the lines indented four spaces more above it (TAP 14, ``node --test``,
Test::More). The cases are the leaves; a parent that fails with no failing
subtest is a failed case itself. Like a harness, a missing plan, a plan that
does not match the test points run, or a ``Bail out!`` is an ``error`` case.
A file with no test point and no plan is not TAP (``tap-syntax``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gates.testcases import MAX_CASES, MAX_DEPTH, CaseStatus, TestCase, TestFile, TestFileError, clip

__all__ = ["parse_tap"]

_POINT = re.compile(r"^(not ok|ok)\b\s*(\d+)?\s*(?:-\s*)?(.*)$")
_DIRECTIVE = re.compile(r"(?<!\\)#\s*(skip|todo)\S*\s*(.*)$", re.I)
_PLAN = re.compile(r"^1\.\.(\d+)\s*(?:#\s*(.*))?$")
_BAIL = re.compile(r"^Bail out!\s*(.*)$")
_VERSION = re.compile(r"^TAP version (\d+)$", re.I)
_LOCATION = re.compile(r"^\s*(?:location|at):\s*['\"]?(.+?):(\d+)(?::\d+)?['\"]?\s*$", re.M)
_YAML_FILE = re.compile(r"^\s*file:\s*['\"]?(.+?)['\"]?\s*$", re.M)
_YAML_LINE = re.compile(r"^\s*line:\s*(\d+)\s*$", re.M)
_YAML_MESSAGE = re.compile(r"^\s*(?:message|error):\s*(.*)$", re.M)


@dataclass
class _Point:
    ok: bool
    description: str
    directive: str = ""
    reason: str = ""
    yaml: list[str] = field(default_factory=list)
    children: list[_Point] = field(default_factory=list)


@dataclass
class _Level:
    points: list[_Point] = field(default_factory=list)
    plan: int | None = None
    plan_skip: bool = False


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _message(yaml: str) -> str:
    m = _YAML_MESSAGE.search(yaml)
    if not m:
        return ""
    value = m.group(1).strip()
    if value in ("|", "|-", ">", ">-", "|+"):  # a block scalar: its first line
        rest = yaml[m.end() :].lstrip("\n").splitlines()
        value = rest[0].strip() if rest else ""
    return value.strip("'\"")


def _where(yaml: str) -> tuple[str | None, int | None]:
    m = _LOCATION.search(yaml)
    if m:
        return m.group(1), int(m.group(2))
    f, n = _YAML_FILE.search(yaml), _YAML_LINE.search(yaml)
    return (f.group(1) if f else None), (int(n.group(1)) if n else None)


def _leaves(points: list[_Point], path: tuple[str, ...], out: list[TestCase]) -> None:
    for p in points:
        names = (*path, p.description or "(unnamed)")
        if p.children:
            before = len(out)
            _leaves(p.children, names, out)
            failed_below = any(c.status in ("failed", "error") for c in out[before:])
            if p.ok or p.directive == "todo" or failed_below:
                continue
        out.append(_case(p, names))
        if len(out) > MAX_CASES:
            raise TestFileError("tap-size", f"more than {MAX_CASES} test points")


def _case(p: _Point, names: tuple[str, ...]) -> TestCase:
    yaml = "\n".join(p.yaml)
    status: CaseStatus
    if p.directive == "skip" or (p.directive == "todo" and not p.ok):
        status = "skipped"
    else:
        status = "passed" if p.ok else "failed"
    file, line = _where(yaml)
    message = p.reason if status == "skipped" else _message(yaml)
    return TestCase(
        name=" > ".join(names),
        status=status,
        message=clip(message, 1024),
        detail=clip(yaml) if status == "failed" else "",
        file=file,
        line=line,
    )


def _problem(name: str, message: str) -> TestCase:
    return TestCase(name=name, status="error", message=message, detail=message)


def parse_tap(data: bytes) -> TestFile:
    """The test cases of a TAP stream (``TestFileError`` when it is not TAP)."""
    text = data.decode("utf-8", "replace")
    levels: list[_Level] = [_Level()]
    yaml_at: int | None = None  # the indentation of the open YAML block's markers
    last: _Point | None = None
    bailed: str | None = None
    seen_any = False
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        indent = _indent(line)
        body = line.strip()
        if yaml_at is not None:
            if body == "..." and indent == yaml_at:
                yaml_at = None
            elif last is not None:
                last.yaml.append(line[yaml_at:] if indent >= yaml_at else body)
            continue
        if not body:
            continue
        if body == "---" and last is not None:
            yaml_at = indent
            continue
        if _VERSION.match(body) or body.startswith("#") or body.startswith("pragma "):
            continue
        bail = _BAIL.match(body)
        if bail:
            bailed = bail.group(1) or "(no reason given)"
            break
        level = indent // 4
        if level >= MAX_DEPTH:
            raise TestFileError("tap-depth", f"subtests nested deeper than {MAX_DEPTH}")
        while len(levels) <= level:
            levels.append(_Level())
        plan = _PLAN.match(body)
        if plan:
            levels[level].plan = int(plan.group(1))
            levels[level].plan_skip = bool(plan.group(2)) and plan.group(2).lower().startswith("skip")
            seen_any = True
            continue
        point = _POINT.match(body)
        if not point:
            continue  # anything else is not TAP's to judge (a harness passes it through)
        seen_any = True
        desc = point.group(3).strip()
        directive = reason = ""
        d = _DIRECTIVE.search(desc)
        if d:
            directive, reason = d.group(1).lower(), d.group(2).strip()
            desc = desc[: d.start()].strip()
        p = _Point(point.group(1) == "ok", desc, directive, reason)
        if len(levels) > level + 1:  # the lines indented under it were its subtests
            p.children = [q for deeper in levels[level + 1 : level + 2] for q in deeper.points]
            del levels[level + 1 :]
        levels[level].points.append(p)
        last = p
    if not seen_any:
        raise TestFileError("tap-syntax", "no test point and no plan: not TAP")
    cases: list[TestCase] = []
    top = levels[0]
    _leaves(top.points, (), cases)
    if bailed is not None:
        cases.append(_problem("Bail out!", f"the run bailed out: {bailed}"))
    elif top.plan is None:
        cases.append(_problem("(plan)", f"no plan: {len(top.points)} test point(s) and no 1..N line"))
    elif top.plan != len(top.points):
        cases.append(_problem("(plan)", f"the plan is 1..{top.plan} but {len(top.points)} test point(s) ran"))
    return TestFile("tap", tuple(cases))
