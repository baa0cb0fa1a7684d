"""How a verdict is shown: a table for people, JSON, JUnit XML, markdown.

Every text here can quote what the recorded command chose (a step name, a path,
its stderr): each format escapes it its own way, so a quoted value can never
become markup, a workflow command or invalid XML. GitHub's workflow commands
(annotations) are written by ``observe.ci.systems.github``, with the CI's other syntax.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from xml.etree import ElementTree as ET

from aos import kinds
from aos.attrs import json_int
from aos.event import Event
from aos.text import display
from gates.verdict import Check, Verdict
from gates.wording import count

__all__ = [
    "SIMULATED",
    "TAIL_BYTES",
    "Facts",
    "FactsGatherer",
    "SpanFacts",
    "facts_from_events",
    "first_cause",
    "junit_element",
    "junit_text",
    "junit_xml",
    "markdown",
    "table",
    "to_json",
    "use_colour",
    "xml_text",
]

_MARK = {"pass": "pass", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}
_SGR = {"pass": "32", "fail": "1;31", "inconclusive": "1;33"}  # green, bold red, bold yellow

#: How much of a step's stderr a failing check's JUnit body quotes (its last bytes, then lines).
TAIL_BYTES = 4096
TAIL_LINES = 40
#: The largest test-results capture a report reads back (as ``[[tests]]`` reads at most).
MAX_FILE = 64 << 20
#: How many simulated GPUs a report names.
KEEP_GPUS = 16
#: What the simulated observer is, wherever a view names its devices.
SIMULATED = "simulated: a test double, not hardware"


def use_colour(isatty: bool, env: Mapping[str, str]) -> bool:
    """Colour on a terminal, unless ``NO_COLOR`` (any value but empty) or ``TERM=dumb``;
    ``FORCE_COLOR`` (any value but empty or ``0``) forces it anywhere. ``NO_COLOR`` wins."""
    if env.get("NO_COLOR"):
        return False
    force = env.get("FORCE_COLOR")
    if force and force.strip().lower() not in ("0", "false"):
        return True
    return isatty and env.get("TERM") != "dumb"


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _line(text: str) -> str:
    """Text for one line of a terminal or log: line breaks as spaces, other control characters
    (a quoted terminal escape) as ``\\xNN``, so quoted text can neither break the table nor drive the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", _LINE_BREAK.sub(" ", text))


def _paint(text: str, status: str, colour: bool) -> str:
    return f"\x1b[{_SGR[status]}m{text}\x1b[0m" if colour else text


def table(
    v: Verdict, *, width: int | None = None, stream: str | None = None, colour: bool = False, facts: Facts | None = None
) -> str:
    """A short table a person can read at a glance: one line per check.

    ``width`` (a terminal's) wraps long reasons; None writes each reason whole
    on its line (for a log or a pipe: nothing is cut). ``facts``, when given, name
    the simulated GPUs the stream holds (``observed on ... (simulated: ...)``).
    """
    gate, scope = _line(v.gate), _line(v.scope)
    lines = [f"gate {gate}: {_paint(v.verdict.upper(), v.verdict, colour)} (scope {scope})"]
    if stream:
        lines.append(f"stream {_line(stream)}")
    if facts is not None and facts.simulated:
        lines.append(f"observed on {_line(', '.join(facts.simulated))} ({SIMULATED})")
    cause = first_cause(v)
    if cause is not None:
        first, later = cause
        refused = _refusal_of(first, facts)
        said = f" (refused: {_line(refused)})" if refused else ""
        mark = _paint(_MARK[first.status], first.status, colour)
        lines.append(f"first: {_line(first.name)}: {mark}: {_line(first.reason)}{said}")
        if later:
            lines.append(f"  {count(len(later), 'later check')} that did not pass {_depend(len(later))} on it")
    names = [_line(c.name) for c in v.checks]
    name_w = min(max((len(n) for n in names), default=4), 34)
    for c, name in zip(v.checks, names, strict=True):
        prefix = f"  {_MARK[c.status]:<12} {name:<{name_w}}  "
        shown = f"  {_paint(f'{_MARK[c.status]:<12}', c.status, colour)} {name:<{name_w}}  "
        reason = _line(c.reason)
        if width is None:
            lines.append(shown + reason)
            continue
        wrapped = textwrap.wrap(reason, max(width - len(prefix), 30)) or [""]
        lines.append(shown + wrapped[0])
        lines.extend(" " * len(prefix) + w for w in wrapped[1:])
    for note in _not_run(v):
        lines.append(f"  not run: {_line(note)}")
    lines.append(_line(v.summary) if v.summary else f"gate {gate}: {v.verdict.upper()} (scope {scope})")
    return "\n".join(lines) + "\n"


