"""``alpha observe export``: OTLP/JSON traces and asciicast v2, from a verified stream.

OTLP is checked by parsing it into ``opentelemetry-proto``'s ``ExportTraceServiceRequest``
(strictly: an unknown field fails); asciicast by its structure and by ``asciinema cat``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aos.event import Event
from aos.reader import read_stream
from gates.testing import SyntheticStream
from tests.helpers.cli import invoke
from tests.helpers.run import alpha

# A lane with nested steps, output on both channels, receipts outside and inside a step,
# a captured file, and a failing step; the command itself exits 0.
LANE = r"""
printf 'start\n'
alpha observe step build -- sh -c '
  printf "building\n"; printf "warn\n" >&2
  alpha observe step inner -- sh -c "printf \"deep \\303\\251\\n\"; alpha observe receipt inner-facts --field n=1"
  echo built > app.txt; alpha observe artifact app.txt'
alpha observe receipt unit --status pass --field passed=3
alpha observe step check -- sh -c 'printf "bad\n" >&2; exit 4'
printf 'done\n'
"""


@pytest.fixture(scope="module")
def lane(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real recording of LANE under the exit-zero gate (one subprocess for the whole module)."""
    d = tmp_path_factory.mktemp("lane")
    out = d / "lane.aos"
    proc = alpha(
        "observe", "gate", "exit-zero", "--quiet", "--out", str(out), "--", "sh", "-c", LANE, cwd=d, timeout=120
    )
    assert 0 == proc.returncode, proc.stderr
    return out


def export(stream: Path, fmt: str, out: Path) -> tuple[int, str]:
    r = invoke("observe", "export", str(stream), "--format", fmt, "-o", str(out))
    return r.exit_code, r.stderr


def events_of(stream: Path) -> list[Event]:
    return read_stream(stream).events


# -- OTLP -----------------------------------------------------------------------------------


def parse_otlp(text: str) -> Any:
    """Parse OTLP/JSON into the protobuf request, strictly.

    OTLP/JSON writes trace and span ids as hex (the OTLP spec's exception to the
    protobuf JSON mapping, which would want base64); they are converted first,
    exactly as an OTLP/JSON receiver does.
    """
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = json.loads(text)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in span:
                        assert span[k] == span[k].lower()
                        assert len(span[k]) in (16, 32)
                        span[k] = base64.b64encode(bytes.fromhex(span[k])).decode()
    req = ExportTraceServiceRequest()
    json_format.Parse(json.dumps(doc), req, ignore_unknown_fields=False)
    return req


def attrs(kvs: Any) -> dict[str, Any]:
    """Protobuf KeyValues as a dict of plain values."""
    out: dict[str, Any] = {}
    for kv in kvs:
        which = kv.value.WhichOneof("value")
        v = getattr(kv.value, which)
        if which == "array_value":
            v = [getattr(x, x.WhichOneof("value")) for x in v.values]
        out[kv.key] = v
    return out


