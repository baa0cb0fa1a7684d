"""The index rows this user has checked against their streams: a memo in the user's own cache.

Checking a row (``observe.store_index.check_row``) reads and decodes its
stream's tail: about a millisecond a stream on a small machine, ten seconds
for 10,000. A row this user checked before (or pushed, having verified the
whole stream), whose stream file is still the same file, need not be read
again: the memo keeps, per store, a fingerprint of each checked row and the
sealed verdict its tail held. The fingerprint covers every column the check
compares (id, digest, size, head, tail, signer, verdict columns, seal time),
the key the seal was checked with (none, or its id), and the file's identity:
device, inode, size, modification and change time. Any write, rename or
``chmod`` of the file sets its change time to now, which no unprivileged
process can set back; an edited row has another fingerprint. Either misses
the memo, and the row is checked again.

The memo is the user's, not the store's: ``index-checked`` in the tool's
cache folder (``observe.util.cache``: ``$ALPHA_CACHE``, else
``$XDG_CACHE_HOME/alpha-observe``, else ``~/.cache/alpha-observe``); one JSON file per store (named by
the BLAKE3 of its absolute path), replaced whole; an entry holds what the
tail sealed (verdict, seal time, the length and digest of the bytes before
the seal, which the events scan checks). Whoever can write there can
make a query trust a row, as whoever can write the user's home can change the
tool itself; ``--reverify`` ignores it. A memo that cannot be read is an empty
one; one that cannot be written is not written (the next query checks again).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FINGERPRINTED", "Memo", "Sealed", "fingerprint", "memo_folder"]

#: The index columns a fingerprint covers: every column ``check_row`` compares with the stream's tail.
FINGERPRINTED: tuple[str, ...] = (
    "stream_id",
    "file_blake3",
    "file_size",
    "head",
    "tail_offset",
    "tail_head",
    "verdict_seq",
    "events",
    "signed",
    "key_id",
    "gate",
    "verdict",
    "scope",
    "checks",
    "checks_failed",
    "last_time",
)


def memo_folder() -> Path:
    """Where the memos lie: ``index-checked`` in the tool's cache folder (``observe.util.cache``)."""
    from observe.util.cache import cache_folder

    return cache_folder("index-checked")


def fingerprint(row: dict[str, Any], st: os.stat_result, key_id: str | None) -> str:
    """The fingerprint of an index row, the file it names (as ``st`` found it) and the key it is checked with."""
    import datetime as dt

    from blake3 import blake3

    # a time as text: pyarrow reads a UTC timestamp with another tzinfo object than the writer's
    values = tuple(v.isoformat() if isinstance(v, dt.datetime) else v for v in (row.get(c) for c in FINGERPRINTED))
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, key_id)
    return blake3(repr((values, identity)).encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class Sealed:
    """What a stream's checked tail sealed: its verdict (attrs, or None), the seal's wall time, and the byte
    length and BLAKE3 of the file before the seal (the seal's ``bytes`` and ``file_blake3``)."""

    verdict: dict[str, Any] | None
    wall_ns: int
    prefix_bytes: int
    prefix_blake3: str


class Memo:
    """One store's memo: fingerprint -> the sealed verdict (attrs, or None) and the seal's wall time."""

    def __init__(self, store_root: Path) -> None:
        from blake3 import blake3

        name = blake3(os.fsencode(os.path.abspath(store_root))).hexdigest()[:32]
        self.path = memo_folder() / f"{name}.json"
        self.entries: dict[str, list[Any]] = {}
        self.added = 0
        with contextlib.suppress(OSError, ValueError, RecursionError):
            got = json.loads(self.path.read_bytes())
            if isinstance(got, dict):
                self.entries = got

    def get(self, fp: str) -> Sealed | None:
        """What the tail of a row checked before sealed, or None."""
        got = self.entries.get(fp)
        if not isinstance(got, list) or len(got) != 4 or not all(type(x) is int for x in got[1:3]):
            return None
        verdict, wall, at, digest = got
        if not isinstance(digest, str):
            return None
        return Sealed((verdict if isinstance(verdict, dict) else None), wall, at, digest)

    def add(self, fp: str, sealed: Sealed) -> None:
        self.entries[fp] = [sealed.verdict, sealed.wall_ns, sealed.prefix_bytes, sealed.prefix_blake3]
        self.added += 1

    def save(self) -> None:
        """Write the memo whole, when anything was added; a memo that cannot be written is left."""
        if not self.added:
            return
        from observe.util.atomic import replace_file

        with contextlib.suppress(OSError, ValueError):
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            replace_file(self.path, json.dumps(self.entries, separators=(",", ":")).encode("utf-8"), mode=0o600)
            self.added = 0
