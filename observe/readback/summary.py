"""What ``alpha observe show`` says of a stream: its summary, for people and as JSON, and one check of its
verdict with the events it cites."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aos import kinds
from aos.attrs import json_int
from aos.refusals import Refusal
from gates.wording import count
from observe.readback.cuts import MARKERS, cuts_of, entry
from observe.readback.events import event_json, iter_stream, only_seqs
from observe.util import formatting

__all__ = ["KEEP", "STATUSES", "Summary", "format_check", "format_summary", "summarize", "summary_json"]

#: What ``show`` keeps at most of each list (steps, receipts, artifacts, GPU processes): the first
#: ones; the counts stay exact and the rest are said as "... and N more".
KEEP = 1000
#: Distinct receipt statuses tallied by name; receipts of further statuses are tallied together.
STATUSES = 32


@dataclass
class Summary:
    """The facts ``show`` prints."""

    stream_id: str = ""
    argv: list[str] = field(default_factory=list)
    cwd: str = ""
    host: str = ""
    gate: str | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] | None = None  # stream.open's ``source`` (None: no repository, or none recorded)
    source_recorded: bool = False
    started_ns: int | None = None
    exit: dict[str, Any] | None = None
    out_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(kinds.OUTPUT, 0))
    out_chunks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(kinds.OUTPUT, 0))
    steps: list[dict[str, Any]] = field(default_factory=list)
    receipts: list[dict[str, Any]] = field(default_factory=list)
    receipt_counts: dict[str, int] = field(default_factory=dict)  # status -> receipts (STATUSES at most)
    receipt_other_statuses: int = 0  # receipts of a status past the first STATUSES
    invalid_receipts: int = 0
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    omitted: dict[str, int] = field(
        default_factory=lambda: {"steps": 0, "receipts": 0, "artifacts": 0, "gpu_processes": 0}
    )  # what was not kept of each list (beyond KEEP)
    verdict: dict[str, Any] | None = None
    devices: dict[str, Any] | None = None  # the first device.observed of the recorder's own machine
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> its first device.observed (KEEP)
    gpu_processes: set[tuple[int, str]] = field(default_factory=set)  # (pid, gpu) of the tree seen on a GPU
    #: Each GPU's health (``node NAME: `` before a node's UUID): its index, the first observed and its seq, the last,
    #: and each change after the first (``[seq, "fact: before -> after"]``, KEEP at most).
    health: dict[str, dict[str, Any]] = field(default_factory=dict)
    gpu_events: list[dict[str, Any]] = field(default_factory=list)  # each GPU event with its seq (KEEP at most)
    cuts: list[str] = field(default_factory=list)  # what the recorder cut, one entry a line (KEEP at most)
    cuts_omitted: int = 0
    events: int = 0
    integrity: str = ""
    intact: bool = False


def _text(value: Any) -> str:
    """A stored value (byte text, or anything else) as one safe line: no control characters."""
    from aos.text import display

    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in display(value))


def _shown(value: Any) -> str:
    """A stored value as ``show`` prints an entry: at most ``cuts.SHOWN`` characters, its size said where it is
    longer or was cut by the recorder."""
    return entry(value, _text(value))


def _key(stored: Any) -> str:
    from aos.text import key_bytes

    return _text(key_bytes(stored).decode("utf-8", "surrogateescape")) if isinstance(stored, str) else _text(stored)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def summarize(path: str | os.PathLike[str], public_key: Any = None) -> Summary:
    """Read a stream (damaged or not) and gather what ``show`` prints.

    Attrs are untrusted: every value is checked for its type, and byte text
    (FORMAT.md section 3.7) is decoded for display.
    """
    from aos.verify import verify_stream

    s = Summary()
    damage: list[Refusal] = []
    open_steps: dict[str, dict[str, Any]] = {}
    depth: dict[str, int] = {}
    for ev in iter_stream(path, damage):
        s.events += 1
        try:
            a = ev.attrs
        except Refusal:  # attrs that are not a JSON object: verify names it on the integrity line
            a = {}
        if any(m in ev.attrs_json for m in MARKERS):
            for line in cuts_of(f"{ev.kind} (seq {ev.seq})" if ev.kind != kinds.STREAM_OPEN else ev.kind, a):
                if len(s.cuts) < KEEP:
                    s.cuts.append(_text(line))
                else:
                    s.cuts_omitted += 1
        if ev.kind == kinds.STREAM_OPEN:
            s.stream_id = _text(a.get("stream_id", ""))
            argv = a.get("argv")
            s.argv = [_shown(v) for v in argv] if isinstance(argv, list) else []
            s.cwd, s.host = _text(a.get("cwd", "")), _text(a.get("host", ""))
            gate = a.get("gate")
            s.gate = None if gate is None else _text(gate)
            s.labels = {_key(k)[:160]: _shown(v) for k, v in _obj(a.get("labels")).items()}
            s.source_recorded = "source" in a
            s.source = a.get("source") if isinstance(a.get("source"), dict) else None
            s.started_ns = ev.wall_ns
        elif ev.kind in (kinds.STDOUT, kinds.STDERR):
            s.out_bytes[ev.kind] += len(ev.data or b"")
            s.out_chunks[ev.kind] += 1
        elif ev.kind == kinds.STEP_START and ev.step is not None:
            if len(s.steps) >= KEEP:
                s.omitted["steps"] += 1
                continue
            parent = a.get("parent")
            depth[ev.step] = depth.get(parent, -1) + 1 if isinstance(parent, str) else 0
            step = {"name": _shown(a.get("name")), "depth": depth[ev.step], "exit_code": None, "duration_ns": None}
            step["by_hand"] = a.get("runner") == "client"  # a span opened by hand: no result to show
            open_steps[ev.step] = step
            s.steps.append(step)
        elif ev.kind == kinds.STEP_END and ev.step in open_steps:
            open_steps[ev.step].update(
                exit_code=json_int(a.get("exit_code")),
                signal=a.get("signal"),
                duration_ns=json_int(a.get("duration_ns")),
            )
        elif ev.kind == kinds.RECEIPT:
            status = _text(a.get("status"))
            if status in s.receipt_counts or len(s.receipt_counts) < STATUSES:
                s.receipt_counts[status] = s.receipt_counts.get(status, 0) + 1
            else:
                s.receipt_other_statuses += 1
            if len(s.receipts) >= KEEP:
                s.omitted["receipts"] += 1
                continue
            s.receipts.append({"name": _shown(a.get("name")), "status": status})
        elif ev.kind == kinds.RECEIPT_INVALID:
            s.invalid_receipts += 1
        elif ev.kind == kinds.ARTIFACT:
            if len(s.artifacts) >= KEEP:
                s.omitted["artifacts"] += 1
                continue
            s.artifacts.append(a)
        elif ev.kind == kinds.PROCESS_EXIT:
            s.exit = a
        elif ev.kind == kinds.VERDICT:
            s.verdict = a
        elif ev.kind == kinds.DEVICE_OBSERVED:
            node = a.get("node")
            if isinstance(node, dict):
                key = f"{_text(node.get('host'))}:{_text(node.get('port'))}"
                if key not in s.nodes and len(s.nodes) < KEEP:
                    s.nodes[key] = a
            else:
                s.devices = s.devices or a
            _health(s, ev.seq, a)
            for p in a.get("processes") or []:
                if isinstance(p, dict) and p.get("in_tree"):
                    seen = (json_int(p.get("pid")) or 0, _text(p.get("gpu")))
                    if seen in s.gpu_processes:
                        continue
                    if len(s.gpu_processes) >= KEEP:
                        s.omitted["gpu_processes"] += 1
                        continue
                    s.gpu_processes.add(seen)
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


def _health(s: Summary, seq: int, a: dict[str, Any]) -> None:
    """File one observation's GPU health and events into ``s``."""
    node = a.get("node")
    where = f"node {_text(node.get('host'))}:{_text(node.get('port'))}: " if isinstance(node, dict) else ""
    for g in a.get("gpus") or []:
        health = g.get("health") if isinstance(g, dict) else None
        if not isinstance(health, dict):
            continue
        key = f"{where}{_text(g.get('uuid'))}"
        if key not in s.health:
            if len(s.health) >= KEEP:
                continue
            s.health[key] = {"index": g.get("index"), "first": health, "first_seq": seq, "changes": []}
        else:
            from observe.devices.health import health_changes

            changes = s.health[key]["changes"]
            changes.extend([seq, c] for c in health_changes(s.health[key]["last"], health)[: KEEP - len(changes)])
        s.health[key]["last"] = health
    for e in a.get("gpu_events") or []:
        if isinstance(e, dict) and len(s.gpu_events) < KEEP:
            s.gpu_events.append({**e, "seq": seq, "where": where})


