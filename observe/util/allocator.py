"""How an ``alpha`` process asks glibc to allocate: keep what is freed, reuse its pages.

Reading, verifying and recording move large buffers (a batch, an event's data, its
base64, its JSON line), one after another. With glibc's defaults each buffer above
the ``mmap`` threshold is a fresh mapping whose pages fault in one by one and are
unmapped when freed; under gVisor, where the GPU machine runs, a page fault costs
about as much as a system call, and ``read --json`` of 512 MB spent most of its
12.7 s faulting (1.4 s for ``read --stdout`` of the same stream). Asked to keep
freed memory (no trimming, no ``mmap`` for chunks below 16 MiB, at most 4 arenas),
each buffer reuses the pages of the one before. What is in flight is bounded by the
callers, so what is kept is too.
"""

from __future__ import annotations

import sys

__all__ = ["keep_freed_memory"]

#: glibc's mallopt parameters and the values asked for.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_SETTINGS = ((_M_TRIM_THRESHOLD, 32 << 20), (_M_MMAP_THRESHOLD, 16 << 20), (_M_ARENA_MAX, 4))


def keep_freed_memory() -> bool:
    """Tune glibc as the module's docstring says; False where there is no glibc (musl: its defaults stay)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    for param, value in _SETTINGS:
        mallopt(param, value)
    return True
