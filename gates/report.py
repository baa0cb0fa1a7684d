"""How a verdict is shown: a table for people, JSON, JUnit XML, GitHub annotations."""

from __future__ import annotations

import json
import textwrap
from xml.etree import ElementTree as ET

from gates.verdict import Verdict

__all__ = ["github_annotations", "junit_xml", "table", "to_json"]

_MARK = {"pass": "pass", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}


def table(v: Verdict, *, width: int = 110, stream: str | None = None) -> str:
    """A short table a person can read at a glance: one line per check."""
    head = f"gate {v.gate}: {v.verdict.upper()} (scope {v.scope})"
    lines = [head]
    if stream:
        lines.append(f"stream {stream}")
    name_w = min(max((len(c.name) for c in v.checks), default=4), 34)
    for c in v.checks:
        mark = _MARK[c.status]
        prefix = f"  {mark:<12} {c.name:<{name_w}}  "
        reason = c.reason if c.status != "pass" else _short(c.reason, max(width - len(prefix), 30))
        wrapped = textwrap.wrap(reason, max(width - len(prefix), 30)) or [""]
        lines.append(prefix + wrapped[0])
        lines.extend(" " * len(prefix) + w for w in wrapped[1:])
    for note in v.extra.get("not_run", []) or []:
        lines.append(f"  not run: {note}")
    lines.append(v.summary or head)
    return "\n".join(lines) + "\n"


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def to_json(v: Verdict) -> str:
    """The sealed verdict as one JSON document."""
    return json.dumps(v.to_attrs(), indent=2, sort_keys=True) + "\n"


def junit_xml(v: Verdict, *, stream: str | None = None) -> str:
    """JUnit XML: one testsuite for the gate, one testcase per check.

    ``fail`` is a ``<failure>``; ``inconclusive`` an ``<error>`` (not a skip:
    an inconclusive gate is not a pass and must not render as one).
    """
    fails = sum(1 for c in v.checks if c.status == "fail")
    errors = sum(1 for c in v.checks if c.status == "inconclusive")
    root = ET.Element(
        "testsuites", name="alpha-observe", tests=str(len(v.checks)), failures=str(fails), errors=str(errors)
    )
    suite = ET.SubElement(
        root, "testsuite", name=v.gate, tests=str(len(v.checks)), failures=str(fails), errors=str(errors), skipped="0"
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (("verdict", v.verdict), ("scope", v.scope), ("stream", stream or "")):
        ET.SubElement(props, "property", name=key, value=value)
    for c in v.checks:
        case = ET.SubElement(suite, "testcase", classname=v.gate, name=c.name)
        evidence = "evidence seqs: " + ", ".join(map(str, c.evidence)) if c.evidence else "no evidence"
        if c.status == "fail":
            el = ET.SubElement(case, "failure", message=c.reason, type="fail")
            el.text = f"{c.reason}\n{evidence}"
        elif c.status == "inconclusive":
            el = ET.SubElement(case, "error", message=c.reason, type="inconclusive")
            el.text = f"{c.reason}\n{evidence}"
        else:
            ET.SubElement(case, "system-out").text = f"{c.reason}\n{evidence}"
    out = ET.SubElement(suite, "system-out")
    out.text = v.summary
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github_annotations(v: Verdict) -> list[str]:
    """``::error`` workflow commands, one per check that did not pass."""
    out = []
    for c in v.failing():
        title = _escape_property(f"gate {v.gate}: {c.name} {c.status}")
        out.append(f"::error title={title}::{_escape_data(c.reason)}")
    return out
