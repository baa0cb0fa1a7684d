"""Steps are run by the recorder: a step's exit code, signal, duration and output are its own observation.

Issue 21, finding 1: a command that spoke the control protocol by hand opened a span
``build``, ran ``sh -c 'echo boom >&2; exit 1'`` itself, then sent an ``e`` frame
``built ok`` and ``step.end`` with ``exit_code: 0``, and got ``step 'build' ran 1x,
exited 0`` and a pass of a gate requiring ``exit = 0`` and ``stderr_contains = "built
ok"``. The recorder now starts a step's command itself, owns its pipes and waits for
it; a span opened by hand carries no result.
"""

from __future__ import annotations

import hashlib
import os
import select
import selectors
import signal
import socket
import sys
from pathlib import Path

from aos.writer import StreamWriter
from gates.evaluation import evaluate_events
from gates.language import parse_gate_text
from observe.channel.protocol import FRAME_ERR, FrameReader
from observe.recorder.sinks import Echo, Sink
from observe.recorder.steps import Run, Steps
from observe.secrets.masking import SecretSet
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
        """The forger's exit 0 and 'built ok' frame are not the step's: the gate fails, the claims are kept apart."""
        forger = tmp_path / "forge.py"
        forger.write_text(FORGER)
        proc, path = record(tmp_path, [sys.executable, str(forger)], "--quiet", "--observe-devices", "off")
        assert 0 == proc.returncode, proc.stderr
        verdict, reason = _verdict(path)
        assert "fail" == verdict, reason
        assert "exited 0" not in reason
        assert "span opened by hand" in reason
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


#: A client that asks the recorder to run a failing step, then claims a success for it.
RUN_FORGER = """
import json, os, socket, time
from observe.channel.protocol import encode_frame, encode_json
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["AOS_CONTROL"])
s.settimeout(20)
s.sendall(encode_json({"op": "step.run", "name": "build", "argv": ["sh", "-c", "sleep 0.5; echo boom >&2; exit 1"],
                       "cwd": os.getcwd(), "env": dict(os.environ), "echo": [False, False], "stdin": False}))
s.sendall(encode_frame(b"e", b"built ok\\n"))
s.sendall(encode_json({"op": "step.end", "exit_code": 0, "signal": None, "duration_ns": 5}))
print("answer", s.recv(65536) == b"", flush=True)
time.sleep(2)  # the step runs on (the recorder's child): it is not ended with its client
"""


def _step(evs: list, name: str) -> tuple[object, object]:
    """The ``step.start`` and ``step.end`` of the step called ``name``."""
    (start,) = [e for e in evs if e.kind == "step.start" and e.attrs["name"] == name]
    (end,) = [e for e in evs if e.kind == "step.end" and e.step == start.step]
    return start, end


class TestClientsCannotSetResults:
    def test_a_client_of_a_recorder_run_step_cannot_end_it(self, tmp_path: Path) -> None:
        """step.end and output frames on a step the recorder runs are refused: its end is what the command did."""
        forger = tmp_path / "forge.py"
        forger.write_text(RUN_FORGER)
        proc, path = record(tmp_path, [sys.executable, str(forger)], "--quiet", "--observe-devices", "off")
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        start, end = _step(evs, "build")
        assert (1, None, True) == (end.attrs["exit_code"], end.attrs["signal"], end.attrs["client_gone"])
        assert end.attrs["duration_ns"] >= 400_000_000
        assert {"stderr_bytes": 9} == end.attrs["refused"]
        assert b"boom\n" == output(evs, "stderr", start.step)
        assert "step.end of no span opened by hand" in one(evs, "recorder.error").attrs["error"]
        assert "fail" == _verdict(path)[0]


