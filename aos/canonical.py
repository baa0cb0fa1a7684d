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

Attrs are canonical JSON (FORMAT.md section 3.1): Python's ``json.dumps`` with
sorted keys and no spaces, except that a non-integer number (a Python float) is
written in the ECMAScript / RFC 8785 form (``1e-7``, ``100000``, ``1.5``), which
every language can reproduce, rather than Python's ``repr``.
"""

from __future__ import annotations

import json
import math
import struct
import threading
from typing import Any

__all__ = [
    "U64",
    "canonical_json",
    "encode_event",
    "encoded_parts",
    "es_number",
    "length_prefixed",
    "parse_canonical",
]

_HEAD = struct.Struct("<Qqq")
U64 = struct.Struct("<Q")


def es_number(x: float) -> str:
    """A float as ECMAScript's Number::toString writes it (RFC 8785, section 3.2.2.3).

    The digits are the shortest that read back as ``x`` (Python's ``repr``
    finds the same ones); only where the decimal point goes and when an
    exponent is used differ from ``repr``. ``-0.0`` is ``0``. NaN and the
    infinities raise ValueError: JSON cannot state them.
    """
    if not math.isfinite(x):
        raise ValueError(f"Out of range float values are not JSON compliant: {x!r}")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    mantissa, _, exp = repr(abs(x)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    point = len(whole) + (int(exp) if exp else 0)  # value = 0.<digits> * 10**point
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    s = stripped.rstrip("0")
    k, n = len(s), point
    if k <= n <= 21:
        text = s + "0" * (n - k)
    elif 0 < n <= 21:
        text = s[:n] + "." + s[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * -n + s
    else:
        e = n - 1
        text = (s if k == 1 else s[0] + "." + s[1:]) + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + text


def _has_float(obj: Any) -> bool:
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, float):
            return True
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, list | tuple):
            stack.extend(o)
    return False


def _dump(o: Any, out: list[str]) -> None:
    """The canonical text of ``o`` (used when it holds a float)."""
    if o is None:
        out.append("null")
    elif o is True or o is False:
        out.append("true" if o else "false")
    elif isinstance(o, str):
        out.append(json.dumps(o, ensure_ascii=False))
    elif isinstance(o, int):
        out.append(int.__repr__(o))
    elif isinstance(o, float):
        out.append(es_number(o))
    elif isinstance(o, dict):
        if not all(isinstance(k, str) for k in o):
            raise TypeError("attrs object keys must be strings")
        out.append("{")
        for i, key in enumerate(sorted(o)):
            if i:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _dump(o[key], out)
        out.append("}")
    elif isinstance(o, list | tuple):
        out.append("[")
        for i, item in enumerate(o):
            if i:
                out.append(",")
            _dump(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(o).__name__} is not a JSON value")


def canonical_json(obj: Any, *, floats: bool | None = None) -> str:
    """The one JSON text for an attrs object: sorted keys, no spaces, UTF-8.

    Non-integer numbers are written in ECMAScript form (``es_number``);
    ``floats=False`` says the caller knows ``obj`` holds none. Raises
    ValueError for values JSON cannot state exactly (NaN, infinities) and
    TypeError for a non-object or a non-JSON value.
    """
    if not isinstance(obj, dict):
        raise TypeError(f"attrs must be a JSON object, not {type(obj).__name__}")
    if not obj:
        return "{}"
    if not (_has_float(obj) if floats is None else floats):
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    out: list[str] = []
    _dump(obj, out)
    return "".join(out)


class _Seen(threading.local):
    floats = 0


_seen = _Seen()


def _float_token(token: str) -> float:
    _seen.floats += 1
    return float(token)


#: One decoder for every parse: it counts the non-integer numbers it meets (so a
#: text without any is re-serialised by the C encoder, with no walk).
_DECODER = json.JSONDecoder(parse_float=_float_token)


def parse_canonical(text: str) -> dict[str, Any]:
    """Parse attrs text that must be the canonical JSON of an object.

    Raises ValueError when it is not JSON, not an object, or not in canonical
    form (keys unsorted or repeated, spaces, escapes, NaN, a number not in
    its one canonical form such as ``1.0``, ``1E5`` or ``-0``).
    """
    _seen.floats = 0
    try:
        obj = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"attrs is not JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"attrs is a JSON {type(obj).__name__}, not an object")
    try:
        again = canonical_json(obj, floats=bool(_seen.floats))
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
