"""Every event the recorder writes stays within the event bound, whatever the recorded command sends or is run with.

An event over the bound is refused by the writer: before, the recording then
stopped writing (exit 125, an unsealed stream), so a command could make its own
recording unreadable. Each case is a hostile input that did that; now what the
command controls is cut, its length and SHA-256 noted, and the stream seals.
"""

from __future__ import annotations

import base64
import hashlib
import os
import resource
import subprocess
import sys
from pathlib import Path

from aos.bounds import ARGV_ITEM, REST_KEY
from aos.event import Event
from aos.framing import MAX_EVENT_BYTES
from aos.text import display
from aos.verify import verify_stream
from tests.helpers.recorder import events, one, record
from tests.helpers.run import alpha

#: A client of the control socket that sends one JSON message (argv[1], a Python literal) and prints the answer.
CLIENT = """
import ast, json, os, socket, sys
from observe.channel.protocol import FrameReader, encode_frame
msg = ast.literal_eval(open(sys.argv[1]).read())
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["AOS_CONTROL"])
s.settimeout(30)
s.sendall(encode_frame(b"J", json.dumps(msg, ensure_ascii=False).encode()))  # UTF-8 as is, no escapes
reader = FrameReader()
while True:
    data = s.recv(1 << 16)
    if not data:
        break
    frames = [p for k, p in reader.feed(data) if k == b"J"]
    if frames:
        print(frames[0].decode()[:300], flush=True)
        break
"""

#: 2 MiB of a byte that JSON spells in 6 (``\\u0001``): 2.7 MiB as the client's base64, 12 MiB as attrs.
CONTROL = b"\x01" * (2 << 20)


def _b64(raw: bytes) -> dict[str, str]:
    return {"bytes_b64": base64.b64encode(raw).decode()}


def _send(tmp_path: Path, msg: dict[str, object]) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    """Record the client sending ``msg``; the recording must end with the client's own exit code."""
    (tmp_path / "client.py").write_text(CLIENT)
    (tmp_path / "msg.txt").write_text(repr(msg))
    return record(tmp_path, [sys.executable, str(tmp_path / "client.py"), str(tmp_path / "msg.txt")], "--quiet")


def _sealed(proc: subprocess.CompletedProcess[bytes], out: Path) -> list[Event]:
    """The recording ended 0, its stream verifies, and every event is within the bound."""
    assert 0 == proc.returncode, proc.stderr[-2000:]
    assert verify_stream(out).events > 0
    evs = events(out)
    assert [] == [e.kind for e in evs if len(e.attrs_json.encode()) + len(e.data or b"") > MAX_EVENT_BYTES]
    return evs


def _cut(raw: bytes) -> str:
    return f"[CUT: {len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()}]"


def test_a_step_argv_item_of_control_bytes_is_cut(tmp_path: Path) -> None:
    """step.run with a 2 MiB argv item of control bytes: step.start and step.end cut it, noting its size and digest."""
    proc, out = _send(tmp_path, {"op": "step.run", "name": "n", "argv": ["true", _b64(CONTROL)], "env": {}})
    evs = _sealed(proc, out)
    for kind in ("step.start", "step.end"):
        argv = one(evs, kind).attrs["argv"]
        assert ("true", True) == (argv[0], display(argv[1]).endswith(_cut(CONTROL))), kind
        assert len(display(argv[1])) < ARGV_ITEM


def test_a_hand_opened_span_of_a_huge_name_and_many_args_is_bounded(tmp_path: Path) -> None:
    """step.start by hand with a 1 MiB name and 400,000 args: the name is cut, the args past the budget noted."""
    name = CONTROL[: 1 << 20]
    proc, out = _send(tmp_path, {"op": "step.start", "name": _b64(name), "argv": ["a"] * 400_000})
    start = one(_sealed(proc, out), "step.start").attrs
    assert display(start["name"]).endswith(_cut(name))
    assert start["argv"][-1].startswith("[NOT RECORDED: ")
    assert " more items, " in start["argv"][-1]
    assert len(start["argv"]) < 400_000


def test_an_unknown_op_of_a_long_name_is_a_bounded_recorder_error(tmp_path: Path) -> None:
    """An op of 1.9 M characters repr() writes in 4 each: its recorder.error is cut, the stream seals."""
    proc, out = _send(tmp_path, {"op": "\x85" * 1_900_000})
    error = one(_sealed(proc, out), "recorder.error").attrs["error"]
    assert error.startswith("bad control message: unknown op '\\x85")
    assert "[CUT: " in error


def test_a_missing_artifact_pattern_of_control_bytes_is_cut(tmp_path: Path) -> None:
    """An artifact request naming a 2 MiB pattern that matches nothing: artifact.missing cuts the pattern."""
    proc, out = _send(tmp_path, {"op": "artifact", "paths": [_b64(CONTROL)], "cwd": str(tmp_path)})
    missing = one(_sealed(proc, out), "artifact.missing").attrs["pattern"]
    assert display(missing).endswith(_cut(CONTROL))


