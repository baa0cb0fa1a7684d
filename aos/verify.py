"""The verifier: is this stream intact, sealed, and (given a key) signed?

Checks, in file order, stopping at the first failure (docs/FORMAT.md section 5):

1. the path is a regular file (``stream-missing``) and an AOS v1 stream with
   exactly the v1 metadata (``stream-schema``);
2. for each complete batch (well-formed framing, ``aos.framing``; no null
   where the schema forbids one, ``stream-schema``), for each event: ``seq``
   is the next integer (``stream-order``), its hash follows from the one
   before (``stream-chain``), its attrs is the canonical JSON of an object
   (``stream-schema``), a ``checkpoint`` holds exactly its keys and names the
   chain head and count (a JSON integer) before it (``stream-chain``);
3. a ``seal`` stands alone in the last batch, holds exactly its keys and names
   the head, the count, the byte length and the BLAKE3 digest of every file
   byte before its batch (``stream-seal``);
4. signing fields are 128 / 32 lowercase hex digits and come together; with a
   key, every checkpoint and the seal is signed under that key's id with a
   good signature (``stream-signature``);
5. after the seal's batch comes at most the end-of-stream marker (a cut marker
   is ``stream-truncated``, anything else ``stream-seal``);
6. without a seal: a cut message is ``stream-truncated``, damage
   ``stream-chain``, a clean end ``stream-unsealed``; each names the last
   intact seq and checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blake3 import blake3

from aos.ahead import batches_ahead
from aos.canonical import parse_canonical
from aos.chain import checkpoint_message, genesis, link, seal_message
from aos.event import Event
from aos.kinds import CHECKPOINT, SEAL, VERDICT
from aos.reader import EOS, StreamFile, batch_rows
from aos.refusals import (
    Refusal,
    StreamChain,
    StreamOrder,
    StreamSchema,
    StreamSeal,
    StreamSignature,
    StreamTruncated,
    StreamUnsealed,
    StreamVerdict,
)
from aos.resources import machine_error
from aos.signing import Verifier

__all__ = ["SealedTail", "Verification", "require_verdict", "verify_stream", "verify_tail"]


@dataclass
class Verification:
    """What an intact, sealed stream committed to.

    ``head`` is the final head of the chain: the hash of the seal event itself
    (not ``seal["head"]``, which is the head before the seal). ``file_blake3``
    is BLAKE3 over the whole file, as the tracker records it. ``key_id`` is the
    checked key's id when a key was given (the seal's must equal it), else the
    seal's own claim.
    """

    path: Path
    stream_id: str
    events: int
    head: str
    seal: dict[str, Any]
    signed: bool
    key_id: str | None
    signature_checked: bool
    verdict: dict[str, Any] | None
    verdict_seq: int | None
    checkpoints: int
    file_blake3: str
    verdicts: int = 0
    kinds: dict[str, int] = field(default_factory=dict)


def _where(last_seq: int | None, last_checkpoint: int | None) -> str:
    seq = "none" if last_seq is None else str(last_seq)
    cp = "none" if last_checkpoint is None else f"seq {last_checkpoint}"
    return f"last intact seq {seq}, last checkpoint {cp}"


def verify_stream(
    path: str | os.PathLike[str], public_key: Verifier | None = None, *, data: bytes | bytearray | None = None
) -> Verification:
    """Verify a stream end to end; raise the first ``Refusal`` found.

    An error of the machine (``aos.resources.machine_error``: a thread, memory or a file
    descriptor it could not have) is raised as it is, never as a refusal: it says
    nothing of the stream.

    With ``data`` the stream is those bytes (already read once by the caller, who
    then knows the bytes it hashes are the bytes verified); ``path`` only names them.
    """
    whole = blake3(max_threads=blake3.AUTO)
    # the next batch is decoded on a second thread while this one is hashed (aos.ahead); the
    # iterator is closed (its thread joined) before the file is
    with StreamFile(path, data=data) as f, contextlib.closing(batches_ahead(f)) as ahead:
        view = f.view
        sid = f.stream_id
        prev = genesis(sid)
        expected = 0
        last_cp: int | None = None
        checkpoints = 0
        verdict: Event | None = None
        seal: Event | None = None
        seal_end = 0
        # The whole file's digest is taken as the batches go by (never a second pass over the file
        # at the end: the reader gives back each batch's mapped pages once it is done with them).
        # The seal's digest (the bytes before the seal's batch) is that hasher's state there: one
        # pass over the file, not two (BLAKE3's digest leaves the hasher as it was).
        whole.update(view[: f.schema_end])
        covered = f.schema_end
        kinds: dict[str, int] = {}
        verdicts = 0

        for raw in ahead:
            if seal is not None:
                raise StreamSeal(f"a batch follows the seal (at byte {raw.start})", last_seq=seal.seq)
            try:
                # rows, not events: each chunk is hashed from the batch's own buffer, never copied out
                rows = batch_rows(raw.batch)
            except Exception as exc:
                if machine_error(exc):
                    raise  # the machine's failure (aos.resources), never the stream's
                where = _where(expected - 1 if expected else None, last_cp)
                raise StreamChain(f"the batch at byte {raw.start} does not decode ({exc}); {where}") from exc
            for i, (seq, wall_ns, mono_ns, kind, step, attrs_json, chunk, stored) in enumerate(rows):
                if seq != expected:
                    raise StreamOrder(
                        f"seq {seq} where {expected} was expected (batch at byte {raw.start}); "
                        f"{_where(expected - 1 if expected else None, last_cp)}",
                        first_bad_seq=expected,
                    )
                h = link(prev, seq, wall_ns, mono_ns, kind, step, attrs_json, chunk)  # type: ignore[arg-type]
                if h != stored:
                    raise StreamChain(
                        f"the hash of seq {seq} does not follow from seq {seq - 1}"
                        if seq
                        else "the hash of seq 0 does not follow from the stream id",
                        first_bad_seq=seq,
                    )
                try:
                    attrs = parse_canonical(attrs_json)
                except ValueError as exc:
                    raise StreamSchema(f"seq {seq} ({kind}): {exc}", first_bad_seq=seq) from exc
                kinds[kind] = kinds.get(kind, 0) + 1
                if kind not in (CHECKPOINT, VERDICT, SEAL):
                    prev = h
                    expected += 1
                    continue
                payload = None if chunk is None else bytes(chunk)
                ev = Event(seq, wall_ns, mono_ns, kind, step, attrs_json, payload, stored, _attrs=attrs)
                if ev.kind == CHECKPOINT:
                    _check_checkpoint(ev, sid, prev, public_key)
                    last_cp = ev.seq
                    checkpoints += 1
                elif ev.kind == VERDICT:
                    verdict = ev
                    verdicts += 1
                elif ev.kind == SEAL:
                    if i != len(rows) - 1 or len(rows) != 1:
                        raise StreamSeal(f"the seal (seq {ev.seq}) does not stand alone in the last batch")
                    before = whole.digest() if covered == raw.start else blake3(view[: raw.start]).digest()
                    _check_seal(ev, sid, prev, raw.start, before, public_key)
                    seal = ev
                    seal_end = raw.end
                prev = h
                expected += 1
            whole.update(view[covered : raw.end])
            covered = raw.end
            f.release(raw.end)  # done with its bytes: its mapped pages go back

        last_seq = expected - 1 if expected else None
        if seal is None:
            if f.damage is not None:
                raise type(f.damage)(f"{f.damage.detail}; {_where(last_seq, last_cp)}", last_seq=last_seq)
            raise StreamUnsealed(f"no seal; {_where(last_seq, last_cp)}", last_seq=last_seq, last_checkpoint=last_cp)
        tail = bytes(view[seal_end:])
        if f.damage is not None and tail and len(tail) < 8 and EOS.startswith(tail):
            raise StreamTruncated(f"the end-of-stream marker after the seal is cut short ({len(tail)} of 8 bytes)")
        if f.damage is not None:
            raise StreamSeal(f"bytes follow the seal: {f.damage.detail}")
        rest = f.size - seal_end
        if rest not in (0, 8):
            raise StreamSeal(f"{rest} bytes follow the seal")
        whole.update(view[covered:])

        attrs = seal.attrs
        return Verification(
            path=f.path,
            stream_id=sid,
            events=seal.seq + 1,
            head=seal.hash.hex(),
            seal=attrs,
            signed="signature" in attrs,
            key_id=public_key.key_id if public_key is not None else attrs.get("key_id"),
            signature_checked=public_key is not None,
            verdict=verdict.attrs if verdict is not None else None,
            verdict_seq=verdict.seq if verdict is not None else None,
            verdicts=verdicts,
            checkpoints=checkpoints,
            file_blake3=whole.hexdigest(),
            kinds=kinds,
        )


@dataclass
class SealedTail:
    """What the end of a sealed stream commits to, checked from a chain head given for its first batch.

    ``verify_tail`` reads only the batches from ``start`` to the seal: every
    event there chains from ``head_before`` to the seal, the seal names that
    chain and its own byte offset, nothing but the end-of-stream marker follows
    it, and with a key the seal (and each checkpoint there) is signed by it.
    What it does not read (the bytes before ``start``) it does not check: the
    seal's ``file_blake3`` is taken as stated (signed, with a key). ``head`` is
    the seal event's own hash, as ``Verification.head``.
    """

    path: Path
    stream_id: str
    events: int
    head: str
    seal: dict[str, Any]
    seal_wall_ns: int
    seal_at: int
    signed: bool
    key_id: str | None
    signature_checked: bool
    verdicts: list[Event]


_HEX64 = re.compile(r"[0-9a-f]{64}")


def verify_tail(
    path: str | os.PathLike[str], start: int, head_before: str, public_key: Verifier | None = None
) -> SealedTail:
    """Verify a sealed stream's last batches, from the batch at byte ``start`` whose first event follows
    the chain head ``head_before`` (hex); raise the first ``Refusal`` found (those of ``verify_stream``)."""
    if not isinstance(head_before, str) or not _HEX64.fullmatch(head_before):
        raise StreamChain(f"the head before byte {start} is not 64 lowercase hex digits")
    prev = bytes.fromhex(head_before)
    with StreamFile(path) as f:
        sid = f.stream_id
        if not f.schema_end <= start < f.size:
            raise StreamChain(f"byte {start} is not inside the stream's batches (they are {f.schema_end}..{f.size})")
        expected: int | None = None
        seal: Event | None = None
        seal_at = seal_end = 0
        verdicts: list[Event] = []
        for raw in f.batches(start=start):
            if seal is not None:
                raise StreamSeal(f"a batch follows the seal (at byte {raw.start})", last_seq=seal.seq)
            rows = batch_rows(raw.batch)
            for i, (seq, wall_ns, mono_ns, kind, step, attrs_json, chunk, stored) in enumerate(rows):
                if expected is not None and seq != expected:
                    raise StreamOrder(f"seq {seq} where {expected} was expected (batch at byte {raw.start})")
                h = link(prev, seq, wall_ns, mono_ns, kind, step, attrs_json, chunk)  # type: ignore[arg-type]
                if h != stored:
                    raise StreamChain(
                        f"the hash of seq {seq} does not follow from the head before it", first_bad_seq=seq
                    )
                expected = seq + 1
                if kind not in (CHECKPOINT, VERDICT, SEAL):
                    prev = h
                    continue
                try:
                    attrs = parse_canonical(attrs_json)
                except ValueError as exc:
                    raise StreamSchema(f"seq {seq} ({kind}): {exc}", first_bad_seq=seq) from exc
                ev = Event(seq, wall_ns, mono_ns, kind, step, attrs_json, None, stored, _attrs=attrs)
                if kind == CHECKPOINT:
                    _check_checkpoint(ev, sid, prev, public_key)
                elif kind == VERDICT:
                    verdicts.append(ev)
                else:
                    if i != len(rows) - 1 or len(rows) != 1:
                        raise StreamSeal(f"the seal (seq {seq}) does not stand alone in the last batch")
                    stated = attrs.get("file_blake3")
                    if not isinstance(stated, str) or not _HEX64.fullmatch(stated):
                        raise StreamSeal(f"the seal (seq {seq}) names no file digest of 64 hex digits")
                    _check_seal(ev, sid, prev, raw.start, bytes.fromhex(stated), public_key)
                    seal, seal_at, seal_end = ev, raw.start, raw.end
                prev = h
        if seal is None:
            if f.damage is not None:
                raise f.damage
            raise StreamUnsealed(f"no seal after byte {start}")
        tail = bytes(f.view[seal_end:])
        if f.damage is not None and tail and len(tail) < 8 and EOS.startswith(tail):
            raise StreamTruncated(f"the end-of-stream marker after the seal is cut short ({len(tail)} of 8 bytes)")
        if f.damage is not None:
            raise StreamSeal(f"bytes follow the seal: {f.damage.detail}")
        if f.size - seal_end not in (0, 8):
            raise StreamSeal(f"{f.size - seal_end} bytes follow the seal")
        a = seal.attrs
        return SealedTail(
            path=f.path,
            stream_id=sid,
            events=seal.seq + 1,
            head=seal.hash.hex(),
            seal=a,
            seal_wall_ns=seal.wall_ns,
            seal_at=seal_at,
            signed="signature" in a,
            key_id=public_key.key_id if public_key is not None else a.get("key_id"),
            signature_checked=public_key is not None,
            verdicts=verdicts,
        )


_HEX128 = re.compile(r"[0-9a-f]{128}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_SIGNING = frozenset({"signature", "key_id"})
_CHECKPOINT_KEYS = frozenset({"head", "events"})
_SEAL_KEYS = frozenset({"head", "events", "bytes", "file_blake3"})


def _is_int(value: object) -> bool:
    """A JSON integer: not a float such as 5.0, not a bool."""
    return type(value) is int


def _keys(a: dict[str, Any], required: frozenset[str], what: str, refusal: type[Refusal], seq: int) -> None:
    """``a`` holds exactly ``required`` plus, optionally, both signing keys."""
    missing = sorted(required - set(a))
    extra = sorted(set(a) - required - _SIGNING)
    if missing or extra:
        detail = (
            f"lacks {', '.join(missing)}" if missing else f"has keys the format does not define: {', '.join(extra)}"
        )
        raise refusal(f"{what} {detail}", first_bad_seq=seq)


def _signature(a: dict[str, Any], what: str, key: Verifier | None, message: bytes) -> None:
    """Check a checkpoint's or seal's signature fields; with ``key``, the signature itself."""
    signed = _SIGNING & set(a)
    if signed:
        if signed != _SIGNING:
            raise StreamSignature(f"{what} has {sorted(signed)[0]} without {sorted(_SIGNING - signed)[0]}")
        sig, kid = a["signature"], a["key_id"]
        if not isinstance(sig, str) or not _HEX128.fullmatch(sig):
            raise StreamSignature(f"{what}: its signature is not 128 lowercase hex digits")
        if not isinstance(kid, str) or not _HEX32.fullmatch(kid):
            raise StreamSignature(f"{what}: its key_id is not 32 lowercase hex digits")
    if key is None:
        return
    if not signed:
        raise StreamSignature(f"{what} is not signed, and a key was given")
    if a["key_id"] != key.key_id:
        raise StreamSignature(f"{what} names key {a['key_id']}, not the checked key {key.key_id}")
    if not key.check(message, a["signature"]):
        raise StreamSignature(f"{what}: the signature is not by key {key.key_id}")


def _check_checkpoint(ev: Event, sid: str, prev: bytes, key: Verifier | None) -> None:
    a = ev.attrs
    what = f"the checkpoint at seq {ev.seq}"
    _keys(a, _CHECKPOINT_KEYS, what, StreamChain, ev.seq)
    if a["head"] != prev.hex() or not _is_int(a["events"]) or a["events"] != ev.seq:
        raise StreamChain(f"{what} does not name the chain before it", first_bad_seq=ev.seq)
    _signature(a, what, key, checkpoint_message(sid, prev, ev.seq))


def _check_seal(ev: Event, sid: str, prev: bytes, start: int, file_digest: bytes, key: Verifier | None) -> None:
    a = ev.attrs
    what = f"the seal (seq {ev.seq})"
    _keys(a, _SEAL_KEYS, what, StreamSeal, ev.seq)
    if a["head"] != prev.hex():
        raise StreamSeal(f"{what} names head {a['head']}, the chain's is {prev.hex()}")
    if not _is_int(a["events"]) or a["events"] != ev.seq:
        raise StreamSeal(f"{what} counts {json.dumps(a['events'])} events, the chain has {ev.seq}")
    if not _is_int(a["bytes"]) or a["bytes"] != start:
        raise StreamSeal(f"{what} counts {json.dumps(a['bytes'])} bytes before it, the file has {start}")
    if a["file_blake3"] != file_digest.hex():
        raise StreamSeal("the file's bytes before the seal do not match the seal's digest")
    _signature(a, what, key, seal_message(sid, prev, ev.seq, start, file_digest))


def require_verdict(v: Verification) -> dict[str, Any]:
    """The sealed verdict's attrs, or ``stream-verdict`` when the stream has none."""
    if v.verdict is None:
        raise StreamVerdict(f"{v.path} is intact and sealed but holds no verdict")
    if v.verdicts > 1:
        raise StreamVerdict(f"{v.path} holds {v.verdicts} verdict events; a gate seals exactly one")
    return v.verdict


def refusal_of(path: str | os.PathLike[str], public_key: Verifier | None = None) -> Refusal | None:
    """The refusal ``verify`` would print, or None for an intact sealed stream."""
    try:
        verify_stream(path, public_key)
    except Refusal as exc:
        return exc
    return None
