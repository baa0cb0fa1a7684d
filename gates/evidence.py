"""An index over a recorded stream's events: what a gate can rely on.

Everything a rule looks at is found here, with the seq of each event, so a
check can name its evidence:

- the recording's start (``stream.open``: its env and labels) and the
  command's end (``process.exit``);
- steps (``step.start``/``step.end`` pairs) with their exit codes and the
  stderr and stdout bytes recorded inside them;
- receipts: only those recorded before ``process.exit`` count; any later one
  is kept apart as evidence of a problem (something outlived the command);
- artifacts, reassembled from their ``artifact.chunk`` events, with the
  SHA-256 of the bytes actually captured, and who captured them (``origin``:
  ``recorder`` for a file the recorder captured on its own, such as the lane
  config; absent for a file the command asked for);
- what the recorder observed of the devices (``device.observed``) and its
  ``telemetry``: events only the recorder writes, never a receipt or artifact;
- the source the recording describes (``stream.open``'s ``source``) and the
  recorder's own ``rebuild`` steps with the files they rebuilt: kept apart from
  the command's steps and artifacts (``rebuild_steps``, ``rebuilt``), so no other
  rule counts or cites them. The command cannot make one: only the recorder's
  ``step.start`` carries ``origin``, and it appends them after the command ended.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from array import array
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Mapping, MutableSequence, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from aos import kinds
from aos.attrs import json_int
from aos.event import Event
from aos.text import key_bytes, os_text

__all__ = ["Artifact", "Evidence", "Receipt", "Step", "glob_match", "normalise_path"]


def _name(stored: Any) -> str:
    """A recorded name or path (byte text, FORMAT.md 3.7), decoded as ``os`` spells it ("" if absent)."""
    if type(stored) is str:
        return _str_name(stored)  # names repeat: a lane's thousands of receipts share a few
    text = os_text(stored)
    return text if text is not None else ("" if stored is None else str(stored))


def _decoded(obj: Any) -> dict[str, Any]:
    """A recorded env or labels object with its keys and byte-text values decoded."""
    if not isinstance(obj, dict):
        return {}
    out: dict[str, Any] = {}
    for k, v in obj.items():
        text = os_text(v)
        out[key_bytes(k).decode("utf-8", "surrogateescape")] = v if text is None else text
    return out


@lru_cache(maxsize=4096)
def _str_name(stored: str) -> str:
    text = os_text(stored)
    return text if text is not None else stored


def normalise_path(path: str) -> str:
    """A path as artifact events record it: ``/`` separated, no ``./``, no ``..``."""
    p = posixpath.normpath(path.replace("\\", "/"))
    return "" if p == "." else p


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> str:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "^(?:" + "".join(out) + r")\z"


def glob_match(pattern: str, path: str) -> bool:
    """Shell-style glob over ``/`` paths: ``*`` and ``?`` stay inside one
    component, ``**/`` matches any number of leading folders.

    Matched on RE2 (linear time): the glob is the gate file's, the path the
    command's, and ``*a*a*a*a*a*a*a*a*b`` on a backtracking engine takes minutes.
    """
    from gates.patterns import search

    return search(_glob_regex(pattern), path)


@dataclass
class Step:
    """One ``step.start`` and (when it finished) its ``step.end``."""

    name: str
    span: str
    start: Event
    end: Event | None = None
    stderr: bytearray = field(default_factory=bytearray)
    stdout: bytearray = field(default_factory=bytearray)
    #: The seqs of the step's output events, in stream order (8 bytes each), and each one's kind
    #: (``output_kinds``: 1 for stderr, 0 for stdout), so a check cites them after their events are gone.
    output_seqs: MutableSequence[int] = field(default_factory=lambda: array("q"))
    output_kinds: bytearray = field(default_factory=bytearray)

    @property
    def finished(self) -> bool:
        """True when the step ended and its client reported how (not ``incomplete``)."""
        return self.end is not None and not self.end.attrs.get("incomplete")

    @property
    def exit_code(self) -> int | None:
        if self.end is None:
            return None
        return json_int(self.end.attrs.get("exit_code"))

    @property
    def signal(self) -> str | None:
        if self.end is None:
            return None
        sig = self.end.attrs.get("signal")
        return None if sig is None else str(sig)

    @property
    def seqs(self) -> list[int]:
        return [self.start.seq] + ([self.end.seq] if self.end is not None else [])

    @property
    def last_seq(self) -> int:
        return self.end.seq if self.end is not None else self.start.seq

    def describe_exit(self) -> str:
        if self.end is None:
            return "never finished (no step.end)"
        if self.end.attrs.get("incomplete"):
            return f"never finished ({self.end.attrs.get('error', 'incomplete')})"
        if self.signal:
            return f"was killed by {self.signal}"
        if self.start.attrs.get("runner") == "client":
            return "is a span opened by hand (no command the recorder ran, so no exit code)"
        return f"exited {self.exit_code}"


@dataclass(frozen=True)
class Receipt:
    """One ``receipt`` event."""

    event: Event
    name: str
    status: str
    fields: dict[str, Any]

    @property
    def seq(self) -> int:
        return self.event.seq

    @property
    def span(self) -> str | None:
        return self.event.step


@dataclass
class Artifact:
    """One captured file: its ``artifact`` event and the bytes its chunks hold."""

    event: Event
    path: str
    chunks: list[Event] = field(default_factory=list)

    @property
    def recorded_sha256(self) -> str | None:
        sha = self.event.attrs.get("sha256")
        return sha.lower() if isinstance(sha, str) else None

    @property
    def origin(self) -> str | None:
        """``recorder`` when the recorder captured the file on its own; None when the command sent it."""
        origin = self.event.attrs.get("origin")
        return origin if isinstance(origin, str) else None

    def has_attrs(self, want: Mapping[str, Any]) -> bool:
        """Whether the ``artifact`` event's attrs hold every key of ``want`` with that value."""
        return all(k in self.event.attrs and self.event.attrs[k] == v for k, v in want.items())

    @property
    def inline(self) -> bool:
        return bool(self.event.attrs.get("content", "inline") == "inline")

    @property
    def size(self) -> int | None:
        size = self.event.attrs.get("size")
        return size if isinstance(size, int) else None

    @property
    def content(self) -> bytes | None:
        """The captured bytes, or None when the content was omitted or is incomplete."""
        if not self.inline:
            return None
        out = bytearray()
        for ch in sorted(self.chunks, key=lambda e: int(e.attrs.get("offset", 0))):
            if int(ch.attrs.get("offset", -1)) != len(out):
                return None
            out += ch.data or b""
        if self.size is not None and self.size != len(out):
            return None
        return bytes(out)

    @property
    def seqs(self) -> list[int]:
        return [self.event.seq] + [c.seq for c in self.chunks]

    def sha256(self) -> tuple[str | None, str]:
        """The SHA-256 the stream supports for this file, and how it was established.

        Inline content is hashed from the captured bytes (and must agree with the
        recorded digest); omitted content falls back on the recorder's digest.
        Returns ``(None, why)`` when the stream supports no digest.
        """
        data = self.content
        recorded = self.recorded_sha256
        if data is not None:
            actual = hashlib.sha256(data).hexdigest()
            if recorded is not None and recorded != actual:
                return None, f"its captured bytes hash to {actual} but the artifact event says {recorded}"
            return actual, "hashed from the captured bytes"
        if not self.inline and recorded is not None:
            return recorded, "the recorder's digest (content omitted)"
        return None, "its captured bytes are incomplete"

    def json(self) -> Any:
        """The captured bytes parsed as JSON (ValueError when they are not)."""
        data = self.content
        if data is None:
            raise ValueError(f"{self.path}: content not captured")
        return json.loads(data)


