"""Checkpoint files: logical chunks of binary64 values, each with its checksum.

A checkpoint is one canonical JSON object (sorted keys, no spaces, one final
newline), so equal states give equal bytes::

    {"chunks": [{"name": "momentum", "sha256": H, "values": ["0x1.8p-3", ...]}, ...],
     "format": "alpha-lane-checkpoint/1", "lane": L, "learner": ID, "step": N}

Chunks are indexed by what the state is (``param``, ``momentum``, ``state``,
``velocity``), never by the owner that held it; the membership epoch is kept
out of it (it lives in the run's ``membership.json``), so a resumed run's
checkpoint can equal an uninterrupted one byte for byte. A chunk's ``sha256``
covers its name and the big-endian bytes of its values. Anything unreadable,
non-finite or not matching its checksum is refused as ``checkpoint-chunk``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct

from .refusals import CheckpointChunk, CheckpointLearner
from .spec import canonical_json, hexf, unhexf

__all__ = ["FORMAT", "chunk_sha256", "corrupt_bytes", "encode", "load", "parse", "write"]

FORMAT = "alpha-lane-checkpoint/1"


def chunk_sha256(name: str, values: list[float]) -> str:
    """The checksum of one chunk."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\0")
    for v in values:
        digest.update(struct.pack(">d", v))
    return digest.hexdigest()


def encode(lane: str, learner: str, step: int, chunks: dict[str, list[float]]) -> bytes:
    """The canonical bytes of a checkpoint."""
    body = {
        "format": FORMAT,
        "lane": lane,
        "learner": learner,
        "step": step,
        "chunks": [
            {"name": name, "values": [hexf(v) for v in chunks[name]], "sha256": chunk_sha256(name, chunks[name])}
            for name in sorted(chunks)
        ],
    }
    return canonical_json(body) + b"\n"


def write(path: str, lane: str, learner: str, step: int, chunks: dict[str, list[float]]) -> str:
    """Write a checkpoint atomically; return its SHA-256."""
    data = encode(lane, learner, step, chunks)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
    return hashlib.sha256(data).hexdigest()


def parse(data: bytes, *, lane: str | None = None, learner: str | None = None) -> tuple[int, dict[str, list[float]]]:
    """Verify every chunk and return ``(step, chunks)``; refuse by name otherwise."""
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointChunk(f"checkpoint is not readable: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(body.get("chunks"), list):
        raise CheckpointChunk(f"not a {FORMAT} checkpoint")
    chunks: dict[str, list[float]] = {}
    for entry in body["chunks"]:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or not isinstance(entry.get("values"), list)
        ):
            raise CheckpointChunk("malformed chunk entry")
        name = entry["name"]
        try:
            values = [unhexf(v) for v in entry["values"]]
        except (ValueError, TypeError) as exc:
            raise CheckpointChunk(f"chunk {name!r}: unreadable value ({exc})") from None
        if entry.get("sha256") != chunk_sha256(name, values):
            raise CheckpointChunk(f"chunk {name!r}: sha256 does not match its values")
        if not all(math.isfinite(v) for v in values):
            raise CheckpointChunk(f"chunk {name!r}: non-finite value behind a matching checksum")
        chunks[name] = values
    step = body.get("step")
    if not isinstance(step, int) or step < 0:
        raise CheckpointChunk("checkpoint step is not a non-negative integer")
    if lane is not None and body.get("lane") != lane:
        raise CheckpointLearner(f"checkpoint is for lane {body.get('lane')!r}, not {lane!r}")
    if learner is not None and body.get("learner") != learner:
        raise CheckpointLearner(f"checkpoint is from learner {body.get('learner')}, not {learner}")
    return step, chunks


def load(path: str, *, lane: str | None = None, learner: str | None = None) -> tuple[int, dict[str, list[float]]]:
    """Read and verify a checkpoint file."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise CheckpointChunk(f"cannot read checkpoint {path}: {exc.strerror}") from None
    return parse(data, lane=lane, learner=learner)


def corrupt_bytes(data: bytes) -> bytes:
    """Flip one mantissa digit of the first value of the first chunk (checksum left as is)."""
    text = data.decode("utf-8")
    start = text.index('"values":["') + len('"values":["')
    end = text.index('"', start)
    value = text[start:end]
    mantissa_end = value.index("p") if "p" in value else len(value)
    pos = start + mantissa_end - 1
    old = text[pos]
    new = "1" if old != "1" else "2"
    if old == ".":  # a value like 0x1.p+0 has no mantissa digits: add one
        return (text[: pos + 1] + "8" + text[pos + 1 :]).encode("utf-8")
    return (text[:pos] + new + text[pos + 1 :]).encode("utf-8")
