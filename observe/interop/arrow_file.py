"""Export a verified stream as an uncompressed Arrow IPC file, for readers without zstd.

The file holds the stream's schema (its columns and its ``aos.*`` metadata, as
docs/FORMAT.md section 2 defines them) and every verified record batch, seal
included, as they were, only without compression, in Arrow's random-access
file format (``ARROW1`` magic, a footer). Each batch is decoded from the
verified bytes and written as it comes, so memory holds one batch at a time
besides the stream's bytes.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from observe.interop.verified import VerifiedStream

__all__ = ["Chunks", "arrow_file_chunks"]


class Chunks(io.RawIOBase):
    """A write-only sink that keeps what was written until it is taken."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self._parts.append(bytes(b))
        return len(b)

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


def arrow_file_chunks(stream: VerifiedStream) -> Iterator[bytes]:
    """The verified batches as an Arrow IPC file (no compression), in chunks of about one batch."""
    import pyarrow as pa

    from aos.reader import open_buffer

    sink = Chunks()
    with open_buffer(stream.data, str(stream.path)) as f:
        options = pa.ipc.IpcWriteOptions(compression=None)
        with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), f.schema, options=options) as writer:
            yield sink.take()
            for raw in f.batches():
                writer.write_batch(raw.batch)
                yield sink.take()
            if f.damage is not None:  # never for verified bytes; a guard, so no half file is written
                raise f.damage
    yield sink.take()
