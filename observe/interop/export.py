"""Export a sealed stream to formats other tools read: OTLP/JSON traces and asciicast v2.

Both exports start from ``load_verified``: the stream file is read once, those
bytes are verified (intact and sealed, as ``verify``) and the events are parsed
from the same bytes, so what is exported is exactly what was verified, even if
the file is replaced meanwhile. A stream that does not verify is refused by name.
The bytes are held (compressed, as in the file); the events are decoded a batch
at a time as an export goes, and the output is written as it is made, so memory
stays near the file's size whatever the stream holds.

OTLP (``otlp_traces``): one trace per stream (trace id = the stream id), a root
span for the command (``process.start`` .. ``process.exit``, status from its exit),
one span per step (parent: the enclosing step, else the root), receipts,
artifacts and invalid receipts as events of the span they were sent from, and
the sealed verdict's checks as events of the root span. Span ids are derived
from the stream id and the seq of the event that opens the span. docs/CI.md
("Exporting") lists every attribute.

asciicast (``asciicast``): the recorded stdout and stderr (both as ``"o"``: a
terminal shows them on one screen) with their recorded timing, and a marker
(``"m"``) at each step's start.
"""

from __future__ import annotations

import codecs
import json
import os
import shlex
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.refusals import Refusal
from observe.util.atomic import replace_file_with

if TYPE_CHECKING:
    from aos.event import Event
    from aos.signing import Verifier
    from aos.verify import Verification

__all__ = [
    "FORMATS",
    "OutputWrite",
    "VerifiedStream",
    "asciicast",
    "asciicast_chunks",
    "load_verified",
    "otlp_traces",
    "write_output",
]

#: The formats ``alpha observe export --format`` knows.
FORMATS = ("otlp", "asciicast")


class OutputWrite(Refusal):
    """An export or attestation could not be written to its output file."""

    name = "output-write"


# -- reading: the verified bytes, once ------------------------------------------------------


@dataclass(frozen=True)
class VerifiedStream:
    """A stream read once: its bytes and what ``verify`` found in them; ``events()`` decodes those bytes."""

    path: Path
    data: bytes | bytearray = field(repr=False)  # the bytes read once (never written to)
    verification: Verification

    @property
    def stream_id(self) -> str:
        return self.verification.stream_id

    def events(self) -> Iterator[Event]:
        """The verified events in order, decoded a batch at a time (each call starts again at seq 0)."""
        from aos.reader import open_buffer

        with open_buffer(self.data, str(self.path)) as f:
            yield from f.events()


