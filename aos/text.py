"""Byte text: values that are usually text but may be any bytes (argv, env, paths, names).

Attrs are JSON, whose strings are Unicode; a command's argv, its environment, a
file name or a step name are bytes, and need not be UTF-8. FORMAT.md section 3.7
defines how such a value is stored, losslessly:

- as a **value**: its bytes decoded as UTF-8 when they are valid UTF-8, else
  the object ``{"bytes_b64": BASE64}`` (RFC 4648 base64 with padding);
- where only a string can stand (an object key, the ``step`` column): the
  decoded string when the bytes are valid UTF-8 and do not start with U+0000,
  else U+0000, ``bytes_b64:``, then the base64.

Each byte string has exactly one stored form, and ``value_bytes`` /
``key_bytes`` give the bytes back. A Python ``str`` stands for the bytes the
operating system gave (``os.fsencode``: U+DC80..U+DCFF stand for the bytes
0x80..0xFF it could not decode); any other lone surrogate stands for its own
three-byte (``surrogatepass``) encoding, so every ``str`` has bytes.

This module is light (base64 only): the step client imports it.
"""

from __future__ import annotations

import base64
import binascii

__all__ = [
    "BYTES_KEY",
    "KEY_PREFIX",
    "display",
    "key_bytes",
    "os_text",
    "printable",
    "text_key",
    "text_value",
    "to_bytes",
    "value_bytes",
]

BYTES_KEY = "bytes_b64"
KEY_PREFIX = "\x00bytes_b64:"


def to_bytes(value: str | bytes) -> bytes:
    """The bytes a value stands for (a ``str`` as ``os.fsencode`` gives them)."""
    if isinstance(value, bytes):
        return value
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        pass
    out = bytearray()  # a lone surrogate that is no escape: its own (surrogatepass) encoding
    for ch in value:
        code = ord(ch)
        out += bytes([code - 0xDC00]) if 0xDC80 <= code <= 0xDCFF else ch.encode("utf-8", "surrogatepass")
    return bytes(out)


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def text_value(value: str | bytes) -> str | dict[str, str]:
    """The stored form of a byte-text value: a string, or ``{"bytes_b64": ...}``."""
    raw = to_bytes(value)
    text = _utf8(raw)
    if text is not None:
        return text
    return {BYTES_KEY: base64.b64encode(raw).decode("ascii")}


def text_key(value: str | bytes) -> str:
    """The stored form of byte text where only a string can stand (a key, the ``step`` column)."""
    raw = to_bytes(value)
    text = _utf8(raw)
    if text is not None and not text.startswith("\x00"):
        return text
    return KEY_PREFIX + base64.b64encode(raw).decode("ascii")


def _b64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None


def value_bytes(stored: object) -> bytes | None:
    """The bytes a stored byte-text value stands for; None when it is neither form."""
    if isinstance(stored, str):
        return to_bytes(stored)
    if isinstance(stored, dict) and len(stored) == 1 and isinstance(stored.get(BYTES_KEY), str):
        return _b64(stored[BYTES_KEY])
    return None


def key_bytes(stored: str) -> bytes:
    """The bytes a stored key (or ``step`` value) stands for."""
    if stored.startswith(KEY_PREFIX):
        raw = _b64(stored[len(KEY_PREFIX) :])
        if raw is not None:
            return raw
    return to_bytes(stored)


def os_text(stored: object) -> str | None:
    """A stored value as Python's ``os`` functions spell it (``os.fsdecode``), for comparing names.

    Valid UTF-8 is the plain string; other bytes become surrogate escapes, so
    they compare equal only to the same bytes. None when it is neither form.
    """
    raw = value_bytes(stored)
    return None if raw is None else raw.decode("utf-8", "surrogateescape")


def display(stored: object) -> str:
    """A stored value for people: its text, with bytes that are not UTF-8 shown as ``\\xNN``."""
    raw = value_bytes(stored)
    if raw is None:
        return str(stored)
    return raw.decode("utf-8", "backslashreplace")


def printable(message: str) -> str:
    """A message (an error, a reason) made valid text: bytes that are not UTF-8 shown as ``\\xNN``.

    For diagnostics only; a value that must be recovered exactly is stored
    with ``text_value``.
    """
    return to_bytes(message).decode("utf-8", "backslashreplace")
