"""A step that starts while the recorder is busy keeps its span (issue 11, "Nothing sent is lost").

The recorder serves the channel from one loop. While that loop is busy (capturing
a large artifact for another client, on a loaded machine) a ``step`` client's
``step.start`` waits. Before bb04c48 it waited 10 s, then ran its command
*unrecorded* and still exited with the command's code (0): the receipts and
artifacts sent from inside landed outside the span (the receipts in the enclosing
receipts file, the artifacts with the enclosing step) and the span ended
``incomplete``. A lane's gate then misses the step's receipts, though every
client exited 0. Here the recorder is stopped outright for longer than that old
limit just as a step starts, which is the same wait made deterministic.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.recorder import events, record

#: Longer than the 10 s the step client used to wait for ``step.start``, with margin for a slow start.
STALL = 15

# The command stops its parent (the recorder, checked by its command line) and has it
# continued after STALL seconds; meanwhile a step starts, and inside it a receipt and
# an artifact are sent.
SCRIPT = f"""
rec=$PPID
case "$(tr '\\0' ' ' < /proc/$rec/cmdline)" in
  *observe\\ record*) ;;
  *) echo "parent $rec is not the recorder" >&2; exit 99 ;;
esac
kill -STOP "$rec"
( sleep {STALL}; kill -CONT "$rec" ) &
alpha observe step S -- sh -c 'alpha observe receipt inside --status pass && alpha observe artifact f.txt'
echo "$?" > step-code
wait
"""


class TestStalledRecorder:
    def test_step_started_while_the_recorder_does_not_answer_keeps_its_span(self, tmp_path: Path) -> None:
        """Stalled past the old 10 s limit at step.start: the receipt and artifact are in the span, the span whole."""
        (tmp_path / "f.txt").write_text("data\n")
        proc, path = record(tmp_path, ["sh", "-c", SCRIPT], "--quiet", cwd=tmp_path, timeout=240)
        assert 0 == proc.returncode, proc.stderr
        assert b"unrecorded" not in proc.stderr, proc.stderr
        assert "0" == (tmp_path / "step-code").read_text().strip()
        evs = events(path)
        (start,) = [e for e in evs if e.kind == "step.start"]
        (end,) = [e for e in evs if e.kind == "step.end"]
        (receipt,) = [e for e in evs if e.kind == "receipt"]
        (artifact,) = [e for e in evs if e.kind == "artifact"]
        assert ("S", False, 0) == (end.attrs["name"], bool(end.attrs.get("incomplete")), end.attrs["exit_code"])
        assert (start.step, start.step) == (receipt.step, artifact.step)
        assert start.seq < receipt.seq < end.seq
        assert start.seq < artifact.seq < end.seq