def test_a_receipt_whose_numbers_grow_once_parsed_is_invalid(tmp_path: Path) -> None:
    """A 1.9 MB receipt line of 9e20s (21 bytes each in canonical JSON): a receipt.invalid naming its size."""
    line = '{"name":"r","fields":{"n":[' + ",".join(["9e20"] * 380_000) + "]}}"
    (tmp_path / "line.json").write_text(line + "\n")
    script = "import os, shutil; shutil.copyfileobj(open('line.json'), open(os.environ['AOS_RECEIPTS'], 'a'))"
    proc, out = record(tmp_path, [sys.executable, "-c", script], "--quiet", cwd=tmp_path)
    invalid = one(_sealed(proc, out), "receipt.invalid").attrs
    assert (len(line), True) == (invalid["length"], "once parsed" in invalid["reason"])


def test_a_command_argv_of_control_bytes_keeps_stream_open_within_the_bound(tmp_path: Path) -> None:
    """Eight 64 KiB argv items of control bytes (3 MiB as JSON, twice with recorder_argv) are cut in stream.open."""
    item = os.fsdecode(b"\x01" * ARGV_ITEM)
    proc, out = record(tmp_path, [sys.executable, "-c", "import sys; sys.exit(7)", *[item] * 8], "--quiet")
    assert 7 == proc.returncode, proc.stderr[-2000:]
    assert verify_stream(out).events > 0
    argv = one(events(out), "stream.open").attrs["argv"]
    assert [True] * 8 == [display(v).endswith(_cut(b"\x01" * ARGV_ITEM)) for v in argv[3:]]


#: The command's environment: 50,000 variables of 60-byte names (4 MB as stream.open's env, names alone) and 16
#: values of 127 KiB of control bytes recorded by --env (12 MiB as JSON). Linux's execve takes no string over
#: 128 KiB and at most 6 MiB of argv and environment in all (with the stack limit raised): a single 8 MiB value
#: cannot reach a command, so the values' budget is tried with as many of the largest as execve passes.
VARIABLES = 50_000
VALUES = 16
VALUE = 127 * 1024


def _big_stack() -> None:
    resource.setrlimit(resource.RLIMIT_STACK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def test_an_environment_far_beyond_the_budget_is_recorded_and_said(tmp_path: Path) -> None:
    """50,000 variables and 2 MiB of --env values: the stream verifies, show reads it, stream.open says what was cut."""
    env = {f"HOSTILE_{i:06d}_" + "N" * 45: "v" for i in range(VARIABLES)}
    env.update({f"BIG_{i:02d}": "\x01" * VALUE for i in range(VALUES)})
    names = [opt for i in range(VALUES) for opt in ("--env", f"BIG_{i:02d}")]
    proc, out = record(tmp_path, ["true"], "--quiet", *names, env=env, preexec_fn=_big_stack)
    assert 0 == proc.returncode, proc.stderr[-2000:]
    assert verify_stream(out).events > 0
    recorded = one(events(out), "stream.open").attrs["env"]
    rest = recorded[REST_KEY]
    assert rest.startswith("[NOT RECORDED: ")
    assert " variables, " in rest
    assert ", sha256 " in rest
    kept = sum(1 for k in recorded if k.startswith("HOSTILE_"))
    assert (True, True) == (0 < kept < VARIABLES, int(rest.split()[2]) + len(recorded) - 1 >= VARIABLES + VALUES)
    values = [recorded[k] for k in recorded if k.startswith("BIG_")]
    assert f"[NOT RECORDED: {VALUE} bytes]" in values, [v[:40] for v in values]
    shown = alpha("observe", "show", str(out), text=True)
    assert 0 == shown.returncode, shown.stderr[-2000:]
    assert "stream.open env: " in shown.stdout
    assert " variables not recorded" in shown.stdout


def test_the_recorders_sink_records_an_over_bound_event_cut_rather_than_failing(tmp_path: Path) -> None:
    """An event whose attrs are over the bound (from any part of the recorder) is recorded cut; the stream seals."""
    from aos.writer import StreamWriter
    from observe.recorder.sinks import Sink

    out = tmp_path / "s.aos"
    writer = StreamWriter(out, background_flush=False)
    sink = Sink(writer)
    sink.append("stream.open", {"argv": ["x"]})
    sink.append("process.stray", {"ended": [{"pid": i, "argv": ["\x01" * ARGV_ITEM] * 8} for i in range(20)]})
    sink.drain()
    assert sink.failure is None
    writer.seal()
    writer.close()
    assert 1 == verify_stream(out).kinds["process.stray"]
    cut = one(events(out), "process.stray").attrs["cut"]
    assert (True, 64) == (cut["bytes"] > MAX_EVENT_BYTES, len(cut["sha256"]))