@pytest.fixture(scope="module")
def otlp(lane: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    out = tmp_path_factory.mktemp("otlp") / "t.json"
    code, err = export(lane, "otlp", out)
    assert 0 == code, err
    text = out.read_text()
    return parse_otlp(text), text


class TestOtlp:
    def test_parses_as_export_trace_service_request(self, lane: Path, otlp: tuple[Any, str]) -> None:
        """The file is one ExportTraceServiceRequest: one resource, one scope, one trace (the stream id)."""
        req, _ = otlp
        assert 1 == len(req.resource_spans)
        rs = req.resource_spans[0]
        assert 1 == len(rs.scope_spans)
        res = attrs(rs.resource.attributes)
        sid = read_stream(lane).stream_id
        assert ("alpha-observe", sid) == (res["service.name"], res["aos.stream_id"])
        assert "alpha-observe" == rs.scope_spans[0].scope.name
        spans = rs.scope_spans[0].spans
        assert {bytes.fromhex(sid)} == {s.trace_id for s in spans}
        assert all(len(s.span_id) == 8 and any(s.span_id) for s in spans)
        assert len(spans) == len({s.span_id for s in spans})

    def test_root_span_is_the_command(self, lane: Path, otlp: tuple[Any, str]) -> None:
        """The root spans process.start..process.exit, with the exit code, status OK for exit 0."""
        from opentelemetry.proto.trace.v1.trace_pb2 import Status

        req, _ = otlp
        evs = events_of(lane)
        start = next(e for e in evs if e.kind == "process.start")
        end = next(e for e in evs if e.kind == "process.exit")
        roots = [s for s in req.resource_spans[0].scope_spans[0].spans if not s.parent_span_id]
        assert 1 == len(roots)
        root = roots[0]
        assert (start.wall_ns, end.wall_ns) == (root.start_time_unix_nano, root.end_time_unix_nano)
        assert Status.STATUS_CODE_OK == root.status.code
        a = attrs(root.attributes)
        assert (0, "exit-zero", "pass", "command") == (
            a["process.exit.code"],
            a["aos.gate"],
            a["aos.verdict"],
            a["aos.scope"],
        )
        assert ["sh", "-c", LANE] == a["process.command_args"]

    def test_a_span_per_step_under_its_parent(self, lane: Path, otlp: tuple[Any, str]) -> None:
        """Each step is a span with its exit code and status, its parent the enclosing step or the root."""
        from opentelemetry.proto.trace.v1.trace_pb2 import Status

        req, _ = otlp
        spans = req.resource_spans[0].scope_spans[0].spans
        by_name = {s.name: s for s in spans}
        root = next(s for s in spans if not s.parent_span_id)
        build, inner, check = by_name["build"], by_name["inner"], by_name["check"]
        assert 4 == len(spans)
        assert (root.span_id, build.span_id, root.span_id) == (
            build.parent_span_id,
            inner.parent_span_id,
            check.parent_span_id,
        )
        assert (0, 0, 4) == tuple(attrs(s.attributes)["process.exit.code"] for s in (build, inner, check))
        assert (Status.STATUS_CODE_OK, Status.STATUS_CODE_ERROR) == (build.status.code, check.status.code)
        assert "exited 4" == check.status.message
        evs = events_of(lane)
        ends = {e.attrs["name"]: e.wall_ns for e in evs if e.kind == "step.end"}
        assert ends["inner"] == inner.end_time_unix_nano
        assert (
            build.start_time_unix_nano
            <= inner.start_time_unix_nano
            <= inner.end_time_unix_nano
            <= build.end_time_unix_nano
        )

    def test_receipts_artifacts_and_checks_are_events(self, otlp: tuple[Any, str]) -> None:
        """Receipts land on the span they were sent from, artifacts too; the gate's checks on the root."""
        req, _ = otlp
        spans = {s.name: s for s in req.resource_spans[0].scope_spans[0].spans}
        root = next(s for s in spans.values() if not s.parent_span_id)
        root_events = [(e.name, attrs(e.attributes)) for e in root.events]
        receipts = [a for n, a in root_events if n == "aos.receipt"]
        assert [("unit", "pass", {"passed": 3})] == [
            (a["aos.receipt.name"], a["aos.receipt.status"], json.loads(a["aos.receipt.fields"])) for a in receipts
        ]
        checks = [a for n, a in root_events if n == "aos.check"]
        assert [("exit-code", "pass")] == [(a["aos.check.name"], a["aos.check.status"]) for a in checks]
        assert checks[0]["aos.check.evidence"]
        inner = [(e.name, attrs(e.attributes)) for e in spans["inner"].events]
        assert [("aos.receipt", "inner-facts")] == [(n, a["aos.receipt.name"]) for n, a in inner]
        build = [(e.name, attrs(e.attributes)) for e in spans["build"].events]
        assert [("aos.artifact", "app.txt")] == [(n, a["aos.artifact.path"]) for n, a in build]

    def test_deterministic(self, lane: Path, otlp: tuple[Any, str], tmp_path: Path) -> None:
        """Exporting the same stream twice gives the same bytes (ids derive from the stream id and seqs)."""
        export(lane, "otlp", tmp_path / "again.json")
        assert otlp[1] == (tmp_path / "again.json").read_text()

    def test_failing_and_unfinished(self, tmp_path: Path) -> None:
        """A command that exited 2 is an ERROR root; a step that never ended is an ERROR span ending with the trace."""
        from opentelemetry.proto.trace.v1.trace_pb2 import Status

        s = SyntheticStream()
        s.step_start("hangs")
        s.exit(2)
        s.write(tmp_path / "s.aos")
        export(tmp_path / "s.aos", "otlp", tmp_path / "t.json")
        spans = {
            x.name: x for x in parse_otlp((tmp_path / "t.json").read_text()).resource_spans[0].scope_spans[0].spans
        }
        root, hangs = spans["lane.sh"], spans["hangs"]
        assert (Status.STATUS_CODE_ERROR, "exited 2") == (root.status.code, root.status.message)
        assert Status.STATUS_CODE_ERROR == hangs.status.code
        assert "never ended" in hangs.status.message
        assert hangs.end_time_unix_nano >= hangs.start_time_unix_nano

    def test_untrusted_step_ids(self, tmp_path: Path) -> None:
        """Step ids the command chose (reused, unknown parents, not UTF-8) still give one span each, well parented."""
        s = SyntheticStream()
        a = s.step_start("same")
        s.step_end("same", 0)
        b = s.step_start("same")
        b["attrs"]["parent"] = "no-such-step"
        c = s.add("step.start", {"name": "bytes", "argv": [], "parent": "same"}, step="\x00bytes_b64:/w==")
        s.add("step.end", {"name": "bytes", "exit_code": 0, "signal": None}, step="\x00bytes_b64:/w==")
        s.step_end("same", 1)
        s.exit(0)
        s.write(tmp_path / "s.aos")
        del a, c
        export(tmp_path / "s.aos", "otlp", tmp_path / "t.json")
        spans = parse_otlp((tmp_path / "t.json").read_text()).resource_spans[0].scope_spans[0].spans
        root = next(x for x in spans if not x.parent_span_id)
        same1, same2, byt = (x for x in spans if x.parent_span_id)
        assert (root.span_id, root.span_id, same2.span_id) == (
            same1.parent_span_id,
            same2.parent_span_id,
            byt.parent_span_id,
        )
        assert "\\xff" == attrs(byt.attributes)["aos.step.id"]

    def test_a_name_not_utf8_is_told_from_its_escape(self, tmp_path: Path) -> None:
        """A step named by the byte 0xff is named U+FFFD with its bytes in aos.step.name_b64, so it is never
        read as a step named by the four characters \\xff; a command not UTF-8 likewise
        (aos.process.command_args_b64)."""
        s = SyntheticStream()
        s.ops[1]["attrs"]["argv"] = ["run", {"bytes_b64": base64.b64encode(b"\xff").decode()}]
        s.add("step.start", {"name": {"bytes_b64": "/w=="}, "argv": []}, step="a")
        s.add("step.end", {"name": {"bytes_b64": "/w=="}, "exit_code": 0, "signal": None}, step="a")
        s.add("step.start", {"name": "\\xff", "argv": []}, step="b")
        s.add("step.end", {"name": "\\xff", "exit_code": 0, "signal": None}, step="b")
        s.exit(0)
        s.write(tmp_path / "s.aos")
        export(tmp_path / "s.aos", "otlp", tmp_path / "t.json")
        spans = parse_otlp((tmp_path / "t.json").read_text()).resource_spans[0].scope_spans[0].spans
        root = next(x for x in spans if not x.parent_span_id)
        named = {x.name: attrs(x.attributes).get("aos.step.name_b64") for x in spans if x.parent_span_id}
        assert {"\ufffd": "/w==", "\\xff": None} == named
        assert ("run '\ufffd'", ["cnVu", "/w=="]) == (root.name, attrs(root.attributes)["aos.process.command_args_b64"])


# -- asciicast ------------------------------------------------------------------------------


def parse_cast(text: str) -> tuple[dict[str, Any], list[list[Any]]]:
    """Check asciicast v2 strictly: a header line, then [time, code, data] lines with times non-decreasing."""
    assert text.endswith("\n")
    lines = text.split("\n")[:-1]
    header = json.loads(lines[0])
    assert 2 == header["version"]
    assert {"version", "width", "height"} <= set(header)
    assert set(header) <= {
        "version",
        "width",
        "height",
        "timestamp",
        "duration",
        "idle_time_limit",
        "command",
        "title",
        "env",
        "theme",
    }
    for k in ("width", "height", "timestamp"):
        assert type(header[k]) is int
        assert header[k] > 0
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in header.get("env", {}).items())
    events = [json.loads(line) for line in lines[1:]]
    last = 0.0
    for ev in events:
        assert 3 == len(ev)
        t, code, data = ev
        assert isinstance(t, float)
        assert t >= last
        assert code in ("o", "m")
        assert isinstance(data, str)
        last = t
    assert header["duration"] >= last
    return header, events


