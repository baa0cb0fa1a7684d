"""``aos.ipc``: the v1 stream's messages without pyarrow are pyarrow's, byte for byte, for any rows."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aos.framing import batch_frame, schema_frame
from aos.ipc import batch_message, schema_message
from aos.reader import batch_events, open_buffer
from aos.schema import arrow_schema

I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
DATA = st.one_of(st.none(), st.binary(max_size=300), st.builds(lambda n: b"z" * n, st.integers(0, 70_000)))


@st.composite
def rows(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 70))
    start = draw(st.integers(0, 2**64 - 71))
    return {
        "seq": list(range(start, start + n)),
        "wall": draw(st.lists(I64, min_size=n, max_size=n)),
        "mono": draw(st.lists(I64, min_size=n, max_size=n)),
        "kind": draw(st.lists(TEXT, min_size=n, max_size=n)),
        "step": draw(st.lists(st.one_of(st.none(), TEXT), min_size=n, max_size=n)),
        "attrs": draw(st.lists(TEXT, min_size=n, max_size=n)),
        "data": draw(st.lists(DATA, min_size=n, max_size=n)),
        "hashes": draw(st.lists(st.binary(min_size=32, max_size=32), min_size=n, max_size=n)),
    }


def pyarrows(stream_id: str, r: dict[str, Any], level: int) -> bytes:
    """The batch message pyarrow writes for the rows ``r``."""
    schema = arrow_schema(stream_id)
    batch = pa.record_batch(
        [
            pa.array(r["seq"], pa.uint64()),
            pa.array(r["wall"], pa.int64()),
            pa.array(r["mono"], pa.int64()),
            pa.array(r["kind"], pa.string()),
            pa.array(r["step"], pa.string()),
            pa.array(r["attrs"], pa.string()),
            pa.array(r["data"], pa.binary()),
            pa.array(r["hashes"], pa.binary(32)),
        ],
        schema=schema,
    )
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression=pa.Codec("zstd", level), use_threads=False)
    with ipc.new_stream(sink, schema, options=options) as w:
        w.write_batch(batch)
    whole = sink.getvalue().to_pybytes()
    return whole[len(schema.serialize().to_pybytes()) : -8]


def ours(r: dict[str, Any], level: int) -> bytes:
    return batch_message(
        r["seq"], r["wall"], r["mono"], r["kind"], r["step"], r["attrs"], r["data"], r["hashes"], level
    )


@given(st.uuids(), rows(), st.sampled_from([1, 1, 3, -1]))
@settings(max_examples=150, deadline=None)
def test_the_messages_are_pyarrows(uuid: Any, r: dict[str, Any], level: int) -> None:
    """Any rows, any stream id, any level: the schema and the batch messages are pyarrow's bytes."""
    assert arrow_schema(uuid.hex).serialize().to_pybytes() == schema_message(uuid.hex)
    assert pyarrows(uuid.hex, r, level) == ours(r, level)


def test_a_stream_of_them_reads_back(tmp_path: Any) -> None:
    """A stream made of these messages is well-formed (aos.framing) and reads back as its rows, with pyarrow
    and with this package's reader; every null and empty value as it was."""
    sid = "0123456789abcdef0123456789abcdef"
    r = {
        "seq": [0, 1, 2, 3],
        "wall": [1, -2, 3, 4],
        "mono": [5, 6, 7, 8],
        "kind": ["stdout", "é", "", "receipt"],
        "step": [None, "s", "", None],
        "attrs": ["{}", '{"a":1}', "{}", '{"ü":"x"}'],
        "data": [b"x" * 100_000, None, b"", b"\0\xff"],
        "hashes": [bytes([i]) * 32 for i in range(4)],
    }
    message = ours(r, 1)
    whole = schema_message(sid) + message + b"\xff\xff\xff\xff\x00\x00\x00\x00"
    schema_end = schema_frame(memoryview(whole), len(whole)).end
    assert schema_end + len(message) == batch_frame(memoryview(whole), schema_end, len(whole)).end
    table = ipc.open_stream(pa.py_buffer(whole)).read_all()
    assert r["data"] == table.column("data").to_pylist()
    assert r["step"] == table.column("step").to_pylist()
    assert r["kind"] == table.column("kind").to_pylist()
    with open_buffer(whole, "ipc") as f:
        (raw,) = list(f.batches())
    assert r["attrs"] == [ev.attrs_json for ev in batch_events(raw.batch)]


def test_a_stream_id_of_another_length_is_refused() -> None:
    with pytest.raises(ValueError, match="32 characters"):
        schema_message("abc")
