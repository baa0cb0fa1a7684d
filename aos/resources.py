"""Errors of the machine, told apart from damage to a stream.

A reader that cannot start a thread, have memory, open a file or write to a
full disk has learnt nothing about the stream: the same bytes verify once the
machine has what they need. ``machine_error`` says whether an exception is such
an error (and which resource it lacked); the readers of this package re-raise
it unchanged instead of calling the stream damaged, and the command line names
it ``resource`` (``observe.refusals.Resource``; ``aos.refusals`` holds only the
format's own ``stream-*`` names).

What a hostile stream can make a reader allocate is bounded before anything is
inflated (``aos.framing``): so a failed allocation while reading is the
machine's, never a stream's doing. Only errors whose type says so are
classified (``MemoryError``, an ``OSError`` of one of ``RESOURCE_ERRNOS``), or
errors of the libraries the readers call (pyarrow, a Rust extension's panic,
DuckDB, ``RuntimeError``) whose message says a thread could not be started or
memory could not be had: those messages are the libraries' own, never bytes of
the stream.
"""

from __future__ import annotations

import errno

__all__ = ["RESOURCE_ERRNOS", "machine_error"]

#: The ``errno`` values of a machine out of something: memory, processes or threads, descriptors, disk.
RESOURCE_ERRNOS: dict[int, str] = {
    errno.ENOMEM: "no memory could be had",
    errno.EAGAIN: "no thread or process could be started",
    errno.EMFILE: "no file descriptor could be had (this process's limit)",
    errno.ENFILE: "no file descriptor could be had (the system's limit)",
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
}

#: Phrases of the libraries' own messages, lower-cased, and what each says the machine lacked.
_PHRASES: tuple[tuple[str, str], ...] = (
    ("failed to launch worker thread", "no thread could be started"),
    ("can't start new thread", "no thread could be started"),
    ("threadpoolbuilderror", "no thread could be started"),
    ("global thread pool has not been initialized", "no thread could be started"),
    ("resource temporarily unavailable", "no thread or process could be started"),
    ("out of memory", "no memory could be had"),
    ("cannot allocate memory", "no memory could be had"),
    ("not enough memory", "no memory could be had"),
    ("memory allocation failed", "no memory could be had"),
    ("failed to allocate", "no memory could be had"),
    ("too many open files", "no file descriptor could be had"),
    ("no space left on device", "the disk is full"),
    ("disk quota exceeded", "the disk quota is used up"),
)

#: The modules whose exceptions are classified by their message (besides ``RuntimeError``).
_LIBRARIES = ("pyarrow", "pyo3_runtime", "duckdb", "_duckdb", "blake3")


def _one(exc: BaseException) -> str | None:
    if isinstance(exc, MemoryError):
        return "no memory could be had"
    if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
        return RESOURCE_ERRNOS[exc.errno]
    module = type(exc).__module__.split(".")[0]
    if isinstance(exc, RuntimeError) or module in _LIBRARIES:
        said = str(exc).lower()
        for phrase, lacked in _PHRASES:
            if phrase in said:
                return lacked
    return None


def machine_error(exc: BaseException) -> str | None:
    """What the machine could not give (``"no thread could be started"``...) when ``exc`` is an error of
    the machine, not of what was read; None otherwise. An exception raised ``from`` one counts as it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        lacked = _one(current)
        if lacked is not None:
            return lacked
        current = current.__cause__
    return None
