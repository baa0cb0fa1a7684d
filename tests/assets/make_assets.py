"""Generate the named known-bad AOS streams in this folder, reproducibly.

Run ``python tests/assets/make_assets.py`` from the repository root; it rewrites
every ``*.aos``, the test keys and ``MANIFEST.json``. The output is the same
byte for byte on every run: stream ids are fixed, the writer runs on a fake
clock, batches are cut by count, and the Ed25519 keys come from fixed seeds
(Ed25519 signatures are deterministic).

The byte surgery used here (split a stream into its messages, re-encode a
batch, recompute the chain) is also what the tamper tests use; ``conftest.py``
serves this module as the ``surgery`` fixture.

``MANIFEST.json`` names, for each asset, the refusal ``verify`` must give
(``null`` for a stream that verifies), the public key to verify with (if
any), the last intact seq or first bad seq the refusal must name (if it names
one), ``in_schema`` when the damage is in the schema message (so even
``read_stream`` refuses it), and what is wrong with it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from blake3 import blake3
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import aos.writer
from aos.canonical import canonical_json
from aos.chain import checkpoint_message, genesis, link, seal_message
from aos.framing import batch_frame
from aos.reader import EOS, StreamFile
from aos.schema import arrow_schema
from aos.signing import Signer
from aos.writer import StreamWriter

HERE = Path(__file__).resolve().parent

STREAM_ID = "0123456789abcdef0123456789abcdef"
OTHER_STREAM_ID = "fedcba9876543210fedcba9876543210"
ROWS = ("seq", "wall_ns", "mono_ns", "kind", "step", "attrs", "data", "hash")

# -- byte surgery ------------------------------------------------------------------------


@dataclass
class Parts:
    """A stream file cut at its message boundaries: schema, each complete batch, the rest."""

    head: bytes
    batches: list[bytes]
    tail: bytes
    stream_id: str
    starts: list[int] = field(default_factory=list)

    def join(self) -> bytes:
        """The file these parts make, in order."""
        return self.head + b"".join(self.batches) + self.tail


def split(path: str | os.PathLike[str]) -> Parts:
    """Cut the file at ``path`` into schema, batches (as ``StreamFile`` finds them) and tail."""
    data = Path(path).read_bytes()
    with StreamFile(path) as f:
        spans = [(raw.start, raw.end) for raw in f.batches()]
        end = spans[-1][1] if spans else f.schema_end
        return Parts(
            data[: f.schema_end], [data[s:e] for s, e in spans], data[end:], f.stream_id, [s for s, _ in spans]
        )


def split_bytes(data: bytes, tmp: Path) -> Parts:
    """``split`` for bytes in memory (goes through a file in ``tmp``)."""
    p = tmp / "split.aos"
    p.write_bytes(data)
    return split(p)


def encode_batch(rows: list[dict[str, Any]], stream_id: str = STREAM_ID) -> bytes:
    """The bytes of one zstd-compressed record batch message holding ``rows`` (as the writer encodes it)."""
    schema = arrow_schema(stream_id)
    batch = pa.record_batch(
        [pa.array([r[name] for r in rows], schema.field(name).type) for name in ROWS], schema=schema
    )
    sink = io.BytesIO()
    writer = ipc.new_stream(sink, schema, options=ipc.IpcWriteOptions(compression=pa.Codec("zstd", 1)))
    writer.write_batch(batch)
    return sink.getvalue()[len(schema.serialize().to_pybytes()) :]


def schema_bytes(stream_id: str = STREAM_ID, metadata: dict[bytes, bytes] | None = None) -> bytes:
    """The schema message of a stream (with its metadata replaced by ``metadata`` when given)."""
    schema = arrow_schema(stream_id)
    if metadata is not None:
        schema = schema.with_metadata(metadata)
    return bytes(schema.serialize().to_pybytes())


def decode_batch(message: bytes, stream_id: str = STREAM_ID) -> list[dict[str, Any]]:
    """The rows of one record batch message, as dicts of column values."""
    schema = arrow_schema(stream_id)
    reader = ipc.open_stream(schema.serialize().to_pybytes() + message + EOS)
    table = reader.read_all()
    table.validate(full=True)  # never convert unvalidated (possibly damaged) buffers: that can crash
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def rehash(rows: list[dict[str, Any]], prev: bytes) -> bytes:
    """Recompute the ``hash`` of each row in place from ``prev``; return the new head."""
    for r in rows:
        r["hash"] = link(prev, r["seq"], r["wall_ns"], r["mono_ns"], r["kind"], r["step"], r["attrs"], r["data"])
        prev = r["hash"]
    return prev


def all_rows(parts: Parts) -> list[list[dict[str, Any]]]:
    """The rows of every batch of ``parts``."""
    return [decode_batch(b, parts.stream_id) for b in parts.batches]


def _is_canonical_object(text: str) -> bool:
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    return isinstance(obj, dict) and canonical_json(obj) == text


def rechain(rows: list[dict[str, Any]], prev: bytes, stream_id: str, signer: Signer | None = None) -> bytes:
    """Recompute hashes from ``prev`` like ``rehash``, rewriting any checkpoint that no longer names its chain.

    A rewritten checkpoint is signed by ``signer`` when one is given, else left unsigned;
    a checkpoint whose attrs are not a canonical JSON object is left as it is.
    """
    for r in rows:
        if r["kind"] == "checkpoint" and _is_canonical_object(r["attrs"]):
            attrs = json.loads(r["attrs"])
            if attrs.get("head") != prev.hex() or attrs.get("events") != r["seq"]:
                attrs = {"head": prev.hex(), "events": r["seq"]}
                if signer is not None:
                    attrs["signature"] = signer.sign(checkpoint_message(stream_id, prev, r["seq"]))
                    attrs["key_id"] = signer.key_id
                r["attrs"] = canonical_json(attrs)
        prev = rehash([r], prev)
    return prev


def reseal(parts: Parts, signer: Signer | None = None, *, key_id: str | None = None) -> Parts:
    """What a forger without the key can do: recompute the chain and a fresh seal over ``parts``.

    The last batch must be the seal; every batch before it is re-encoded with its
    hashes (and any checkpoint that no longer names its chain) recomputed, and the
    seal is rebuilt over the new bytes (signed by ``signer`` when given, under
    ``key_id`` if that is given too).
    """
    batches = all_rows(parts)
    assert batches[-1][-1]["kind"] == "seal"
    prev = genesis(parts.stream_id)
    out: list[bytes] = []
    for rows in batches[:-1]:
        prev = rechain(rows, prev, parts.stream_id, signer)
        out.append(encode_batch(rows, parts.stream_id))
    seal = batches[-1][-1]
    events = seal["seq"]
    before = parts.head + b"".join(out)
    digest = blake3(before).digest()
    attrs: dict[str, Any] = {
        "head": prev.hex(),
        "events": events,
        "bytes": len(before),
        "file_blake3": digest.hex(),
    }
    if signer is not None:
        attrs["signature"] = signer.sign(seal_message(parts.stream_id, prev, events, len(before), digest))
        attrs["key_id"] = key_id or signer.key_id
    seal["attrs"] = canonical_json(attrs)
    rehash([seal], prev)
    out.append(encode_batch([seal], parts.stream_id))
    return Parts(parts.head, out, parts.tail, parts.stream_id)


# -- deterministic sample streams --------------------------------------------------------


class FakeClock:
    """Stands in for the ``time`` module inside ``aos.writer``: every reading is 1 ms later."""

    def __init__(self) -> None:
        self._ns = 1_780_000_000_000_000_000

    def _tick(self) -> int:
        self._ns += 1_000_000
        return self._ns

    def time_ns(self) -> int:
        return self._tick()

    def monotonic_ns(self) -> int:
        return self._tick() - 1_700_000_000_000_000_000

    def monotonic(self) -> float:
        return self.monotonic_ns() / 1e9


@contextlib.contextmanager
def fake_clock() -> Iterator[None]:
    """Run the writer on a ``FakeClock`` (its only source of nondeterminism)."""
    real = aos.writer.time  # type: ignore[attr-defined]
    aos.writer.time = FakeClock()  # type: ignore[attr-defined,assignment]
    try:
        yield
    finally:
        aos.writer.time = real  # type: ignore[attr-defined]


def seeded_signer(seed: str) -> Signer:
    """An Ed25519 signer whose private key is BLAKE3 of ``seed`` (test keys only)."""
    return Signer(Ed25519PrivateKey.from_private_bytes(blake3(seed.encode()).digest()))


def write_keys(signer: Signer, prefix: Path) -> None:
    """Write ``prefix.key`` (PKCS#8, 0600) and ``prefix.pub`` for ``signer``."""
    key = prefix.with_suffix(".key")
    key.write_bytes(
        signer.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key.chmod(0o600)
    prefix.with_suffix(".pub").write_bytes(
        signer.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def sample_events() -> list[tuple[str, dict[str, Any], bytes | None, str | None]]:
    """A small recording: open, start, output, a step, a receipt, an artifact, exit and a verdict."""
    return [
        (
            "stream.open",
            {"stream_id": STREAM_ID, "argv": ["make", "test"], "cwd": "/src", "env": {"HOME": "/root"}},
            None,
            None,
        ),
        ("process.start", {"pid": 4242, "argv": ["make", "test"]}, None, None),
        ("stdout", {}, b"building...\n", None),
        ("step.start", {"name": "unit", "argv": ["pytest", "-q"]}, None, "unit"),
        ("stdout", {}, b"..........                                [100%]\n", "unit"),
        ("stderr", {}, b"warning: \xff\xfe not utf-8\n", "unit"),
        ("step.end", {"name": "unit", "exit_code": 0, "signal": None, "duration_ns": 1234567}, None, "unit"),
        ("receipt", {"name": "unit", "status": "pass", "fields": {"tests": 10, "big": 2**80}}, None, None),
        ("stdout", {}, b"", None),
        ("artifact", {"path": "out/r\u00e9sum\u00e9.txt", "size": 5, "content": "inline"}, None, None),
        ("artifact.chunk", {"path": "out/r\u00e9sum\u00e9.txt", "offset": 0}, b"hello", None),
        ("process.exit", {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 99}, None, None),
        ("verdict", {"gate": "exit-zero", "verdict": "fail", "scope": "static", "checks": []}, None, None),
    ]


def write_sample(
    path: Path,
    *,
    stream_id: str = STREAM_ID,
    signer: Signer | None = None,
    seal: bool = True,
    batch_max_events: int = 3,
    events: list[tuple[str, dict[str, Any], bytes | None, str | None]] | None = None,
    compression_level: int = 1,
) -> None:
    """Write ``events`` (default: the sample recording) to ``path``: a checkpoint closes each batch."""
    path.unlink(missing_ok=True)
    with fake_clock():
        w = StreamWriter(
            path,
            stream_id=stream_id,
            signer=signer,
            flush_interval=1e9,
            checkpoint_interval=0.0,
            batch_max_events=batch_max_events,
            background_flush=False,
            compression_level=compression_level,
        )
        for kind, attrs, data, step in sample_events() if events is None else events:
            w.append(kind, attrs, data, step)
        if seal:
            w.seal()
        else:
            w.close()


# -- the assets --------------------------------------------------------------------------


def _last_seq(rows_by_batch: list[list[dict[str, Any]]], nbatches: int) -> int:
    return int(rows_by_batch[nbatches - 1][-1]["seq"])


def _padding_flip(parts: Parts, index: int) -> int:
    """An offset inside batch ``index`` whose flip keeps the message well-formed and every decoded value."""
    message = parts.batches[index]
    want = decode_batch(message)
    for i in range(len(message) - 1, 0, -1):
        b = bytearray(message)
        b[i] ^= 0x01
        try:
            batch_frame(memoryview(bytes(b)), 0, len(b))
            batch = ipc.read_record_batch(ipc.read_message(pa.py_buffer(bytes(b))), arrow_schema(STREAM_ID))
            batch.validate(full=True)
            if batch.to_pylist() == want:
                return i
        except Exception:  # noqa: BLE001 - a flip that breaks framing or decoding is not the one wanted
            continue
    raise AssertionError("no harmless byte in the batch")


def build(out: Path) -> dict[str, dict[str, Any]]:
    """Write every asset into ``out``; return the manifest."""
    signer, other = seeded_signer("aos-test-signer"), seeded_signer("aos-test-forger")
    write_keys(signer, out / "signer")
    write_keys(other, out / "forger")
    manifest: dict[str, dict[str, Any]] = {}

    def put(name: str, data: bytes, refusal: str | None, what: str, **extra: Any) -> None:
        (out / name).write_bytes(data)
        manifest[name] = {"refusal": refusal, "what": what, **extra}

    good_path = out / "good.aos"
    write_sample(good_path)
    good = split(good_path)
    rows = all_rows(good)
    assert len(good.batches) >= 5
    assert good.tail == EOS
    manifest["good.aos"] = {"refusal": None, "what": "an intact sealed stream with a verdict (the base of the others)"}

    write_sample(out / "good-signed.aos", signer=signer)
    manifest["good-signed.aos"] = {
        "refusal": None,
        "key": "signer.pub",
        "what": "an intact stream sealed and checkpointed with signer.key",
    }

    cut = good.starts[2] + len(good.batches[2]) // 2
    data = good.join()
    put(
        "truncated-mid-batch.aos",
        data[:cut],
        "stream-truncated",
        "cut in the middle of the third batch (a recorder killed mid-write)",
        last_intact_seq=_last_seq(rows, 2),
    )
    put(
        "truncated-at-batch.aos",
        data[: good.starts[3]],
        "stream-unsealed",
        "cut exactly after the third batch: intact but never sealed",
        last_intact_seq=_last_seq(rows, 3),
    )

    b = bytearray(data)
    b[good.starts[1] + len(good.batches[1]) // 2] ^= 0x10
    put("flipped-byte.aos", bytes(b), "stream-chain", "one bit flipped inside the compressed body of the second batch")

    i = _padding_flip(good, 1)
    b = bytearray(data)
    b[good.starts[1] + i] ^= 0x01
    put(
        "flipped-padding-byte.aos",
        bytes(b),
        "stream-seal",
        "one bit flipped where it changes no decoded value: only the seal's file digest catches it",
    )

    p = Parts(good.head, [good.batches[0], good.batches[2], good.batches[1], *good.batches[3:]], good.tail, STREAM_ID)
    put(
        "reordered-batches.aos",
        p.join(),
        "stream-order",
        "the second and third batches swapped",
        last_intact_seq=_last_seq(rows, 1),
    )
    p = Parts(good.head, [good.batches[0], *good.batches[2:]], good.tail, STREAM_ID)
    put("deleted-batch.aos", p.join(), "stream-order", "the second batch removed", last_intact_seq=_last_seq(rows, 1))
    p = Parts(good.head, [*good.batches[:2], good.batches[1], *good.batches[2:]], good.tail, STREAM_ID)
    put(
        "duplicated-batch.aos",
        p.join(),
        "stream-order",
        "the second batch written twice",
        last_intact_seq=_last_seq(rows, 2),
    )

    other_path = out / "other.tmp"
    write_sample(other_path, stream_id=OTHER_STREAM_ID)
    foreign = split(other_path)
    other_path.unlink()
    p = Parts(good.head, [good.batches[0], foreign.batches[1], *good.batches[2:]], good.tail, STREAM_ID)
    put(
        "spliced-from-other-stream.aos",
        p.join(),
        "stream-chain",
        "the second batch taken from another stream with the same events (same seqs, other genesis)",
        first_bad_seq=int(rows[1][0]["seq"]),
    )
    p = Parts(good.head, foreign.batches, foreign.tail, STREAM_ID)
    put(
        "foreign-batches.aos",
        p.join(),
        "stream-chain",
        "every batch of another stream under this stream's schema (its id in the metadata)",
        first_bad_seq=0,
    )

    write_sample(out / "unsealed.aos", seal=False)
    last = all_rows(split(out / "unsealed.aos"))[-1][-1]["seq"]
    manifest["unsealed.aos"] = {"refusal": "stream-unsealed", "what": "closed without a seal", "last_intact_seq": last}

    signed = split(out / "good-signed.aos")
    forged = reseal(signed, other, key_id=signer.key_id)
    put(
        "forged-seal.aos",
        forged.join(),
        "stream-signature",
        "signed stream whose seal was re-signed by another key under the signer's key id; "
        "verifies without a key (the chain alone does not stop a forger)",
        key="signer.pub",
    )

    put(
        "bytes-after-seal.aos",
        data + b"extra bytes after the end\n",
        "stream-seal",
        "text appended after the end-of-stream marker",
    )
    put(
        "batch-after-eos.aos",
        data + good.batches[1],
        "stream-seal",
        "a copy of a batch appended after the end-of-stream marker",
    )

    seal_row = rows[-1][0]
    verdict = {
        "seq": seal_row["seq"] + 1,
        "wall_ns": seal_row["wall_ns"] + 1,
        "mono_ns": seal_row["mono_ns"] + 1,
        "kind": "verdict",
        "step": None,
        "attrs": canonical_json({"gate": "exit-zero", "verdict": "pass", "scope": "static", "checks": []}),
        "data": None,
    }
    rehash([verdict], seal_row["hash"])
    p = Parts(good.head, [*good.batches, encode_batch([verdict])], EOS, STREAM_ID)
    put(
        "verdict-after-seal.aos",
        p.join(),
        "stream-seal",
        "a well-chained passing verdict appended in a batch after the seal",
    )

    edited = [dict(r) for r in rows[-2]]
    (vi,) = [i for i, r in enumerate(edited) if r["kind"] == "verdict"]
    vattrs = json.loads(edited[vi]["attrs"])
    vattrs["verdict"] = "pass"
    edited[vi]["attrs"] = canonical_json(vattrs)
    p = Parts(good.head, [*good.batches[:-2], encode_batch(edited), good.batches[-1]], good.tail, STREAM_ID)
    put(
        "edited-verdict.aos",
        p.join(),
        "stream-chain",
        "the verdict's attrs changed from fail to pass, its hash left as it was",
        first_bad_seq=int(edited[vi]["seq"]),
    )

    batches = all_rows(good)
    batches[-2][vi]["attrs"] = canonical_json(vattrs)
    prev = batches[-3][-1]["hash"]
    rehash(batches[-1], rehash(batches[-2], prev))
    p = Parts(good.head, [*good.batches[:-2], *(encode_batch(r) for r in batches[-2:])], good.tail, STREAM_ID)
    put(
        "rehashed-verdict.aos",
        p.join(),
        "stream-seal",
        "the verdict changed to pass and every hash from it on recomputed, the seal's attrs left as they were",
    )

    put(
        "not-arrow.aos",
        b"2026-11-29 make test: this is a log file, not an Arrow stream\n",
        "stream-schema",
        "plain text",
        in_schema=True,
    )
    sink = io.BytesIO()
    plain = pa.schema([pa.field("x", pa.int64())])
    with ipc.new_stream(sink, plain) as w:
        w.write_batch(pa.record_batch([pa.array([1, 2, 3])], schema=plain))
    put(
        "arrow-not-aos.aos",
        sink.getvalue(),
        "stream-schema",
        "a valid Arrow IPC stream with no AOS metadata",
        in_schema=True,
    )

    meta = {k: v for k, v in arrow_schema(STREAM_ID).metadata.items()}
    meta[b"aos.version"] = b"2"
    put(
        "future-version.aos",
        schema_bytes(STREAM_ID, meta) + b"".join(good.batches) + EOS,
        "stream-schema",
        "the sample's batches under a schema that says aos.version 2",
        in_schema=True,
    )
    bad_cols = pa.schema([*arrow_schema(STREAM_ID)][:-1], metadata=arrow_schema(STREAM_ID).metadata)
    put(
        "wrong-columns.aos",
        bytes(bad_cols.serialize().to_pybytes()) + EOS,
        "stream-schema",
        "AOS metadata, but the hash column is missing",
        in_schema=True,
    )
    put("empty.aos", b"", "stream-truncated", "zero bytes: the schema was never written", in_schema=True)
    put(
        "schema-cut-short.aos",
        good.head[: len(good.head) // 2],
        "stream-truncated",
        "cut inside the schema message",
        in_schema=True,
    )
    put("schema-only.aos", good.head, "stream-unsealed", "the schema and nothing else", last_intact_seq="none")
    put("eos-cut-short.aos", data[:-3], "stream-truncated", "the end-of-stream marker after the seal cut short")

    merged = [*rows[-2], rows[-1][0]]
    p = Parts(good.head, [*good.batches[:-2], encode_batch(merged)], EOS, STREAM_ID)
    put("seal-not-alone.aos", p.join(), "stream-seal", "the seal shares its batch with the events before it")

    batches = all_rows(good)
    (ci,) = [i for i, r in enumerate(batches[1]) if r["kind"] == "checkpoint"]
    cattrs = json.loads(batches[1][ci]["attrs"])
    cattrs["events"] += 1
    batches[1][ci]["attrs"] = canonical_json(cattrs)
    prev = batches[0][-1]["hash"]
    for rows_ in batches[1:]:
        prev = rehash(rows_, prev)
    p = Parts(good.head, [good.batches[0], *(encode_batch(r) for r in batches[1:])], EOS, STREAM_ID)
    put(
        "checkpoint-wrong-count.aos",
        p.join(),
        "stream-chain",
        "a checkpoint that miscounts the events before it (chain recomputed around it)",
        first_bad_seq=int(batches[1][ci]["seq"]),
    )

    batches = all_rows(good)
    prev = batches[0][-1]["hash"]
    for rows_ in batches[1:]:
        for r in rows_:
            r["seq"] += 1
        prev = rehash(rows_, prev)
    p = Parts(good.head, [good.batches[0], *(encode_batch(r) for r in batches[1:])], EOS, STREAM_ID)
    put(
        "seq-gap.aos",
        p.join(),
        "stream-order",
        "one seq skipped after the first batch (hashes recomputed)",
        last_intact_seq=_last_seq(rows, 1),
    )

    for name, kind, text, what in (
        ("attrs-not-canonical.aos", "stdout", '{"b": 1, "a": 2}', "an event's attrs with spaces and unsorted keys"),
        ("verdict-attrs-not-json.aos", "verdict", "verdict: pass", "a verdict whose attrs text is not JSON"),
        ("verdict-attrs-not-object.aos", "verdict", '["pass"]', "a verdict whose attrs are a JSON array"),
    ):
        batches = all_rows(good)
        (bi, ri) = next((b, r) for b, rs in enumerate(batches) for r, e in enumerate(rs) if e["kind"] == kind)
        batches[bi][ri]["attrs"] = text
        forged = reseal(Parts(good.head, [encode_batch(r) for r in batches], good.tail, STREAM_ID))
        put(
            name,
            forged.join(),
            "stream-schema",
            what + " (chain and seal recomputed)",
            first_bad_seq=int(batches[bi][ri]["seq"]),
        )

    _strict_format_assets(out, good, signed, signer, other, put)
    _bomb_asset(out, put)

    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


#: The bomb's one stdout event: zeros that zstd level 19 packs about 30 000 to 1.
BOMB_BYTES = 512 << 20


@contextlib.contextmanager
def unbounded_writer() -> Iterator[None]:
    """Let the writer write batches beyond v1's bounds (as the writer before them did)."""
    saved = aos.writer.MAX_EVENT_BYTES, aos.writer.MAX_BATCH_BYTES
    aos.writer.MAX_EVENT_BYTES = aos.writer.MAX_BATCH_BYTES = 1 << 40  # type: ignore[misc]
    try:
        yield
    finally:
        aos.writer.MAX_EVENT_BYTES, aos.writer.MAX_BATCH_BYTES = saved  # type: ignore[misc]


def bomb_events(mib: int = BOMB_BYTES >> 20) -> list[tuple[str, dict[str, Any], bytes | None, str | None]]:
    """A recording whose one stdout event is ``mib`` MiB of zeros."""
    sample = sample_events()
    return [*sample[:2], ("stdout", {}, bytes(mib << 20), None), sample[-2], sample[-1]]


def _bomb_asset(out: Path, put: Any) -> None:
    """A decompression bomb: a sealed stream, written by the writer, whose batch inflates to 512 MiB."""
    path = out / "bomb-512m.aos"
    with unbounded_writer():
        write_sample(path, batch_max_events=2, events=bomb_events(), compression_level=19)
    put(
        path.name,
        path.read_bytes(),
        "stream-chain",
        f"a sealed stream whose second batch declares {BOMB_BYTES >> 20} MiB of zeros uncompressed "
        "(one stdout event, zstd level 19; beyond a v1 batch's bound)",
        last_intact_seq=2,
    )


def _resealed_with(parts: Parts, edit: Any, signer: Signer | None = None) -> Parts:
    """``parts`` with ``edit(rows_by_batch)`` applied, then rechained and resealed (a forger's work)."""
    batches = all_rows(parts)
    edit(batches)
    return reseal(
        Parts(parts.head, [encode_batch(r, parts.stream_id) for r in batches], parts.tail, parts.stream_id), signer
    )


def _with_seal_attrs(parts: Parts, change: dict[str, Any], *, python_json: bool = False) -> Parts:
    """``parts`` with keys of the seal's attrs replaced and the seal's own hash recomputed (nothing else).

    With ``python_json`` the attrs text is Python's ``json.dumps`` (sorted, compact), which writes
    a float such as ``17.0`` where the canonical form writes ``17``.
    """
    batches = all_rows(parts)
    seal = batches[-1][0]
    attrs = {**json.loads(seal["attrs"]), **change}
    seal["attrs"] = json.dumps(attrs, sort_keys=True, separators=(",", ":")) if python_json else canonical_json(attrs)
    rehash([seal], batches[-2][-1]["hash"])
    return Parts(parts.head, [*parts.batches[:-1], encode_batch([seal], parts.stream_id)], parts.tail, parts.stream_id)


def _strict_format_assets(out: Path, good: Parts, signed: Parts, signer: Signer, other: Signer, put: Any) -> None:
    """The assets of issue 11's "format, checked strictly": nulls, metadata, counts, keys, damage vs truncation."""
    rows = all_rows(good)

    # A null where the schema forbids one: the batch cannot even be hashed, so it is a schema refusal.
    for column, index in (("wall_ns", 1), ("mono_ns", 1), ("kind", 2), ("attrs", 0), ("hash", 1), ("seq", 1)):
        edited = [dict(r) for r in rows[1]]
        edited[index][column] = None
        p = Parts(good.head, [good.batches[0], encode_batch(edited), *good.batches[2:]], good.tail, STREAM_ID)
        put(
            f"null-{column.replace('_', '-')}.aos",
            p.join(),
            "stream-schema",
            f"a null {column} in the second batch (a column that may not be null)",
        )

    # Schema metadata checked exactly (FORMAT.md section 2); the chain is consistent with the id it names.
    base_meta = dict(arrow_schema(STREAM_ID).metadata)
    for name, meta, what in (
        ("hash-not-blake3.aos", {**base_meta, b"aos.hash": b"sha256"}, "aos.hash names sha256"),
        ("hash-missing.aos", {k: v for k, v in base_meta.items() if k != b"aos.hash"}, "no aos.hash"),
        ("metadata-extra-key.aos", {**base_meta, b"aos.note": b"x"}, "a schema metadata key v1 does not define"),
    ):
        forged = reseal(Parts(schema_bytes(STREAM_ID, meta), good.batches, EOS, STREAM_ID))
        put(name, forged.join(), "stream-schema", what + " (sealed over it)", in_schema=True)
    for name, sid, what in (
        ("stream-id-uppercase.aos", STREAM_ID.upper(), "a stream id in upper-case hex"),
        ("stream-id-short.aos", STREAM_ID[:31], "a stream id of 31 hex digits"),
        ("stream-id-not-hex.aos", "urn:uuid:" + STREAM_ID[:23], "a stream id that is not hex"),
    ):
        tmp = out / "id.tmp"
        write_sample(tmp, stream_id=sid)
        put(name, tmp.read_bytes(), "stream-schema", what + " (chained and sealed under it)", in_schema=True)
        tmp.unlink()

    # Counts are JSON integers. `17.0` is not even canonical JSON any more (canonical numbers are
    # ECMAScript's: 17); `true` is canonical, and equals 1 in Python: a stream whose seal and
    # checkpoint fall at seq 1 shows it.
    seal_seq = rows[-1][0]["seq"]
    put(
        "seal-events-float.aos",
        _with_seal_attrs(good, {"events": float(seal_seq)}, python_json=True).join(),
        "stream-schema",
        f"the seal counts {float(seal_seq)} events, written as Python writes a float; its hash recomputed",
        first_bad_seq=seal_seq,
    )
    tiny_path = out / "tiny.tmp"
    write_sample(tiny_path, events=sample_events()[:1])
    one = split(tiny_path)
    assert [["stream.open"], ["seal"]] == [[r["kind"] for r in b] for b in all_rows(one)]
    put(
        "seal-events-true.aos",
        _with_seal_attrs(one, {"events": True}).join(),
        "stream-seal",
        "a stream of one event whose seal (seq 1) counts `true` events; its hash recomputed",
    )
    write_sample(tiny_path, batch_max_events=1, events=sample_events()[:1])
    tiny = split(tiny_path)
    tiny_path.unlink()
    assert [["stream.open", "checkpoint"], ["seal"]] == [[r["kind"] for r in b] for b in all_rows(tiny)]

    def first_count_true(batches: list[list[dict[str, Any]]]) -> None:
        a = json.loads(batches[0][1]["attrs"])
        a["events"] = True
        batches[0][1]["attrs"] = canonical_json(a)

    put(
        "checkpoint-events-true.aos",
        _resealed_with(tiny, first_count_true).join(),
        "stream-chain",
        "a checkpoint at seq 1 that counts `true` events (chain and seal recomputed)",
        first_bad_seq=1,
    )

    # Keys: with --key, the key id must be the checked key's, the signature lowercase hex, checkpoints signed.
    put(
        "seal-names-other-key.aos",
        _with_seal_attrs(signed, {"key_id": other.key_id}).join(),
        "stream-signature",
        "a good signature by signer.key under a key_id naming forger.key; verified with signer.pub",
        key="signer.pub",
    )
    seal_attrs = json.loads(all_rows(signed)[-1][0]["attrs"])
    put(
        "signature-uppercase.aos",
        _with_seal_attrs(signed, {"signature": seal_attrs["signature"].upper()}).join(),
        "stream-signature",
        "the seal's good signature written in upper-case hex",
        key="signer.pub",
    )
    put(
        "checkpoints-unsigned.aos",
        reseal(good, signer).join(),
        "stream-signature",
        "a seal signed by signer.key over unsigned checkpoints; verified with signer.pub",
        key="signer.pub",
    )

    # Truncated is only the start of a well-formed message; anything else is damage.
    cut = split(out / "truncated-at-batch.aos").join()
    last = all_rows(split(out / "truncated-at-batch.aos"))[-1][-1]["seq"]
    for name, tail, refusal, what in (
        ("junk-after-last-batch.aos", b"junk\x00\x01\x02\x03", "stream-chain", "8 bytes of junk after the last batch"),
        ("zeros-after-last-batch.aos", b"\x00" * 8, "stream-chain", "8 zero bytes after the last batch"),
        ("eos-then-junk-unsealed.aos", EOS + b"junk", "stream-chain", "junk after an end-of-stream marker, no seal"),
        ("eos-cut-short-unsealed.aos", EOS[:5], "stream-truncated", "5 bytes of an end-of-stream marker, no seal"),
        ("framing-cut-short.aos", good.batches[0][:6], "stream-truncated", "6 bytes of a batch's framing"),
        ("metadata-cut-short.aos", good.batches[0][:200], "stream-truncated", "a batch cut inside its metadata"),
        ("body-cut-short.aos", good.batches[0][:-8], "stream-truncated", "a batch cut 8 bytes before its end"),
    ):
        put(name, cut + tail, refusal, what + " (after truncated-at-batch.aos)", last_intact_seq=last)

    sig = signed.join()
    seal_at = signed.starts[-1]
    for name, offset, what in (
        ("signed-flipped-length.aos", seal_at + 5, "the seal batch's metadata length made 2048 bytes longer"),
        ("signed-flipped-body-length.aos", None, "the seal batch's bodyLength made larger than the file"),
        ("signed-flipped-continuation.aos", seal_at + 1, "one byte of the seal batch's continuation marker"),
    ):
        b = bytearray(sig)
        if offset is None:
            message = signed.batches[-1]
            body = len(message) - 8 - int.from_bytes(message[4:8], "little")
            offset = seal_at + 8 + bytes(message[8:]).index(body.to_bytes(8, "little")) + 1
            b[offset] ^= 0x40
        else:
            b[offset] ^= 0x08 if name == "signed-flipped-length.aos" else 0x01
        put(name, bytes(b), "stream-chain", what + " in a signed stream: damage, not a cut", key="signer.pub")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    out.mkdir(parents=True, exist_ok=True)
    manifest = build(out)
    print(f"wrote {len(manifest)} assets to {out}")


if __name__ == "__main__":
    main()
