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
from gates.evidence import STDOUT_TAIL, Evidence
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
        lean = Evidence(iter(evs), keep_output=False)
        assert len(evs) == len(lean.events)
        assert all(e.data is None for e in lean.events if e.kind in ("stdout", "stderr"))
        assert b"warning: unused\n" == bytes(lean.steps[0].stderr)
        assert len(lean.steps[0].stdout) <= 2 * STDOUT_TAIL
        assert bytes(Evidence(evs).steps[0].stdout).endswith(bytes(lean.steps[0].stdout))
        assert not needs_output(_gate(_STDERR_GATE))
        assert needs_output(_gate(_OUTPUT_GATE))

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
