"""The v1 stream's Arrow IPC messages, encoded without pyarrow: the bytes pyarrow writes, byte for byte.

An AOS v1 stream has one schema and one shape of record batch (docs/FORMAT.md sections 1 and 2): the
FlatBuffer of every batch's metadata has the same layout, and only its numbers change (the body's length,
the row count, each of the 20 buffers' offset and length, each of the 8 columns' length and null count).
So the writer keeps the metadata pyarrow writes for that shape, with those numbers zero, and fills them in;
the schema message is pyarrow's for a stream id, with the id put in its place (always 32 characters). The
body is Arrow's: each buffer truncated to what its rows use, compressed alone with zstd (an ``i64`` of its
uncompressed length before the frame), an empty buffer written as nothing, each buffer's start rounded up
to 8 with zeros.

This is what ``record -- true`` needs instead of importing pyarrow (a third of its start-up, issue 39).
tests/aos/test_ipc.py checks every message against pyarrow's for the same rows, byte for byte, and that
pyarrow and this package's reader decode it.
"""

from __future__ import annotations

import struct
import sys
import threading
from array import array
from collections.abc import Sequence
from itertools import accumulate

# Imported here, by whoever imports the writer, never first by an encoder thread: a thread holding an import
# lock while the recorder forks its command would leave the child waiting on it.
import zstandard

__all__ = ["batch_message", "schema_message"]

#: pyarrow's schema message for stream id ``"0" * 32`` (``aos.schema.arrow_schema(...).serialize()``).
_SCHEMA = bytes.fromhex(
    "ffffffffb80200001000000000000a000e000600050008000a000000000104001000000000000a000c000000040008000a000000"
    "dc0000000400000004000000ac0000007c00000030000000040000006cffffff140000000400000006000000626c616b65330000"
    "08000000616f732e686173680000000094ffffff3000000004000000200000003030303030303030303030303030303030303030"
    "303030303030303030303030000000000d000000616f732e73747265616d5f6964000000dcffffff100000000400000001000000"
    "310000000b000000616f732e76657273696f6e0008000c000400080008000000100000000400000003000000414f53000a000000"
    "616f732e666f726d6174000008000000780100002c010000f8000000c80000009c000000600000003400000004000000b8feffff"
    "0000000f10000000180000000400000000000000040000006861736800000000aafeffff20000000b0ffffff0000010410000000"
    "18000000040000000000000004000000646174610000000078ffffff0cffffff0000000510000000180000000400000000000000"
    "050000006174747273000000a0ffffff100014000800060007000c0000001000100000000000010510000000180000000400000000"
    "000000040000007374657000000000d8ffffff6cffffff00000005100000001c0000000400000000000000040000006b696e6400"
    "000000040004000400000098ffffff0000000210000000180000000400000000000000070000006d6f6e6f5f6e7300d0ffffff00"
    "00000140000000c8ffffff00000002100000002000000004000000000000000700000077616c6c5f6e730008000c000800070008"
    "0000000000000140000000100014000800000007000c00000010001000000000000002100000001c000000040000000000000003"
    "000000736571000000060008000400060000004000000000000000"
)
#: Where the stream id's 32 characters are in it.
_STREAM_ID_AT = 136

#: The metadata of a record batch message as pyarrow writes it (a ``Message`` V5 holding a ``RecordBatch``
#: with zstd ``BUFFER`` compression), its numbers zero: the part before the buffers, then the 20 buffers
#: (offset, length), the field nodes' count (8) and the 8 nodes (length, null count).
_BATCH_HEAD = bytes.fromhex(
    "14000000000000000c0018000600050008000c000c000000000304001c0000000000000000000000000000000c001e0010000400"
    "08000c000c000000700100002400000018000000000000000000000000000000000006000800070006000000000000011400"
    "0000"
)
_BUFFERS_AT = len(_BATCH_HEAD)  # 104
_NODES_AT = _BUFFERS_AT + 20 * 16 + 8  # 432
_METADATA = _BATCH_HEAD + bytes(20 * 16) + struct.pack("<II", 0, 8) + bytes(8 * 16)
_BODY_LENGTH_AT, _LENGTH_AT = 32, 72
#: The encapsulated message's prefix: the continuation marker and the metadata's length.
_PREFIX = b"\xff\xff\xff\xff" + struct.pack("<i", len(_METADATA))

