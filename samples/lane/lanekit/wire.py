"""Framed, identity-checked messages between the participants of one run.

A frame is a 4-byte big-endian length followed by that many bytes of canonical
JSON; a frame longer than :data:`MAX_FRAME` is refused. The first frame each
way is a ``hello`` naming the protocol, the role, the learner, the rate and the
membership (epoch, members, sample split). The receiver compares it with its
own before anything else, and refuses a difference by name (``peer-identity``)
on that first message, before any value is combined.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
from typing import Any

from .refusals import PeerIdentity
from .spec import LearnerSpec, canonical_json, hexf

__all__ = ["MAX_FRAME", "PROTOCOL", "Channel", "WireError", "compare_hello", "hello"]

PROTOCOL = "alpha-lane/1"
MAX_FRAME = 64 * 1024


class WireError(Exception):
    """The peer closed early, or sent something that is not a frame."""


class Channel:
    """One connected socket, speaking frames."""

    def __init__(self, sock: socket.socket, peer: str = "peer") -> None:
        self.sock = sock
        self.peer = peer

    def send(self, message: dict[str, Any]) -> None:
        """Send one message."""
        body = canonical_json(message)
        if len(body) > MAX_FRAME:
            raise WireError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def _exact(self, n: int) -> bytes:
        chunks: list[bytes] = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise WireError(f"{self.peer} closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv(self, expect: str | None = None) -> dict[str, Any]:
        """Receive one message; with ``expect``, it must be of that type (a refusal is raised)."""
        (length,) = struct.unpack(">I", self._exact(4))
        if length > MAX_FRAME:
            raise WireError(f"{self.peer} announced a frame of {length} bytes (limit {MAX_FRAME})")
        try:
            message = json.loads(self._exact(length).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise WireError(f"{self.peer} sent an unreadable frame: {exc}") from None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise WireError(f"{self.peer} sent a frame without a type")
        if message["type"] == "refused":
            raise PeerIdentity(f"{self.peer} refused this participant: {message.get('detail')}")
        if expect is not None and message["type"] != expect:
            raise WireError(f"{self.peer} sent {message['type']!r}, expected {expect!r}")
        return message

    def close(self) -> None:
        """Close the socket."""
        with contextlib.suppress(OSError):
            self.sock.close()


def hello(spec: LearnerSpec, role: str, epoch: int) -> dict[str, Any]:
    """The first message a participant sends."""
    return {
        "type": "hello",
        "protocol": PROTOCOL,
        "role": role,
        "lane": spec.lane,
        "learner": spec.learner_id,
        "rate": hexf(spec.rate),
        "membership": spec.membership(epoch),
    }


def compare_hello(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Refuse (``peer-identity``) the first difference in protocol, learner, rate or membership."""
    role = theirs.get("role", "peer")
    for key in ("protocol", "lane", "learner", "rate", "membership"):
        if mine.get(key) != theirs.get(key):
            raise PeerIdentity(f"{role} differs in {key}: {theirs.get(key)!r}, expected {mine.get(key)!r}")
    members = mine["membership"]["members"]
    if role not in members or role == mine.get("role"):
        raise PeerIdentity(f"{role!r} is not a peer in membership {members}")
