"""The AOS_RECEIPTS channel: what a recorded command may say to its recorder.

Two paths, both set up by the recorder for its command:

- ``$AOS_RECEIPTS``, a regular file. Anyone appends one JSON object per line
  (``echo '{"name": "x"}' >> "$AOS_RECEIPTS"`` works). Appends with ``O_APPEND``
  are atomic per ``write``, so many concurrent writers never interleave inside a
  line; the recorder tails the file and keeps a partial last line until its
  newline arrives. A line is ``{"name": STR, "status": STR, "fields": OBJ}``.
- ``$AOS_CONTROL``, a Unix stream socket for requests that need an answer:
  ``step.run`` (run a step's command: argv, cwd, environment, and the client's
  stdin descriptor passed with SCM_RIGHTS; the recorder answers with ``o``/``e``
  frames of the command's output to write, then ``{"op": "step.exit", "ok",
  "code", ...}``; meanwhile the client may send ``step.signal`` and
  ``step.close``), ``step.start``/``step.end`` (a span opened by hand, with no
  result), ``artifact`` (capture now) and ``receipts.sync`` (confirm that a
  receipts file is recorded up to an offset). Frames are a 1-byte type, a
  big-endian u32 length, a payload. Every request is answered only after what it
  asked for is appended to the stream's writer; a request the recorder never
  answers (the recording ended first) was not recorded.

This module is imported by the light client path: no pyarrow, nothing heavy.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from typing import Any

from aos.attrs import RECEIPT_STATUSES
from aos.kinds import RECEIPT, RECEIPT_INVALID
from aos.text import text_key, text_value, value_bytes
from observe.env import ChannelVars

__all__ = [
    "ENV_CONTROL",
    "ENV_RECEIPTS",
    "ENV_STDERR_ID",
    "ENV_STDOUT_ID",
    "ENV_STEP",
    "ENV_STREAM",
    "ENV_STREAM_ID",
    "FRAME_ERR",
    "FRAME_ERR_ECHO",
    "FRAME_JSON",
    "FRAME_OUT",
    "FRAME_OUT_ECHO",
    "FRAME_OVERSIZE",
    "MAX_FRAME",
    "FrameReader",
    "Oversize",
    "ReceiptTail",
    "encode_frame",
    "encode_json",
    "fd_identity",
    "parse_receipt_line",
    "receipt_line",
]

# The channel's variables, by the names its users import (defined in observe.env).
ENV_STREAM = ChannelVars.STREAM
ENV_STREAM_ID = ChannelVars.STREAM_ID
ENV_RECEIPTS = ChannelVars.RECEIPTS
ENV_CONTROL = ChannelVars.CONTROL
ENV_STEP = ChannelVars.STEP
ENV_STDOUT_ID = ChannelVars.STDOUT_ID
ENV_STDERR_ID = ChannelVars.STDERR_ID

_KEYS = frozenset({"name", "status", "fields"})

FRAME_JSON = b"J"
FRAME_OUT = b"o"  # a step's stdout bytes, from the recorder, for its client to write
FRAME_ERR = b"e"
FRAME_OUT_ECHO = b"O"  # (from a client: refused, never recorded as output)
FRAME_ERR_ECHO = b"E"
_HEADER = struct.Struct(">cI")
#: The most bytes of one control frame, and of one receipts line, the recorder records as sent: what one
#: event's data may hold (aos.framing.MAX_EVENT_BYTES is 4 MiB + 64 KiB for kind, step, attrs and data
#: together), less room for its attrs. Anything longer is recorded as a ``receipt.invalid`` holding its
#: first ``MAX_FRAME`` bytes, its length and its SHA-256 (``Oversize``): never dropped silently.
MAX_FRAME = 4 << 20
#: Marks an oversized frame that ``FrameReader`` consumed (never a type a client sends: see ``FrameReader``).
FRAME_OVERSIZE = b"!"


def receipt_line(name: str, status: str = "info", fields: dict[str, Any] | None = None) -> bytes:
    """One receipt line, newline-terminated, as the channel expects it.

    Strings that are not UTF-8 (undecodable command-line bytes) are sent as byte
    text (FORMAT.md 3.7): a name or value as ``{"bytes_b64": ...}``, a key in the
    key form. So any bytes make a valid line.
    """
    obj: dict[str, Any] = {"name": text_value(name), "status": status, "fields": _byte_text(fields or {})}
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode() + b"\n"


def _byte_text(obj: Any) -> Any:
    """``obj`` with every string that is not Unicode text made byte text (keys in the key form)."""
    if isinstance(obj, str):
        return text_value(obj)
    if isinstance(obj, dict):
        return {text_key(k) if isinstance(k, str) else k: _byte_text(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_byte_text(v) for v in obj]
    return obj


def parse_receipt_line(raw: bytes) -> tuple[str, dict[str, Any]]:
    """``("receipt", attrs)`` for a valid line, else ``("receipt.invalid", {"reason": ...})``.

    ``raw`` is one line without its newline (a trailing CR is tolerated). The
    attrs of a valid receipt are exactly ``{name, status, fields}``. Every line
    gets an answer, an empty one included: nothing on the channel is dropped.
    """
    if not raw.strip():
        return RECEIPT_INVALID, {"reason": "empty line"}
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        return RECEIPT_INVALID, {"reason": "not UTF-8"}
    except (ValueError, RecursionError) as exc:
        return RECEIPT_INVALID, {"reason": f"not JSON: {exc}"}
    if not isinstance(obj, dict):
        return RECEIPT_INVALID, {"reason": f"not a JSON object but {type(obj).__name__}"}
    if not _unicode(obj):
        # "\udcff" escapes name no character; attrs hold only Unicode text (FORMAT.md 3.1, 3.7).
        return RECEIPT_INVALID, {"reason": "a string escapes a lone surrogate (not Unicode text)"}
    extra = sorted(set(obj) - _KEYS)
    if extra:
        return RECEIPT_INVALID, {"reason": f"unknown key {extra[0]!r}; a receipt has name, status, fields"}
    name = obj.get("name")
    if not (isinstance(name, str) and name) and not (isinstance(name, dict) and value_bytes(name)):
        return RECEIPT_INVALID, {"reason": "name missing or not a non-empty string"}
    status = obj.get("status", "info")
    if status not in RECEIPT_STATUSES:
        return RECEIPT_INVALID, {"reason": f"status {status!r} is not one of {', '.join(RECEIPT_STATUSES)}"}
    fields = obj.get("fields", {})
    if fields is None:
        fields = {}
    if not isinstance(fields, dict):
        return RECEIPT_INVALID, {"reason": "fields is not a JSON object"}
    return RECEIPT, {"name": name, "status": status, "fields": fields}


def _unicode(obj: Any) -> bool:
    """True when every string in ``obj`` (keys included) is Unicode text: no lone surrogate."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, str):
            try:
                o.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return True


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class Oversize:
    """A frame or line longer than ``MAX_FRAME``: its first ``MAX_FRAME`` bytes, its length and its SHA-256,
    taken as it arrives (the rest is hashed, never kept)."""

    __slots__ = ("head", "kind", "length", "sha")

    def __init__(self, kind: bytes | None = None) -> None:
        self.kind = kind  # the frame's type (None for a receipts line)
        self.head = bytearray()
        self.length = 0
        import hashlib  # the recorder's side only: receipt and step (clients) never load OpenSSL's hashes

        self.sha = hashlib.sha256()

    def add(self, data: bytes | bytearray | memoryview) -> None:
        self.length += len(data)
        self.sha.update(data)
        room = MAX_FRAME - len(self.head)
        if room > 0:
            self.head += data[:room]

    def attrs(self, what: str) -> dict[str, Any]:
        """The attrs of its ``receipt.invalid``: the reason (naming the size), the length and the SHA-256."""
        return {
            "reason": f"{what} of {self.length} bytes is longer than an event holds: its first {MAX_FRAME} "
            "bytes are kept",
            "length": self.length,
            "sha256": self.sha.hexdigest(),
        }