class TestObserved:
    def test_exit_duration_output_and_process_are_the_childs(self, tmp_path: Path) -> None:
        """exit code, duration, output and pid in the stream are what the recorder's own child did."""
        script = "alpha observe step s -- sh -c 'echo $$; echo $PPID; echo err >&2; sleep 0.3; exit 7'; echo rc=$?"
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off")
        evs = events(path)
        start, end = _step(evs, "s")
        pid, ppid, rc = proc.stdout.decode().split()
        assert "rc=7" == rc
        assert (7, None) == (end.attrs["exit_code"], end.attrs["signal"])
        assert int(pid) == start.attrs["process"] == end.attrs["process"]
        assert int(ppid) == one(evs, "stream.open").attrs["pid"]  # the recorder's child, not the client's
        assert 300_000_000 <= end.attrs["duration_ns"] < one(evs, "process.exit").attrs["duration_ns"]
        assert (f"{pid}\n{ppid}\n".encode(), b"err\n") == (
            output(evs, "stdout", start.step),
            output(evs, "stderr", start.step),
        )
        assert "recorder" == start.attrs["runner"]

    def test_a_signal_is_observed_and_exits_128_plus_n(self, tmp_path: Path) -> None:
        """A step killed by SIGTERM is recorded with signal SIGTERM, no exit code, and its client exits 143."""
        script = "alpha observe step s -- sh -c 'kill -TERM $$'; echo rc=$?"
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off")
        assert b"rc=143\n" == proc.stdout, proc.stderr
        _start, end = _step(events(path), "s")
        assert (None, "SIGTERM") == (end.attrs["exit_code"], end.attrs["signal"])

    def test_the_steps_cwd_is_the_clients(self, tmp_path: Path) -> None:
        """The step runs in the client's working directory, which step.start records."""
        (tmp_path / "sub").mkdir()
        script = "cd sub && alpha observe step s -- pwd"
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off", cwd=tmp_path)
        start, _end = _step(events(path), "s")
        assert (str(tmp_path / "sub") + "\n").encode() == proc.stdout
        assert str(tmp_path / "sub") == start.attrs["cwd"]

    def test_not_found_and_cannot_execute(self, tmp_path: Path) -> None:
        """A command not found is 127, one that cannot execute 126: recorded, said on stderr, the client's code."""
        (tmp_path / "noexec").write_text("#!/bin/sh\n")
        script = "alpha observe step a -- no-such-cmd-xyz; echo a=$?; alpha observe step b -- ./noexec; echo b=$?"
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off", cwd=tmp_path)
        assert b"a=127\nb=126\n" == proc.stdout
        assert b"no-such-cmd-xyz: command not found" in proc.stderr
        evs = events(path)
        assert 127 == _step(evs, "a")[1].attrs["exit_code"]
        assert 126 == _step(evs, "b")[1].attrs["exit_code"]
        assert "cannot execute" in _step(evs, "b")[1].attrs["error"]


class TestPipelines:
    def test_a_pipeline_reads_the_steps_stdout(self, tmp_path: Path) -> None:
        """``step s -- printf hi | wc -c``: wc counts the step's bytes, and the step's span records them."""
        proc, path = record(
            tmp_path, ["sh", "-c", "alpha observe step s -- printf hi | wc -c"], "--observe-devices", "off"
        )
        assert b"2" == proc.stdout.strip(), proc.stderr
        start, end = _step(events(path), "s")
        assert (b"hi", 0) == (output(events(path), "stdout", start.step), end.attrs["exit_code"])

    def test_a_slow_reader_gets_every_byte(self, tmp_path: Path) -> None:
        """More than the recorder holds for a client, read late: the reader gets and the span records every byte."""
        script = "alpha observe step s -- head -c 3000000 /dev/zero | (sleep 1; wc -c)"
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off", timeout=60)
        assert b"3000000" == proc.stdout.strip(), proc.stderr
        start, end = _step(events(path), "s")
        assert (3_000_000, 0) == (len(output(events(path), "stdout", start.step)), end.attrs["exit_code"])

    def test_command_substitution_gets_the_output(self, tmp_path: Path) -> None:
        """``x=$(step s -- echo hi)`` sets x to hi."""
        script = 'x=$(alpha observe step s -- echo hi); echo "got $x"'
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off")
        assert b"got hi\n" == proc.stdout, proc.stderr
        start, _end = _step(events(path), "s")
        assert b"hi\n" == output(events(path), "stdout", start.step)

    def test_stdin_is_passed_through(self, tmp_path: Path) -> None:
        """``echo in | step s -- cat``: the step reads the client's own stdin."""
        proc, path = record(tmp_path, ["sh", "-c", "echo in | alpha observe step s -- cat"], "--observe-devices", "off")
        assert b"in\n" == proc.stdout, proc.stderr
        start, _end = _step(events(path), "s")
        assert b"in\n" == output(events(path), "stdout", start.step)

    def test_a_closed_reader_ends_the_writer(self, tmp_path: Path) -> None:
        """``step s -- yes | head -1`` ends: the step meets the closed pipe (SIGPIPE), as in the plain pipeline."""
        script = "alpha observe step s -- yes | head -1; echo done"
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off", timeout=60)
        assert b"y\ndone\n" == proc.stdout, proc.stderr
        _start, end = _step(events(path), "s")
        assert "SIGPIPE" == end.attrs["signal"]

    def test_masked_in_the_record_not_in_the_pipeline(self, tmp_path: Path) -> None:
        """A masked value is masked in the step's recorded output; what the pipeline reads is the command's own."""
        script = "alpha observe step s -- echo s3cret-value | sha256sum > digest"
        proc, path = record(
            tmp_path, ["sh", "-c", script], "--mask", "s3cret-value", "--observe-devices", "off", cwd=tmp_path
        )
        assert 0 == proc.returncode, proc.stderr
        start, _end = _step(events(path), "s")
        assert b"[MASKED]\n" == output(events(path), "stdout", start.step)
        assert hashlib.sha256(b"s3cret-value\n").hexdigest() == (tmp_path / "digest").read_text().split()[0]


