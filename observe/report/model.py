"""The model of ``alpha observe report``'s page (``observe.report.write``), gathered from a stream.

The model is gathered in one pass over the stream's events, in bounded memory:
only what the page shows is kept, each part under a stated cap (``Caps``): the
last 64 KiB of each step's stdout and stderr, at most so many steps, receipts,
artifacts and cited events, a fixed number of telemetry points per series
(``observe.report.plots``). A second, targeted pass reads back the events the checks
cite that the first pass did not keep, and ``aos.verify`` reads the file once more
for the integrity line. ``observe.report.page`` lays it out.

``build_model`` never raises for a damaged, unsealed or garbage stream: the
model says what is wrong.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.attrs import json_int
from observe.report.plots import Series

if TYPE_CHECKING:
    from aos.event import Event
    from aos.refusals import Refusal
    from aos.signing import Verifier
    from aos.verify import Verification

__all__ = ["CAPS", "Caps", "ReportModel", "Tail", "ansi_html", "build_model", "cited_seqs", "text"]

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class Caps:
    """What the page keeps at most (docs/REPORT.md states them)."""

    tail: int = 64 * KiB  # bytes of each step's stdout, and of its stderr: the last ones
    steps: int = 500
    tails: int = 200  # steps whose output tails are kept (the others: how many bytes they wrote)
    receipts: int = 1000
    artifacts: int = 1000
    cited: int = 2000  # events the checks cite, rendered with their attrs
    attrs: int = 4 * KiB  # characters of one event's attrs (or a receipt's fields) shown
    preview: int = 8 * KiB  # an artifact at most this size, captured and text, is previewed
    gpus: int = 16
    processes: int = 200  # GPU processes listed
    kinds: int = 64  # distinct event kinds counted by name (the rest: counted together)
    statuses: int = 32  # distinct receipt statuses tallied by name (the rest: tallied together)
    page: int = 8 * MiB  # the whole page


CAPS = Caps()


def text(value: Any, limit: int = 4 * KiB) -> str:
    """An untrusted stored value as display text: byte text decoded, control characters shown as escapes."""
    from aos.text import display

    structured = isinstance(value, (dict, list))
    shown = json.dumps(value, ensure_ascii=False, sort_keys=True) if structured else display(value)
    if len(shown) > limit:
        shown = shown[:limit] + f"... (+{len(shown) - limit} characters)"
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in shown)


class Tail:
    """The last ``cap`` bytes written, and how many there were in all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.total = 0
        self.chunks = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        self.chunks += 1
        if not self.cap:
            return
        self.buf += data[-self.cap :]
        if len(self.buf) > self.cap + max(self.cap // 4, 4096):
            del self.buf[: len(self.buf) - self.cap]

    def bytes(self, cap: int | None = None) -> bytes:
        keep = self.cap if cap is None else min(cap, self.cap)
        return bytes(self.buf[-keep:]) if keep else b""


@dataclass
class Step:
    """One span: a ``step.start`` and, when it ended, its ``step.end``."""

    index: int
    span: str
    name: str
    argv: str
    depth: int
    start_seq: int
    start_mono: int
    end_seq: int | None = None
    end_mono: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    duration_ns: int | None = None
    out: dict[str, Tail] = field(default_factory=dict)


@dataclass
class Artifact:
    seq: int
    path: str
    raw_path: Any
    size: int | None
    sha256: str
    blake3: str
    content: str
    kind: str
    step: str
    origin: str
    masked: bool
    error: str
    chunks: bytearray | None = None  # the captured bytes of a small file, while they arrive
    preview: str | None = None
    preview_note: str = ""


@dataclass
class ReportModel:
    """Everything the page shows, gathered in one bounded pass (plus the verifier's word)."""

    path: str
    caps: Caps = CAPS
    stream_id: str | None = None
    unreadable: Refusal | None = None  # the file is not a stream at all (no events could be read)
    damage: Refusal | None = None  # what followed the last complete batch
    refusal: Refusal | None = None  # the verifier's refusal (None: intact and sealed)
    sealed: dict[str, Any] | None = None  # seal facts when intact: events, head, signed, key_id
    events: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # kind -> events, for the first ``caps.kinds`` kinds
    other_kinds: int = 0  # events of a kind past the first ``caps.kinds``
    argv: str = ""
    cwd: str = ""
    host: str = ""
    tool: str = ""
    gate_requested: str | None = None
    labels: list[tuple[str, str]] = field(default_factory=list)
    source: str | None = None  # stream.open's ``source`` in words (None: not recorded)
    started_wall: int | None = None
    start_mono: int | None = None
    last_mono: int | None = None
    process_start_mono: int | None = None
    exit: dict[str, Any] | None = None
    exit_mono: int | None = None
    steps: list[Step] = field(default_factory=list)
    steps_omitted: int = 0
    top_out: dict[str, Tail] = field(default_factory=dict)
    output_elsewhere: int = 0  # bytes written in steps the page does not list
    receipts: list[dict[str, Any]] = field(default_factory=list)
    receipts_omitted: int = 0
    receipt_counts: dict[str, int] = field(default_factory=dict)  # status -> receipts (``caps.statuses`` at most)
    receipt_other_statuses: int = 0  # receipts of a status past the first ``caps.statuses``
    invalid_receipts: list[dict[str, Any]] = field(default_factory=list)
    invalid_count: int = 0
    artifacts: list[Artifact] = field(default_factory=list)
    artifacts_omitted: int = 0
    verdict: dict[str, Any] | None = None  # the last verdict event's attrs, as stored
    verdict_seq: int | None = None
    verdict_events: int = 0
    observations: int = 0
    observer: str | None = None
    driver: str | None = None
    cuda_driver: int | None = None
    library: str | None = None
    device_errors: list[str] = field(default_factory=list)
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The GPUs each node showed, in the order first seen: node ("this machine" or HOST:PORT) -> UUIDs.
    gpu_nodes: dict[str, list[str]] = field(default_factory=dict)
    #: The roles of the lane's static build, in role order, and the preflight's GPUs (one per role, in role order).
    role_order: list[str] = field(default_factory=list)
    bound_uuids: list[str] = field(default_factory=list)
    gpu_processes: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    gpu_processes_omitted: int = 0
    gpu_events: list[dict[str, Any]] = field(default_factory=list)  # each GPU event and its seq (caps.processes)
    cpu: Series = field(default_factory=lambda: Series("CPU (% of one core)"))
    rss: Series = field(default_factory=lambda: Series("RSS"))
    gpu_util: dict[str, Series] = field(default_factory=dict)
    gpu_mem: dict[str, Series] = field(default_factory=dict)
    telemetry: int = 0
    cited: dict[int, dict[str, Any]] = field(default_factory=dict)  # seq -> the event, for the page
    tests: list[dict[str, Any]] = field(default_factory=list)  # the captured test results (observe.report.tests)

    # -- derived -----------------------------------------------------------------

    @property
    def gpu_tables(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """The GPUs as one table per node (the node's name, its GPUs), each GPU with the role bound to it."""
        roles = dict(zip(self.bound_uuids, self.role_order, strict=False))
        return [
            (node, [dict(self.gpus[u], role=roles.get(u, "")) for u in uuids if u in self.gpus])
            for node, uuids in self.gpu_nodes.items()
        ]

    @property
    def sealed_verdict(self) -> dict[str, Any] | None:
        """The verdict only when the stream is intact and sealed with exactly one well-formed verdict."""
        v = self.verdict
        if self.refusal is not None or self.unreadable is not None or v is None or self.verdict_events != 1:
            return None
        if v.get("verdict") not in ("pass", "fail", "inconclusive"):
            return None
        return v

    @property
    def integrity(self) -> str:
        if self.unreadable is not None:
            return f"damaged: {self.unreadable.name}"
        if self.refusal is None:
            sealed = self.sealed or {}
            if not sealed.get("signed"):
                return "intact and sealed"
            checked = " (signature checked)" if sealed.get("checked") else ""
            return f"intact and sealed, signed by key {sealed.get('key_id')}{checked}"
        if self.refusal.name == "stream-unsealed":
            return "unsealed (recorder killed?)"
        return f"damaged: {self.refusal.name}"


def _events(path: str, model: ReportModel) -> Iterator[Event]:
    """Every event of every complete batch; damage is kept on the model, never raised."""
    from aos.reader import StreamFile
    from aos.refusals import Refusal

    try:
        with StreamFile(path) as f:
            model.stream_id = f.stream_id
            yield from f.events()
            model.damage = f.damage
    except Refusal as exc:
        model.unreadable = exc


_OSC = re.compile(rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")


def ansi_html(data: bytes) -> str:
    """Terminal output as HTML (escaped), its SGR colours rendered by ansi2html.

    Operating-system commands (hyperlinks, window titles) are dropped before
    conversion, so the command's output can never make a link; other control
    characters are shown as ``\\xNN``.
    """
    data = _OSC.sub(b"", data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", data.decode("utf-8", "replace"))
    return str(_converter().convert(shown, full=False))


@functools.cache
def _converter() -> Any:
    """One ansi2html converter per process: making one builds its whole style table (most of a small
    report's cost, issue 36); a conversion keeps no state that changes the next one's output."""
    from ansi2html import Ansi2HTMLConverter

    return Ansi2HTMLConverter(inline=True, linkify=False, escaped=True)


class _Collector:
    """Feeds events into a ``ReportModel``, one at a time."""

    def __init__(self, model: ReportModel) -> None:
        self.m = model
        self.c = model.caps
        self.spans: dict[str, Step] = {}
        self.depth: dict[str, int] = {}
        self.preview: Artifact | None = None
        self.last_cpu: tuple[int, int] | None = None

    def feed(self, ev: Event) -> None:
        m = self.m
        m.events += 1
        if ev.kind in m.kinds or len(m.kinds) < self.c.kinds:
            m.kinds[ev.kind] = m.kinds.get(ev.kind, 0) + 1
        else:
            m.other_kinds += 1
        if m.start_mono is None:
            m.start_mono = ev.mono_ns
        m.last_mono = ev.mono_ns
        kind = ev.kind
        if kind in (kinds.STDOUT, kinds.STDERR):
            self._output(ev)
            return
        if kind == kinds.ARTIFACT_CHUNK:
            self._chunk(ev)
            return
        try:
            a = ev.attrs
        except Exception:  # noqa: BLE001 - attrs that are not a JSON object: verify names it
            a = {}
        handler = getattr(self, "_on_" + kind.replace(".", "_"), None)
        if handler is not None:
            handler(ev, a)

    # -- output --------------------------------------------------------------------

    def _output(self, ev: Event) -> None:
        step = self.spans.get(ev.step) if ev.step is not None else None
        if ev.step is not None and step is None:  # a step past the steps cap (or never started)
            self.m.output_elsewhere += len(ev.data or b"")
            return
        outs = step.out if step is not None else self.m.top_out
        tail = outs.get(ev.kind)
        if tail is None:
            keep = self.c.tail if step is None or step.index < self.c.tails else 0
            tail = outs[ev.kind] = Tail(keep)
        tail.add(ev.data or b"")

    # -- artifacts -------------------------------------------------------------------

    def _on_artifact(self, ev: Event, a: dict[str, Any]) -> None:
        self._end_preview()
        m = self.m
        if len(m.artifacts) >= self.c.artifacts:
            m.artifacts_omitted += 1
            return
        step = self.spans.get(ev.step) if ev.step is not None else None
        size = json_int(a.get("size"))
        art = Artifact(
            seq=ev.seq,
            path=text(a.get("path"), 1024),
            raw_path=a.get("path"),
            size=size,
            sha256=text(a.get("sha256") or "", 128),
            blake3=text(a.get("blake3") or "", 128),
            content=text(a.get("content") or "", 32),
            kind=text(a.get("kind") or "", 32),
            step=step.name if step is not None else "",
            origin=text(a.get("origin") or "", 64),
            masked=a.get("masked") is True,
            error=text(a.get("error") or "", 512),
        )
        m.artifacts.append(art)
        if art.content == "inline" and size is not None and 0 < size <= self.c.preview:
            art.chunks = bytearray()
            self.preview = art

    def _chunk(self, ev: Event) -> None:
        art = self.preview
        if art is None or art.chunks is None:
            return
        try:
            a = ev.attrs
        except Exception:  # noqa: BLE001
            return
        if a.get("path") != art.raw_path or a.get("offset") != len(art.chunks):
            return
        art.chunks += (ev.data or b"")[: self.c.preview + 1 - len(art.chunks)]
        if art.size is not None and len(art.chunks) >= art.size:
            self._end_preview()

    def _end_preview(self) -> None:
        art, self.preview = self.preview, None
        if art is None or art.chunks is None:
            return
        data, art.chunks = bytes(art.chunks), None
        if len(data) != art.size or hashlib.sha256(data).hexdigest() != art.sha256:
            art.preview_note = "the captured chunks do not add up to the recorded file: no preview"
            return
        if b"\x00" in data:
            art.preview_note = "binary: no preview"
            return
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError:
            art.preview_note = "not UTF-8 text: no preview"
            return
        art.preview = _CONTROL.sub(lambda mm: f"\\x{ord(mm.group()):02x}", decoded)

    # -- the rest ----------------------------------------------------------------------

    def _on_stream_open(self, ev: Event, a: dict[str, Any]) -> None:
        import shlex

        m = self.m
        argv = a.get("argv")
        m.argv = shlex.join(text(v, 1024) for v in argv) if isinstance(argv, list) else text(argv)
        m.argv = text(m.argv, 4 * KiB)
        m.cwd, m.host = text(a.get("cwd", ""), 1024), text(a.get("host", ""), 256)
        m.tool = text(f"{display_or(a.get('tool'), 'alpha')} {display_or(a.get('version'), '')}".strip(), 128)
        gate = a.get("gate")
        m.gate_requested = None if gate is None else text(gate, 256)
        labels = a.get("labels")
        if isinstance(labels, dict):
            m.labels = [(text(k, 256), text(v, 1024)) for k, v in list(labels.items())[:100]]
        if "source" in a:
            from gates.rebuild import describe_source

            source = a.get("source")
            m.source = text(describe_source(source if isinstance(source, dict) else None), 2048)
        m.started_wall = ev.wall_ns

    def _on_process_start(self, ev: Event, a: dict[str, Any]) -> None:
        self.m.process_start_mono = ev.mono_ns

    def _on_process_exit(self, ev: Event, a: dict[str, Any]) -> None:
        m = self.m
        m.exit = {
            "seq": ev.seq,
            "exit_code": json_int(a.get("exit_code")),
            "signal": None if a.get("signal") is None else text(a.get("signal"), 64),
            "timed_out": a.get("timed_out") is True,
            "duration_ns": json_int(a.get("duration_ns")),
        }
        m.exit_mono = ev.mono_ns

    def _on_step_start(self, ev: Event, a: dict[str, Any]) -> None:
        m = self.m
        if ev.step is None:
            return
        if len(m.steps) >= self.c.steps:
            m.steps_omitted += 1
            return
        parent = a.get("parent")
        depth = self.depth.get(parent, -1) + 1 if isinstance(parent, str) else 0
        self.depth[ev.step] = depth
        argv = a.get("argv")
        step = Step(
            index=len(m.steps),
            span=ev.step,
            name=text(a.get("name"), 256),
            argv=" ".join(text(v, 256) for v in argv[:64]) if isinstance(argv, list) else "",
            depth=min(depth, 16),
            start_seq=ev.seq,
            start_mono=ev.mono_ns,
        )
        self.spans[ev.step] = step
        m.steps.append(step)

    def _on_step_end(self, ev: Event, a: dict[str, Any]) -> None:
        step = self.spans.get(ev.step) if ev.step is not None else None
        if step is None or step.end_seq is not None:
            return
        step.end_seq, step.end_mono = ev.seq, ev.mono_ns
        step.exit_code = json_int(a.get("exit_code"))
        step.signal = None if a.get("signal") is None else text(a.get("signal"), 64)
        step.duration_ns = json_int(a.get("duration_ns"))

    def _on_receipt(self, ev: Event, a: dict[str, Any]) -> None:
        m = self.m
        status = text(a.get("status", "info"), 32)
        if status in m.receipt_counts or len(m.receipt_counts) < self.c.statuses:
            m.receipt_counts[status] = m.receipt_counts.get(status, 0) + 1
        else:
            m.receipt_other_statuses += 1
        if len(m.receipts) >= self.c.receipts:
            m.receipts_omitted += 1
            return
        step = self.spans.get(ev.step) if ev.step is not None else None
        fields = a.get("fields")
        self._roles(a.get("name"), fields)
        m.receipts.append(
            {
                "seq": ev.seq,
                "name": text(a.get("name"), 256),
                "status": status,
                "fields": text(fields, self.c.attrs) if fields not in (None, {}) else "",
                "step": step.name if step is not None else "",
            }
        )

    def _roles(self, name: Any, fields: Any) -> None:
        """The roles (static-build receipts, in order) and the GPUs the preflight bound them to, in role order."""
        if not isinstance(fields, dict):
            return
        m = self.m
        if name == "static-build" and isinstance(fields.get("role"), str) and len(m.role_order) < self.c.gpus:
            role = text(fields["role"], 128)
            if role not in m.role_order:
                m.role_order.append(role)
        elif name == "preflight" and isinstance(fields.get("gpus"), list):
            m.bound_uuids = [text(g.get("uuid"), 128) for g in fields["gpus"][: self.c.gpus] if isinstance(g, dict)]

    def _on_receipt_invalid(self, ev: Event, a: dict[str, Any]) -> None:
        m = self.m
        m.invalid_count += 1
        if len(m.invalid_receipts) < 50:
            m.invalid_receipts.append(
                {"seq": ev.seq, "reason": text(a.get("reason"), 512), "line": text((ev.data or b"")[:512], 1024)}
            )

    def _on_verdict(self, ev: Event, a: dict[str, Any]) -> None:
        m = self.m
        m.verdict_events += 1
        m.verdict, m.verdict_seq = a, ev.seq

    def _on_device_observed(self, ev: Event, a: dict[str, Any]) -> None:
        m = self.m
        m.observations += 1
        if m.observer is None:
            m.observer = text(a.get("observer"), 64)
            m.driver = None if a.get("driver") is None else text(a.get("driver"), 64)
            m.cuda_driver = json_int(a.get("cuda_driver"))
            lib = a.get("library")
            if isinstance(lib, dict):
                m.library = f"{text(lib.get('path'), 512)} (sha256 {text(lib.get('sha256'), 64)})"
        err = a.get("error")
        if err and len(m.device_errors) < 20:
            shown = text(err, 512)
            if shown not in m.device_errors:
                m.device_errors.append(shown)
        gpus = a.get("gpus")
        where = a.get("node")
        node = "this machine"
        if isinstance(where, dict):
            port = json_int(where.get("port"))
            node = text(where.get("host"), 256) + (f":{port}" if port is not None else "")
        for g in gpus if isinstance(gpus, list) else []:
            if not isinstance(g, dict):
                continue
            uuid = text(g.get("uuid"), 128)
            listed = m.gpu_nodes.get(node)
            if listed is None and len(m.gpu_nodes) < self.c.gpus:
                listed = m.gpu_nodes[node] = []
            if listed is not None and uuid not in listed and len(listed) < self.c.gpus:
                listed.append(uuid)
            if uuid not in m.gpus and len(m.gpus) < self.c.gpus:
                m.gpus[uuid] = {
                    "uuid": uuid,
                    "index": json_int(g.get("index")),
                    "minor": json_int(g.get("minor")),
                    "name": text(g.get("name"), 128),
                    "memory": json_int(g.get("memory")),
                    "pci_bus_id": text(g.get("pci_bus_id") or "", 64),
                    "health": None,  # (seq, [(what, value)...]) of its first observation with health
                    "health_last": None,
                    "health_changes": [],  # (seq, "fact: before -> after")
                }
            self._health(ev, m.gpus.get(uuid), g.get("health"))
        for e in a.get("gpu_events") or []:
            if isinstance(e, dict) and len(m.gpu_events) < self.c.processes:
                from observe.devices.health import describe_event

                m.gpu_events.append({"seq": ev.seq, "text": text(describe_event(e), 256)})
        procs = a.get("processes")
        for p in procs if isinstance(procs, list) else []:
            if not isinstance(p, dict):
                continue
            key = (json_int(p.get("pid")), text(p.get("gpu"), 128), p.get("in_tree") is True)
            if key in m.gpu_processes:
                continue
            if len(m.gpu_processes) >= self.c.processes:
                m.gpu_processes_omitted += 1
                continue
            argv = p.get("argv")
            steps = p.get("steps")
            m.gpu_processes[key] = {
                "pid": key[0],
                "gpu": key[1],
                "in_tree": key[2],
                "argv": " ".join(text(v, 256) for v in argv[:32]) if isinstance(argv, list) else "",
                "steps": ", ".join(text(s, 128) for s in steps[:8]) if isinstance(steps, list) else "",
                "first_seq": ev.seq,
            }

    def _health(self, ev: Event, gpu: dict[str, Any] | None, health: Any) -> None:
        """A GPU's health panel: its facts at the first observation that has them, each change after it."""
        if gpu is None or not isinstance(health, dict):
            return
        from observe.devices.health import describe_health, health_changes

        if gpu["health"] is None:
            gpu["health"] = (ev.seq, [(w, text(v, 256)) for w, v in describe_health(health)])
        elif len(gpu["health_changes"]) < self.c.processes:
            gpu["health_changes"] += [(ev.seq, text(c, 512)) for c in health_changes(gpu["health_last"], health)]
        gpu["health_last"] = health

    def _on_telemetry(self, ev: Event, a: dict[str, Any]) -> None:
        m = self.m
        m.telemetry += 1
        t = ev.mono_ns - (m.process_start_mono if m.process_start_mono is not None else m.start_mono or 0)
        tree = a.get("tree")
        if isinstance(tree, dict):
            cpu, rss = json_int(tree.get("cpu_ns")), json_int(tree.get("rss"))
            if cpu is not None:
                # cpu_ns counts live processes plus what they reaped: a child that exits leaves the
                # sum until its parent reaps it, then comes back. Counting only what rises above the
                # high-water mark keeps that round trip from showing as a burst.
                if self.last_cpu is not None and ev.mono_ns > self.last_cpu[0]:
                    dt = ev.mono_ns - self.last_cpu[0]
                    m.cpu.add(t, max(cpu - self.last_cpu[1], 0) * 100 // dt)
                    self.last_cpu = (ev.mono_ns, max(cpu, self.last_cpu[1]))
                elif self.last_cpu is None:
                    self.last_cpu = (ev.mono_ns, cpu)
            if rss is not None:
                m.rss.add(t, rss)
        gpus = a.get("gpus")
        for g in gpus if isinstance(gpus, list) else []:
            if not isinstance(g, dict):
                continue
            uuid = text(g.get("uuid"), 128)
            util, mem = json_int(g.get("utilization")), json_int(g.get("memory_used"))
            if uuid not in m.gpu_util and len(m.gpu_util) >= self.c.gpus:
                continue
            if util is not None:
                m.gpu_util.setdefault(uuid, Series(uuid)).add(t, util)
            if mem is not None:
                m.gpu_mem.setdefault(uuid, Series(uuid)).add(t, mem)

    def finish(self) -> None:
        self._end_preview()


def display_or(value: Any, default: str) -> str:
    return default if value is None else text(value, 128)


def cited_seqs(model: ReportModel) -> list[int]:
    """The seqs the verdict's checks cite (valid integers, capped), sorted."""
    v = model.verdict or {}
    checks = v.get("checks")
    seqs: set[int] = set()
    for c in checks if isinstance(checks, list) else []:
        ev = c.get("evidence") if isinstance(c, dict) else None
        for s in ev if isinstance(ev, list) else []:
            if json_int(s) is not None and s >= 0:
                seqs.add(s)
    return sorted(seqs)[: model.caps.cited]


#: A stream of at most this many events and bytes (data and attrs) is read once for its page: its events are
#: kept for the cited ones; a larger one is read again for them (issue 36: most of a site's reports are small).
KEEP_EVENTS = 20_000
KEEP_BYTES = 16 << 20


def build_model(
    stream: Path | str,
    caps: Caps = CAPS,
    *,
    public_key: Verifier | None = None,
    verification: Verification | None = None,
) -> ReportModel:
    """Read ``stream`` (damaged or not) into the page's model; never raises a ``Refusal``.

    With ``public_key`` the seal's signature is checked too (``aos verify --key``). ``verification``: the
    stream's verification by ``aos.verify.verify_stream`` (with no key) that the caller already holds, of the
    same file: taken as the page's, not verified again (a site verifies each stream once, issue 36).
    """
    from aos.refusals import Refusal
    from aos.verify import verify_stream

    path = str(stream)
    model = ReportModel(path=path, caps=caps)
    collector = _Collector(model)
    kept: list[Event] | None = []  # a small stream's events, for its cited ones: not read a second time
    held = 0
    for ev in _events(path, model):
        collector.feed(ev)
        if kept is not None:
            held += len(ev.data or b"") + len(ev.attrs_json)
            kept = kept if len(kept) < KEEP_EVENTS and held <= KEEP_BYTES else None
            if kept is not None:
                kept.append(ev)
    collector.finish()
    wanted = frozenset(cited_seqs(model))
    if wanted:
        from observe.readback.events import only_seqs

        sink = ReportModel(path=path, caps=caps)  # damage of the re-read is already known
        names = {span: st.name for span, st in collector.spans.items()}
        for ev in only_seqs(kept if kept is not None else _events(path, sink), wanted, set()):
            model.cited[ev.seq] = _cited(ev, caps, names)
    from observe.report.tests import read_tests

    model.tests = read_tests(path, model.verdict)
    if model.unreadable is None:
        try:
            v = verification if verification is not None and public_key is None else verify_stream(path, public_key)
        except Refusal as exc:
            model.refusal = exc
        else:
            model.sealed = {
                "events": v.events,
                "head": v.head,
                "signed": v.signed,
                "key_id": v.key_id,
                "checked": v.signature_checked,
            }
    return model


def _cited(ev: Event, caps: Caps, names: dict[str, str]) -> dict[str, Any]:
    data = ev.data
    step = None if ev.step is None else names.get(ev.step) or text(ev.step, 128)
    shown = None
    if data is not None:
        head = text(data[:256].decode("utf-8", "backslashreplace"), 1024)
        shown = f"{len(data)} B: {head}" + (" ..." if len(data) > 256 else "")
    return {
        "seq": ev.seq,
        "missing": False,
        "kind": text(ev.kind, 64),
        "step": step,
        "attrs": text(ev.attrs_json, caps.attrs),
        "data": shown,
    }
