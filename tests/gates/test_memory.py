"""Gate evaluation in bounded memory (issue 16 follow-up), with the trust boundary kept.

The writer's copy is read back a window at a time and checked only when the read
ends, so the checks must still refuse a copy altered after some events were
yielded, before any verdict evaluated from them is appended. The evidence keeps
what the rules read, not the output, and gives the same verdicts as the whole.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.canonical import canonical_json
from aos.event import Event
from aos.refusals import StreamWrite
from aos.writer import StreamWriter
from gates.engine import evaluate, needs_output
from gates.evaluation import evaluate_events, evaluate_stream
from gates.evidence import Evidence
from gates.language import parse_gate_text
from gates.registry import builtin_gates, resolve_gate
from gates.testing import SyntheticStream, device_lane
from observe.recorder.gating import run_gate
from observe.recorder.record import RecordOptions
from tests.helpers.recorder import events


def _writer_with_batches(path: Path, batches: int = 12) -> StreamWriter:
    w = StreamWriter(path, background_flush=False, keep_copy=True)
    w.append("stream.open", {"stream_id": "x"})
    for i in range(batches):
        w.append("stdout", {}, os.urandom(20_000) + f"batch {i}\n".encode())
        w.flush()  # one batch each: the read-back window then ends between batches
    return w


class TestReadBackWindowed:
    def test_reads_back_every_event_in_small_windows(self, tmp_path: Path) -> None:
        w = _writer_with_batches(tmp_path / "s.aos")
        whole = w.written_events()
        windowed = list(w.iter_written_events(window=4096))
        assert [(e.seq, e.hash, e.data) for e in whole] == [(e.seq, e.hash, e.data) for e in windowed]
        assert 13 == len(windowed)
        w.seal()

    def test_copy_altered_after_events_were_yielded_is_refused(self, tmp_path: Path) -> None:
        """The attack: the copy changes behind the reader, past where it has read. Only the
        end-of-read checks can see it; the iterator must raise there, not end quietly."""
        w = _writer_with_batches(tmp_path / "s.aos")
        size = w.bytes_written
        it = w.iter_written_events(window=4096)
        first = [next(it) for _ in range(3)]
        assert "stream.open" == first[0].kind
        assert w._copy_fd is not None
        os.pwrite(w._copy_fd, b"\x00" * 64, size - 2000)  # inside the last batch: not read yet
        with pytest.raises(StreamWrite):
            list(it)
        w.close()

    def test_copy_cut_short_is_refused(self, tmp_path: Path) -> None:
        w = _writer_with_batches(tmp_path / "s.aos")
        assert w._copy_fd is not None
        os.ftruncate(w._copy_fd, w.bytes_written - 100)
        with pytest.raises(StreamWrite):
            list(w.iter_written_events(window=4096))
        w.close()


def test_gate_seals_no_verdict_from_a_copy_altered_mid_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_gate`` reads the copy to its end before it appends: the copy altered after the
    first events were evaluated gives the readback refusal, never the verdict of those events."""
    real = StreamWriter.iter_written_events

    def tampering(self: StreamWriter, window: int = 4096) -> Iterator[Event]:
        for n, ev in enumerate(real(self, window=256)):
            if n == 1:  # the first batch read and evaluated; the last one not yet read
                assert self._copy_fd is not None
                os.pwrite(self._copy_fd, b"\x00" * 16, self.bytes_written - 40)
            yield ev

    monkeypatch.setattr(StreamWriter, "iter_written_events", tampering)
    out = tmp_path / "g.aos"
    script = "for i in 1 2 3 4; do echo line $i; sleep 0.3; done"  # a batch each (flushed every 0.1 s)
    outcome = run_gate(resolve_gate("exit-zero"), ["sh", "-c", script], RecordOptions(out=out, quiet=True))
    assert outcome.verdict is not None
    assert "inconclusive" == outcome.verdict.verdict
    assert ["stream-readback"] == [c.name for c in outcome.verdict.checks]
    verdicts = [e for e in events(out) if e.kind == "verdict"]
    assert 1 == len(verdicts)
    assert "inconclusive" == verdicts[0].attrs["verdict"]


def _lane_with_output() -> SyntheticStream:
    s = SyntheticStream()
    s.step_start("build")
    s.output("stdout", b"compiling\n" * 1000, step="build")
    s.output("stderr", b"warning: unused\n", step="build")
    s.receipt("build", exit_code=0, step="build", step_stderr="warning: unused")
    s.step_end("build")
    s.output("stdout", b"done\n")
    s.exit(0)
    return s