def _health_lines(s: Summary) -> list[str]:
    """Each GPU's health at its first observation, what changed by its last, and the GPU events."""
    from observe.devices.health import describe_event, describe_health

    lines = []
    for key, h in s.health.items():
        lines.append(f"  GPU {_text(h['index'])} {key} health (seq {h['first_seq']}):")
        lines.extend(f"    {what}: {value}" for what, value in describe_health(h["first"]))
        changes = h["changes"]
        lines.append("    changed over the run: " + ("; ".join(f"{c} (seq {q})" for q, c in changes) or "nothing"))
    for e in s.gpu_events:
        lines.append(f"  GPU event: {e['where']}{describe_event(e)} (seq {e['seq']})")
    return lines


def _devices(s: Summary) -> str:
    if s.devices is None:
        return "not observed"
    text = _observation(s.devices)
    if s.devices.get("gpus"):
        n = len(s.gpu_processes) + s.omitted["gpu_processes"]
        text += f"; {n} process{'es' if n != 1 else ''} of the recorded tree seen on a GPU"
    return text


def _observation(d: dict[str, Any]) -> str:
    """One ``device.observed``: its observer (said ``simulated`` where it is), driver, GPUs and error."""
    gpus = d.get("gpus") or []
    names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict)})
    text = f"observer {d.get('observer')}"
    if d.get("observer") != "simulated" and d.get("simulated_from") is not None:  # a simulated file claiming NVML
        from gates.report import SIMULATED

        text += f" ({SIMULATED})"
    if d.get("driver"):
        text += f", driver {d.get('driver')}"
    text += f": {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}" + (f" ({', '.join(names)})" if names else "")
    if d.get("error"):
        text += f"; error: {d.get('error')}"
    return text


