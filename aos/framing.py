"""Arrow IPC framing, checked to the byte: what a complete message is, and what a truncated one is.

An AOS stream is a sequence of encapsulated Arrow IPC messages. This module
decides, from the bytes alone and before Arrow decodes anything, whether the
bytes at a position are

- a **complete message**: well-formed framing and metadata (docs/FORMAT.md,
  section 1.1) and every byte of the body it announces;
- a **cut message** (``Cut``): a proper prefix of such a message, every field
  that lies wholly inside the bytes being well-formed, the file ending before
  the message does. Only this is ``stream-truncated``: it is what a writer
  killed in the middle of its one ``write()`` leaves behind;
- anything else (``Malformed``): damage.

Metadata is a FlatBuffer; the few tables read here (``Message``,
``RecordBatch``, ``BodyCompression``) are parsed directly, with every offset
bounds- and alignment-checked, so a flipped byte in a length, an offset or a
count is damage rather than an apparently longer message.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "CONTINUATION",
    "EOS",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_ROWS",
    "MAX_EVENT_BYTES",
    "MAX_METADATA",
    "Cut",
    "Frame",
    "Malformed",
    "batch_frame",
    "check_inflation",
    "schema_frame",
]

CONTINUATION = b"\xff\xff\xff\xff"
EOS = CONTINUATION + b"\x00\x00\x00\x00"
#: The largest metadata length a v1 message may announce (a v1 batch's is 560 bytes, its schema's 696).
MAX_METADATA = 4096
#: The most rows a v1 batch holds (a v1 writer cuts a batch before more events than this).
MAX_BATCH_ROWS = 1 << 16
#: The most bytes one event's kind, step, attrs and data may hold together in a v1 writer:
#: 4 MiB of data (the recorder's chunks are 1 MiB) and room for its attrs.
MAX_EVENT_BYTES = (4 << 20) + (64 << 10)
#: The most bytes a v1 batch's buffers hold uncompressed, all together: the sum of each zstd
#: buffer's declared uncompressed length (a v1 writer cuts a batch before it would hold more; one
#: event of ``MAX_EVENT_BYTES`` fits, with its row's fixed columns and a checkpoint). Checked
#: before anything is inflated, so a reader holds about this much of one batch at a time.
MAX_BATCH_BYTES = MAX_EVENT_BYTES + (64 << 10)
#: MetadataVersion.V5, MessageHeader.Schema / RecordBatch, CompressionType.ZSTD, BodyCompressionMethod.BUFFER.
_V5 = 4
_SCHEMA = 1
_RECORD_BATCH = 3
_ZSTD = 1
_BUFFER = 0
#: A v1 batch has 8 columns: 3 fixed-width (validity, values), 4 variable-width
#: (validity, offsets, values), 1 fixed-size binary (validity, values).
FIELD_NODES = 8
BUFFERS = 20


class Cut(Exception):
    """The file ends inside a message whose every present byte is well-formed."""


class Malformed(Exception):
    """The bytes are not (the start of) a well-formed message."""


class _Unknown(Exception):
    """A field lies partly beyond the end of the file: it cannot be checked."""


@dataclass(frozen=True)
class Frame:
    """A complete message: where it starts, its metadata length and its body length."""

    start: int
    metadata_length: int
    body_length: int

    @property
    def end(self) -> int:
        return self.start + 8 + self.metadata_length + self.body_length


def _align8(n: int) -> int:
    return (n + 7) & ~7


class _FlatBuffer:
    """Bounds- and alignment-checked reads from a (possibly cut) FlatBuffer.

    ``declared`` is the metadata length the framing announces; only the first
    ``available`` bytes exist. A read past ``declared`` is ``Malformed``; a
    read that is inside ``declared`` but past ``available`` is ``_Unknown``.
    """

    def __init__(self, data: bytes, declared: int) -> None:
        self.data = data
        self.declared = declared
        self.extent = 0
        self.covered = bytearray(len(data))

    def _at(self, pos: int, size: int, what: str) -> int:
        if pos < 0 or pos + size > self.declared:
            raise Malformed(f"the metadata's {what} points outside it (byte {pos})")
        if pos % size:
            raise Malformed(f"the metadata's {what} is misaligned (byte {pos})")
        if pos + size > len(self.data):
            raise _Unknown(what)
        self._mark(pos, size)
        return pos

    def _mark(self, pos: int, size: int) -> None:
        self.extent = max(self.extent, pos + size)
        self.covered[pos : pos + size] = b"\xff" * size

    def u8(self, pos: int, what: str) -> int:
        return self.data[self._at(pos, 1, what)]

    def u16(self, pos: int, what: str) -> int:
        value: int = struct.unpack_from("<H", self.data, self._at(pos, 2, what))[0]
        return value

    def i16(self, pos: int, what: str) -> int:
        value: int = struct.unpack_from("<h", self.data, self._at(pos, 2, what))[0]
        return value

    def u32(self, pos: int, what: str) -> int:
        value: int = struct.unpack_from("<I", self.data, self._at(pos, 4, what))[0]
        return value

    def i32(self, pos: int, what: str) -> int:
        value: int = struct.unpack_from("<i", self.data, self._at(pos, 4, what))[0]
        return value

    def i64(self, pos: int, what: str) -> int:
        value: int = struct.unpack_from("<q", self.data, self._at(pos, 8, what))[0]
        return value

    def cover(self, pos: int, size: int, what: str) -> None:
        """Check that ``size`` bytes from ``pos`` lie inside the metadata (and count them)."""
        if pos < 0 or pos + size > self.declared:
            raise Malformed(f"the metadata's {what} points outside it (byte {pos})")
        if pos + size > len(self.data):
            raise _Unknown(what)
        self._mark(pos, size)

    def table(self, pos: int, what: str, known: int) -> tuple[int, list[int]]:
        """The table at ``pos``: its position and the offset of each field (0: absent)."""
        vtable = pos - self.i32(pos, f"{what} table")
        size = self.u16(vtable, f"{what} vtable")
        inline = self.u16(vtable + 2, f"{what} vtable")
        if size < 4 or size % 2 or inline < 4:
            raise Malformed(f"the metadata's {what} vtable is malformed")
        self.cover(vtable, size, f"{what} vtable")
        self.cover(pos, inline, f"{what} table")
        fields = [self.u16(vtable + 4 + 2 * i, f"{what} vtable") for i in range((size - 4) // 2)]
        if any(fields[known:]):
            raise Malformed(f"the metadata's {what} has fields this format does not define")
        if any(off >= inline or (off and off < 4) for off in fields):
            raise Malformed(f"the metadata's {what} has a field outside its table")
        return pos, fields + [0] * (known - len(fields))

    def offset(self, pos: int, what: str) -> int:
        """Follow the uoffset at ``pos``."""
        return pos + self.u32(pos, what)


def _framing(view: memoryview, pos: int, size: int) -> int:
    """The metadata length announced at ``pos``; ``Cut`` or ``Malformed`` when it cannot be a message."""
    head = bytes(view[pos : min(pos + 8, size)])
    if not CONTINUATION.startswith(head[:4]):
        raise Malformed("it does not start with the continuation marker FF FF FF FF")
    if len(head) < 8:
        # Fewer than 8 bytes: the marker, then the low bytes of a little-endian length
        # that some completion must make a positive multiple of 8 up to MAX_METADATA.
        if len(head) > 4:
            low = int.from_bytes(head[4:], "little")
            smallest = low if low else 1 << (8 * (len(head) - 4))
            if low % 8 or smallest > MAX_METADATA:
                raise Malformed("the partial metadata length cannot be a v1 message's")
        raise Cut(f"{len(head)} bytes of a message's framing")
    length: int = struct.unpack_from("<i", head, 4)[0]
    if length <= 0 or length % 8 or length > MAX_METADATA:
        raise Malformed(f"metadata length {length} is not a positive multiple of 8 up to {MAX_METADATA}")
    return length


def _message(fb: _FlatBuffer, header_type: int) -> tuple[int, int]:
    """The root ``Message``: (the header table's position, bodyLength)."""
    root = fb.u32(0, "root offset")
    _, f = fb.table(root, "Message", 5)
    if not f[0] or fb.i16(root + f[0], "version") != _V5:
        raise Malformed("the message is not of metadata version V5")
    if not f[1] or fb.u8(root + f[1], "header type") != header_type:
        raise Malformed("the message is not a " + ("schema" if header_type == _SCHEMA else "record batch"))
    if not f[2]:
        raise Malformed("the message has no header")
    if f[4]:
        raise Malformed("the message carries custom metadata")
    body = fb.i64(root + f[3], "bodyLength") if f[3] else 0
    if body < 0 or body % 8:
        raise Malformed(f"bodyLength {body} is not a non-negative multiple of 8")
    return fb.offset(root + f[2], "header"), body


def _record_batch(fb: _FlatBuffer, header: int, body: int) -> list[tuple[int, int]]:
    """Check the ``RecordBatch`` table: 8 nodes, 20 contiguous buffers filling the body, zstd."""
    _, f = fb.table(header, "RecordBatch", 5)
    rows = fb.i64(header + f[0], "length") if f[0] else 0
    if not 0 <= rows <= MAX_BATCH_ROWS:
        raise Malformed(f"the batch's length {rows} is not 0 to {MAX_BATCH_ROWS} rows")
    if f[4]:
        raise Malformed("the batch has variadic buffer counts (no v1 column has any)")
    if not f[1] or not f[2]:
        raise Malformed("the batch lists no field nodes or no buffers")
    nodes = fb.offset(header + f[1], "nodes")
    if fb.u32(nodes, "node count") != FIELD_NODES:
        raise Malformed(f"the batch does not have {FIELD_NODES} field nodes")
    for i in range(FIELD_NODES):
        at = nodes + 4 + 16 * i
        n_len = fb.i64(at, "field node")
        n_null = fb.i64(at + 8, "field node")
        if n_len != rows or not 0 <= n_null <= rows:
            raise Malformed(f"field node {i} does not match the batch's {rows} rows")
    buffers = fb.offset(header + f[2], "buffers")
    if fb.u32(buffers, "buffer count") != BUFFERS:
        raise Malformed(f"the batch does not have {BUFFERS} buffers")
    end = 0
    spans = []
    for i in range(BUFFERS):
        at = buffers + 4 + 16 * i
        b_off = fb.i64(at, "buffer")
        b_len = fb.i64(at + 8, "buffer")
        if b_off != _align8(end) or b_len < 0:
            raise Malformed(f"buffer {i} is not where the one before it ends")
        end = b_off + b_len
        spans.append((b_off, b_len))
    if _align8(end) != body:
        raise Malformed(f"bodyLength {body} is not where the last buffer ends ({_align8(end)})")
    if not f[3]:
        raise Malformed("the batch is not compressed (v1 batches are zstd-compressed)")
    comp, cf = fb.table(fb.offset(header + f[3], "compression"), "BodyCompression", 2)
    if (fb.u8(comp + cf[0], "codec") if cf[0] else 0) != _ZSTD:
        raise Malformed("the batch is not zstd-compressed")
    if (fb.u8(comp + cf[1], "method") if cf[1] else _BUFFER) != _BUFFER:
        raise Malformed("the batch's compression is not per buffer")
    return spans


def _padding(fb: _FlatBuffer, length: int) -> None:
    """Every byte no field covers is zero, and fewer than 8 of them follow the FlatBuffer's last byte."""
    if length - fb.extent >= 8:
        raise Malformed(f"the metadata is {length} bytes but its content ends at byte {fb.extent}")
    loose = int.from_bytes(fb.data[:length], "little") & ~int.from_bytes(fb.covered[:length], "little")
    if loose:
        raise Malformed(f"the metadata's padding is not zero (byte {(loose & -loose).bit_length() // 8})")


def batch_frame(view: memoryview, pos: int, size: int) -> Frame:
    """The record batch message at ``pos`` in a file of ``size`` bytes.

    Raises ``Cut`` when the file ends inside a message whose present bytes are
    well-formed, ``Malformed`` when they are not.
    """
    length = _framing(view, pos, size)
    present = bytes(view[pos + 8 : min(pos + 8 + length, size)])
    fb = _FlatBuffer(present, length)
    try:
        header, body = _message(fb, _RECORD_BATCH)
        buffers = _record_batch(fb, header, body)
    except _Unknown:
        raise Cut(f"the file ends inside a message's metadata (at {len(present)} of {length} bytes)") from None
    _padding(fb, min(length, len(present)))
    if len(present) < length:
        raise Cut(f"the file ends inside a message's metadata padding (at {len(present)} of {length} bytes)")
    frame = Frame(pos, length, body)
    if frame.end > size:
        raise Cut(f"the file ends inside a message's body (at {size - pos - 8 - length} of {body} bytes)")
    start = pos + 8 + length
    for b_off, b_len in buffers:
        if any(view[start + b_off + b_len : start + _align8(b_off + b_len)]):
            raise Malformed(f"the padding after a buffer at body byte {b_off} is not zero")
    _inflated(view, start, buffers)
    return frame


def check_inflation(metadata: bytes, body: memoryview) -> int:
    """For a batch message already split by Arrow (its metadata FlatBuffer and its body): the bytes its
    buffers declare uncompressed; ``Malformed`` when it is not a v1 batch or declares more than
    ``MAX_BATCH_BYTES``. For a reader that walks messages with Arrow's own reader, before it decodes one."""
    fb = _FlatBuffer(metadata, len(metadata))
    try:
        header, length = _message(fb, _RECORD_BATCH)
        buffers = _record_batch(fb, header, length)
    except _Unknown:  # pragma: no cover - the whole metadata is given
        raise Malformed("the batch's metadata is cut short") from None
    if len(body) < length:
        raise Malformed(f"the batch's body is {len(body)} bytes, not {length}")
    return _inflated(body, 0, buffers)


def _inflated(view: memoryview, start: int, buffers: list[tuple[int, int]]) -> int:
    """The bytes the batch's buffers declare uncompressed, all together; ``Malformed`` beyond ``MAX_BATCH_BYTES``.

    A non-empty zstd buffer starts with its uncompressed length (int64; -1: stored as it is),
    which Arrow allocates before it inflates: a few KB of zeros may declare gigabytes.
    """
    total = 0
    for i, (b_off, b_len) in enumerate(buffers):
        if b_len == 0:
            continue
        if b_len < 8:
            raise Malformed(f"buffer {i} is {b_len} bytes, too short to state its uncompressed length")
        declared: int = struct.unpack_from("<q", view, start + b_off)[0]
        if declared == -1:
            declared = b_len - 8
        elif declared < 0:
            raise Malformed(f"buffer {i} declares an uncompressed length of {declared} bytes")
        total += declared
        if total > MAX_BATCH_BYTES:
            raise Malformed(
                f"its buffers declare {total} or more bytes uncompressed (buffer {i}: {declared}); "
                f"a v1 batch holds at most {MAX_BATCH_BYTES}"
            )
    return total


def schema_frame(view: memoryview, size: int) -> Frame:
    """The schema message at the start of the file (framing and ``Message`` table only).

    The ``Schema`` table itself is left to Arrow; a complete schema message
    whose FlatBuffer would also parse from fewer than ``length - 7`` bytes has
    padding that no Arrow writer writes, and is ``Malformed``.
    """
    length = _framing(view, 0, size)
    present = bytes(view[8 : min(8 + length, size)])
    fb = _FlatBuffer(present, length)
    try:
        _, body = _message(fb, _SCHEMA)
    except _Unknown:
        raise Cut(f"the file ends inside the schema's metadata (at {len(present)} of {length} bytes)") from None
    if body:
        raise Malformed(f"the schema message announces a body of {body} bytes")
    if len(present) < length:
        if _parses_within(present, (len(present) // 8) * 8, length):
            raise Malformed("the schema's metadata is followed by more padding than Arrow writes")
        raise Cut(f"the file ends inside the schema's metadata (at {len(present)} of {length} bytes)")
    if _parses_within(present, length - 8, length):
        raise Malformed("the schema's metadata is followed by more padding than Arrow writes")
    return Frame(0, length, 0)


def _parses_within(present: bytes, limit: int, length: int) -> bool:
    """True when the schema FlatBuffer parses from its first ``limit`` bytes (so it ends 8+ bytes early)."""
    if limit <= 0 or limit + 8 > length:
        return False
    import pyarrow as pa
    import pyarrow.ipc as ipc

    message = CONTINUATION + struct.pack("<i", limit) + present[:limit]
    try:
        ipc.read_schema(ipc.read_message(pa.py_buffer(message)))
    except Exception:  # noqa: BLE001 - any failure means it does not fit in fewer bytes
        return False
    return True
