"""Export a verified stream as an asciicast v2 recording.

The recorded stdout and stderr (both as ``"o"``: a terminal shows them on one
screen) with their recorded timing, and a marker (``"m"``) at each step's start.
"""

from __future__ import annotations

import codecs
import json
import shlex
import tempfile
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from aos import kinds
from observe.interop.verified import argv_of, attrs_of, display, opening

if TYPE_CHECKING:
    from observe.interop.verified import VerifiedStream

__all__ = ["asciicast", "asciicast_chunks"]


_DEFAULT_SIZE = (80, 24)


def _size(env: Mapping[str, Any]) -> tuple[int, int]:
    """The terminal size: ``COLUMNS``/``LINES`` when the stream recorded them as positive integers, else 80x24."""
    out = list(_DEFAULT_SIZE)
    for i, name in enumerate(("COLUMNS", "LINES")):
        value = env.get(name)
        if isinstance(value, str) and value.isdigit() and 0 < int(value) <= 10_000:
            out[i] = int(value)
    return out[0], out[1]


#: The body of an asciicast is written to a temporary file as it is made, then copied after its
#: header (which holds the duration, known only at the end) in chunks of this size.
_SPOOL_CHUNK = 1 << 20
#: The most characters of output one asciicast line holds (a longer chunk is cut into several at one time).
_TEXT_PIECE = 1 << 18


def asciicast_chunks(stream: VerifiedStream) -> Iterator[bytes]:
    """The recorded terminal output as an asciicast v2 file (newline-delimited JSON), in chunks.

    Memory stays bounded whatever the output's size: each line goes to a temporary
    file (``$TMPDIR``) as it is made, and comes back after the header.
    """
    from observe.secrets.envpolicy import NOT_RECORDED

    open_attrs, start = opening(stream)
    env = open_attrs.get("env")
    env = env if isinstance(env, dict) else {}
    width, height = _size(env)
    pty = open_attrs.get("pty") is True
    argv = argv_of(attrs_of(start).get("argv") if start.kind == kinds.PROCESS_START else open_attrs.get("argv"))
    t0 = start.mono_ns
    last_mono = t0
    decoders = {k: codecs.getincrementaldecoder("utf-8")("replace") for k in (kinds.STDOUT, kinds.STDERR)}
    with tempfile.TemporaryFile(prefix="alpha-asciicast-") as body:

        def line(text: str) -> None:
            body.write(text.encode("utf-8"))
            body.write(b"\n")

        def at(mono_ns: int) -> str:
            nonlocal last_mono
            last_mono = max(last_mono, mono_ns)  # never backwards: asciicast times are non-decreasing
            return f"{(last_mono - t0) / 1e9:.6f}"

        def out(mono_ns: int, text: str) -> None:
            # One "o" line per _TEXT_PIECE characters: JSON-escaping a chunk of control characters
            # makes it six times longer, and a chunk may be a whole event's data.
            for i in range(0, len(text), _TEXT_PIECE):
                piece = text[i : i + _TEXT_PIECE]
                if not pty:  # what a terminal's ONLCR does: a bare LF would draw a staircase
                    piece = piece.replace("\n", "\r\n")
                line(f'[{at(mono_ns)}, "o", {json.dumps(piece, ensure_ascii=False)}]')

        for ev in stream.events():
            if ev.kind in (kinds.STDOUT, kinds.STDERR) and ev.data:
                out(ev.mono_ns, decoders[ev.kind].decode(ev.data))
            elif ev.kind == kinds.STEP_START:
                line(f'[{at(ev.mono_ns)}, "m", {json.dumps(display(attrs_of(ev).get("name")), ensure_ascii=False)}]')
            elif ev.kind == kinds.PROCESS_EXIT:
                last_mono = max(last_mono, ev.mono_ns)
        for decoder in decoders.values():  # the bytes of a character cut off at the very end
            out(last_mono, decoder.decode(b"", final=True))
        header: dict[str, Any] = {
            "version": 2,
            "width": width,
            "height": height,
            "timestamp": start.wall_ns // 1_000_000_000,
            "duration": round((last_mono - t0) / 1e9, 6),
            "command": shlex.join(argv),
            "title": f"alpha observe: stream {stream.stream_id}",
        }
        term = {k: env[k] for k in ("SHELL", "TERM") if isinstance(env.get(k), str) and env[k] != NOT_RECORDED}
        if term:
            header["env"] = term
        yield json.dumps(header, ensure_ascii=False).encode("utf-8") + b"\n"
        body.seek(0)
        while chunk := body.read(_SPOOL_CHUNK):
            yield chunk


def asciicast(stream: VerifiedStream) -> str:
    """The recorded terminal output as an asciicast v2 file, whole (``asciicast_chunks`` for large streams)."""
    return b"".join(asciicast_chunks(stream)).decode("utf-8")