def _more(lines: list[str], omitted: int, what: str) -> None:
    """Say how many of a list ``show`` did not keep."""
    if omitted:
        lines.append(f"  ... and {omitted} more {what} (show keeps the first {KEEP})")


def format_summary(s: Summary) -> str:
    """The human summary: one fact a line, readable at a glance."""
    import shlex

    lines = [f"stream     {s.stream_id}"]
    lines.append(f"command    {shlex.join(s.argv) if s.argv else '?'}")
    lines.append(f"where      {s.cwd} on {s.host}")
    if s.started_ns is not None:
        try:
            when = datetime.fromtimestamp(s.started_ns / 1e9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        except (OverflowError, OSError, ValueError):
            when = f"{s.started_ns} ns (not a date)"
        lines.append(f"started    {when}")
    if s.source_recorded:
        from gates.rebuild import describe_source

        lines.append(f"source     {describe_source(s.source)}")
    if s.labels:
        lines.append("labels     " + ", ".join(f"{k}={v}" for k, v in sorted(s.labels.items())))
    if s.exit is None:
        lines.append("exit       none recorded (the recording did not finish)")
    else:
        e = s.exit
        how = f"signal {_text(e['signal'])}" if e.get("signal") else f"code {_text(e.get('exit_code'))}"
        extra = " (timed out)" if e.get("timed_out") is True else ""
        lines.append(f"exit       {how}{extra} after {formatting.seconds(e.get('duration_ns'))}")
    size, chunks = s.out_bytes, s.out_chunks
    lines.append(
        f"output     stdout {formatting.size(size[kinds.STDOUT])} in {count(chunks[kinds.STDOUT], 'chunk')}, "
        f"stderr {formatting.size(size[kinds.STDERR])} in {count(chunks[kinds.STDERR], 'chunk')}"
    )
    lines.append(f"steps      {len(s.steps) + s.omitted['steps']}")
    for st in s.steps:
        code = st.get("exit_code")
        if st.get("by_hand"):
            state = "a span opened by hand: no result"
        elif st.get("duration_ns") is None:
            state = "running/unfinished"
        elif st.get("signal"):
            state = f"signal {_text(st['signal'])}, {formatting.seconds(st.get('duration_ns'))}"
        else:
            state = f"exit {code}, {formatting.seconds(st.get('duration_ns'))}"
        lines.append(f"  {'  ' * int(st['depth'])}{st['name']}  ({state})")
    _more(lines, s.omitted["steps"], "steps")
    tally = [f"{n} {k}" for k, n in sorted(s.receipt_counts.items())]
    if s.receipt_other_statuses:
        tally.append(f"{s.receipt_other_statuses} of other statuses")
    invalid = [f"{s.invalid_receipts} invalid"] if s.invalid_receipts else []
    detail = "; ".join(p for p in (", ".join(tally), *invalid) if p)
    lines.append(f"receipts   {len(s.receipts) + s.omitted['receipts']}" + (f" ({detail})" if detail else ""))
    if s.omitted["receipts"]:
        lines.append(f"  (the first {len(s.receipts)} kept; ... and {s.omitted['receipts']} more)")
    lines.append(f"artifacts  {len(s.artifacts) + s.omitted['artifacts']}")
    for a in s.artifacts:
        digest = _text(a.get("sha256") or "")[:12]
        lines.append(f"  {_shown(a.get('path'))}  {formatting.size(a.get('size'))}  sha256 {digest}")
    _more(lines, s.omitted["artifacts"], "artifacts")
    lines.append(f"devices    {_devices(s)}")
    lines.extend(f"  node {node}: {_observation(d)}" for node, d in s.nodes.items())
    lines.extend(_health_lines(s))
    if s.verdict is None:
        lines.append("verdict    none")
    else:
        v = s.verdict
        checks = [c for c in v.get("checks") or [] if isinstance(c, dict)] if isinstance(v.get("checks"), list) else []
        failing = [_text(c.get("name")) for c in checks if c.get("status") != "pass"]
        tail = f"; not passing: {', '.join(failing)}" if failing else ""
        lines.append(
            f"verdict    {_text(v.get('verdict'))} (gate {_text(v.get('gate'))}, scope {_text(v.get('scope'))}, "
            f"{count(len(checks), 'check')}{tail})"
        )
    if s.cuts:
        n = len(s.cuts) + s.cuts_omitted
        lines.append(f"cut        {n} entr{'ies' if n != 1 else 'y'} cut to keep an event within the bound")
        lines.extend(f"  {line}" for line in s.cuts)
        if s.cuts_omitted:
            lines.append(f"  ... and {s.cuts_omitted} more entries (show keeps the first {KEEP})")
    lines.append(f"integrity  {s.integrity}")
    return "\n".join(lines)


def summary_json(s: Summary, stream: str) -> str:
    """The summary as one JSON document, naming the stream's path and id."""
    doc = {
        "stream": stream,
        "stream_id": s.stream_id,
        "argv": s.argv,
        "cwd": s.cwd,
        "host": s.host,
        "gate": s.gate,
        "labels": s.labels,
        "source": s.source if s.source_recorded else None,
        "started_ns": s.started_ns,
        "exit": s.exit,
        "output": {"bytes": s.out_bytes, "chunks": s.out_chunks},
        "steps": s.steps,
        "receipts": s.receipts,
        "receipt_counts": s.receipt_counts,
        "receipt_other_statuses": s.receipt_other_statuses,
        "invalid_receipts": s.invalid_receipts,
        "omitted": s.omitted,
        "cut": {"entries": s.cuts, "omitted": s.cuts_omitted},
        "artifacts": s.artifacts,
        "devices": s.devices,
        "nodes": s.nodes,
        "gpu_processes": [{"pid": pid, "gpu": gpu} for pid, gpu in sorted(s.gpu_processes)],
        "health": s.health,
        "gpu_events": s.gpu_events,
        "verdict": s.verdict,
        "events": s.events,
        "intact": s.intact,
        "integrity": s.integrity,
    }
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)


