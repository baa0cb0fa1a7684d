"""The recorder's tuning: the knobs it reads from the environment, and the memory habits that keep it lean.

Tuning by environment (for tests and benchmarks; the defaults suit CI):
``ALPHA_OBSERVE_KILL_GRACE`` (seconds from ``--timeout``'s SIGTERM to SIGKILL,
default 5), ``ALPHA_OBSERVE_DRAIN`` (seconds stray background writers are still
recorded after the command exits, default 2), ``ALPHA_OBSERVE_ZSTD_LEVEL``
(the stream's zstd level, default 1; -1 records ~15% faster into ~35% larger
streams), ``ALPHA_OBSERVE_ENCODERS`` (threads compressing batches, 1 to 64;
default one per core, 2 to 4: ``aos.writer.default_encoders``; each adds about
2 MiB to the peak RSS). A value that is not one of these is ignored, with a warning.
"""

from __future__ import annotations

import os

from observe.env import RecorderVars
from observe.recorder.sinks import logger

__all__ = [
    "DRAIN_SECONDS",
    "KILL_GRACE",
    "drain_seconds",
    "encoders",
    "float_env",
    "kill_grace",
    "lean_memory",
    "zstd_level",
]

#: Seconds between ``--timeout``'s SIGTERM and the SIGKILL that follows
#: (``ALPHA_OBSERVE_KILL_GRACE`` overrides).
KILL_GRACE = 5.0
#: Seconds the output of stray background writers is still recorded after the
#: command exits (``ALPHA_OBSERVE_DRAIN`` overrides).
DRAIN_SECONDS = 2.0


def float_env(name: str, default: float, *, low: float = 0.0, high: float = 86400.0) -> float:
    """A tuning variable's value; anything else than a number in ``[low, high]`` is ignored, with a warning."""
    import math

    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not low <= value <= high:
        logger().warning("ignoring a bad tuning variable", variable=name, value=raw[:40], using=default)
        return default
    return value


def kill_grace() -> float:
    """``ALPHA_OBSERVE_KILL_GRACE``: the seconds from ``--timeout``'s SIGTERM to SIGKILL, else ``KILL_GRACE``."""
    return float_env(RecorderVars.KILL_GRACE, KILL_GRACE)


def drain_seconds() -> float:
    """``ALPHA_OBSERVE_DRAIN``: the seconds stray writers are still recorded after the exit, else ``DRAIN_SECONDS``."""
    return float_env(RecorderVars.DRAIN, DRAIN_SECONDS)


def zstd_level() -> int:
    """``ALPHA_OBSERVE_ZSTD_LEVEL``: an integer from -7 to 22 (zstd's fast and normal levels), else 1."""
    level = float_env(RecorderVars.ZSTD_LEVEL, 1, low=-7, high=22)
    if level != int(level):
        logger().warning("ignoring a bad tuning variable", variable=RecorderVars.ZSTD_LEVEL, using=1)
        return 1
    return int(level)


def encoders() -> int | None:
    """``ALPHA_OBSERVE_ENCODERS``: an integer from 1 to 64, else None (one per core: the writer's default)."""
    if not os.environ.get(RecorderVars.ENCODERS, "").strip():
        return None
    count = float_env(RecorderVars.ENCODERS, 0, low=1, high=64)
    if count != int(count) or count < 1:
        if count:
            logger().warning("ignoring a bad tuning variable", variable=RecorderVars.ENCODERS, using="default")
        return None
    return int(count)


def lean_memory(*, arrow: bool = True) -> None:
    """Keep the recorder's memory small, flat in the stream's size, and its pages reused.

    With ``arrow`` (a recording whose events are read back: a gate), pyarrow is
    loaded now, and its buffers come from the system allocator, like Python's:
    pyarrow's own (mimalloc or jemalloc) keeps freed batches beside glibc's free
    memory, ~15-25 MB more peak RSS. Without it pyarrow is not loaded at all (the
    writer encodes without it, ``aos.ipc``). glibc is asked to keep what is freed
    (no trimming, no ``mmap`` for chunks below 16 MiB, at most 4 arenas), so each
    batch reuses the pages of the one before instead of faulting fresh ones in
    (page faults are dear under gVisor); what is in flight is bounded (aos.writer,
    observe.recorder.sinks.Sink), so what is kept is too. The recorded command is
    exec'd: none of this reaches it.
    """
    if arrow:
        _arrow_system_pool()
    from observe.util.allocator import keep_freed_memory

    keep_freed_memory()


def _arrow_system_pool() -> None:
    """Load pyarrow with the system allocator as its default pool (``lean_memory``)."""
    # Arrow picks its default pool once, from ARROW_DEFAULT_MEMORY_POOL, when it is first
    # used: set it only for that moment (the command's environment is the recorder's own).
    # Switching pools later (set_memory_pool) leaves the first pool's reservations: ~20 MB.
    saved = os.environ.get(RecorderVars.ARROW_MEMORY_POOL)
    os.environ[RecorderVars.ARROW_MEMORY_POOL] = "system"
    try:
        import pyarrow as pa

        try:
            if pa.default_memory_pool().backend_name != "system":  # pyarrow was in use already
                pa.set_memory_pool(pa.system_memory_pool())
        except (NotImplementedError, AttributeError, pa.ArrowException):
            pass
    finally:
        if saved is None:
            del os.environ[RecorderVars.ARROW_MEMORY_POOL]
        else:
            os.environ[RecorderVars.ARROW_MEMORY_POOL] = saved
