"""`alpha observe read --json` writes its lines in large writes: the same lines as before, and on a
damaged stream every line before the damage, then the refusal (issue 16)."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aos.canonical import canonical_json
from aos.event import Event
from aos.reader import StreamFile, batch_events, read_stream
from aos.refusals import Refusal
from aos.schema import arrow_schema
from aos.writer import StreamWriter
from observe.readback.events import event_json
from observe.readback.jsonl import FEW, write_json_lines
from tests.helpers.run import alpha

ASSETS = Path(__file__).resolve().parents[2] / "assets"

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


# -- the batch-at-a-time writer (observe.readback.jsonl) against event_json, line for line -------------------


def reference(batches: list[pa.RecordBatch]) -> tuple[bytes, str | None]:
    """What ``read --json`` wrote before it went a batch at a time: each event's line, up to a refusal."""
    out: list[str] = []
    for batch in batches:
        for ev in batch_events(batch):
            try:
                out.append(event_json(ev) + "\n")
            except Refusal as exc:
                return "".join(out).encode(), f"{exc.name}: {exc}"
    return "".join(out).encode(), None


def batched(batches: list[pa.RecordBatch], kinds: tuple[str, ...] = ()) -> tuple[bytes, str | None]:
    buf = io.BytesIO()
    try:
        write_json_lines(batches, event_json, buf, kinds)
    except Refusal as exc:
        return buf.getvalue(), f"{exc.name}: {exc}"
    return buf.getvalue(), None


def raw_batch(rows: Sequence[tuple[str, str | None, str, bytes | None]]) -> pa.RecordBatch:
    """A batch of (kind, step, attrs text, data) rows as stored, attrs not made canonical (hashes are zeros:
    ``read`` does not check the chain)."""
    n = len(rows)
    columns = [
        pa.array(range(n), pa.uint64()),
        pa.array([1_700_000_000_000_000_000 + i for i in range(n)], pa.int64()),
        pa.array(range(n), pa.int64()),
        pa.array([r[0] for r in rows], pa.string()),
        pa.array([r[1] for r in rows], pa.string()),
        pa.array([r[2] for r in rows], pa.string()),
        pa.array([r[3] for r in rows], pa.binary()),
        pa.array([b"\0" * 32] * n, pa.binary(32)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema("0" * 32))


#: Attrs texts event_json does not write back as stored, and some it does: each forgery of ATTRS_EXACT
#: and of the repeated-key check has one here.
TRICKY = [
    '{"a":1,"a":2}',  # a repeated key: comes back once
    '{"b":{"k":1,"x":[1,2],"k":3}}',  # repeated in a nested object
    '{"k1":1,"k2":2}',  # keys that differ in digits only (encoded the old way, same line)
    '{"k12":1,"k12":2}',  # a repeated key with digits
    '{"k10":1,"k2":{"k10":3,"k10":4}}',  # keys of other digit counts, one repeated in a nested object
    '{"a":[{"n":1},{"n":2}]}',  # one key in two objects: no repeat
    '{"a": 1}',  # a space
    '{"a":1.0}',  # a float
    '{"a":1e5}',
    '{"a":-0}',
    '{"a":"\\u00e9"}',  # an escape the encoder does not write
    '{"a":"\\/"}',
    '{"a":"\\n\\"x"}',  # escapes it writes the same
    '{"a":NaN}',
    '{"a":{"b":{"c":{"d":{"e":1}}}}}',  # deeper than DEPTH
    '{"é":"ü","z":[true,false,null,0,-12,"",{}]}',
    '{"a":":x","b":"{"}',  # strings that look like structure
    "{}",
    '{"a":1}{"b":2}',  # two objects: not JSON
]


def test_tricky_attrs_lines_as_event_json(tmp_path: Path) -> None:
    """Every attrs text that must not be copied as stored gets event_json's line; the others are copied."""
    rows: list[tuple[str, str | None, str, bytes | None]] = [
        (kind, step, text, data)
        for text in TRICKY[:-1]
        for kind, step, data in (("receipt", None, None), ('we"ird\n', "s\\1", b"\x00\xff"), ("stdout", "é", b""))
    ]
    good = raw_batch(rows * 2)
    assert good.num_rows >= FEW  # written a batch at a time, not event by event
    assert reference([good])[1] is None
    assert reference([good]) == batched([good])
    twice = [good, good.slice(5, FEW)]  # taken together, the second a slice (an offset)
    assert reference(twice) == batched(twice)


def test_repeated_keys_found_in_a_slice() -> None:
    """The repeated-key check reads a sliced column's own rows (its digits mapped in the whole buffer)."""
    from observe.readback.jsonl import _repeats_a_key

    texts = ['{"k1":1}'] * 5 + ['{"k12":1,"k12":2}', '{"k3":3}', '{"k4":{"k5":1,"k5":2}}']
    column = pa.array(texts, pa.string()).slice(5)
    exact = pa.array([True] * len(column), pa.bool_())
    assert [True, False, True] == _repeats_a_key(column, exact).to_pylist()


def test_a_refusal_after_the_lines_before_it() -> None:
    """attrs that is not JSON: the lines before it, then stream-schema, as before."""
    rows = [("receipt", None, '{"i":1}', None)] * FEW + [("receipt", None, t, None) for t in TRICKY]
    batch = raw_batch(rows)
    expected = reference([batch])
    assert expected[1] is not None
    assert expected[1].startswith("stream-schema")
    assert expected[0].count(b"\n") == len(rows) - 1
    assert expected == batched([batch])
    tail = raw_batch([("receipt", None, "[1]", None)] * FEW)  # a JSON array, not an object
    assert reference([batch.slice(0, FEW + 3), tail]) == batched([batch.slice(0, FEW + 3), tail])


def test_kinds_select_as_the_filter_did() -> None:
    """--kind on the batch path: the same lines as filtering the events one by one."""
    batch = raw_batch([(k, None, '{"i":1}', None) for k in ("stdout", "receipt", "stdout", "step.start")] * FEW)
    out, err = batched([batch], ("receipt", "step.start"))
    assert err is None
    wanted = [ev for ev in batch_events(batch) if ev.kind in ("receipt", "step.start")]
    assert "".join(event_json(ev) + "\n" for ev in wanted).encode() == out


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def attrs_texts(draw: st.DrawFn) -> str:
    """An attrs text as a writer, a forger or a careless hand might have stored it."""
    obj = draw(st.dictionaries(st.text(alphabet='ab1é"\\\n:{', max_size=3), _json_values, max_size=4))
    how = draw(st.sampled_from(["canonical", "spaces", "ascii", "repeat", "cut"]))
    try:
        text = canonical_json(obj)
    except ValueError:  # NaN or an infinity
        text = json.dumps(obj)
    if how == "spaces":
        text = json.dumps(obj)
    elif how == "ascii":
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=True)
    elif how == "repeat" and text != "{}":
        text = text[:-1] + "," + text[1:]  # every key twice
    elif how == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    return text


