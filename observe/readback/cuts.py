"""What the recorder cut to keep an event within the bound, found in its attrs, for ``show`` to say.

The recorder (aos.bounds) cuts a long value and appends ``[CUT: N bytes, sha256 X]``,
notes the items of a list past its budget as ``[NOT RECORDED: ...]``, stands the
variables of an object past its budget in one entry ``=``, and marks attrs it had to
cut as a whole with ``cut``. This module finds each of those in an event's attrs
and says it as one line an entry: where it is, its size, and what was kept.
"""

from __future__ import annotations

import re
from typing import Any

from aos.text import value_bytes
from observe.util import formatting

__all__ = ["MARKERS", "SHOWN", "cuts_of", "entry"]

#: Substrings of an event's attrs JSON that may hold a mark (base64 byte text may hide one: it is decoded).
MARKERS = ("[CUT: ", "[NOT RECORDED: ", '"cut":{', '"bytes_b64"')
#: The most characters ``show`` prints of one entry; a longer one is cut there and its size said.
SHOWN = 160

_CUT = re.compile(rb"\[CUT: (\d+) bytes, sha256 ([0-9a-f]{64})\]\Z")
_NOT = re.compile(
    r"\[NOT RECORDED: (?:(?P<items>\d+) (?P<what>more items|[a-z]+), )?(?P<bytes>\d+) bytes"
    r"(?:, sha256 (?P<sha>[0-9a-f]{64}))?\]\Z"
)


def _raw(value: Any) -> bytes | None:
    return value_bytes(value) if isinstance(value, str | dict) else None


def entry(value: Any, text: str) -> str:
    """``text`` (a value as ``show`` prints it) cut to ``SHOWN`` characters, with its size where it is longer or
    the recorder cut it: ``... (120000 bytes, 49040 recorded)``."""
    raw = _raw(value)
    cut = _CUT.search(raw) if raw is not None else None
    if cut is not None:
        head = text[: text.rfind("[CUT: ")] if "[CUT: " in text else text
        kept = len(raw or b"") - len(cut.group(0))
        return f"{head[:SHOWN]}... ({formatting.size(int(cut.group(1)))}, {formatting.size(kept)} recorded)"
    if len(text) > SHOWN:
        return f"{text[:SHOWN]}... ({formatting.size(len(raw) if raw is not None else len(text))})"
    return text


def cuts_of(kind: str, attrs: dict[str, Any]) -> list[str]:
    """One line for each value, list or object of ``attrs`` the recorder cut (``kind`` names the event)."""
    lines: list[str] = []
    whole = attrs.get("cut")
    if isinstance(whole, dict) and isinstance(whole.get("bytes"), int):
        lists = [c for c in whole.get("lists") or [] if isinstance(c, dict)]
        shortened = ", ".join(f"{c.get('path') or '/'} less {c.get('items')} items" for c in lists[:8])
        lines.append(
            f"{kind}: attrs of {formatting.size(whole['bytes'])} cut to fit the event bound "
            f"(sha256 {str(whole.get('sha256'))[:16]})" + (f"; {shortened}" if shortened else "")
        )
    _walk(kind, attrs, lines)
    return lines


def _walk(path: str, value: Any, lines: list[str]) -> None:
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, dict) and not (len(v) == 1 and "bytes_b64" in v):
            for key, item in reversed(list(v.items())):
                if key == "=" and isinstance(item, str) and (m := _NOT.match(item)) and m.group("items"):
                    lines.append(
                        f"{where}: {m.group('items')} {m.group('what')} not recorded "
                        f"({formatting.size(int(m.group('bytes')))}, sha256 {str(m.group('sha'))[:16]})"
                    )
                elif not (key == "cut" and where == path):  # the whole attrs' mark: said by cuts_of
                    stack.append((f"{where} {key}" if where == path else f"{where}.{key}", item))
        elif isinstance(v, list):
            noted = [i for i in v if isinstance(i, str) and _NOT.match(i)]
            if noted:
                items = sum(int(m.group("items") or 1) for i in noted if (m := _NOT.match(i)))
                size = sum(int(m.group("bytes")) for i in noted if (m := _NOT.match(i)))
                lines.append(f"{where}: {items} items not recorded ({formatting.size(size)})")
            for i, item in reversed(list(enumerate(v))):
                if not (isinstance(item, str) and _NOT.match(item)):
                    stack.append((f"{where}[{i}]", item))
        else:
            raw = _raw(v)
            cut = _CUT.search(raw) if raw is not None else None
            if cut is not None:
                kept = len(raw or b"") - len(cut.group(0))
                lines.append(
                    f"{where}: {formatting.size(int(cut.group(1)))}, {formatting.size(kept)} recorded "
                    f"(sha256 {cut.group(2).decode()[:16]})"
                )
            elif isinstance(v, str) and (n := _NOT.match(v)) and not n.group("items"):
                lines.append(f"{where}: {formatting.size(int(n.group('bytes')))}, not recorded")