class TestAsciicast:
    def test_structure_and_output(self, lane: Path, tmp_path: Path) -> None:
        """Header then events; the "o" data is stdout and stderr as recorded (LF shown as CRLF), markers at steps."""
        code, err = export(lane, "asciicast", tmp_path / "c.cast")
        assert 0 == code, err
        header, events = parse_cast((tmp_path / "c.cast").read_text(encoding="utf-8"))
        evs = events_of(lane)
        start = next(e for e in evs if e.kind == "process.start")
        assert start.wall_ns // 10**9 == header["timestamp"]
        assert (80, 24) == (header["width"], header["height"])
        recorded = b"".join(e.data or b"" for e in evs if e.kind in ("stdout", "stderr")).decode()
        assert recorded.replace("\n", "\r\n") == "".join(d for _, c, d in events if c == "o")
        assert "deep é\r\n" in recorded.replace("\n", "\r\n")
        assert ["build", "inner", "check"] == [d for _, c, d in events if c == "m"]
        stdout_times = [(e.mono_ns - start.mono_ns) / 1e9 for e in evs if e.kind in ("stdout", "stderr")]
        assert [round(t, 6) for t in stdout_times] == [t for t, c, _ in events if c == "o"]

    def test_plays_with_asciinema_cat(self, lane: Path, tmp_path: Path) -> None:
        """`asciinema cat` (the asciinema package) reads the file and prints the recorded terminal output."""
        export(lane, "asciicast", tmp_path / "c.cast")
        proc = subprocess.run(
            [sys.executable, "-m", "asciinema", "cat", str(tmp_path / "c.cast")],
            capture_output=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert 0 == proc.returncode, proc.stderr
        recorded = b"".join(e.data or b"" for e in events_of(lane) if e.kind in ("stdout", "stderr"))
        assert recorded.replace(b"\n", b"\r\n") == proc.stdout

    def test_utf8_split_across_reads_and_invalid_bytes(self, tmp_path: Path) -> None:
        """A character split across two reads is one character; bytes that are not UTF-8 show as U+FFFD."""
        s = SyntheticStream()
        s.output("stdout", b"caf\xc3")
        s.output("stderr", b"!")
        s.output("stdout", b"\xa9 \xff\n")
        s.exit(0)
        s.write(tmp_path / "s.aos")
        export(tmp_path / "s.aos", "asciicast", tmp_path / "c.cast")
        _, events = parse_cast((tmp_path / "c.cast").read_text(encoding="utf-8"))
        assert "caf!\u00e9 \ufffd\r\n" == "".join(d for _, c, d in events if c == "o")

    def test_pty_output_is_kept_as_is(self, tmp_path: Path) -> None:
        """Under --pty the terminal already wrote CRLF: the bytes are kept; recorded COLUMNS/LINES size it."""
        s = SyntheticStream(env={"COLUMNS": "132", "LINES": "50", "TERM": "xterm-256color", "SHELL": "[NOT RECORDED]"})
        s.ops[0]["attrs"]["pty"] = True
        s.output("stdout", b"\x1b[32mok\x1b[0m\r\nnext\n")
        s.exit(0)
        s.write(tmp_path / "s.aos")
        export(tmp_path / "s.aos", "asciicast", tmp_path / "c.cast")
        header, events = parse_cast((tmp_path / "c.cast").read_text(encoding="utf-8"))
        assert (132, 50, {"TERM": "xterm-256color"}) == (header["width"], header["height"], header["env"])
        assert "\x1b[32mok\x1b[0m\r\nnext\n" == "".join(d for _, c, d in events if c == "o")


# -- refusals -------------------------------------------------------------------------------


class TestRefusals:
    @pytest.mark.parametrize("fmt", ["otlp", "asciicast", "parquet"])
    def test_tampered_stream(self, tmp_path: Path, fmt: str) -> None:
        """A stream that does not verify is refused by name and nothing is written."""
        from tracker.testing import flip_byte

        s = SyntheticStream()
        s.output("stdout", b"x" * 4096)
        s.exit(0)
        s.write(tmp_path / "s.aos")
        flip_byte(tmp_path / "s.aos")
        code, err = export(tmp_path / "s.aos", fmt, tmp_path / "out")
        assert 1 == code
        assert err.startswith("refused: stream-")
        assert not (tmp_path / "out").exists()

    def test_unsealed_stream(self, tmp_path: Path) -> None:
        """An unsealed stream is refused: stream-unsealed."""
        s = SyntheticStream()
        s.write(tmp_path / "s.aos", seal=False)
        code, err = export(tmp_path / "s.aos", "otlp", tmp_path / "out")
        assert (1, "refused: stream-unsealed") == (code, err.split(":", 2)[0] + ":" + err.split(":", 2)[1])

    def test_unknown_format_is_usage(self, tmp_path: Path) -> None:
        """An unknown --format is a usage error (exit 2)."""
        assert 2 == export(tmp_path / "s.aos", "jaeger", tmp_path / "out")[0]


# -- memory: the file's bytes, once; never the events or the output whole ----------------------


def _peak_rss_mib(argv: list[str], cwd: Path) -> float:
    """The peak resident set of ``alpha`` running ``argv`` in a process of its own."""
    from tests.helpers.run import ALPHA

    proc = subprocess.Popen([ALPHA, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    assert 0 == os.waitstatus_to_exitcode(status), proc.stderr.read() if proc.stderr else b""
    return usage.ru_maxrss / 1024


def _noisy(d: Path, mib: int) -> Path:
    """A stream (exit-zero's pass) of ``mib`` MiB of output that does not compress: the file is as big."""
    out = d / f"noisy-{mib}.aos"
    script = f"head -c {mib * (1 << 20)} /dev/urandom"
    proc = alpha("observe", "gate", "exit-zero", "--quiet", "--out", str(out), "--", "sh", "-c", script, cwd=d)
    assert 0 == proc.returncode, proc.stderr
    return out


@pytest.mark.parametrize(
    "argv",
    [
        ["observe", "export", "{}", "--format", "asciicast", "-o", "x.cast"],
        ["observe", "export", "{}", "--format", "otlp", "-o", "x.json"],
        ["observe", "export", "{}", "--format", "parquet", "-o", "x.parquet"],
        ["observe", "attest", "{}", "--attester-id", "https://ci.example/a", "-o", "x.att"],
    ],
    ids=["asciicast", "otlp", "parquet", "attest"],
)
def test_memory_stays_near_the_file_size(tmp_path: Path, argv: list[str]) -> None:
    """Exporting or attesting a stream holds its file's bytes once (read once, so what is exported is what was
    verified) and a batch of events at a time: the peak grows with the file, not several times over. Before,
    every event was kept and the asciicast built whole: 6.5x the file for asciicast, 2.5x for the others."""
    small, big = _noisy(tmp_path, 2), _noisy(tmp_path, 64)
    file_mib = big.stat().st_size / (1 << 20)
    base = _peak_rss_mib([a.replace("{}", str(small)) for a in argv], tmp_path)
    peak = _peak_rss_mib([a.replace("{}", str(big)) for a in argv], tmp_path)
    assert peak - base < 1.4 * file_mib + 24, (base, peak, file_mib)