_REFUSED = re.compile(rb"^refused: ([A-Za-z0-9._-]{1,64}):", re.M)


def _refusal_of(check: Check, facts: Facts | None) -> str | None:
    """The name of the last ``refused: NAME:`` line the check's cited steps wrote to stderr (what the lane
    refused), None when they wrote none (or no facts)."""
    if facts is None:
        return None
    for span in reversed(facts.spans_of(check)):
        found = _REFUSED.findall(bytes(span.stderr))
        if found:
            return str(found[-1].decode("ascii"))
    return None


def _depend(n: int) -> str:
    return "depends" if n == 1 else "depend"


def _first_seq(c: Check) -> float:
    """Where a check stands in the order the run went: its first cited event; one citing no event
    found nothing the run recorded, so it stands after every event."""
    return min(c.evidence) if c.evidence else float("inf")


def first_cause(v: Verdict) -> tuple[Check, list[Check]] | None:
    """The first check that did not pass in the order the run went, and the checks that depend on it.

    Order: a check's first cited event (the lowest seq it cites); checks citing no event come after
    every event, in the gate's order. A later check *depends* on the first when it did not pass either
    and stands at or after it (its first cited event is at or after the first's, or it cites none):
    what a step that failed or never ran leaves behind. None when every check passed.
    """
    bad = [(i, c) for i, c in enumerate(v.checks) if c.status != "pass"]
    if not bad:
        return None
    i0, first = min(bad, key=lambda ic: (_first_seq(ic[1]), ic[0]))
    at = _first_seq(first)
    later = [c for i, c in bad if i != i0 and _first_seq(c) >= at]
    return first, later


def _not_run(v: Verdict) -> list[str]:
    notes = v.extra.get("not_run")
    return [str(n) for n in notes] if isinstance(notes, list) else []


def to_json(v: Verdict, *, stream: str | None = None, stream_id: str | None = None) -> str:
    """The sealed verdict as one JSON document, naming the stream's path and id."""
    doc = v.to_attrs()
    doc["stream"] = stream
    doc["stream_id"] = stream_id
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# -- facts from the stream, for reports --------------------------------------------------


@dataclass
class SpanFacts:
    """One step (span) as a report needs it."""

    name: str
    parent: str | None
    duration_ns: int | None = None
    exit_code: int | None = None
    stderr: bytearray = field(default_factory=bytearray)
    stdout: bytearray = field(default_factory=bytearray)


@dataclass
class Facts:
    """What reports quote from a stream besides its verdict: times, host, steps, output tails,
    and the bytes of the test-results files its ``[[tests]]`` checks read (``files``, by the
    seq of their ``artifact`` event: path and bytes, None when not captured whole)."""

    stream_id: str | None = None
    started_ns: int | None = None
    host: str | None = None
    command_ns: int | None = None
    stderr: bytearray = field(default_factory=bytearray)
    stdout: bytearray = field(default_factory=bytearray)
    spans: dict[str, SpanFacts] = field(default_factory=dict)
    files: dict[int, tuple[str, bytes | None]] = field(default_factory=dict)
    cited: dict[int, tuple[str, str | None]] = field(default_factory=dict)  # seq -> (kind, span)
    #: The GPU UUIDs a simulated observer (the test double) reported, in the order first seen (at most ``KEEP_GPUS``).
    simulated: list[str] = field(default_factory=list)

    def spans_of(self, check: Check) -> list[SpanFacts]:
        """The steps whose events ``check`` cites, outermost first, each once."""
        seen: dict[str, SpanFacts] = {}
        for seq in check.evidence:
            _, span = self.cited.get(seq, ("", None))
            if span is not None and span in self.spans:
                seen.setdefault(span, self.spans[span])
        return list(seen.values())

    def duration_ns(self, check: Check) -> int | None:
        """How long what ``check`` judged ran: its longest cited step, else the command when it cites its exit."""
        durations = [s.duration_ns for s in self.spans_of(check) if s.duration_ns is not None]
        if durations:
            return max(durations)
        if any(self.cited.get(seq, ("", None))[0] == kinds.PROCESS_EXIT for seq in check.evidence):
            return self.command_ns
        return None


def _keep_tail(buf: bytearray, data: bytes) -> None:
    buf += data
    if len(buf) > 2 * TAIL_BYTES:
        del buf[: len(buf) - TAIL_BYTES]