class _Building:
    """What the one pass of ``Evidence._index`` carries from event to event."""

    __slots__ = ("by_span", "open_spans", "pending_artifacts", "rebuild_spans")

    def __init__(self) -> None:
        self.open_spans: dict[str, Step] = {}
        self.by_span: dict[str, Step] = {}
        self.pending_artifacts: dict[str, Artifact] = {}
        self.rebuild_spans: dict[str, dict[str, Artifact]] = {}  # a recorder rebuild's span -> its captures, by path


class Evidence:
    """An index over the events of one stream, built in one pass over ``events`` (any iterable).

    With ``keep_output=False`` it holds what the rules read and no more, so its
    memory follows the count of events other than output, not the output's size
    nor its count: ``events`` holds no ``stdout`` or ``stderr`` event (a step keeps
    the seq and kind of each of its own, 9 bytes, for its citations: ``cite``), no
    step keeps its stdout, and only the steps named in ``stderr_of`` (those whose
    stderr a rule searches: ``stderr_contains``, a receipt's ``step_stderr``
    claim; every step when None) and the recorder's rebuild steps keep their
    stderr, whole; artifact chunks keep their bytes. A check that reads the output
    events (``output-free-of``) needs ``keep_output=True``, the default (every
    event as given, every step's stdout and stderr). ``count`` is the number of
    events read, ``first`` the first.
    """

    def __init__(
        self, events: Iterable[Event], *, keep_output: bool = True, stderr_of: Collection[str] | None = None
    ) -> None:
        self.keep_output = keep_output
        self.stderr_of = None if stderr_of is None else frozenset(stderr_of)
        self.events: list[Event] = []
        self.count = 0
        self.first: Event | None = None
        self.open: Event | None = None
        self.exit: Event | None = None
        self.steps: list[Step] = []
        self.receipts: list[Receipt] = []
        self.late_receipts: list[Receipt] = []
        self.invalid_receipts: list[Event] = []
        self.artifacts: list[Artifact] = []
        self.observations: list[Event] = []
        self.telemetry: list[Event] = []
        #: ``recorder.interrupted`` events: signals the recorder got (``during: "command"``: while the command ran).
        self.interrupts: list[Event] = []
        #: What a rule derived from the evidence and another may ask again (a captured file, parsed).
        self.memo: dict[Any, Any] = {}
        self.rebuild_steps: list[Step] = []
        self.rebuilt: list[Artifact] = []
        self._index(events)
        # Lookups by name and span, built once: a rule asks them once per receipt, and a long
        # lane has tens of thousands of receipts and steps (a linear scan each was quadratic).
        self._span_step: dict[str, Step] = {}
        self._named_steps: dict[str, list[Step]] = {}
        self._named_receipts: dict[str, list[Receipt]] = {}
        self._named_late: dict[str, list[Receipt]] = {}
        for s in self.steps:
            self._span_step.setdefault(s.span, s)
            self._named_steps.setdefault(s.name, []).append(s)
        for r in self.receipts:
            self._named_receipts.setdefault(r.name, []).append(r)
        for r in self.late_receipts:
            self._named_late.setdefault(r.name, []).append(r)

    # -- building ------------------------------------------------------------------

    def _index(self, events: Iterable[Event]) -> None:
        """One pass over ``events``: each kind's handler (``_HANDLERS``) files the event; other kinds are kept only."""
        building = _Building()
        keep = self.keep_output
        kept = self.events
        handlers = _HANDLERS
        output = kinds.OUTPUT
        count = 0
        for ev in events:
            kind = ev.kind
            if count == 0:
                self.first = ev
            count += 1
            if keep or kind not in output:
                kept.append(ev)
            handler = handlers.get(kind)
            if handler is not None:
                handler(self, ev, building)
        self.count = count

    def _on_open(self, ev: Event, _: _Building) -> None:
        if self.open is None:
            self.open = ev

    def _on_exit(self, ev: Event, _: _Building) -> None:
        if self.exit is None:
            self.exit = ev

    def _on_step_start(self, ev: Event, b: _Building) -> None:
        name = _name(ev.attrs.get("name"))
        span = ev.step or str(ev.attrs.get("span") or ev.attrs.get("id") or name)
        step = Step(name, span, ev)
        if ev.attrs.get("origin") == "recorder" and self.exit is not None and ev.step is not None:
            self.rebuild_steps.append(step)  # the recorder's own rebuild, after the command
            b.rebuild_spans[span] = {}
        else:
            self.steps.append(step)
        b.open_spans[span] = step
        b.by_span[span] = step

    def _on_step_end(self, ev: Event, b: _Building) -> None:
        name = _name(ev.attrs.get("name"))
        span = ev.step or str(ev.attrs.get("span") or ev.attrs.get("id") or name)
        step_or_none = b.open_spans.pop(span, None)
        if step_or_none is None:
            # fall back on the last unfinished step of that name
            for cand in reversed(self.steps):
                if cand.end is None and cand.name == name:
                    step_or_none = cand
                    b.open_spans.pop(cand.span, None)
                    break
        if step_or_none is not None:
            step_or_none.end = ev

    def _on_output(self, ev: Event, b: _Building) -> None:
        # Only output recorded with the step's span is the step's own: the
        # lane script's output around it proves nothing about the step.
        target = b.by_span.get(ev.step) if ev.step is not None else None
        if target is not None and ev.data:
            if ev.kind == kinds.STDERR:
                names = self.stderr_of
                if self.keep_output or names is None or target.name in names or target.span in b.rebuild_spans:
                    target.stderr += ev.data
                target.output_kinds.append(1)
            else:
                if self.keep_output:
                    target.stdout += ev.data
                target.output_kinds.append(0)
            target.output_seqs.append(ev.seq)

    def _on_receipt(self, ev: Event, _: _Building) -> None:
        status = ev.attrs.get("status", "info")
        fields = ev.attrs.get("fields", {})
        r = Receipt(
            ev,
            _name(ev.attrs.get("name")),
            status if isinstance(status, str) else str(status),
            fields if isinstance(fields, dict) else {},
        )
        (self.late_receipts if self.exit is not None else self.receipts).append(r)

    def _on_invalid_receipt(self, ev: Event, _: _Building) -> None:
        self.invalid_receipts.append(ev)

    def _on_artifact(self, ev: Event, b: _Building) -> None:
        art = Artifact(ev, normalise_path(_name(ev.attrs.get("path"))))
        if ev.step is not None and ev.step in b.rebuild_spans and ev.attrs.get("origin") == "recorder":
            self.rebuilt.append(art)
            b.rebuild_spans[ev.step][art.path] = art
        else:
            self.artifacts.append(art)
            b.pending_artifacts[art.path] = art

    def _on_chunk(self, ev: Event, b: _Building) -> None:
        path = normalise_path(_name(ev.attrs.get("path")))
        if ev.step is not None and ev.step in b.rebuild_spans:
            owner = b.rebuild_spans[ev.step].get(path)  # a rebuild's chunk belongs to that rebuild's captures only
        else:
            owner = b.pending_artifacts.get(path)
        if owner is not None:
            owner.chunks.append(ev)

    def _on_observation(self, ev: Event, _: _Building) -> None:
        self.observations.append(ev)

    def _on_telemetry(self, ev: Event, _: _Building) -> None:
        self.telemetry.append(ev)

    def _on_interrupt(self, ev: Event, _: _Building) -> None:
        self.interrupts.append(ev)

    def before(self, seq: int) -> Evidence:
        """The evidence of the events before ``seq`` alone: what was complete when the run was cut there (an
        interrupt, a setup refusal; gates.engine). Without the output's bytes kept in ``events``, each step that
        ended before ``seq`` gets its output from this index (all of it precedes its ``step.end``)."""
        prefix = Evidence(
            (e for e in self.events if e.seq < seq), keep_output=self.keep_output, stderr_of=self.stderr_of
        )
        if not self.keep_output:
            whole = {s.span: s for s in self.steps}
            for step in prefix.steps:
                full = whole.get(step.span)
                if full is not None and step.end is not None:
                    step.stderr[:] = full.stderr
                    step.stdout[:] = full.stdout
                    n = bisect_left(full.output_seqs, seq)
                    step.output_seqs[:] = full.output_seqs[:n]
                    step.output_kinds[:] = full.output_kinds[:n]
        return prefix

    def cite(self, seqs: Iterable[int]) -> dict[int, tuple[str, str | None]]:
        """The kind and step of each of ``seqs`` that the index holds (an output event cited by a step's
        ``output_seqs`` included, its event gone or not): what a verdict's citations name."""
        want = set(seqs)
        out = {e.seq: (e.kind, e.step) for e in self.events if e.seq in want}
        for step in (*self.steps, *self.rebuild_steps):
            for n, k in zip(step.output_seqs, step.output_kinds, strict=True):
                if n in want:
                    out.setdefault(n, (kinds.STDERR if k else kinds.STDOUT, step.span))
        return out

    # -- queries -------------------------------------------------------------------

    @property
    def env(self) -> dict[str, Any]:
        """The environment recorded at the start (secrets redacted, names kept)."""
        return _decoded(self.open.attrs.get("env") if self.open is not None else None)

    @property
    def labels(self) -> dict[str, Any]:
        return _decoded(self.open.attrs.get("labels") if self.open is not None else None)

    @property
    def source_recorded(self) -> bool:
        """Whether the recorder recorded the source at all (``stream.open`` has ``source``, null included)."""
        return self.open is not None and "source" in self.open.attrs

    @property
    def source(self) -> dict[str, Any] | None:
        """The recorded source (docs/FORMAT.md): None when none was recorded or no repository held the cwd."""
        value = self.open.attrs.get("source") if self.open is not None else None
        return value if isinstance(value, dict) else None

    @property
    def cwd(self) -> str | None:
        return os_text(self.open.attrs.get("cwd")) if self.open is not None else None

    def env_set(self, name: str) -> bool:
        """True when ``name`` was set, non-empty, when the recording started."""
        value = self.env.get(name)
        return value is not None and value != ""

    def steps_named(self, name: str) -> list[Step]:
        """The steps named ``name``, in stream order (a new list each call)."""
        return list(self._named_steps.get(name, ()))

    def steps_named_view(self, name: str) -> Sequence[Step]:
        """``steps_named`` without the copy: for a rule that asks once per receipt (read it, never change it)."""
        return self._named_steps.get(name, ())

    def step_of_span(self, span: str | None) -> Step | None:
        """The first step recorded with span ``span``."""
        if span is None:
            return None
        return self._span_step.get(span)

    def receipts_named(self, name: str) -> list[Receipt]:
        """The receipts named ``name`` recorded before ``process.exit``, in stream order (a new list)."""
        return list(self._named_receipts.get(name, ()))

    def late_named(self, name: str) -> list[Receipt]:
        """The receipts named ``name`` recorded after ``process.exit`` (a new list)."""
        return list(self._named_late.get(name, ()))

    def artifact(self, path: str) -> Artifact | None:
        """The last capture of ``path`` (normalised; relative to the recording's cwd)."""
        want = self.relative(path)
        found = None
        for a in self.artifacts:
            if a.path == want:
                found = a
        return found

    def artifacts_matching(self, pattern: str, attrs: Mapping[str, Any] | None = None) -> list[Artifact]:
        """The last capture of each path matching ``pattern`` (among those whose attrs hold ``attrs``).

        The attrs select first: a later capture of the same path that lacks them
        (say, a command's capture of a file the recorder captured) does not hide
        the one that has them.
        """
        latest: dict[str, Artifact] = {}
        for a in self.artifacts:
            if glob_match(pattern, a.path) and (not attrs or a.has_attrs(attrs)):
                latest[a.path] = a
        return list(latest.values())

    def relative(self, path: str) -> str:
        """``path`` as artifact events record it: normalised, relative to the recording's cwd when under it."""
        p = normalise_path(path)
        cwd = self.cwd
        if cwd and posixpath.isabs(p):
            base = normalise_path(cwd)
            if p.startswith(base.rstrip("/") + "/"):
                return p[len(base.rstrip("/")) + 1 :]
        return p

    def exit_code(self) -> int | None:
        if self.exit is None:
            return None
        return json_int(self.exit.attrs.get("exit_code"))

    def describe_exit(self) -> str:
        if self.exit is None:
            return "the command never finished (no process.exit)"
        a = self.exit.attrs
        if a.get("timed_out"):
            return "the command timed out"
        if a.get("signal"):
            return f"the command was killed by {a.get('signal')}"
        return f"the command exited {a.get('exit_code')}"


