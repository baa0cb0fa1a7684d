"""aos.reader.batch_rows (what the verifier hashes) holds exactly what batch_events holds, data read in place."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from aos.reader import StreamFile, batch_events, batch_rows
from aos.verify import verify_stream
from aos.writer import StreamWriter


def rows_as_events(batch: pa.RecordBatch) -> list[tuple[object, ...]]:
    return [(*r[:6], None if r[6] is None else bytes(r[6]), r[7]) for r in batch_rows(batch)]


def events_as_rows(batch: pa.RecordBatch) -> list[tuple[object, ...]]:
    return [(e.seq, e.wall_ns, e.mono_ns, e.kind, e.step, e.attrs_json, e.data, e.hash) for e in batch_events(batch)]


def test_rows_match_events_nulls_empties_and_slices(tmp_path: Path) -> None:
    """Null data, empty data, large data; whole batches and slices of them (an array offset)."""
    path = tmp_path / "s.aos"
    w = StreamWriter(path)
    w.append("stream.open", {"stream_id": w.stream_id})
    for i in range(40):
        w.append("stdout", {}, bytes([i]) * (i * 97) if i % 3 else b"")
        w.append("receipt", {"name": f"r{i}"}, None, f"step-{i}" if i % 2 else None)
    w.seal()
    with StreamFile(path) as f:
        batches = [raw.batch for raw in f.batches()]
        for batch in batches:
            assert events_as_rows(batch) == rows_as_events(batch)
            for start in (0, 1, 5, 13):
                part = batch.slice(start, 17)
                assert events_as_rows(part) == rows_as_events(part)
        assert any(r[6] is None for b in batches for r in batch_rows(b))
        assert any(r[6] is not None and len(r[6]) == 0 for b in batches for r in batch_rows(b))
    assert 82 == verify_stream(path).events
