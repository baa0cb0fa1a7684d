"""Steps are run by the recorder: a step's exit code, signal, duration and output are its own observation.

Issue 21, finding 1: a command that spoke the control protocol by hand opened a span
``build``, ran ``sh -c 'echo boom >&2; exit 1'`` itself, then sent an ``e`` frame
``built ok`` and ``step.end`` with ``exit_code: 0``, and got ``step 'build' ran 1x,
exited 0`` and a pass of a gate requiring ``exit = 0`` and ``stderr_contains = "built
ok"``. The recorder now starts a step's command itself, owns its pipes and waits for
it; a span opened by hand carries no result.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gates.evaluation import evaluate_events
from gates.language import parse_gate_text
from tests.helpers.recorder import events, one, output, record

GATE = """
[gate]
name = "built"
description = "the build step succeeded and said so"

[[step]]
name = "build"
exit = 0
stderr_contains = "built ok"
"""

#: The forger of finding 1: a span opened by hand, results of its own choosing.
FORGER = """
import os, socket, subprocess
from observe.channel.protocol import encode_frame, encode_json
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["AOS_CONTROL"])
s.settimeout(20)
s.sendall(encode_json({"op": "step.start", "span": "f0f0f0f0f0f0f0f0", "name": "build", "argv": ["make"],
                       "parent": None}))
print("start", s.recv(65536)[5:].decode(), flush=True)
subprocess.run(["sh", "-c", "echo boom >&2; exit 1"])
s.sendall(encode_frame(b"e", b"built ok\\n"))
s.sendall(encode_frame(b"E", b"built ok\\n"))
s.sendall(encode_json({"op": "step.end", "exit_code": 0, "signal": None, "duration_ns": 5}))
print("end", s.recv(65536)[5:].decode(), flush=True)
"""


def _verdict(path: Path) -> tuple[str, str]:
    """The gate's verdict over the recorded stream and its step check's reason."""
    verdict = evaluate_events(parse_gate_text(GATE, "built.toml"), events(path))
    (check,) = [c for c in verdict.checks if c.name.startswith("step")]
    return verdict.verdict, check.reason


class TestForgedStep:
    def test_a_span_opened_by_hand_cannot_claim_a_result(self, tmp_path: Path) -> None:
        """The forger's exit code 0 and its 'built ok' frame are not the step's: the gate fails, the claims are kept apart."""
        forger = tmp_path / "forge.py"
        forger.write_text(FORGER)
        proc, path = record(tmp_path, [sys.executable, str(forger)], "--quiet", "--observe-devices", "off")
        assert 0 == proc.returncode, proc.stderr
        verdict, reason = _verdict(path)
        assert "fail" == verdict, reason
        assert "exited 0" not in reason
        evs = events(path)
        start, end = one(evs, "step.start"), one(evs, "step.end")
        assert (None, None, None) == (end.attrs["exit_code"], end.attrs["signal"], end.attrs["duration_ns"])
        assert ("client", "client") == (start.attrs["runner"], end.attrs["runner"])
        assert {"exit_code": 0, "signal": None, "duration_ns": 5, "stderr_bytes": 18} == end.attrs["refused"]
        assert b"" == output(evs, "stderr", start.step)
        assert start.step != "f0f0f0f0f0f0f0f0"  # the span id is the recorder's, never the client's

    def test_the_real_step_fails_the_gate_with_what_it_really_did(self, tmp_path: Path) -> None:
        """The same command run as a step: exit 1 and 'boom' recorded, so the gate fails on the truth."""
        script = "alpha observe step build -- sh -c 'echo boom >&2; exit 1'; echo rc=$?"
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off")
        assert b"rc=1\n" == proc.stdout, proc.stderr
        verdict, reason = _verdict(path)
        assert ("fail", True) == (verdict, "exited 1" in reason), reason
        evs = events(path)
        start, end = one(evs, "step.start"), one(evs, "step.end")
        assert ("recorder", 1, None) == (end.attrs["runner"], end.attrs["exit_code"], end.attrs["signal"])
        assert b"boom\n" == output(evs, "stderr", start.step)

    def test_a_real_passing_step_passes(self, tmp_path: Path) -> None:
        """A step that really exits 0 and really prints 'built ok' on stderr passes the same gate."""
        script = "alpha observe step build -- sh -c 'echo built ok >&2'"
        proc, path = record(tmp_path, ["sh", "-c", script], "--quiet", "--observe-devices", "off")
        assert 0 == proc.returncode, proc.stderr
        assert ("pass", True) == (_verdict(path)[0], "exited 0" in _verdict(path)[1])