#: The client of a long step is sent SIGTERM; the step's command must die of it.
FORWARD = """
alpha observe step s -- sh -c 'echo $$ > child; exec sleep 30' &
client=$!
while [ ! -s child ]; do sleep 0.05; done
kill -TERM $client
wait $client
echo rc=$?
"""


class TestSignalsNestingTimeout:
    def test_a_signal_to_the_client_is_sent_on_to_the_command(self, tmp_path: Path) -> None:
        """SIGTERM to the step client kills the step's command with SIGTERM; recorded so, the client exits 143."""
        proc, path = record(tmp_path, ["sh", "-c", FORWARD], "--observe-devices", "off", cwd=tmp_path, timeout=60)
        assert b"rc=143\n" == proc.stdout, proc.stderr
        start, end = _step(events(path), "s")
        assert (None, "SIGTERM", ["SIGTERM"]) == (end.attrs["exit_code"], end.attrs["signal"], end.attrs["forwarded"])
        assert int((tmp_path / "child").read_text()) == start.attrs["process"]
        assert end.attrs["duration_ns"] < 20_000_000_000

    def test_nested_steps_know_their_parent(self, tmp_path: Path) -> None:
        """A step inside a step gets AOS_STEP of its own; its parent is the outer span, both run by the recorder."""
        script = (
            "alpha observe step outer -- sh -c 'echo $AOS_STEP;"
            ' alpha observe step inner -- sh -c "echo \\$AOS_STEP; exit 4"; echo inner=$?\''
        )
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off")
        evs = events(path)
        outer, outer_end = _step(evs, "outer")
        inner, inner_end = _step(evs, "inner")
        assert f"{outer.step}\n{inner.step}\ninner=4\n".encode() == proc.stdout, proc.stderr
        assert (None, outer.step) == (outer.attrs["parent"], inner.attrs["parent"])
        assert (4, 0) == (inner_end.attrs["exit_code"], outer_end.attrs["exit_code"])
        assert {"recorder"} == {outer.attrs["runner"], inner.attrs["runner"]}
        assert inner_end.seq < outer_end.seq

    def test_a_step_under_timeout_ends_with_the_recording(self, tmp_path: Path) -> None:
        """Under --timeout a running step is ended with the command: its end is recorded, signal SIGTERM."""
        script = "alpha observe step s -- sleep 30; echo rc=$?"
        proc, path = record(tmp_path, ["sh", "-c", script], "--timeout", "1", "--observe-devices", "off", timeout=60)
        assert 124 == proc.returncode, proc.stderr
        evs = events(path)
        _start, end = _step(evs, "s")
        assert (None, "SIGTERM") == (end.attrs["exit_code"], end.attrs["signal"])
        assert end.attrs["duration_ns"] < 20_000_000_000
        assert one(evs, "process.exit").attrs["timed_out"]

    def test_a_step_left_running_is_ended_and_recorded(self, tmp_path: Path) -> None:
        """A background step still running when the command exits is ended with its tree; its end says so."""
        script = (
            "alpha observe step bg -- sh -c 'touch started; exec sleep 30' >/dev/null 2>&1 &"
            " while [ ! -e started ]; do sleep 0.05; done"
        )
        proc, path = record(tmp_path, ["sh", "-c", script], "--observe-devices", "off", cwd=tmp_path, timeout=60)
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        start, end = _step(evs, "bg")
        assert (None, "SIGTERM") == (end.attrs["exit_code"], end.attrs["signal"])
        assert start.attrs["process"] in [p["pid"] for p in one(evs, "process.stray").attrs["ended"]]


class TestPty:
    def test_under_pty_the_step_reads_the_terminal_and_is_echoed(self, tmp_path: Path) -> None:
        """Under --pty the step's stdin is the command's terminal, and its output is echoed and in its span."""
        script = "alpha observe step s -- sh -c 'test -t 0 && echo tty; echo hi'"
        proc, path = record(tmp_path, ["sh", "-c", script], "--pty", "--observe-devices", "off")
        assert 0 == proc.returncode, proc.stderr
        start, end = _step(events(path), "s")
        assert b"tty\nhi\n" == output(events(path), "stdout", start.step)
        assert 0 == end.attrs["exit_code"]
        assert b"tty\r\nhi\r\n" in proc.stdout or b"tty\nhi\n" in proc.stdout