@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["stdout", "receipt", "step.start", 'k"\x01']),
            st.none() | st.text(max_size=4),
            attrs_texts(),
            st.none() | st.binary(max_size=40),
        ),
        min_size=1,
        max_size=30,
    )
)
@settings(max_examples=300, deadline=None)
def test_any_stored_rows_same_lines_as_event_json(rows: list[tuple[str, str | None, str, bytes | None]]) -> None:
    """Hypothesis-made rows (canonical or not, repeated keys, escapes, floats, text cut short): the same
    bytes, and the same refusal after them, as event_json event by event."""
    batch = raw_batch(rows * (FEW // len(rows) + 1))
    assert reference([batch]) == batched([batch])
    assert reference([batch.slice(0, 5)]) == batched([batch.slice(0, 5)])  # a few rows: event by event


@pytest.mark.parametrize("asset", sorted(p.name for p in ASSETS.glob("*.aos")))
def test_assets_read_as_before(asset: str) -> None:
    """Every test asset (intact, damaged, forged): the same lines, and the same damage, as event by event."""
    path = ASSETS / asset
    try:
        with StreamFile(path) as f:
            batches = [raw.batch for raw in f.batches()]
    except Refusal:
        return  # refused before any batch: the batch path is never reached
    assert reference(batches) == batched(batches)


def test_cli_on_a_recorded_stream_as_event_json(tmp_path: Path) -> None:
    """The command itself, a real recording with --kind: the lines event_json writes for those events."""
    path = tmp_path / "s.aos"
    stream(path)
    proc = alpha("observe", "read", "--json", "--kind", "stdout", "--kind", "stream.open", str(path), timeout=120)
    assert 0 == proc.returncode, proc.stderr
    wanted = [ev for ev in read_stream(path).events if ev.kind in ("stdout", "stream.open")]
    assert "".join(event_json(ev) + "\n" for ev in wanted).encode() == proc.stdout
