"""Reading a stream back for people and scripts: events as JSON, raw output, artifacts, a summary."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from aos.event import Event
from aos.refusals import ArtifactMissing, Refusal

__all__ = [
    "Summary",
    "artifact_bytes",
    "event_json",
    "format_summary",
    "iter_stream",
    "summarize",
]


def iter_stream(path: str | os.PathLike[str], damage: list[Refusal]) -> Iterator[Event]:
    """Every intact event, streamed; damage after the last good batch is appended to ``damage``."""
    from aos.reader import StreamFile, batch_events

    with StreamFile(path) as f:
        for raw in f.batches():
            yield from batch_events(raw.batch)
        if f.damage is not None:
            damage.append(f.damage)


def event_json(ev: Event) -> str:
    """One JSON Lines record: seq, kind, wall_ns, step, attrs, and data_b64 when there is data."""
    record: dict[str, Any] = {
        "seq": ev.seq,
        "kind": ev.kind,
        "wall_ns": ev.wall_ns,
        "step": ev.step,
        "attrs": ev.attrs,
    }
    if ev.data is not None:
        record["data_b64"] = base64.b64encode(ev.data).decode("ascii")
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def artifact_bytes(events: Iterable[Event], path: str, out: IO[bytes]) -> int:
    """Write the captured bytes of artifact ``path`` to ``out``; checks their sha256.

    Raises ``artifact-missing`` when the stream holds no such artifact, when its
    content was omitted, or when the chunks do not add up to the recorded file.
    """
    import hashlib

    want = os.path.normpath(path)
    meta: dict[str, Any] | None = None
    sha = hashlib.sha256()
    written = 0
    for ev in events:
        if ev.kind == "artifact" and os.path.normpath(str(ev.attrs.get("path", ""))) == want:
            meta, sha, written = ev.attrs, hashlib.sha256(), 0
        elif ev.kind == "artifact.chunk" and meta is not None and ev.attrs.get("path") == meta.get("path"):
            chunk = ev.data or b""
            if ev.attrs.get("offset") != written:
                raise ArtifactMissing(f"{path}: chunk at offset {ev.attrs.get('offset')} where {written} was due")
            sha.update(chunk)
            out.write(chunk)
            written += len(chunk)
    if meta is None:
        raise ArtifactMissing(f"the stream holds no artifact {path!r}")
    if meta.get("content") == "omitted":
        raise ArtifactMissing(f"{path}: only its hash was recorded (content omitted, {meta.get('size')} bytes)")
    if written != meta.get("size") or sha.hexdigest() != meta.get("sha256"):
        raise ArtifactMissing(f"{path}: the captured chunks ({written} bytes) do not match the recorded file")
    return written


@dataclass
class Summary:
    """The facts ``show`` prints."""

    stream_id: str = ""
    argv: list[str] = field(default_factory=list)
    cwd: str = ""
    host: str = ""
    gate: str | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    started_ns: int | None = None
    exit: dict[str, Any] | None = None
    out_bytes: dict[str, int] = field(default_factory=lambda: {"stdout": 0, "stderr": 0})
    out_chunks: dict[str, int] = field(default_factory=lambda: {"stdout": 0, "stderr": 0})
    steps: list[dict[str, Any]] = field(default_factory=list)
    receipts: list[dict[str, Any]] = field(default_factory=list)
    invalid_receipts: int = 0
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    events: int = 0
    integrity: str = ""
    intact: bool = False


def summarize(path: str | os.PathLike[str], public_key: Any = None) -> Summary:
    """Read a stream (damaged or not) and gather what ``show`` prints."""
    from aos.verify import verify_stream

    s = Summary()
    damage: list[Refusal] = []
    open_steps: dict[str, dict[str, Any]] = {}
    depth: dict[str, int] = {}
    for ev in iter_stream(path, damage):
        s.events += 1
        a = ev.attrs
        if ev.kind == "stream.open":
            s.stream_id = str(a.get("stream_id", ""))
            argv = a.get("argv")  # attrs are the command's to shape: any JSON type may stand anywhere
            s.argv = [str(x) for x in argv] if isinstance(argv, list) else []
            s.cwd, s.host, s.gate = str(a.get("cwd", "")), str(a.get("host", "")), a.get("gate")
            labels = a.get("labels")
            s.labels = dict(labels) if isinstance(labels, dict) else {}
            s.started_ns = ev.wall_ns
        elif ev.kind in ("stdout", "stderr"):
            s.out_bytes[ev.kind] += len(ev.data or b"")
            s.out_chunks[ev.kind] += 1
        elif ev.kind == "step.start" and ev.step is not None:
            parent = a.get("parent")
            depth[ev.step] = depth.get(parent, -1) + 1 if isinstance(parent, str) else 0
            entry = {"name": str(a.get("name")), "depth": depth[ev.step], "exit_code": None, "duration_ns": None}
            open_steps[ev.step] = entry
            s.steps.append(entry)
        elif ev.kind == "step.end" and ev.step in open_steps:
            open_steps[ev.step].update(
                exit_code=a.get("exit_code"), signal=a.get("signal"), duration_ns=a.get("duration_ns")
            )
        elif ev.kind == "receipt":
            s.receipts.append({"name": str(a.get("name")), "status": str(a.get("status"))})
        elif ev.kind == "receipt.invalid":
            s.invalid_receipts += 1
        elif ev.kind == "artifact":
            s.artifacts.append(a)
        elif ev.kind == "process.exit":
            s.exit = a
        elif ev.kind == "verdict":
            s.verdict = a
    if not s.stream_id:
        from aos.reader import StreamFile

        with StreamFile(path) as f:
            s.stream_id = f.stream_id
    try:
        v = verify_stream(path, public_key)
    except Refusal as exc:
        s.integrity = exc.diagnostics()
    else:
        s.intact = True
        sig = f", signed by key {v.key_id}" if v.signed else ", unsigned"
        checked = " (signature checked)" if v.signature_checked else ""
        s.integrity = f"intact and sealed: {v.events} events, head {v.head[:16]}{sig}{checked}"
    return s


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)  # pragma: no cover


def _secs(ns: Any) -> str:
    return f"{ns / 1e9:.2f} s" if isinstance(ns, int) else "?"


def format_summary(s: Summary) -> str:
    """The human summary: one fact a line, readable at a glance."""
    import shlex

    lines = [f"stream     {s.stream_id}"]
    lines.append(f"command    {shlex.join(s.argv) if s.argv else '?'}")
    lines.append(f"where      {s.cwd} on {s.host}")
    if s.started_ns is not None:
        when = datetime.fromtimestamp(s.started_ns / 1e9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(f"started    {when}")
    if s.labels:
        lines.append("labels     " + ", ".join(f"{k}={v}" for k, v in sorted(s.labels.items())))
    if s.exit is None:
        lines.append("exit       none recorded (the recording did not finish)")
    else:
        e = s.exit
        how = f"signal {e['signal']}" if e.get("signal") else f"code {e.get('exit_code')}"
        extra = " (timed out)" if e.get("timed_out") else ""
        lines.append(f"exit       {how}{extra} after {_secs(e.get('duration_ns'))}")
    lines.append(
        f"output     stdout {_size(s.out_bytes['stdout'])} in {s.out_chunks['stdout']} chunks, "
        f"stderr {_size(s.out_bytes['stderr'])} in {s.out_chunks['stderr']} chunks"
    )
    lines.append(f"steps      {len(s.steps)}")
    for st in s.steps:
        code = st.get("exit_code")
        state = (
            "running/unfinished" if st.get("duration_ns") is None else f"exit {code}, {_secs(st.get('duration_ns'))}"
        )
        lines.append(f"  {'  ' * int(st['depth'])}{st['name']}  ({state})")
    counts: dict[str, int] = {}
    for r in s.receipts:
        counts[str(r["status"])] = counts.get(str(r["status"]), 0) + 1
    tally = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    invalid = f"; {s.invalid_receipts} invalid" if s.invalid_receipts else ""
    lines.append(f"receipts   {len(s.receipts)}" + (f" ({tally}{invalid})" if s.receipts or invalid else ""))
    lines.append(f"artifacts  {len(s.artifacts)}")
    for a in s.artifacts:
        digest = str(a.get("sha256") or "")[:12]
        size = a.get("size")
        shown = _size(size) if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else "? B"
        lines.append(f"  {a.get('path')}  {shown}  sha256 {digest}")
    if s.verdict is None:
        lines.append("verdict    none")
    else:
        v = s.verdict
        checks = v.get("checks")
        checks = [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []
        failing = [c.get("name") for c in checks if c.get("status") != "pass"]
        tail = f"; not passing: {', '.join(map(str, failing))}" if failing else ""
        lines.append(
            f"verdict    {v.get('verdict')} (gate {v.get('gate')}, scope {v.get('scope')}, {len(checks)} checks{tail})"
        )
    lines.append(f"integrity  {s.integrity}")
    return "\n".join(lines)