def facts_from_events(events: Iterable[Event], cited: Iterable[int] = (), files: Iterable[int] = ()) -> Facts:
    """Gather ``Facts`` in one pass (output tails bounded); ``cited``: the seqs whose kind and step to keep;
    ``files``: the seqs of the ``artifact`` events whose captured bytes to keep (bounded, ``MAX_FILE``)."""
    gather = FactsGatherer(cited, files)
    for ev in events:
        gather.add(ev)
    return gather.facts


class FactsGatherer:
    """``facts_from_events`` one event at a time (``add`` each, then read ``facts``): for a caller
    that reads the events once for something else too. Holds bounded tails, never the output."""

    def __init__(self, cited: Iterable[int] = (), files: Iterable[int] = ()) -> None:
        self.want = set(cited)
        self.want_files = set(files)
        self._open: dict[str, tuple[int, int, bytearray]] = {}  # path -> (artifact seq, size, bytes so far)
        self.facts = Facts()

    def add(self, ev: Event) -> None:
        """Take one event, in stream order."""
        f, want = self.facts, self.want
        if ev.seq in want:
            f.cited[ev.seq] = (ev.kind, ev.step)
        kind = ev.kind
        if kind == kinds.STDERR or kind == kinds.STDOUT:
            data = ev.data or b""
            _keep_tail(f.stderr if kind == kinds.STDERR else f.stdout, data)
            span = ev.step
            hops = 0
            while span is not None and span in f.spans and hops < 64:  # a step's tail holds its nested steps'
                _keep_tail(f.spans[span].stderr if kind == kinds.STDERR else f.spans[span].stdout, data)
                span = f.spans[span].parent
                hops += 1
            return
        if (kind == kinds.ARTIFACT or kind == kinds.ARTIFACT_CHUNK) and (self.want_files or self._open):
            self._file(ev)
            return
        if kind not in (kinds.STREAM_OPEN, kinds.STEP_START, kinds.STEP_END, kinds.PROCESS_EXIT, kinds.DEVICE_OBSERVED):
            return
        try:
            a = ev.attrs
        except Exception:  # noqa: BLE001 - a report quotes what it can; verify names the damage
            return
        if kind == kinds.STREAM_OPEN:
            f.stream_id = str(a.get("stream_id")) if a.get("stream_id") is not None else None
            f.started_ns = ev.wall_ns
            f.host = display(a.get("host")) if a.get("host") is not None else None
        elif kind == kinds.STEP_START and ev.step is not None:
            parent = a.get("parent")
            f.spans[ev.step] = SpanFacts(display(a.get("name")), parent if isinstance(parent, str) else None)
        elif kind == kinds.STEP_END and ev.step in f.spans:
            f.spans[ev.step].duration_ns = json_int(a.get("duration_ns"))
            f.spans[ev.step].exit_code = json_int(a.get("exit_code"))
        elif kind == kinds.PROCESS_EXIT:
            f.command_ns = json_int(a.get("duration_ns"))
        elif kind == kinds.DEVICE_OBSERVED and (
            a.get("observer") == "simulated" or a.get("simulated_from") is not None
        ):
            gpus = a.get("gpus")
            for g in gpus if isinstance(gpus, list) else []:
                uuid = g.get("uuid") if isinstance(g, dict) else None
                if isinstance(uuid, str) and uuid not in f.simulated and len(f.simulated) < KEEP_GPUS:
                    f.simulated.append(display(uuid))

    def _file(self, ev: Event) -> None:
        """Keep the bytes of a wanted capture: its ``artifact`` event, then its chunks in order."""
        try:
            a = ev.attrs
        except Exception:  # noqa: BLE001 - a report quotes what it can
            return
        path = display(a.get("path"))
        if ev.kind == kinds.ARTIFACT:
            self._open.pop(path, None)  # a later capture of the path: an unfinished one stays None
            if ev.seq in self.want_files:
                self.facts.files[ev.seq] = (path, None)
                size = json_int(a.get("size"))
                if a.get("kind", "file") == "file" and a.get("content") == "inline" and size is not None:
                    if size == 0:
                        self.facts.files[ev.seq] = (path, b"")
                    elif size <= MAX_FILE:
                        self._open[path] = (ev.seq, size, bytearray())
            return
        held = self._open.get(path)
        if held is None:
            return
        seq, size, buf = held
        data = ev.data or b""
        if json_int(a.get("offset")) != len(buf) or len(buf) + len(data) > size:
            del self._open[path]  # not the capture's bytes in order: left as not captured whole
            return
        buf += data
        if len(buf) == size:
            self.facts.files[seq] = (path, bytes(buf))
            del self._open[path]


