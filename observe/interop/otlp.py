"""Export a verified stream as OTLP/JSON traces.

One trace per stream (trace id = the stream id), a root span for the command
(``process.start`` .. ``process.exit``, status from its exit), one span per step
(parent: the enclosing step, else the root), receipts, artifacts and invalid
receipts as events of the span they were sent from, and the sealed verdict's
checks as events of the root span. Span ids are derived from the stream id and
the seq of the event that opens the span. docs/CI.md ("Exporting") lists every
attribute.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aos import kinds
from observe.interop.semconv import TASK_RUN_RESULT, ci_attributes, source_attributes, task_run_result
from observe.interop.verified import argv_of, attrs_of, display, int_of, opening

if TYPE_CHECKING:
    from aos.event import Event
    from observe.interop.verified import VerifiedStream

__all__ = ["otlp_traces"]


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
        end = max(self.end_ns if self.end_ns is not None else end_default, self.start_ns)
        attrs = {**self.attrs, "aos.seq.start": self.seq, "aos.seq.end": self.end_seq}
        span: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": _KIND_INTERNAL,
            "startTimeUnixNano": str(self.start_ns),
            "endTimeUnixNano": str(end),
            "attributes": _kv(attrs),
            # An event lies inside its span: one recorded outside it (the verdict's checks, after
            # the command ended; a receipt read after its step ended) is timed at the span's edge.
            "events": [
                {**e, "timeUnixNano": str(min(max(int(e["timeUnixNano"]), self.start_ns), end))} for e in self.events
            ],
            "status": self.status,
        }
        if self.parent is not None:
            span["parentSpanId"] = self.parent
        return span


def _name_text(stored: Any) -> tuple[str, str | None]:
    """A recorded byte text as a span name: its text, bytes that are not UTF-8 as U+FFFD; and, only then,
    the exact bytes in base64 (``\\xNN`` text would read the same as a name that holds those four characters)."""
    from aos.text import value_bytes

    raw = value_bytes(stored)
    if raw is None:
        return display(stored), None
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), base64.b64encode(raw).decode("ascii")


def _command_name(argv: Any) -> tuple[str, list[str] | None]:
    """The root span's name: the command line when short, else its first word and an ellipsis (80 at most);
    and, when an item is not UTF-8, every item's exact bytes in base64."""
    items = [_name_text(v) for v in argv] if isinstance(argv, list) else []
    if not items:
        return "(no command)", None
    words = [text for text, _ in items]
    text = shlex.join(words)
    name = text if len(text) <= 80 else shlex.join(words[:1])[:78] + " \u2026"
    if all(b64 is None for _, b64 in items):
        return name, None
    from aos.text import value_bytes

    return name, [base64.b64encode(value_bytes(v) or b"").decode("ascii") for v in argv]


