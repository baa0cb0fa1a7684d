"""Run ids: globally unique text, so trackers can be merged.

A run id is a UUID version 7 in its 36-character text form: 48 bits of the
start time in milliseconds since the epoch, then 74 random bits (RFC 9562).
Ids of runs started later sort later (to the millisecond); two trackers never
hand out the same one. Runs of a tracker made before run ids were text keep
their old number as ``legacy_id`` (migration 3).
"""

from __future__ import annotations

import re
import secrets
import time

__all__ = ["RUN_ID", "is_run_id", "iso_ms", "new_run_id"]

#: The text form the database accepts (``runs.id``'s CHECK).
RUN_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def new_run_id(now_ns: int | None = None) -> str:
    """A fresh UUIDv7 (``now_ns``: the time it stands for; default now)."""
    ms = (time.time_ns() if now_ns is None else now_ns) // 1_000_000
    rand_a = secrets.randbits(12)
    rand_b = secrets.randbits(62)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def is_run_id(text: str) -> bool:
    """Whether ``text`` has the form of a run id."""
    return RUN_ID.match(text) is not None


def iso_ms(ns: int) -> str:
    """A wall time in ns as the tracker writes times: UTC, ISO 8601, milliseconds (floor), e.g.
    ``2026-05-09T07:35:25.123Z`` (the form of SQLite's ``strftime('%Y-%m-%dT%H:%M:%fZ', 'now')``)."""
    seconds, ms = divmod(ns // 1_000_000, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ms:03d}Z"
