"""A receipts line or control frame longer than an event holds is a ``receipt.invalid``, never a failed recording."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from aos.framing import MAX_EVENT_BYTES
from aos.reader import iter_events
from aos.verify import verify_stream
from observe.channel.protocol import MAX_FRAME, FrameReader, encode_frame
from tests.helpers.run import alpha

SIX_MIB = 6 << 20

#: Writes a 6 MiB receipts line, a 6 MiB stdout frame and a 6 MiB JSON frame, then a small receipt; exits 7.
COMMAND = """
import json, os, socket, struct, sys
big = b"x" * (6 << 20)
with open(os.environ["AOS_RECEIPTS"], "ab") as f:
    f.write(b'{"name": "' + big + b'"}\\n')
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["AOS_CONTROL"])
s.sendall(struct.pack(">cI", b"o", len(big)) + big)
s.sendall(struct.pack(">cI", b"J", len(big)) + big)
head = s.recv(5)
reply = json.loads(s.recv(struct.unpack(">I", head[1:])[0]))
print("reply", reply["ok"])
with open(os.environ["AOS_RECEIPTS"], "ab") as f:
    f.write(b'{"name": "after"}\\n')
sys.exit(7)
"""


def test_six_mib_lines_and_frames_are_recorded_as_invalid_receipts(tmp_path: Path) -> None:
    """The recording seals and verifies with the command's own exit code; each oversized line or frame is a
    receipt.invalid with its first bytes, its length and its SHA-256."""
    stream = tmp_path / "s.aos"
    proc = alpha("observe", "record", "--out", str(stream), "--", sys.executable, "-c", COMMAND, timeout=120)
    assert 7 == proc.returncode, proc.stderr[-2000:]
    verify_stream(stream)
    invalid = [ev for ev in iter_events(stream) if ev.kind == "receipt.invalid"]
    digests = {
        hashlib.sha256(b'{"name": "' + b"x" * SIX_MIB + b'"}').hexdigest(),
        hashlib.sha256(b"x" * SIX_MIB).hexdigest(),
    }
    seen = [(ev.attrs["length"], ev.attrs.get("frame"), len(ev.data or b"")) for ev in invalid]
    # The receipts file is tailed and the frames read from a socket: which the recorder sees first is a race.
    expected = [(SIX_MIB + 12, None, MAX_FRAME), (SIX_MIB, "o", MAX_FRAME), (SIX_MIB, "J", MAX_FRAME)]
    assert sorted(expected, key=repr) == sorted(seen, key=repr)
    assert digests == {ev.attrs["sha256"] for ev in invalid}
    assert all(f"of {ev.attrs['length']} bytes" in ev.attrs["reason"] for ev in invalid)
    names = [ev.attrs["name"] for ev in iter_events(stream) if ev.kind == "receipt"]
    assert ["after"] == names
    assert b"reply False" in proc.stdout


def test_a_frame_holds_what_one_event_may() -> None:
    """The frame bound leaves room for the attrs inside an event's bound."""
    assert MAX_FRAME + (64 << 10) <= MAX_EVENT_BYTES


def test_a_client_cannot_forge_an_oversize_frame() -> None:
    """A client's own ``!`` frame is yielded as sent, with no oversize attached (the control refuses it)."""
    reader = FrameReader()
    frames = list(reader.feed(encode_frame(b"!", json.dumps({"length": 1}).encode())))
    assert ([b"!"], None) == ([k for k, _ in frames], reader.oversize)


def test_an_oversized_frame_is_consumed_in_pieces_and_the_next_one_read() -> None:
    """An oversized frame fed a piece at a time is hashed, not held; the frame after it reads as sent."""
    reader = FrameReader()
    data = encode_frame(b"o", b"y" * (MAX_FRAME + 10)) + encode_frame(b"J", b"{}")
    out: list[tuple[bytes, object]] = []
    for at in range(0, len(data), 1 << 20):
        for kind, payload in reader.feed(data[at : at + (1 << 20)]):
            big = reader.oversize
            out.append((kind, (big.length, len(big.head)) if big is not None else payload))
    assert [(b"!", (MAX_FRAME + 10, MAX_FRAME)), (b"J", b"{}")] == out
