"""The test vectors in samples/vectors/ against an independent verifier written from docs/FORMAT.md."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from blake3 import blake3
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

VECTORS = Path(__file__).resolve().parent.parent / "samples" / "vectors"


def _u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def _lp(b: bytes) -> bytes:
    return _u64(len(b)) + b


def _opt(b: bytes | None) -> bytes:
    return b"\x00" if b is None else b"\x01" + _lp(b)


def _independent_verify(path: Path, raw_public_key: bytes | None) -> list[dict[str, Any]]:
    """Verify a stream following docs/FORMAT.md only; return each event's encoding and hash."""
    data = path.read_bytes()
    source = pa.BufferReader(data)
    reader = ipc.MessageReader.open_stream(source)
    schema = ipc.read_schema(reader.read_next_message())
    meta = schema.metadata
    assert meta[b"aos.format"] == b"AOS"
    assert meta[b"aos.version"] == b"1"
    stream_id = meta[b"aos.stream_id"].decode()
    prev = blake3(b"AOS1/genesis\x00" + _lp(stream_id.encode())).digest()
    out: list[dict[str, Any]] = []
    seal_seen = False
    while True:
        start = source.tell()
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        assert not seal_seen, "a batch follows the seal"
        batch = ipc.read_record_batch(message, schema)
        rows = batch.to_pylist()
        for row in rows:
            enc = (
                struct.pack("<Qqq", row["seq"], row["wall_ns"], row["mono_ns"])
                + _lp(row["kind"].encode())
                + _opt(None if row["step"] is None else row["step"].encode())
                + _lp(row["attrs"].encode())
                + _opt(row["data"])
            )
            h = blake3(b"AOS1/event\x00" + prev + _u64(len(enc)) + enc).digest()
            assert h == row["hash"], f"chain breaks at seq {row['seq']}"
            attrs = json.loads(row["attrs"])
            if row["kind"] == "checkpoint" and raw_public_key is not None:
                msg = b"AOS1/checkpoint\x00" + _lp(stream_id.encode()) + prev + _u64(row["seq"])
                Ed25519PublicKey.from_public_bytes(raw_public_key).verify(bytes.fromhex(attrs["signature"]), msg)
            if row["kind"] == "seal":
                assert len(rows) == 1
                digest = blake3(data[:start]).digest()
                assert attrs["head"] == prev.hex()
                assert attrs["events"] == row["seq"]
                assert attrs["bytes"] == start
                assert attrs["file_blake3"] == digest.hex()
                if raw_public_key is not None:
                    msg = b"AOS1/seal\x00" + _lp(stream_id.encode()) + prev + _u64(row["seq"]) + _u64(start) + digest
                    Ed25519PublicKey.from_public_bytes(raw_public_key).verify(bytes.fromhex(attrs["signature"]), msg)
                seal_seen = True
            out.append({"seq": row["seq"], "kind": row["kind"], "encoding_hex": enc.hex(), "hash": h.hex()})
            prev = h
    assert seal_seen, "no seal"
    return out


class TestVectors:
    """The committed vectors, the generator and the independent verifier agree."""

    def test_generator_reproduces_every_byte(self, tmp_path: Path) -> None:
        """Re-running make_vectors.py writes files identical to the committed ones."""
        subprocess.run([sys.executable, str(VECTORS / "make_vectors.py"), str(tmp_path)], check=True)
        for name in ("sealed.aos", "signed.aos", "vectors.json", "test-key.pub"):
            assert (VECTORS / name).read_bytes() == (tmp_path / name).read_bytes(), name

    def test_independent_verifier_matches_vectors(self) -> None:
        """Every event's encoding and hash recomputed from FORMAT.md alone equals vectors.json."""
        doc = json.loads((VECTORS / "vectors.json").read_text(encoding="utf-8"))
        raw_key = bytes.fromhex(doc["public_key_raw_hex"])
        for stream in doc["streams"]:
            signed = "signature" in stream["seal"]
            got = _independent_verify(VECTORS / stream["file"], raw_key if signed else None)
            assert stream["events"] == got
            genesis = blake3(b"AOS1/genesis\x00" + _lp(stream["stream_id"].encode())).hexdigest()
            assert stream["genesis"] == genesis

    def test_vectors_cover_every_designed_kind(self) -> None:
        """The vectors hold at least one event of every kind DESIGN.md names."""
        from aos.event import KINDS

        doc = json.loads((VECTORS / "vectors.json").read_text(encoding="utf-8"))
        kinds = {e["kind"] for e in doc["streams"][0]["events"]}
        assert set() == (KINDS - kinds)

    def test_stock_pyarrow_reads_vectors(self) -> None:
        """A stock pyarrow stream reader reads each vector whole."""
        for name in ("sealed.aos", "signed.aos"):
            with pa.OSFile(str(VECTORS / name)) as f:
                table = ipc.open_stream(f).read_all()
            assert "seal" == table.column("kind")[-1].as_py()