def _read_once(path: Path) -> bytearray:
    from aos.reader import open_regular
    from aos.refusals import StreamMissing

    fd = open_regular(path)  # never blocks on a FIFO or a device: stream-missing for those
    try:
        # Into one buffer of the file's size (a list of chunks joined would hold the file twice).
        data = bytearray(os.fstat(fd).st_size)
        view = memoryview(data)
        got = 0
        while got < len(data) and (n := os.readv(fd, [view[got:]])):
            got += n
        view.release()
        del data[got:]  # the file shrank meanwhile
        while more := os.read(fd, 1 << 20):  # or grew
            data += more
    except OSError as exc:
        raise StreamMissing(f"{path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    return data


def load_verified(path: str | os.PathLike[str], key: Verifier | None = None) -> VerifiedStream:
    """Read ``path`` once, verify those bytes (and the seal's signature with ``key``), parse their events.

    Raises the refusal ``verify`` would print for the same bytes.
    """
    from aos.verify import verify_stream

    p = Path(path)
    data = _read_once(p)
    v = verify_stream(p, key, data=data)
    return VerifiedStream(p, data, v)


def write_output(path: str, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or chunks made as they are written) to ``path`` (``-`` is stdout), creating
    missing folders; ``output-write`` on failure.

    A file is written beside its destination and renamed over it, so a reader never sees half of it
    (nor anything, when making the chunks raises).
    """
    import sys

    chunks = (data,) if isinstance(data, bytes) else data
    if path == "-":
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        return
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        replace_file_with(dest, chunks)
    except OSError as exc:
        raise OutputWrite(f"cannot write {dest}: {exc.strerror or exc}") from None


# -- shared helpers -------------------------------------------------------------------------


def _attrs(ev: Event) -> dict[str, Any]:
    try:
        return ev.attrs
    except Refusal:  # verified attrs are canonical objects; this is only a guard
        return {}


def _display(value: Any) -> str:
    from aos.text import display

    return display(value)


def _argv(value: Any) -> list[str]:
    return [_display(v) for v in value] if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _first(events: Iterable[Event], kind: str) -> Event | None:
    return next((e for e in events if e.kind == kind), None)


def _opening(stream: VerifiedStream) -> tuple[dict[str, Any], Event]:
    """``stream.open``'s attrs, and the event the command starts at (``process.start``, else the first)."""
    opened = _first(stream.events(), "stream.open")
    start = _first(stream.events(), "process.start") or opened or next(stream.events())
    return (_attrs(opened) if opened is not None else {}), start


# -- OTLP/JSON ------------------------------------------------------------------------------

_SPAN_DOMAIN = b"aos-otlp-span\x00"
_KIND_INTERNAL = 1
_STATUS_OK = 1
_STATUS_ERROR = 2
_INT64 = 1 << 63


def _span_id(stream_id: str, seq: int) -> str:
    """8 bytes of BLAKE3 over a domain tag, the stream id and the seq that opens the span, in hex (never zero)."""
    from blake3 import blake3

    raw = blake3(_SPAN_DOMAIN + bytes.fromhex(stream_id) + seq.to_bytes(8, "big")).digest()[:8]
    return (raw if any(raw) else b"\x00" * 7 + b"\x01").hex()


def _trace_id(stream_id: str) -> str:
    """The stream id itself (16 random bytes); an all-zero id, which OTLP forbids, is replaced by BLAKE3 of it."""
    if int(stream_id, 16):
        return stream_id
    from blake3 import blake3

    return blake3(b"aos-otlp-trace\x00" + bytes.fromhex(stream_id)).digest()[:16].hex()


def _any_value(value: Any) -> dict[str, Any] | None:
    """An OTLP ``AnyValue`` in JSON (int64 as a decimal string); None for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)} if -_INT64 <= value < _INT64 else {"stringValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        values = [v for v in (_any_value(x) for x in value) if v is not None]
        return {"arrayValue": {"values": values}}
    return {"stringValue": json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)}


def _kv(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for k, v in attrs.items():
        value = _any_value(v)
        if value is not None:
            out.append({"key": k, "value": value})
    return out


def _exit_status(exit_code: int | None, signal: Any, ended: bool, timed_out: bool = False) -> dict[str, Any]:
    if not ended:
        return {"code": _STATUS_ERROR, "message": "it never ended: no end event in the stream"}
    if timed_out:
        return {"code": _STATUS_ERROR, "message": "timed out"}
    if isinstance(signal, str) and signal:
        return {"code": _STATUS_ERROR, "message": f"killed by {signal}"}
    if exit_code == 0:
        return {"code": _STATUS_OK}
    if exit_code is None:
        return {"code": _STATUS_ERROR, "message": "no exit code recorded"}
    return {"code": _STATUS_ERROR, "message": f"exited {exit_code}"}


@dataclass
class _Span:
    span_id: str
    parent: str | None
    name: str
    start_ns: int
    seq: int
    attrs: dict[str, Any]
    end_ns: int | None = None
    end_seq: int | None = None
    status: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def event(self, ev: Event, name: str, attrs: Mapping[str, Any]) -> None:
        self.events.append(
            {"timeUnixNano": str(ev.wall_ns), "name": name, "attributes": _kv({**attrs, "aos.seq": ev.seq})}
        )

    def to_json(self, trace_id: str, end_default: int) -> dict[str, Any]:
        end = self.end_ns if self.end_ns is not None else end_default
        attrs = {**self.attrs, "aos.seq.start": self.seq, "aos.seq.end": self.end_seq}
        span: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": _KIND_INTERNAL,
            "startTimeUnixNano": str(self.start_ns),
            "endTimeUnixNano": str(max(end, self.start_ns)),
            "attributes": _kv(attrs),
            "events": self.events,
            "status": self.status,
        }
        if self.parent is not None:
            span["parentSpanId"] = self.parent
        return span


def _command_name(argv: list[str]) -> str:
    """The root span's name: the command line when short, else its first word and an ellipsis (80 at most)."""
    if not argv:
        return "(no command)"
    text = shlex.join(argv)
    return text if len(text) <= 80 else shlex.join(argv[:1])[:78] + " \u2026"


def otlp_traces(stream: VerifiedStream) -> dict[str, Any]:
    """The stream as an OTLP/JSON ``ExportTraceServiceRequest`` (one resource, one scope, one trace)."""
    sid = stream.stream_id
    trace_id = _trace_id(sid)
    open_attrs, start = _opening(stream)
    start_attrs = _attrs(start) if start.kind == "process.start" else {}
    argv = _argv(start_attrs.get("argv", open_attrs.get("argv")))
    root = _Span(
        _span_id(sid, start.seq),
        None,
        _command_name(argv),
        start.wall_ns,
        start.seq,
        {"process.command_args": argv, "process.pid": _int(start_attrs.get("pid"))},
    )
    spans: list[_Span] = [root]
    open_steps: dict[str, list[_Span]] = {}  # step id -> spans started with it and not yet ended
    last_ns = start.wall_ns

    def span_of(step: str | None) -> _Span:
        if step is not None and open_steps.get(step):
            return open_steps[step][-1]
        return root

    for ev in stream.events():
        if ev.kind == "seal":
            break
        last_ns = max(last_ns, ev.wall_ns)
        a = _attrs(ev)
        if ev.kind == "step.start" and ev.step is not None:
            parent = a.get("parent")
            enclosing = span_of(parent) if isinstance(parent, str) else root
            from aos.text import key_bytes

            span = _Span(
                _span_id(sid, ev.seq),
                enclosing.span_id,
                _display(a.get("name")),
                ev.wall_ns,
                ev.seq,
                {
                    "aos.step.id": key_bytes(ev.step).decode("utf-8", "backslashreplace"),
                    "process.command_args": _argv(a.get("argv")),
                    "process.pid": _int(a.get("pid")),
                },
            )
            spans.append(span)
            open_steps.setdefault(ev.step, []).append(span)
        elif ev.kind == "step.end" and ev.step is not None and open_steps.get(ev.step):
            span = open_steps[ev.step].pop()
            code, signal = _int(a.get("exit_code")), a.get("signal")
            span.end_ns, span.end_seq = ev.wall_ns, ev.seq
            span.attrs.update(
                {"process.exit.code": code, "aos.step.signal": signal if isinstance(signal, str) else None}
            )
            span.status = _exit_status(code, signal, ended=True)
        elif ev.kind == "process.exit":
            code, signal = _int(a.get("exit_code")), a.get("signal")
            timed_out = a.get("timed_out") is True
            root.end_ns, root.end_seq = ev.wall_ns, ev.seq
            root.attrs.update(
                {
                    "process.exit.code": code,
                    "aos.signal": signal if isinstance(signal, str) else None,
                    "aos.timed_out": timed_out,
                    "aos.duration_ns": _int(a.get("duration_ns")),
                }
            )
            root.status = _exit_status(code, signal, ended=True, timed_out=timed_out)
        elif ev.kind == "receipt":
            span_of(ev.step).event(
                ev,
                "aos.receipt",
                {
                    "aos.receipt.name": _display(a.get("name")),
                    "aos.receipt.status": _display(a.get("status")),
                    "aos.receipt.fields": json.dumps(a.get("fields", {}), sort_keys=True, ensure_ascii=False),
                },
            )
        elif ev.kind == "receipt.invalid":
            span_of(ev.step).event(ev, "aos.receipt.invalid", {"aos.receipt.reason": _display(a.get("reason"))})
        elif ev.kind == "artifact":
            span_of(ev.step).event(
                ev,
                "aos.artifact",
                {
                    "aos.artifact.path": _display(a.get("path")),
                    "aos.artifact.size": _int(a.get("size")),
                    "aos.artifact.sha256": a.get("sha256") if isinstance(a.get("sha256"), str) else None,
                    "aos.artifact.content": a.get("content") if isinstance(a.get("content"), str) else None,
                },
            )
        elif ev.kind == "verdict":
            root.attrs.update(
                {
                    "aos.gate": _display(a.get("gate")),
                    "aos.verdict": _display(a.get("verdict")),
                    "aos.scope": _display(a.get("scope")),
                }
            )
            checks = a.get("checks")
            for check in checks if isinstance(checks, list) else []:
                if not isinstance(check, dict):
                    continue
                evidence = check.get("evidence")
                root.event(
                    ev,
                    "aos.check",
                    {
                        "aos.check.name": _display(check.get("name")),
                        "aos.check.status": _display(check.get("status")),
                        "aos.check.reason": _display(check.get("reason")),
                        "aos.check.evidence": [s for s in evidence if _int(s) is not None]
                        if isinstance(evidence, list)
                        else [],
                    },
                )
    if root.end_ns is None:
        root.status = _exit_status(None, None, ended=False)
    for stack in open_steps.values():
        for span in stack:
            span.status = _exit_status(None, None, ended=False)

    resource = {
        "service.name": "alpha-observe",
        "host.name": _display(open_attrs.get("host")) if "host" in open_attrs else None,
        "aos.stream_id": sid,
        "aos.stream.head": stream.verification.head,
        "aos.stream.signed": stream.verification.signed,
    }
    labels = open_attrs.get("labels")
    if isinstance(labels, dict):
        from aos.text import key_bytes

        for k, v in sorted(labels.items()):
            resource[f"aos.label.{key_bytes(k).decode('utf-8', 'backslashreplace')}"] = _display(v)
    source = open_attrs.get("source")
    if isinstance(source, dict) and "error" not in source:  # OpenTelemetry's vcs.* conventions
        resource["vcs.ref.head.revision"] = _display(source.get("commit"))
        resource["vcs.ref.head.name"] = _display(source.get("branch")) if source.get("branch") is not None else None
        resource["vcs.ref.head.type"] = "branch" if source.get("branch") is not None else None
        resource["vcs.repository.url.full"] = _display(source.get("remote")) if source.get("remote") else None
        resource["aos.source.tree"] = _display(source.get("tree"))
        resource["aos.source.dirty"] = bool(source.get("dirty"))
    version = open_attrs.get("version")
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _kv(resource)},
                "scopeSpans": [
                    {
                        "scope": {
                            "name": "alpha-observe",
                            **({"version": version} if isinstance(version, str) else {}),
                        },
                        "spans": [s.to_json(trace_id, last_ns) for s in spans],
                    }
                ],
            }
        ]
    }