REFUSAL_GATE = """
[gate]
name = "refusal-control"
description = "a control that must be refused: the step exits non-zero and says why, and its receipt agrees"

[[step]]
name = "bad-input"
exit = "nonzero"
stderr_contains = "refused: bad-input"

[[receipt]]
name = "bad-input"
count = 1
step = "bad-input"
step_exit = "exit_code"
step_stderr = ["refusal"]
"""

#: A lane that never runs its role: it opens the control's span by hand and claims the refusal.
REFUSAL_FORGER = """
import json, os, socket
from observe.channel.protocol import encode_frame, encode_json
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["AOS_CONTROL"])
s.settimeout(20)
s.sendall(encode_json({"op": "step.start", "span": "x", "name": "bad-input", "argv": ["role"], "parent": None}))
reply = json.loads(s.recv(65536)[5:])
s.sendall(encode_frame(b"e", b"refused: bad-input\\n"))
line = {"name": "bad-input", "status": "pass", "fields": {"exit_code": 2, "refusal": "refused: bad-input"}}
with open(reply["receipts"], "a") as fh:
    fh.write(json.dumps(line) + "\\n")
s.sendall(encode_json({"op": "step.end", "exit_code": 2, "signal": None, "duration_ns": 5}))
s.recv(65536)
"""


class TestRefusalControls:
    def _verdict(self, path: Path) -> str:
        return evaluate_events(parse_gate_text(REFUSAL_GATE, "refusal.toml"), events(path)).verdict

    def test_a_refusal_claimed_by_hand_does_not_pass(self, tmp_path: Path) -> None:
        """A lane's refusal control with no role run (a span opened by hand claiming exit 2) does not pass."""
        forger = tmp_path / "forge.py"
        forger.write_text(REFUSAL_FORGER)
        proc, path = record(tmp_path, [sys.executable, str(forger)], "--quiet", "--observe-devices", "off")
        assert 0 == proc.returncode, proc.stderr
        assert "fail" == self._verdict(path)

    def test_a_real_refusal_passes(self, tmp_path: Path) -> None:
        """The role really run, refusing with exit 2 and the refusal name on stderr, passes the same gate."""
        role = (
            "echo 'refused: bad-input' >&2;"
            " alpha observe receipt bad-input --status pass --field exit_code=2"
            " --field 'refusal=refused: bad-input'; exit 2"
        )
        script = f'alpha observe step bad-input -- sh -c "{role}"; test $? = 2'
        proc, path = record(tmp_path, ["sh", "-c", script], "--quiet", "--observe-devices", "off")
        assert 0 == proc.returncode, proc.stderr
        assert "pass" == self._verdict(path)


class TestForwardedAtASpanBoundary:
    def test_what_a_span_boundary_reads_reaches_the_client_at_once(self, tmp_path: Path) -> None:
        """A step's output that the recorder reads at another span's boundary (``drain``, before that span's
        ``step.start``) is sent to its client then, not when the step next writes: a step that waits for its client
        to read what it said (a lane's coordinator announcing its address, then accepting) never says more, and
        the run hung. The step's line is left in its pipe unread by the loop, as when it lands between the loop's
        wake-up and another client's ``step.run``."""
        writer = StreamWriter(tmp_path / "s.aos", background_flush=False, fsync="never")
        sink = Sink(writer)
        steps = Steps(sink, Echo(False), SecretSet(), lambda run: None)
        sel = selectors.DefaultSelector()
        ours, client = socket.socketpair()
        ours.setblocking(False)
        conn = ("conn", None)
        sel.register(ours, selectors.EVENT_READ, conn)
        argv = ["sh", "-c", "echo 'coordinator: listening on tcp:127.0.0.1:1' >&2; exec sleep 30"]
        run = steps.start(
            sel,
            span="ab" * 8,
            argv=argv,
            env=dict(os.environ),
            cwd=str(tmp_path),
            stdin=None,
            echo=(False, False),
            sock=ours,
            conn=conn,
        )
        assert isinstance(run, Run), run
        try:
            err = run.pipes[1].fd
            assert select.select([err], [], [], 20)[0], "the step never wrote"
            steps.drain(sel)  # the boundary: what the pipes hold is recorded (and no loop turn follows here)
            client.settimeout(10)
            frames = list(FrameReader().feed(client.recv(1 << 16)))
            assert [(FRAME_ERR, b"coordinator: listening on tcp:127.0.0.1:1\n")] == frames
        finally:
            os.killpg(run.pid, signal.SIGKILL)
            steps.finish_all(sel)
            sink.seal()
            client.close()
            ours.close()