def _data_note(kind: str, data: bytes) -> str:
    """An event's bytes as ``show --check`` prints them: a captured file's bytes, or output that is not
    text, never as such (their size and digest); text output as a short preview."""
    import hashlib

    digest = hashlib.sha256(data).hexdigest()[:16]
    if kind in (kinds.ARTIFACT, kinds.ARTIFACT_CHUNK):
        return f"{len(data)} B of a captured file, not shown (sha256 {digest}...; read --artifact PATH writes them)"
    if b"\x00" in data[:4096] or not _is_text(data[:4096]):
        return f"{len(data)} B, binary, not shown (sha256 {digest}...)"
    return f"{len(data)} B: {_preview(data)}"


def _is_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3  # only a character cut at the end of the head
    return True


def _preview(data: bytes, n: int = 160) -> str:
    text = data[:n].decode("utf-8", "backslashreplace")
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown + (f"... (+{len(data) - n} B)" if len(data) > n else "")


def format_check(path: str | os.PathLike[str], s: Summary, name: str, *, as_json: bool = False) -> tuple[str, bool]:
    """Check ``name`` of the sealed verdict with every event it cites: ``(text, found)``.

    Raises ``stream-verdict`` when the stream holds no verdict; ``found`` is False
    (and the text names the checks there are) when the verdict has no such check.
    """
    from aos.refusals import StreamVerdict

    if s.verdict is None:
        raise StreamVerdict(f"{path}: the stream holds no verdict, so no check {name!r}")
    raw = s.verdict.get("checks")
    checks = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
    check = next((c for c in checks if c.get("name") == name), None)
    if check is None:
        known = ", ".join(_text(c.get("name")) for c in checks) or "none"
        return f"alpha observe show: the verdict has no check {name!r} (checks: {known})", False
    raw_ev = check.get("evidence")
    evidence = frozenset(e for e in raw_ev if json_int(e) is not None) if isinstance(raw_ev, list) else frozenset()
    found: set[int] = set()
    events = list(only_seqs(iter_stream(path, []), evidence, found)) if evidence else []
    if as_json:
        doc = {
            "stream": str(path),
            "stream_id": s.stream_id,
            "gate": s.verdict.get("gate"),
            "check": check,
            "events": [json.loads(event_json(ev)) for ev in events],
            "missing": sorted(evidence - found),
        }
        return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False), True
    lines = [
        f"check      {_text(check.get('name'))}: {_text(check.get('status'))} "
        f"(gate {_text(s.verdict.get('gate'))}, verdict {_text(s.verdict.get('verdict'))})",
        f"reason     {_text(check.get('reason'))}",
        f"evidence   {len(evidence)} event{'s' if len(evidence) != 1 else ''}"
        + (f": {', '.join(map(str, sorted(evidence)))}" if evidence else " (the check cites none)"),
    ]
    for ev in events:
        step = f" [{_key(ev.step)}]" if ev.step else ""
        lines.append(f"  {ev.seq:>6} {ev.kind}{step} {_text(ev.attrs_json)}")
        if ev.data:
            lines.append(f"         data {_data_note(ev.kind, ev.data)}")
    for seq in sorted(evidence - found):
        lines.append(f"  {seq:>6} (not in the stream)")
    if evidence:
        import shlex

        lines.append(
            f"read them  alpha observe read {shlex.quote(str(path))} --seq {','.join(map(str, sorted(evidence)))}"
        )
    return "\n".join(lines), True