def _tail_text(data: bytes | bytearray) -> str:
    text = bytes(data[-TAIL_BYTES:]).decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-TAIL_LINES:])


# -- JUnit XML ---------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """Text that XML 1.0 can hold: terminal escapes dropped, other forbidden characters as ``\\xNN``."""
    return _XML_INVALID.sub(lambda m: f"\\x{ord(m.group()):02x}", _ANSI.sub("", text))


_xml = xml_text


def _secs(ns: int | None) -> str:
    return f"{(ns or 0) / 1e9:.3f}"


def _evidence(c: Check) -> str:
    return "evidence seqs: " + ", ".join(map(str, c.evidence)) if c.evidence else "no evidence"


def _failure_body(c: Check, facts: Facts | None) -> str:
    """The reason, the evidence, and the tail of the cited steps' stderr: their stdout where stderr is
    empty (pytest and many runners print their failures on stdout)."""
    parts = [c.reason, _evidence(c)]
    if facts is not None:
        spans = facts.spans_of(c)
        if spans:
            for s in spans:
                parts.append(_output_tail(f"step {s.name}", s.stderr, s.stdout))
        elif facts.stderr or facts.stdout:
            parts.append(_output_tail("the command", facts.stderr, facts.stdout))
    return "\n".join(parts)


def _output_tail(who: str, stderr: bytes | bytearray, stdout: bytes | bytearray) -> str:
    tail = _tail_text(stderr)
    if tail:
        return f"--- stderr of {who} (last lines) ---\n{tail}"
    out = _tail_text(stdout)
    if out:
        return f"--- stdout of {who} (last lines; its stderr is empty) ---\n{out}"
    return f"--- stderr of {who} (last lines): empty ---"


def _timestamp(ns: int | None) -> str | None:
    """ISO 8601 in UTC without a zone, as Ant's and Jenkins's JUnit schemas write it."""
    if ns is None:
        return None
    try:
        return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return None


def junit_xml(v: Verdict, *, stream: str | None = None, facts: Facts | None = None) -> str:
    """JUnit XML (Jenkins/Surefire schema): one testsuite for the gate, one testcase per check
    (``junit_element``, written by ``junit_text``)."""
    return junit_text(junit_element(v, stream=stream, facts=facts))


def junit_text(root: ET.Element) -> str:
    """A JUnit document as ASCII text: every other character a character reference (``&#NNNN;``),
    since some JUnit viewers (xunit-viewer) break on any other byte."""
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode").encode("ascii", "xmlcharrefreplace").decode("ascii")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + text + "\n"


def junit_element(v: Verdict, *, stream: str | None = None, facts: Facts | None = None) -> ET.Element:
    """The ``<testsuites>`` of ``junit_xml``: one testsuite for the gate, one testcase per check.

    ``fail`` is a ``<failure>``, ``inconclusive`` an ``<error>`` (not a skip: an
    inconclusive gate is not a pass and must not render as one); their body holds
    the reason, the evidence seqs and the tail of the cited step's stderr (the
    command's, when the check cites no step; stdout where stderr is empty). Testcases carry ``time`` (the cited
    step's duration), the suite ``timestamp`` (the recording's start, UTC) and
    ``hostname`` (where it was recorded).
    """
    fails = sum(1 for c in v.checks if c.status == "fail")
    errors = sum(1 for c in v.checks if c.status == "inconclusive")
    total = _secs(facts.command_ns if facts else None)
    root = ET.Element(
        "testsuites",
        name="alpha-observe",
        tests=str(len(v.checks)),
        failures=str(fails),
        errors=str(errors),
        time=total,
    )
    suite_attrs = {
        "name": _xml(v.gate),
        "tests": str(len(v.checks)),
        "failures": str(fails),
        "errors": str(errors),
        "skipped": "0",
        "time": total,
    }
    stamp = _timestamp(facts.started_ns if facts else None)
    if stamp is not None:
        suite_attrs["timestamp"] = stamp
    suite_attrs["hostname"] = _xml((facts.host if facts else None) or "unknown")
    if facts is not None and facts.stream_id:
        suite_attrs["id"] = _xml(facts.stream_id)
    suite = ET.SubElement(root, "testsuite", suite_attrs)
    props = ET.SubElement(suite, "properties")
    stream_id = (facts.stream_id if facts else None) or ""
    for key, value in (("verdict", v.verdict), ("scope", v.scope), ("stream", stream or ""), ("stream_id", stream_id)):
        ET.SubElement(props, "property", name=key, value=_xml(value))
    for c in v.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=_xml(v.gate),
            name=_xml(c.name),
            time=_secs(facts.duration_ns(c) if facts else 0),
        )
        if c.status == "fail":
            el = ET.SubElement(case, "failure", message=_xml(c.reason), type="fail")
            el.text = _xml(_failure_body(c, facts))
        elif c.status == "inconclusive":
            el = ET.SubElement(case, "error", message=_xml(c.reason), type="inconclusive")
            el.text = _xml(_failure_body(c, facts))
        else:
            ET.SubElement(case, "system-out").text = _xml(f"{c.reason}\n{_evidence(c)}")
    out = ET.SubElement(suite, "system-out")
    out.text = _xml("\n".join([v.summary, *(f"not run: {n}" for n in _not_run(v))]))
    return root