class ReceiptTail:
    """Follows one receipts file, yielding complete lines as they are appended."""

    __slots__ = ("_buf", "_fd", "_long", "_read", "path", "step")

    def __init__(self, path: str, step: str | None) -> None:
        self.path = path
        self.step = step
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._buf = b""
        self._long: Oversize | None = None  # the line being read, once it is longer than MAX_FRAME
        self._read = 0

    @property
    def consumed(self) -> int:
        """Bytes of the file handed out as complete lines so far (a partial last line not counted)."""
        pending = len(self._buf) + (self._long.length if self._long is not None else 0)
        return self._read - pending

    def lines(self) -> Iterator[bytes | Oversize]:
        """Every complete line appended since the last call (newline stripped); a line longer than
        ``MAX_FRAME`` as its ``Oversize`` (memory holds at most ``MAX_FRAME`` bytes of a line)."""
        while True:
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                break
            self._read += len(chunk)
            while chunk:
                end = chunk.find(b"\n")
                part, chunk = (chunk, b"") if end < 0 else (chunk[:end], chunk[end + 1 :])
                if self._long is None and len(self._buf) + len(part) > MAX_FRAME:
                    self._long = Oversize()
                    self._long.add(self._buf)
                    self._buf = b""
                if self._long is not None:
                    self._long.add(part)
                else:
                    self._buf += part
                if end < 0:
                    break
                line: bytes | Oversize = self._buf if self._long is None else self._long
                self._buf, self._long = b"", None
                yield line

    def rest(self) -> bytes | Oversize | None:
        """At the end: a final line that never got its newline, if any."""
        rest: bytes | Oversize | None = self._long if self._long is not None else (self._buf or None)
        self._buf, self._long = b"", None
        return rest

    def close(self) -> None:
        os.close(self._fd)