# -- asciicast v2 ---------------------------------------------------------------------------

_DEFAULT_SIZE = (80, 24)


def _size(env: Mapping[str, Any]) -> tuple[int, int]:
    """The terminal size: ``COLUMNS``/``LINES`` when the stream recorded them as positive integers, else 80x24."""
    out = list(_DEFAULT_SIZE)
    for i, name in enumerate(("COLUMNS", "LINES")):
        value = env.get(name)
        if isinstance(value, str) and value.isdigit() and 0 < int(value) <= 10_000:
            out[i] = int(value)
    return out[0], out[1]


#: The body of an asciicast is written to a temporary file as it is made, then copied after its
#: header (which holds the duration, known only at the end) in chunks of this size.
_SPOOL_CHUNK = 1 << 20


def asciicast_chunks(stream: VerifiedStream) -> Iterator[bytes]:
    """The recorded terminal output as an asciicast v2 file (newline-delimited JSON), in chunks.

    Memory stays bounded whatever the output's size: each line goes to a temporary
    file (``$TMPDIR``) as it is made, and comes back after the header.
    """
    from observe.secrets.envpolicy import NOT_RECORDED

    open_attrs, start = _opening(stream)
    env = open_attrs.get("env")
    env = env if isinstance(env, dict) else {}
    width, height = _size(env)
    pty = open_attrs.get("pty") is True
    argv = _argv(_attrs(start).get("argv") if start.kind == "process.start" else open_attrs.get("argv"))
    t0 = start.mono_ns
    last_mono = t0
    decoders = {k: codecs.getincrementaldecoder("utf-8")("replace") for k in ("stdout", "stderr")}
    with tempfile.TemporaryFile(prefix="alpha-asciicast-") as body:

        def line(text: str) -> None:
            body.write(text.encode("utf-8"))
            body.write(b"\n")

        def at(mono_ns: int) -> str:
            nonlocal last_mono
            last_mono = max(last_mono, mono_ns)  # never backwards: asciicast times are non-decreasing
            return f"{(last_mono - t0) / 1e9:.6f}"

        def out(mono_ns: int, text: str) -> None:
            if text:
                if not pty:  # what a terminal's ONLCR does: a bare LF would draw a staircase
                    text = text.replace("\n", "\r\n")
                line(f'[{at(mono_ns)}, "o", {json.dumps(text, ensure_ascii=False)}]')

        for ev in stream.events():
            if ev.kind in ("stdout", "stderr") and ev.data:
                out(ev.mono_ns, decoders[ev.kind].decode(ev.data))
            elif ev.kind == "step.start":
                line(f'[{at(ev.mono_ns)}, "m", {json.dumps(_display(_attrs(ev).get("name")), ensure_ascii=False)}]')
            elif ev.kind == "process.exit":
                last_mono = max(last_mono, ev.mono_ns)
        for decoder in decoders.values():  # the bytes of a character cut off at the very end
            out(last_mono, decoder.decode(b"", final=True))
        header: dict[str, Any] = {
            "version": 2,
            "width": width,
            "height": height,
            "timestamp": start.wall_ns // 1_000_000_000,
            "duration": round((last_mono - t0) / 1e9, 6),
            "command": shlex.join(argv),
            "title": f"alpha observe: stream {stream.stream_id}",
        }
        term = {k: env[k] for k in ("SHELL", "TERM") if isinstance(env.get(k), str) and env[k] != NOT_RECORDED}
        if term:
            header["env"] = term
        yield json.dumps(header, ensure_ascii=False).encode("utf-8") + b"\n"
        body.seek(0)
        while chunk := body.read(_SPOOL_CHUNK):
            yield chunk


def asciicast(stream: VerifiedStream) -> str:
    """The recorded terminal output as an asciicast v2 file, whole (``asciicast_chunks`` for large streams)."""
    return b"".join(asciicast_chunks(stream)).decode("utf-8")
