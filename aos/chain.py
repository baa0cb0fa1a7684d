"""The BLAKE3 hash chain: genesis, links, and the messages seals sign.

    genesis  = BLAKE3("AOS1/genesis\\0" | lp(stream_id))
    hash_i   = BLAKE3("AOS1/event\\0" | hash_{i-1} | u64 len(enc_i) | enc_i)

Domain tags keep a hash of one kind from ever being read as another.
"""

from __future__ import annotations

from blake3 import blake3

from aos.canonical import U64, encoded_parts, length_prefixed

__all__ = [
    "CHECKPOINT_TAG",
    "EVENT_TAG",
    "GENESIS_TAG",
    "SEAL_TAG",
    "checkpoint_message",
    "genesis",
    "link",
    "seal_message",
]

GENESIS_TAG = b"AOS1/genesis\x00"
EVENT_TAG = b"AOS1/event\x00"
SEAL_TAG = b"AOS1/seal\x00"
CHECKPOINT_TAG = b"AOS1/checkpoint\x00"


def genesis(stream_id: str) -> bytes:
    """hash_{-1}: binds the chain to its stream, so no event can be spliced in."""
    return blake3(GENESIS_TAG + length_prefixed(stream_id.encode("utf-8"))).digest()


def link(
    prev: bytes,
    seq: int,
    wall_ns: int,
    mono_ns: int,
    kind: str,
    step: str | None,
    attrs_json: str,
    data: bytes | None,
) -> bytes:
    """hash_i from hash_{i-1} and event i's column values."""
    prefix, data_part, total = encoded_parts(seq, wall_ns, mono_ns, kind, step, attrs_json, data)
    h = blake3(EVENT_TAG)
    h.update(prev)
    h.update(U64.pack(total))
    h.update(prefix)
    if data_part:
        h.update(data_part)
    return h.digest()


def seal_message(stream_id: str, head: bytes, events: int, nbytes: int, file_digest: bytes) -> bytes:
    """The bytes a seal's signature covers."""
    sid = length_prefixed(stream_id.encode("utf-8"))
    return SEAL_TAG + sid + head + U64.pack(events) + U64.pack(nbytes) + file_digest


def checkpoint_message(stream_id: str, head: bytes, events: int) -> bytes:
    """The bytes a checkpoint's signature covers."""
    return CHECKPOINT_TAG + length_prefixed(stream_id.encode("utf-8")) + head + U64.pack(events)
