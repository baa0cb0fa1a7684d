"""Write a file whole or not at all: a temporary file beside it, then a rename over it.

A reader (a browser on a report, a web server on the site, a CI step on an export)
sees the old bytes or the new ones, never half a file; a failed write leaves no
temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["replace_file", "replace_file_with"]


def replace_file(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """Put ``data`` at ``path`` atomically (its folder must exist); ``OSError`` when it cannot."""
    replace_file_with(path, (data,), mode=mode)


def replace_file_with(path: str | os.PathLike[str], chunks: Iterable[bytes], *, mode: int = 0o644) -> None:
    """:func:`replace_file` for content made as it is written (never held whole); an exception raised
    while making it leaves the old file (or none) in place."""
    dest = Path(path)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
