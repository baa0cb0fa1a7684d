"""Canonical byte encoding of an event, independent of Arrow.

The chain hashes these bytes, never Arrow's, so a stream can be re-encoded
(other compression, other batch sizes) and another language can recompute
every hash from the column values alone. docs/FORMAT.md states it to the byte.

    encoding = u64 seq | i64 wall_ns | i64 mono_ns
             | lp(kind) | opt(step) | lp(attrs_json) | opt(data)
    lp(b)    = u64 len(b) | b
    opt(b)   = 0x00                       (null)
             | 0x01 | lp(b)               (present, possibly empty)

Integers are little-endian; text is UTF-8.
"""

from __future__ import annotations

import json
import struct
from typing import Any

__all__ = ["U64", "canonical_json", "encode_event", "encoded_parts", "length_prefixed", "parse_canonical"]

_HEAD = struct.Struct("<Qqq")
U64 = struct.Struct("<Q")


def canonical_json(obj: Any) -> str:
    """The one JSON text for an attrs object: sorted keys, no spaces, UTF-8.

    Raises ValueError for values JSON cannot state exactly (NaN, infinities)
    and TypeError for a non-object or a non-JSON value.
    """
    if not isinstance(obj, dict):
        raise TypeError(f"attrs must be a JSON object, not {type(obj).__name__}")
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def parse_canonical(text: str) -> dict[str, Any]:
    """Parse attrs text that must be the canonical JSON of an object.

    Raises ValueError when it is not JSON, not an object, or not in canonical
    form (keys unsorted or repeated, spaces, escapes, NaN).
    """
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"attrs is not JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"attrs is a JSON {type(obj).__name__}, not an object")
    try:
        again = canonical_json(obj)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"attrs holds a value JSON cannot state exactly ({exc})") from exc
    if again != text:
        raise ValueError("attrs is not in canonical form")
    return obj


def length_prefixed(b: bytes) -> bytes:
    """lp(b): the byte length as a little-endian u64, then the bytes."""
    return U64.pack(len(b)) + b


def encoded_parts(
    seq: int,
    wall_ns: int,
    mono_ns: int,
    kind: str,
    step: str | None,
    attrs_json: str,
    data: bytes | None,
) -> tuple[bytes, bytes | None, int]:
    """The encoding split as (everything before data's bytes, data, total length).

    Hashing the prefix and then ``data`` separately avoids copying large chunks.
    """
    parts = [_HEAD.pack(seq, wall_ns, mono_ns), length_prefixed(kind.encode("utf-8"))]
    if step is None:
        parts.append(b"\x00")
    else:
        parts.append(b"\x01" + length_prefixed(step.encode("utf-8")))
    parts.append(length_prefixed(attrs_json.encode("utf-8")))
    if data is None:
        parts.append(b"\x00")
        prefix = b"".join(parts)
        return prefix, None, len(prefix)
    parts.append(b"\x01" + U64.pack(len(data)))
    prefix = b"".join(parts)
    return prefix, data, len(prefix) + len(data)


def encode_event(
    seq: int,
    wall_ns: int,
    mono_ns: int,
    kind: str,
    step: str | None,
    attrs_json: str,
    data: bytes | None,
) -> bytes:
    """The whole canonical encoding as one byte string (for vectors and tests)."""
    prefix, data_part, _ = encoded_parts(seq, wall_ns, mono_ns, kind, step, attrs_json, data)
    return prefix if data_part is None else prefix + data_part