_local = threading.local()


def schema_message(stream_id: str) -> bytes:
    """The schema message of the stream ``stream_id`` (32 lowercase hex digits), as pyarrow writes it."""
    sid = stream_id.encode("ascii")
    if len(sid) != 32:
        raise ValueError(f"a stream id has 32 characters, not {len(sid)}")
    return _SCHEMA[:_STREAM_ID_AT] + sid + _SCHEMA[_STREAM_ID_AT + 32 :]


def batch_message(
    seq: Sequence[int],
    wall: Sequence[int],
    mono: Sequence[int],
    kind: Sequence[str],
    step: Sequence[str | None],
    attrs: Sequence[str],
    data: Sequence[bytes | None],
    hashes: Sequence[bytes],
    level: int,
) -> bytes:
    """One record batch message of the v1 schema (its columns, in order), compressed with zstd at ``level``."""
    n = len(seq)
    if sys.byteorder != "little":  # pragma: no cover - Arrow's IPC buffers here are little-endian
        raise ValueError("the AOS writer needs a little-endian machine")
    columns = [
        (0, [b"", array("Q", seq).tobytes()]),
        (0, [b"", array("q", wall).tobytes()]),
        (0, [b"", array("q", mono).tobytes()]),
        _variable([k.encode("utf-8") for k in kind]),
        _variable([None if s is None else s.encode("utf-8") for s in step]),
        _variable([a.encode("utf-8") for a in attrs]),
        _variable(data),
        (0, [b"", b"".join(hashes)]),
    ]
    compress = _compressor(level)
    meta = bytearray(_METADATA)
    parts: list[bytes] = []
    at = 0
    i = 0
    for c, (nulls, buffers) in enumerate(columns):
        struct.pack_into("<qq", meta, _NODES_AT + 16 * c, n, nulls)
        for raw in buffers:
            size = 0
            if raw:
                frame = compress(raw)
                parts += (struct.pack("<q", len(raw)), frame)
                size = 8 + len(frame)
                pad = -size % 8
                if pad:
                    parts.append(bytes(pad))
            struct.pack_into("<qq", meta, _BUFFERS_AT + 16 * i, at, size)
            at += size + (-size % 8)
            i += 1
    struct.pack_into("<q", meta, _BODY_LENGTH_AT, at)
    struct.pack_into("<q", meta, _LENGTH_AT, n)
    return b"".join([_PREFIX, meta, *parts])


def _variable(values: Sequence[bytes | None]) -> tuple[int, list[bytes]]:
    """A string or binary column's null count and buffers: validity (none without a null), offsets, values."""
    nulls = sum(1 for v in values if v is None)
    validity = b""
    if nulls:
        bits = bytearray((len(values) + 7) // 8)
        for j, v in enumerate(values):
            if v is not None:
                bits[j >> 3] |= 1 << (j & 7)
        validity = bytes(bits)
    present = [v for v in values if v]
    offsets = array("i", accumulate((len(v) if v else 0 for v in values), initial=0))
    return nulls, [validity, offsets.tobytes(), present[0] if len(present) == 1 else b"".join(present)]


def _compressor(level: int):  # type: ignore[no-untyped-def]
    """This thread's zstd ``compress`` at ``level`` (a compressor is not shared between threads)."""
    cached = getattr(_local, "compressors", None)
    if cached is None:
        cached = _local.compressors = {}
    compress = cached.get(level)
    if compress is None:
        compress = cached[level] = zstandard.ZstdCompressor(level=level, write_content_size=True).compress
    return compress
