"""Schema v1 of an AOS stream: the Arrow columns and the stream-level metadata."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "COLUMNS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "HASH_NAME",
    "META_FORMAT",
    "META_HASH",
    "META_STREAM_ID",
    "META_VERSION",
    "NOT_NULL",
    "arrow_schema",
]

FORMAT_NAME = "AOS"
FORMAT_VERSION = "1"
HASH_NAME = "blake3"

META_FORMAT = b"aos.format"
META_VERSION = b"aos.version"
META_STREAM_ID = b"aos.stream_id"
META_HASH = b"aos.hash"

COLUMNS = ("seq", "wall_ns", "mono_ns", "kind", "step", "attrs", "data", "hash")
#: The columns that may never hold a null (indexes into ``COLUMNS``): all but step and data.
NOT_NULL = (0, 1, 2, 3, 5, 7)


def arrow_schema(stream_id: str) -> pa.Schema:
    """The v1 schema for one stream; its metadata names the format and the stream."""
    import pyarrow as pa

    fields = [
        pa.field("seq", pa.uint64(), nullable=False),
        pa.field("wall_ns", pa.int64(), nullable=False),
        pa.field("mono_ns", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("step", pa.string(), nullable=True),
        pa.field("attrs", pa.string(), nullable=False),
        pa.field("data", pa.binary(), nullable=True),
        pa.field("hash", pa.binary(32), nullable=False),
    ]
    metadata = {
        META_FORMAT: FORMAT_NAME.encode(),
        META_VERSION: FORMAT_VERSION.encode(),
        META_STREAM_ID: stream_id.encode(),
        META_HASH: HASH_NAME.encode(),
    }
    return pa.schema(fields, metadata=metadata)