_STDERR_GATE = """
[gate]
name = "t-stderr"
scope = "command"

[exit]
code = 0

[[step]]
name = "build"
stderr_contains = "warning: unused"

[[receipt]]
name = "build"
step = "build"
step_exit = "exit_code"
step_stderr = ["step_stderr"]
"""

_OUTPUT_GATE = """
[gate]
name = "t-output"
scope = "command"

[[check]]
name = "clean"
uses = "output-free-of"
args = { patterns = ["compiling"] }
"""


def _gate(text: str) -> Any:
    return parse_gate_text(text, "test")


class TestEvidenceKeepsWhatRulesRead:
    def test_output_dropped_unless_a_check_reads_it(self) -> None:
        evs = _lane_with_output().events()
        whole = Evidence(evs)
        lean = Evidence(iter(evs), keep_output=False)
        outputs = [e for e in evs if e.kind in ("stdout", "stderr")]
        assert [e for e in evs if e not in outputs] == lean.events
        assert (len(evs), evs[0]) == (lean.count, lean.first)
        assert b"warning: unused\n" == bytes(lean.steps[0].stderr)
        assert (b"", b"compiling\n" * 1000) == (bytes(lean.steps[0].stdout), bytes(whole.steps[0].stdout))
        assert list(whole.steps[0].output_seqs) == list(lean.steps[0].output_seqs)
        in_step = [e for e in outputs if e.step is not None]
        assert {e.seq: (e.kind, e.step) for e in in_step} == lean.cite(e.seq for e in outputs)
        assert not needs_output(_gate(_STDERR_GATE))
        assert needs_output(_gate(_OUTPUT_GATE))

    def test_stderr_kept_only_for_the_steps_a_rule_searches(self) -> None:
        from gates.engine import lean_evidence, stderr_steps

        evs = _lane_with_output().events()
        assert frozenset({"build"}) == stderr_steps(_gate(_STDERR_GATE))
        assert b"warning: unused\n" == bytes(lean_evidence(_gate(_STDERR_GATE), evs).steps[0].stderr)
        exit_zero = resolve_gate("exit-zero")
        assert frozenset() == stderr_steps(exit_zero)
        assert b"" == bytes(lean_evidence(exit_zero, evs).steps[0].stderr)
        assert b"warning: unused\n" == bytes(Evidence(evs, keep_output=False).steps[0].stderr)  # None: every step

    def test_a_gate_searching_another_steps_stderr_does_not_see_the_dropped_one(self) -> None:
        """The forgery: the rule names step "test", the warning is in step "build"'s stderr; keeping only
        "test"'s stderr must not make the rule pass nor change its verdict from the whole evidence's."""
        gate = _gate(_STDERR_GATE.replace('name = "build"\nstderr_contains', 'name = "test"\nstderr_contains'))
        lane = _lane_with_output()
        lane.step_start("test")
        lane.step_end("test")
        evs = lane.events()
        from gates.engine import evaluate_evidence

        assert "fail" == evaluate(gate, iter(evs)).checks[1].status
        assert evaluate_evidence(gate, Evidence(evs)).to_attrs() == evaluate(gate, iter(evs)).to_attrs()

    @pytest.mark.parametrize("text", [_STDERR_GATE, _OUTPUT_GATE])
    def test_same_verdict_from_a_one_pass_iterable(self, text: str) -> None:
        evs = _lane_with_output().events()
        gate = _gate(text)
        assert evaluate(gate, evs).to_attrs() == evaluate(gate, iter(evs)).to_attrs()
        assert evaluate(gate, evs).to_attrs() == evaluate_events(gate, (e for e in evs)).to_attrs()

    def test_output_free_of_still_sees_the_output(self) -> None:
        assert "fail" == evaluate(_gate(_OUTPUT_GATE), iter(_lane_with_output().events())).verdict

    @pytest.mark.parametrize("name", sorted(builtin_gates()))
    def test_builtin_gates_same_verdict_lean_or_whole(self, name: str) -> None:
        from gates.engine import evaluate_evidence

        lane = device_lane(name) if name.endswith("-device") else _lane_with_output()
        evs = lane.events()
        gate = resolve_gate(name)
        whole = evaluate_evidence(gate, Evidence(evs))
        lean = evaluate_evidence(gate, Evidence(iter(evs), keep_output=False))
        assert whole.to_attrs() == lean.to_attrs()

    def test_stream_evaluated_batch_by_batch_equals_events(self, tmp_path: Path) -> None:
        lane = _lane_with_output()
        lane.write(tmp_path / "s.aos")
        gate = _gate(_STDERR_GATE)
        assert evaluate_events(gate, events(tmp_path / "s.aos")).to_attrs() == (
            evaluate_stream(gate, tmp_path / "s.aos").to_attrs()
        )


