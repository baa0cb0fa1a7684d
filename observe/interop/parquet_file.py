"""Export a verified stream's events as Parquet: the columns of ``alpha observe query``'s ``events`` table.

Any engine that reads Parquet (DuckDB without an extension, DataFusion, Spark,
pandas) then reads one stream's events with the typed columns docs/QUERY.md
lists (``time``, ``name``, ``status``, ``exit_code``, ``duration_ns``, ``attrs``
as JSON text, the sealed verdict's ``gate``/``verdict``/``scope``), seal
included. The file's key-value metadata names what it came from:
``aos.stream_id``, ``aos.file_blake3`` and ``aos.head`` (the verified chain's
head). Each batch is decoded from the verified bytes and written as a row
group as it comes, so memory holds one batch at a time besides the stream's
bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from observe.interop.arrow_file import Chunks

if TYPE_CHECKING:
    from observe.interop.verified import VerifiedStream

__all__ = ["parquet_chunks"]


def parquet_chunks(stream: VerifiedStream) -> Iterator[bytes]:
    """The verified events as a Parquet file (zstd), in chunks of about one row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aos.reader import open_buffer
    from observe.query.tables import Source, events_batch, events_schema

    v = stream.verification
    source = Source(
        path=stream.path,
        stream_id=v.stream_id,
        digest=v.file_blake3,
        events=v.events,
        integrity="intact",
        damage=None,
        sealed=True,
        signed=v.signed,
        key_id=v.key_id,
        verdict=v.verdict if v.verdicts == 1 else None,
        first_ns=None,
        last_ns=None,
        host=None,
        labels=None,
        argv=None,
    )
    # attrs as plain JSON text: the Arrow JSON extension type is not one every Parquet reader knows
    schema = events_schema()
    schema = schema.set(schema.get_field_index("attrs"), pa.field("attrs", pa.string()))
    schema = schema.with_metadata({"aos.stream_id": v.stream_id, "aos.file_blake3": v.file_blake3, "aos.head": v.head})
    sink = Chunks()
    with (
        open_buffer(stream.data, str(stream.path)) as f,
        pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema, compression="zstd") as writer,
    ):
        yield sink.take()
        for raw in f.batches():
            if raw.batch.num_rows == 0:
                continue
            batch = events_batch(raw.batch, source, events_schema())
            attrs = batch.column(batch.schema.get_field_index("attrs")).storage
            columns = [attrs if name == "attrs" else batch.column(name) for name in schema.names]
            writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
            yield sink.take()
        if f.damage is not None:  # never for verified bytes; a guard, so no half file is written
            raise f.damage
    yield sink.take()