def encode_frame(kind: bytes, payload: bytes) -> bytes:
    """One control-socket frame."""
    return _HEADER.pack(kind, len(payload)) + payload


def encode_json(obj: dict[str, Any]) -> bytes:
    """A JSON control frame."""
    return encode_frame(FRAME_JSON, json.dumps(obj, separators=(",", ":")).encode())


class FrameReader:
    """Splits a byte stream into frames.

    A frame longer than ``MAX_FRAME`` is consumed as it arrives, never held: once its last
    byte is in, ``(FRAME_OVERSIZE, b"")`` is yielded and ``oversize`` holds its ``Oversize``
    (a client's own ``!`` frame leaves ``oversize`` None: a reader tells the two apart).
    """

    __slots__ = ("_buf", "_left", "_long", "oversize")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._long: Oversize | None = None  # the oversized frame being consumed
        self._left = 0  # its bytes still to come
        self.oversize: Oversize | None = None

    def feed(self, data: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Add received bytes; yield every complete ``(type, payload)``."""
        self._buf += data
        buf = self._buf
        pos = 0
        while True:
            if self._long is not None:
                take = min(self._left, len(buf) - pos)
                self._long.add(buf[pos : pos + take])
                pos += take
                self._left -= take
                if self._left:
                    break
                self.oversize, self._long = self._long, None
                yield FRAME_OVERSIZE, b""
                self.oversize = None
                continue
            if len(buf) - pos < _HEADER.size:
                break
            kind, length = _HEADER.unpack_from(buf, pos)
            if length > MAX_FRAME:
                self._long, self._left = Oversize(kind), length
                pos += _HEADER.size
                continue
            end = pos + _HEADER.size + length
            if end > len(buf):
                break
            yield kind, bytes(buf[pos + _HEADER.size : end])
            pos = end
        if pos:
            del buf[:pos]


def fd_identity(fd: int) -> str | None:
    """``dev:ino`` of what an fd refers to (a pipe, a terminal), or None."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}"
