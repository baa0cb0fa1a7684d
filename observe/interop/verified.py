"""A stream read once and verified, for the formats other tools read (OTLP, asciicast, attestations).

``load_verified`` reads the stream file once, verifies those bytes (intact and
sealed, as ``verify``) and parses the events from the same bytes, so what is
exported or attested is exactly what was verified, even if the file is replaced
meanwhile. A stream that does not verify is refused by name. The bytes are held
(compressed, as in the file); the events are decoded a batch at a time as an
export goes, and ``write_output`` writes the output as it is made, so memory stays
near the file's size whatever the stream holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.refusals import Refusal
from observe.refusals import OutputWrite
from observe.util.atomic import replace_file_with

if TYPE_CHECKING:
    from aos.event import Event
    from aos.signing import Verifier
    from aos.verify import Verification

__all__ = [
    "VerifiedStream",
    "argv_of",
    "attrs_of",
    "display",
    "int_of",
    "load_verified",
    "opening",
    "write_output",
]


# -- reading: the verified bytes, once ------------------------------------------------------


@dataclass(frozen=True)
class VerifiedStream:
    """A stream read once: its bytes and what ``verify`` found in them; ``events()`` decodes those bytes."""

    path: Path
    data: bytes | bytearray = field(repr=False)  # the bytes read once (never written to)
    verification: Verification

    @property
    def stream_id(self) -> str:
        return self.verification.stream_id

    def events(self) -> Iterator[Event]:
        """The verified events in order, decoded a batch at a time (each call starts again at seq 0)."""
        from aos.reader import open_buffer

        with open_buffer(self.data, str(self.path)) as f:
            yield from f.events()


def _read_once(path: Path) -> bytearray:
    from aos.reader import open_regular
    from aos.refusals import StreamMissing

    fd = open_regular(path)  # never blocks on a FIFO or a device: stream-missing for those
    try:
        # Into one buffer of the file's size (a list of chunks joined would hold the file twice).
        data = bytearray(os.fstat(fd).st_size)
        view = memoryview(data)
        got = 0
        while got < len(data) and (n := os.readv(fd, [view[got:]])):
            got += n
        view.release()
        del data[got:]  # the file shrank meanwhile
        while more := os.read(fd, 1 << 20):  # or grew
            data += more
    except OSError as exc:
        raise StreamMissing(f"{path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    return data


def load_verified(path: str | os.PathLike[str], key: Verifier | None = None) -> VerifiedStream:
    """Read ``path`` once, verify those bytes (and the seal's signature with ``key``), parse their events.

    Raises the refusal ``verify`` would print for the same bytes.
    """
    from aos.verify import verify_stream

    p = Path(path)
    data = _read_once(p)
    v = verify_stream(p, key, data=data)
    return VerifiedStream(p, data, v)


def write_output(path: str, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or chunks made as they are written) to ``path`` (``-`` is stdout), creating
    missing folders; ``output-write`` on failure.

    A file is written beside its destination and renamed over it, so a reader never sees half of it
    (nor anything, when making the chunks raises).
    """
    import sys

    chunks = (data,) if isinstance(data, bytes) else data
    if path == "-":
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        return
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        replace_file_with(dest, chunks)
    except OSError as exc:
        raise OutputWrite(f"cannot write {dest}: {exc.strerror or exc}") from None


# -- reading events: what every export needs -----------------------------------------------


def attrs_of(ev: Event) -> dict[str, Any]:
    """The event's attrs; ``{}`` should they not decode (verified attrs always do)."""
    try:
        return ev.attrs
    except Refusal:  # verified attrs are canonical objects; this is only a guard
        return {}


def display(value: Any) -> str:
    """A recorded value as text for a person or another tool (``aos.text.display``)."""
    from aos.text import display as text_display

    return text_display(value)


def argv_of(value: Any) -> list[str]:
    """A recorded argv as a list of texts; ``[]`` when it is not a list."""
    return [display(v) for v in value] if isinstance(value, list) else []


def int_of(value: Any) -> int | None:
    """``value`` when it is an int (not a bool), else None."""
    return value if type(value) is int else None


def _first(events: Iterable[Event], kind: str) -> Event | None:
    return next((e for e in events if e.kind == kind), None)


def opening(stream: VerifiedStream) -> tuple[dict[str, Any], Event]:
    """``stream.open``'s attrs, and the event the command starts at (``process.start``, else the first)."""
    opened = _first(stream.events(), kinds.STREAM_OPEN)
    start = _first(stream.events(), kinds.PROCESS_START) or opened or next(stream.events())
    return (attrs_of(opened) if opened is not None else {}), start
