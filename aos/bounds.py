"""Attrs within the event bound: byte text cut with a note of what was cut, long lists and objects shortened.

A v1 event holds at most ``MAX_EVENT_BYTES`` (aos.framing); a writer refuses a
larger one and readers refuse a stream that holds one. What a recorded command
controls (its argv, environment, names, paths) must therefore be bounded before it
lands in attrs, and said where it was cut, so that nothing is dropped silently:

- a value longer than an item's share is cut and ``[CUT: N bytes, sha256 X]``
  appended (N and X of the whole value's bytes);
- the items of a list (an argv) begun after its budget are
  ``[NOT RECORDED: N bytes, sha256 X]`` each, while those notes fit their own
  budget; the rest are one last item ``[NOT RECORDED: K more items, N bytes,
  sha256 X]`` (X over the items' bytes, each followed by a NUL byte, as
  ``/proc/PID/cmdline`` holds an argv);
- an object's (an environment's) values past its value budget are
  ``[NOT RECORDED: N bytes]``; the entries past its budget are one entry whose key
  is ``=`` (no variable's name can be) and whose value is ``[NOT RECORDED: K
  variables, N bytes, sha256 X]`` (X over each ``NAME=VALUE`` as recorded, NUL
  after each).

Sizes are counted as the attrs' JSON spells them (escapes, base64 included), so the
budgets hold whatever bytes a value is. ``fit_attrs`` is the last resort for any
event: attrs over their share are cut (strings first, then lists and objects), and
``cut`` says the original attrs' size and SHA-256 and what lists lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from aos.canonical import canonical_json
from aos.framing import MAX_EVENT_BYTES
from aos.text import text_value, to_bytes

__all__ = [
    "ARGV_BUDGET",
    "ARGV_ITEM",
    "ATTRS_BUDGET",
    "ENV_BUDGET",
    "ENV_VALUES",
    "LABELS_BUDGET",
    "LIST_NOTES",
    "REST_KEY",
    "SHORT",
    "bounded_list",
    "bounded_mapping",
    "cut_note",
    "cut_text",
    "fit_attrs",
    "stored_size",
]

#: One value (an argv item, a name, a path) is recorded up to this many bytes of JSON.
ARGV_ITEM = 64 * 1024
#: One list (an argv) is recorded up to this many bytes of JSON; further items are noted.
ARGV_BUDGET = 512 * 1024
#: The notes of the items of one list past its budget, at most this many bytes; the rest are one note.
LIST_NOTES = 64 * 1024
#: An environment's recorded values, at most this many bytes of JSON in all (further values: their length).
ENV_VALUES = 512 * 1024
#: An environment (names and values) at most this many bytes of JSON; further variables are one entry.
ENV_BUDGET = 1024 * 1024
#: A value of at most this many bytes is always recorded (``[NOT RECORDED]`` stays itself): only the entries' budget
#: bounds them.
SHORT = 64
#: Labels (``--label``, names and values) at most this many bytes of JSON.
LABELS_BUDGET = 256 * 1024
#: What an event's attrs may take: the event bound, less room for its kind, step and fixed fields.
ATTRS_BUDGET = MAX_EVENT_BYTES - 16 * 1024
#: The key of the entry that stands for the variables past an object's budget (no variable's name can be ``=``).
REST_KEY = "="


def stored_size(stored: Any) -> int:
    """The bytes a stored value takes in canonical JSON (aos.canonical)."""
    return len(json.dumps(stored, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def _sha256(data: bytes = b"") -> Any:
    """A SHA-256 of ``data``; hashlib (OpenSSL) is loaded the first time a value is cut or left out, not when
    a recording starts (a command's argv and environment are rarely cut)."""
    import hashlib

    return hashlib.sha256(data)


def cut_note(raw: bytes) -> str:
    """``N bytes, sha256 X`` of ``raw``: what a cut or unrecorded value was."""
    return f"{len(raw)} bytes, sha256 {_sha256(raw).hexdigest()}"


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def cut_text(value: str | bytes, limit: int = ARGV_ITEM) -> str | dict[str, str]:
    """The stored form of byte text (aos.text) in at most ``limit`` bytes of JSON.

    A longer value keeps its first bytes (whole characters where it is UTF-8) and
    ``[CUT: N bytes, sha256 X]`` after them, N and X of the whole value.
    """
    raw = to_bytes(value)
    stored = text_value(raw)
    if len(raw) <= limit // 6 or stored_size(stored) <= limit:  # JSON spells a byte in at most 6
        return stored
    marker = f"[CUT: {cut_note(raw)}]"
    text = _utf8(raw)
    if text is None:  # base64: 4 characters for 3 bytes, inside {"bytes_b64":"..."}
        keep = max(0, (limit - 20) * 3 // 4 - len(marker))
        return text_value(raw[:keep] + marker.encode())
    lo, hi = 0, min(len(text), limit)
    while lo < hi:  # the most characters whose JSON, marker included, fits
        mid = (lo + hi + 1) // 2
        if stored_size(text[:mid] + marker) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + marker


def bounded_list(
    values: Iterable[str | bytes], *, item: int = ARGV_ITEM, budget: int = ARGV_BUDGET
) -> list[str | dict[str, str]]:
    """A list of byte text (an argv, already masked) within ``budget`` bytes of JSON and ``LIST_NOTES`` of notes.

    Each item is cut to ``item`` bytes (``cut_text``; a cut item counts as ``item``);
    items begun once ``budget`` is spent are ``[NOT RECORDED: N bytes, sha256 X]``,
    and once those notes take ``LIST_NOTES`` the rest are one last note.
    """
    out: list[str | dict[str, str]] = []
    spent = notes = 0
    rest = None
    rest_items = rest_bytes = 0
    for value in values:
        raw = to_bytes(value)
        if rest is not None:
            rest.update(raw + b"\0")
            rest_items, rest_bytes = rest_items + 1, rest_bytes + len(raw)
        elif spent >= budget:
            note = f"[NOT RECORDED: {cut_note(raw)}]"
            if notes + len(note) > LIST_NOTES:
                rest = _sha256(raw + b"\0")
                rest_items, rest_bytes = 1, len(raw)
            else:
                notes += len(note) + 3
                out.append(note)
        else:
            stored = cut_text(raw, item)
            size = stored_size(stored)
            spent += item if stored_size(text_value(raw)) > item else size + 1
            out.append(stored)
    if rest is not None:
        out.append(f"[NOT RECORDED: {rest_items} more items, {rest_bytes} bytes, sha256 {rest.hexdigest()}]")
    return out


def bounded_mapping(
    mapping: Mapping[str, str | bytes],
    *,
    item: int = ARGV_ITEM,
    values: int = ENV_VALUES,
    budget: int = ENV_BUDGET,
    what: str = "variables",
) -> dict[str, Any]:
    """An object of byte text (an environment: stored key -> value) within ``budget`` bytes of JSON.

    Values are cut to ``item`` (``cut_text``) while their JSON takes at most
    ``values`` bytes in all, further values are ``[NOT RECORDED: N bytes]`` (values of
    ``SHORT`` bytes or less are kept, within the entries' budget); once
    ``budget`` is spent, the remaining entries are one entry ``=`` saying how many
    ``what`` were not recorded, their bytes and their SHA-256 (of each stored key, ``=``
    and the value's bytes, a NUL after each).
    """
    out: dict[str, Any] = {}
    spent = value_spent = 0
    rest = None
    rest_items = rest_bytes = 0
    for key, value in mapping.items():
        raw = to_bytes(value)
        if spent >= budget:
            entry = key.encode("utf-8") + b"=" + raw
            rest = rest if rest is not None else _sha256()
            rest.update(entry + b"\0")
            rest_items, rest_bytes = rest_items + 1, rest_bytes + len(entry)
            continue
        key = key if stored_size(key) <= item else _cut_key(key, item)
        stored: Any = cut_text(raw, item) if value_spent < values or len(raw) <= SHORT else None
        if stored is not None and len(raw) > SHORT:
            value_spent += stored_size(stored)
        if stored is None or (value_spent > values and len(raw) > SHORT):
            stored = f"[NOT RECORDED: {len(raw)} bytes]"
        out[key] = stored
        spent += stored_size(key) + stored_size(stored) + 2
    if rest is not None:
        out[REST_KEY] = f"[NOT RECORDED: {rest_items} {what}, {rest_bytes} bytes, sha256 {rest.hexdigest()}]"
    return out


def _cut_key(key: str, limit: int) -> str:
    """A key (always a string) cut to about ``limit`` bytes, ``[CUT: N bytes, sha256 X]`` after it."""
    raw = key.encode("utf-8", "surrogatepass")
    return key[: max(0, limit // 6 - 100)] + f"[CUT: {cut_note(raw)}]"


def fit_attrs(attrs: dict[str, Any], limit: int = ATTRS_BUDGET) -> dict[str, Any]:
    """``attrs`` as they are when their canonical JSON fits ``limit`` bytes; else cut to fit.

    Strings are cut (``cut_text``) to a share that halves until the attrs fit
    (down to 256 bytes), then lists and objects keep ever fewer of their first
    items. ``cut`` holds the original attrs' ``bytes`` and ``sha256`` and, for each
    list or object shortened, its JSON pointer with the items dropped (``lists``,
    the first 100).
    """
    whole = canonical_json(attrs).encode("utf-8", "surrogatepass")
    if len(whole) <= limit:
        return attrs
    summary: dict[str, Any] = {"bytes": len(whole), "sha256": _sha256(whole).hexdigest()}
    longest, widest = _longest(attrs)
    share = max(256, min(limit // 2, widest // 2))
    previous = len(whole) * 2
    while True:
        cuts: list[dict[str, Any]] = []
        shrunk = _shrink(attrs, share, longest, "", cuts)
        out = {**(shrunk if isinstance(shrunk, dict) else {}), "cut": {**summary, "lists": cuts[:100]}}
        size = len(canonical_json(out).encode("utf-8", "surrogatepass"))
        if size <= limit:
            return out
        ratio = limit / size * 0.9  # at least halved each time, less where far over
        if size > previous * 0.95:  # cutting strings no longer helps: lists and objects next
            share = 256
        previous = size
        if share > 256:
            share = max(256, min(share // 2, int(share * ratio)))
        elif longest > 0:
            longest = min(longest // 2, int(longest * ratio))
        else:
            return {"cut": summary}


def _longest(obj: Any) -> tuple[int, int]:
    """The most items of any list or object in ``obj``, and the most JSON bytes of any string."""
    most = widest = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            most = max(most, len(o))
            stack.extend(o.values())
            widest = max(widest, *(stored_size(k) for k in o if len(k) * 6 > widest), 0)
        elif isinstance(o, list):
            most = max(most, len(o))
            stack.extend(o)
        elif isinstance(o, str) and len(o) * 6 > widest:
            widest = max(widest, stored_size(o))
    return most, widest


def _shrink(obj: Any, share: int, longest: int, path: str, cuts: list[dict[str, Any]]) -> Any:
    if isinstance(obj, str):
        return obj if len(obj) <= share // 6 else cut_text(obj, share)
    if isinstance(obj, list):
        kept = [_shrink(v, share, longest, f"{path}/{i}", cuts) for i, v in enumerate(obj[:longest])]
        if len(obj) > longest:
            cuts.append({"path": path, "items": len(obj) - longest})
        return kept
    if isinstance(obj, dict):
        items = list(obj.items())
        out = {
            (k if len(k) <= share // 6 else _cut_key(k, share)): _shrink(
                v, share, longest, f"{path}/{k[:256].replace('~', '~0').replace('/', '~1')}", cuts
            )
            for k, v in items[:longest]
        }
        if len(items) > longest:
            cuts.append({"path": path, "items": len(items) - longest})
        return out
    return obj
