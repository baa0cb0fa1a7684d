"""aos: the AOS stream format (an Arrow IPC stream, zstd, BLAKE3-chained).

Nothing here imports the rest of the project. Heavy modules (pyarrow) load only
when a reader or writer is used, and even ``Event`` loads on first use, so light
commands start fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aos.refusals import (
    Refusal,
    StreamChain,
    StreamMissing,
    StreamOrder,
    StreamSchema,
    StreamSeal,
    StreamSignature,
    StreamTruncated,
    StreamUnsealed,
    StreamVerdict,
    StreamWrite,
)

if TYPE_CHECKING:
    from aos.event import KINDS, Event
    from aos.reader import StreamContents, read_stream
    from aos.verify import Verification, verify_stream
    from aos.writer import SealInfo, StreamWriter

__all__ = [
    "KINDS",
    "Event",
    "Refusal",
    "SealInfo",
    "StreamChain",
    "StreamContents",
    "StreamMissing",
    "StreamOrder",
    "StreamSchema",
    "StreamSeal",
    "StreamSignature",
    "StreamTruncated",
    "StreamUnsealed",
    "StreamVerdict",
    "StreamWrite",
    "StreamWriter",
    "Verification",
    "read_stream",
    "verify_stream",
]

# Loaded on first use: ``alpha observe receipt`` imports ``aos.text`` and needs none of them
# (``aos.event`` loads dataclasses, which loads inspect: milliseconds on every receipt).
_LAZY = {
    "KINDS": "aos.event",
    "Event": "aos.event",
    "StreamWriter": "aos.writer",
    "SealInfo": "aos.writer",
    "StreamContents": "aos.reader",
    "read_stream": "aos.reader",
    "Verification": "aos.verify",
    "verify_stream": "aos.verify",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aos' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
