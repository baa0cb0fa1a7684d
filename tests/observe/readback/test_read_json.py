"""`alpha observe read --json` writes its lines in large writes: the same lines as before, and on a
damaged stream every line before the damage, then the refusal (issue 16)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from aos.canonical import canonical_json
from aos.event import Event
from aos.reader import read_stream
from aos.writer import StreamWriter
from observe.readback.events import event_json
from tests.helpers.run import alpha

ALPHA = shutil.which("alpha", path=str(Path(sys.executable).parent)) or "alpha"


def stream(path: Path) -> None:
    """Enough events for more than one MiB of JSON lines, in several batches."""
    w = StreamWriter(path, batch_max_events=2000)
    w.append("stream.open", {"stream_id": w.stream_id, "argv": ["x"], "env": {}, "labels": {}})
    for i in range(12_000):
        w.append("receipt", {"name": "t", "status": "pass", "fields": {"i": i, "text": 'é\n"' * 3}})
        if i % 1000 == 0:
            w.append("stdout", {}, bytes(range(256)) * 20)
    w.seal()


def read(path: Path) -> subprocess.CompletedProcess[bytes]:
    return alpha("observe", "read", "--json", str(path), env={"PYTHONUNBUFFERED": "1"}, timeout=120)


def test_lines_are_each_events_json(tmp_path: Path) -> None:
    """Every event, one line each, exactly event_json's text (buffering changes no byte)."""
    path = tmp_path / "s.aos"
    stream(path)
    proc = read(path)
    assert 0 == proc.returncode, proc.stderr
    expected = "".join(event_json(ev) + "\n" for ev in read_stream(path).events).encode()
    assert len(proc.stdout) > 1 << 20
    assert expected == proc.stdout


def test_damage_after_the_lines_before_it(tmp_path: Path) -> None:
    """A stream cut short: every intact event's line, then the refusal on stderr, exit 1."""
    path = tmp_path / "s.aos"
    stream(path)
    contents = read_stream(path)
    cut = tmp_path / "cut.aos"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    intact = read_stream(cut).events
    assert 0 < len(intact) < len(contents.events)
    proc = read(cut)
    assert 1 == proc.returncode
    assert b"refused: stream-" in proc.stderr
    assert "".join(event_json(ev) + "\n" for ev in intact).encode() == proc.stdout


@given(
    data=st.none() | st.binary(max_size=3000),
    step=st.none() | st.text(max_size=8),
    attrs=st.dictionaries(st.text(max_size=6), st.integers() | st.text(max_size=6), max_size=4),
)
@settings(max_examples=200, deadline=None)
def test_a_line_is_the_record_encoded_whole(data: bytes | None, step: str | None, attrs: dict[str, object]) -> None:
    """event_json splices the data's base64 in unscanned: the line is still exactly the whole record encoded."""
    ev = Event(7, 11, 13, "stdout", step, canonical_json(attrs), data, b"\0" * 32)
    record: dict[str, object] = {"seq": 7, "kind": "stdout", "wall_ns": 11, "step": step, "attrs": ev.attrs}
    if data is not None:
        record["data_b64"] = base64.b64encode(data).decode("ascii")
    assert json.dumps(record, ensure_ascii=False, separators=(",", ":")) == event_json(ev)