# -- markdown (GitHub job summary, Buildkite annotation) -------------------------------------

_MD_ESCAPE = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MD_PUNCT = set("\\`*_{}[]()#+-.!|~\"'$:@=")
_ICON = {"pass": "✅", "fail": "❌", "inconclusive": "⚠️"}
#: GitHub refuses a step summary over 1 MiB per step (and shows at most 128 KiB of one): stay well under.
MARKDOWN_MAX_REASON = 2000


def md_text(text: str) -> str:
    """Text for a markdown table cell or line: no markup, no HTML, no line breaks, no links."""
    out = []
    for ch in text:
        if ch in _MD_ESCAPE:
            out.append(_MD_ESCAPE[ch])
        elif ch in _MD_PUNCT:
            out.append("\\" + ch)
        elif ch in "\r\n":
            out.append(" ")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _fenced(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}sh\n{text}\n{fence}"


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _md_cause(v: Verdict) -> list[str]:
    """The cause first (``first_cause``), as a paragraph before the table; nothing when every check passed."""
    cause = first_cause(v)
    if cause is None:
        return []
    first, later = cause
    reason = md_text(_cut(first.reason, MARKDOWN_MAX_REASON))
    depend = f" {count(len(later), 'later check')} that did not pass {_depend(len(later))} on it." if later else ""
    return [f"**First:** {md_text(first.name)}: {_ICON[first.status]} {first.status}: {reason}.{depend}", ""]


def markdown(v: Verdict, *, stream: str | None = None, stream_id: str | None = None, key_id: str | None = None) -> str:
    """The verdict as markdown: gate, verdict, scope, every check with its reason, what did
    not run, the stream and how to verify it (a job summary, an annotation); ``key_id``: the
    key that signed the seal, whose public key the commands then name (``--key``)."""
    icon = _ICON[v.verdict]
    lines = [
        f"### {icon} gate {md_text(v.gate)}: {v.verdict.upper()} (scope {md_text(v.scope)})",
        "",
        md_text(v.summary) if v.summary else "",
        "",
        *_md_cause(v),
        "| check | status | reason | evidence (event seqs) |",
        "| --- | --- | --- | --- |",
    ]
    for c in v.checks:
        seqs = ", ".join(map(str, c.evidence)) or "none"
        reason = md_text(_cut(c.reason, MARKDOWN_MAX_REASON))
        lines.append(f"| {md_text(c.name)} | {_ICON[c.status]} {c.status} | {reason} | {seqs} |")
    notes = _not_run(v)
    lines.append("")
    if notes:
        lines.append("**Not run:**")
        lines.append("")
        lines.extend(f"- {md_text(n)}" for n in notes)
    else:
        lines.append("**Not run:** nothing; every part of the gate applied.")
    lines.append("")
    if stream:
        ident = f" (id {md_text(stream_id)})" if stream_id else ""
        lines.append(f"**Stream:** {md_text(stream)}{ident}")
        lines.append("")
        quoted = shlex.quote(display(stream)) if stream else ""
        if key_id:
            lines.append(
                f"Verify it (intact, sealed, signed by key {md_text(key_id)}: `seal.pub` is that key's public key)"
                " and read its sealed verdict:"
            )
            key = " --key seal.pub"
        else:
            lines.append("Verify it (intact, sealed) and read its sealed verdict:")
            key = ""
        lines.append("")
        cmds = f"alpha observe verify {quoted}{key}\nalpha observe verdict {quoted}{key}\nalpha observe show {quoted}"
        lines.append(_fenced(_xml(cmds)))
    lines.append("")
    return "\n".join(lines)