def otlp_traces(stream: VerifiedStream) -> dict[str, Any]:
    """The stream as an OTLP/JSON ``ExportTraceServiceRequest`` (one resource, one scope, one trace)."""
    sid = stream.stream_id
    trace_id = _trace_id(sid)
    open_attrs, start = opening(stream)
    start_attrs = attrs_of(start) if start.kind == kinds.PROCESS_START else {}
    recorded_argv = start_attrs.get("argv", open_attrs.get("argv"))
    argv = argv_of(recorded_argv)
    root_name, argv_b64 = _command_name(recorded_argv)
    root = _Span(
        _span_id(sid, start.seq),
        None,
        root_name,
        start.wall_ns,
        start.seq,
        {
            "process.command_args": argv,
            "process.pid": int_of(start_attrs.get("pid")),
            "aos.process.command_args_b64": argv_b64,
        },
    )
    env = open_attrs.get("env")
    root.attrs.update(ci_attributes(env if isinstance(env, dict) else {}))
    root.attrs.update(source_attributes(open_attrs.get("source")))  # the recorder's own reading of git wins
    spans: list[_Span] = [root]
    open_steps: dict[str, list[_Span]] = {}  # step id -> spans started with it and not yet ended
    last_ns = start.wall_ns
    interrupted = False  # a signal reached the recorder while the command ran

    def span_of(step: str | None) -> _Span:
        if step is not None and open_steps.get(step):
            return open_steps[step][-1]
        return root

    for ev in stream.events():
        if ev.kind == kinds.SEAL:
            break
        last_ns = max(last_ns, ev.wall_ns)
        a = attrs_of(ev)
        if ev.kind == kinds.STEP_START and ev.step is not None:
            parent = a.get("parent")
            enclosing = span_of(parent) if isinstance(parent, str) else root
            from aos.text import key_bytes

            name, name_b64 = _name_text(a.get("name"))
            span = _Span(
                _span_id(sid, ev.seq),
                enclosing.span_id,
                name,
                ev.wall_ns,
                ev.seq,
                {
                    "aos.step.id": key_bytes(ev.step).decode("utf-8", "backslashreplace"),
                    "aos.step.name_b64": name_b64,
                    "process.command_args": argv_of(a.get("argv")),
                    "process.pid": int_of(a.get("pid")),
                },
            )
            spans.append(span)
            open_steps.setdefault(ev.step, []).append(span)
        elif ev.kind == kinds.STEP_END and ev.step is not None and open_steps.get(ev.step):
            span = open_steps[ev.step].pop()
            code, signal = int_of(a.get("exit_code")), a.get("signal")
            span.end_ns, span.end_seq = ev.wall_ns, ev.seq
            span.attrs.update(
                {"process.exit.code": code, "aos.step.signal": signal if isinstance(signal, str) else None}
            )
            span.status = _exit_status(code, signal, ended=True)
        elif ev.kind == kinds.PROCESS_EXIT:
            code, signal = int_of(a.get("exit_code")), a.get("signal")
            timed_out = a.get("timed_out") is True
            root.end_ns, root.end_seq = ev.wall_ns, ev.seq
            root.attrs.update(
                {
                    "process.exit.code": code,
                    "aos.signal": signal if isinstance(signal, str) else None,
                    "aos.timed_out": timed_out,
                    "aos.duration_ns": int_of(a.get("duration_ns")),
                }
            )
            root.status = _exit_status(code, signal, ended=True, timed_out=timed_out)
        elif ev.kind == kinds.RECEIPT:
            span_of(ev.step).event(
                ev,
                "aos.receipt",
                {
                    "aos.receipt.name": display(a.get("name")),
                    "aos.receipt.status": display(a.get("status")),
                    "aos.receipt.fields": json.dumps(a.get("fields", {}), sort_keys=True, ensure_ascii=False),
                },
            )
        elif ev.kind == kinds.RECEIPT_INVALID:
            span_of(ev.step).event(ev, "aos.receipt.invalid", {"aos.receipt.reason": display(a.get("reason"))})
        elif ev.kind == kinds.ARTIFACT:
            span_of(ev.step).event(
                ev,
                "aos.artifact",
                {
                    "aos.artifact.path": display(a.get("path")),
                    "aos.artifact.size": int_of(a.get("size")),
                    "aos.artifact.sha256": a.get("sha256") if isinstance(a.get("sha256"), str) else None,
                    "aos.artifact.content": a.get("content") if isinstance(a.get("content"), str) else None,
                },
            )
        elif ev.kind == kinds.RECORDER_INTERRUPTED and a.get("during") == "command":
            interrupted = True
        elif ev.kind == kinds.VERDICT:
            root.attrs.update(
                {
                    "aos.gate": display(a.get("gate")),
                    "aos.verdict": display(a.get("verdict")),
                    "aos.scope": display(a.get("scope")),
                    "aos.verdict.time_unix_nano": ev.wall_ns,
                    TASK_RUN_RESULT: task_run_result(
                        a.get("verdict"), timed_out=root.attrs.get("aos.timed_out") is True, interrupted=interrupted
                    ),
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
                        "aos.check.name": display(check.get("name")),
                        "aos.check.status": display(check.get("status")),
                        "aos.check.reason": display(check.get("reason")),
                        "aos.check.evidence": [s for s in evidence if int_of(s) is not None]
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
        "host.name": display(open_attrs.get("host")) if "host" in open_attrs else None,
        "aos.stream_id": sid,
        "aos.stream.head": stream.verification.head,
        "aos.stream.signed": stream.verification.signed,
    }
    labels = open_attrs.get("labels")
    if isinstance(labels, dict):
        from aos.text import key_bytes

        for k, v in sorted(labels.items()):
            resource[f"aos.label.{key_bytes(k).decode('utf-8', 'backslashreplace')}"] = display(v)
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