def test_exit_zero_over_much_output_holds_none_of_it() -> None:
    """200 MB of stdout, made one event at a time: the evaluation's peak allocation stays far below it
    (every event's bytes were kept before)."""

    def stream() -> Iterator[Event]:
        lane = SyntheticStream()
        head = lane.events()
        yield from head
        seq = len(head)
        for i in range(200):
            data = bytes([65 + i % 26]) * (1 << 20)
            yield Event(seq, seq, seq, "stdout", None, "{}", data, b"\0" * 32)
            seq += 1
        exit_attrs = canonical_json({"exit_code": 0, "duration_ns": 1})
        yield Event(seq, seq, seq, "process.exit", None, exit_attrs, None, b"\0" * 32)

    tracemalloc.start()
    try:
        v = evaluate_events(resolve_gate("exit-zero"), stream())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "pass" == v.verdict
    assert peak < 20 << 20, peak


#: Peak RSS of a process evaluating a gate over a million events (issue 36: it was 680-800 MB).
MILLION_EVENTS_RSS_MB = 200

_PROBE = """
import json, os, subprocess, sys
proc = subprocess.Popen(json.loads(sys.argv[1]), stdout=subprocess.PIPE, close_fds=True)
out = proc.stdout.read()
_, status, ru = os.wait4(proc.pid, 0)
print(json.dumps({"out": out.decode(), "maxrss_kb": ru.ru_maxrss, "rc": os.waitstatus_to_exitcode(status)}))
"""

_EVALUATE = """
import sys
from pathlib import Path
from gates.evaluation import evaluate_stream
from gates.language import parse_gate_text
from gates.registry import resolve_gate
gate = resolve_gate("exit-zero") if sys.argv[2] == "exit-zero" else parse_gate_text(sys.argv[2], "t")
print(evaluate_stream(gate, Path(sys.argv[1])).verdict)
"""


def peak_rss_of_evaluation(stream: Path, gate: str) -> tuple[str, int]:
    """The verdict and the peak RSS (MB) of a fresh process evaluating ``gate`` (a built-in's name, or TOML)
    over ``stream``: measured from a small probe process (a child's maxrss starts at its parent's)."""
    import json
    import subprocess
    import sys

    argv = [sys.executable, "-c", _EVALUATE, str(stream), gate]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    got = json.loads(
        subprocess.run(
            [sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, check=True, text=True, env=env
        ).stdout
    )
    assert 0 == got["rc"], got
    return got["out"].strip(), got["maxrss_kb"] >> 10


#: A gate over ``write_long_lane``'s builds: each step's exit and stderr, each receipt's claims against its step.
_LONG_GATE = """
[gate]
name = "t-builds"
scope = "command"

[exit]
code = 0

[[step]]
name = "build"
min = 1
max = 100000
stderr_contains = "warning: unused"

[[receipt]]
name = "build"
min = 1
max = 100000
step = "build"
step_exit = "exit_code"
step_stderr = ["warning"]
"""


@pytest.mark.slow
@pytest.mark.parametrize("gate", ["exit-zero", _LONG_GATE])
def test_a_million_events_evaluated_in_bounded_memory(tmp_path: Path, gate: str) -> None:
    """A million events (a lane of 1,000 build steps of output, a receipt each) under 200 MB: the index keeps
    no output event, no stdout and only the stderr a rule searches; the checks citing every output event of
    every step (``stderr_contains``, ``step_stderr``) hold them as bits, not a million ints."""
    from gates.testing import write_long_lane

    stream = tmp_path / "long.aos"
    assert write_long_lane(stream, 1_000_000) >= 1_000_000
    verdict, mb = peak_rss_of_evaluation(stream, gate)
    assert ("pass", True) == (verdict, mb < MILLION_EVENTS_RSS_MB), mb