#: Each kind the index files, and its handler; other kinds are kept in ``events`` only.
_HANDLERS: dict[str, Callable[[Evidence, Event, _Building], None]] = {
    kinds.STREAM_OPEN: Evidence._on_open,
    kinds.PROCESS_EXIT: Evidence._on_exit,
    kinds.STEP_START: Evidence._on_step_start,
    kinds.STEP_END: Evidence._on_step_end,
    kinds.STDOUT: Evidence._on_output,
    kinds.STDERR: Evidence._on_output,
    kinds.RECEIPT: Evidence._on_receipt,
    kinds.RECEIPT_INVALID: Evidence._on_invalid_receipt,
    kinds.ARTIFACT: Evidence._on_artifact,
    kinds.ARTIFACT_CHUNK: Evidence._on_chunk,
    kinds.DEVICE_OBSERVED: Evidence._on_observation,
    kinds.TELEMETRY: Evidence._on_telemetry,
    kinds.RECORDER_INTERRUPTED: Evidence._on_interrupt,
}


def seqs_of(items: Iterable[Receipt | Step | Artifact | Event]) -> list[int]:
    """Every seq the given evidence rests on."""
    out: list[int] = []
    for it in items:
        if isinstance(it, Receipt):
            out.append(it.seq)
        elif isinstance(it, Step | Artifact):
            out.extend(it.seqs)
        else:
            out.append(it.seq)
    return out
