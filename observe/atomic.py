"""Write a file whole or not at all: a temporary file beside it, then a rename over it.

A reader (a browser on a report, a web server on the site, a CI step on an export)
sees the old bytes or the new ones, never half a file; a failed write leaves no
temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["replace_file"]


def replace_file(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """Put ``data`` at ``path`` atomically (its folder must exist); ``OSError`` when it cannot."""
    dest = Path(path)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
