"""How sizes and durations read to people: ``show``, the HTML report and the tracker's site say them one way.

Both take whatever a stream's attrs hold: a value that is not a JSON integer
(a string, a float, ``true``) is ``?``, and an integer too large for a float
(a forged ``size`` of ``10**400``) is printed whole rather than raising
``OverflowError``.
"""

from __future__ import annotations

from aos.attrs import json_int

__all__ = ["BINARY_UNITS", "seconds", "size"]

#: The units a size is shown in, largest first.
BINARY_UNITS: tuple[tuple[str, int], ...] = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))

# Beyond these, a value is printed as the integer it is: a float would round it (or overflow).
_SIZE_WHOLE = 1 << 60
_NS_WHOLE = 1 << 62


def size(n: object) -> str:
    """Return a byte count as people read it: ``512 B``, ``1.5 KiB``, ``3.0 GiB`` (``?`` when not an integer)."""
    count = json_int(n)
    if count is None:
        return "?"
    if count < 1024 or count >= _SIZE_WHOLE:
        return f"{count} B"
    for unit, k in BINARY_UNITS:
        if count >= k:
            return f"{count / k:.1f} {unit}"
    return f"{count} B"  # pragma: no cover - count >= 1024 meets KiB


def seconds(ns: object) -> str:
    """Return nanoseconds as seconds to two places: ``1.25 s`` (``?`` when not an integer)."""
    value = json_int(ns)
    if value is None:
        return "?"
    return f"{value / 1e9:.2f} s" if abs(value) < _NS_WHOLE else f"{value} ns"
