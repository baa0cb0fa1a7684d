"""The test vectors in samples/vectors/ against an independent verifier written from docs/FORMAT.md."""

from __future__ import annotations

import base64
import contextlib
import decimal
import json
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from blake3 import blake3
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tests.helpers.paths import SAMPLES

VECTORS = SAMPLES / "vectors"


def _u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def _lp(b: bytes) -> bytes:
    return _u64(len(b)) + b


def _opt(b: bytes | None) -> bytes:
    return b"\x00" if b is None else b"\x01" + _lp(b)


_STREAM_ID = re.compile(r"[0-9a-f]{32}")
_NOT_NULL = ("seq", "wall_ns", "mono_ns", "kind", "attrs", "hash")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(text: str) -> str:
    """FORMAT.md 3.1: quote, backslash and the five short escapes; other controls as \\u00xx; the rest as is."""
    out = []
    for c in text:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif ord(c) < 0x20:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _number(x: float) -> str:
    """FORMAT.md 3.1: a non-integer number in ECMAScript form (the fewest digits that read back, the
    closest such, the even one on a tie; then the placement rules)."""
    if x == 0:
        return "0"
    exact = decimal.Decimal(abs(x))
    for k in range(1, 18):
        found = []
        for rounding in (decimal.ROUND_FLOOR, decimal.ROUND_CEILING):
            with decimal.localcontext() as ctx:
                ctx.prec, ctx.rounding = k, rounding
                candidate = +exact
            if float(candidate) == abs(x):
                found.append(candidate)
        if found:
            best = min(found, key=lambda d: (abs(d - exact), d.as_tuple().digits[-1] % 2))  # a tie: the even one
            break
    _, digits, exponent = best.normalize().as_tuple()
    s = "".join(map(str, digits))
    k, n = len(s), len(s) + int(exponent)
    if k <= n <= 21:
        out = s + "0" * (n - k)
    elif 0 < n <= 21:
        out = s[:n] + "." + s[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * -n + s
    else:
        out = s[0] + ("." + s[1:] if k > 1 else "") + "e" + ("+" if n > 0 else "-") + str(abs(n - 1))
    return ("-" if x < 0 else "") + out


def _canonical(value: Any) -> str:
    """FORMAT.md 3.1, written out: sorted keys, no spaces, integers exact, other numbers in ECMAScript form."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    return "{" + ",".join(_string(k) + ":" + _canonical(value[k]) for k in sorted(value)) + "}"


def _independent_verify(path: Path, raw_public_key: bytes | None) -> list[dict[str, Any]]:
    """Verify a stream following docs/FORMAT.md only; return each event's encoding and hash."""
    data = path.read_bytes()
    assert data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    source = pa.BufferReader(data)
    reader = ipc.MessageReader.open_stream(source)
    schema = ipc.read_schema(reader.read_next_message())
    meta = schema.metadata
    assert {b"aos.format": b"AOS", b"aos.version": b"1", b"aos.hash": b"blake3"} == {
        k: v for k, v in meta.items() if k != b"aos.stream_id"
    }
    stream_id = meta[b"aos.stream_id"].decode()
    assert _STREAM_ID.fullmatch(stream_id)
    prev = blake3(b"AOS1/genesis\x00" + _lp(stream_id.encode())).digest()
    out: list[dict[str, Any]] = []
    seal_seen = False
    while True:
        start = source.tell()
        if data[start : start + 8] == b"\xff\xff\xff\xff\x00\x00\x00\x00":
            break
        meta_len = struct.unpack_from("<i", data, start + 4)[0]
        assert (data[start : start + 4], 0, True) == (b"\xff\xff\xff\xff", meta_len % 8, 0 < meta_len <= 4096)
        message = reader.read_next_message()
        assert not seal_seen, "a batch follows the seal"
        batch = ipc.read_record_batch(message, schema)
        assert [0] * 6 == [batch.column(name).null_count for name in _NOT_NULL]
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
            assert row["attrs"] == _canonical(attrs), f"attrs of seq {row['seq']} are not canonical"
            if row["kind"] == "checkpoint":
                assert (type(attrs["events"]), attrs["events"], attrs["head"]) == (int, row["seq"], prev.hex())
                if raw_public_key is not None:
                    msg = b"AOS1/checkpoint\x00" + _lp(stream_id.encode()) + prev + _u64(row["seq"])
                    Ed25519PublicKey.from_public_bytes(raw_public_key).verify(bytes.fromhex(attrs["signature"]), msg)
            if row["kind"] == "seal":
                assert len(rows) == 1
                digest = blake3(data[:start]).digest()
                assert attrs["head"] == prev.hex()
                assert (type(attrs["events"]), attrs["events"]) == (int, row["seq"])
                assert (type(attrs["bytes"]), attrs["bytes"]) == (int, start)
                assert attrs["file_blake3"] == digest.hex()
                if raw_public_key is not None:
                    msg = b"AOS1/seal\x00" + _lp(stream_id.encode()) + prev + _u64(row["seq"]) + _u64(start) + digest
                    assert re.fullmatch("[0-9a-f]{128}", attrs["signature"])
                    Ed25519PublicKey.from_public_bytes(raw_public_key).verify(bytes.fromhex(attrs["signature"]), msg)
                seal_seen = True
            out.append({"seq": row["seq"], "kind": row["kind"], "encoding_hex": enc.hex(), "hash": h.hex()})
            prev = h
    assert seal_seen, "no seal"
    return out


def _value_bytes(stored: Any) -> bytes:
    """FORMAT.md 3.7: a string is its UTF-8; an object {"bytes_b64": B} is the base64 B decoded."""
    return stored.encode() if isinstance(stored, str) else base64.b64decode(stored["bytes_b64"], validate=True)


def _key_bytes(stored: str) -> bytes:
    """FORMAT.md 3.7: U+0000 "bytes_b64:" then base64, else the key's UTF-8."""
    prefix = "\x00bytes_b64:"
    return base64.b64decode(stored[len(prefix) :]) if stored.startswith(prefix) else stored.encode()


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
        """The vectors hold at least one event of every kind docs/FORMAT.md names (aos.kinds.REGISTRY)."""
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

    def test_stock_pyarrow_on_a_cut_file(self, tmp_path: Path) -> None:
        """FORMAT.md 1: on a file cut mid-message read_all() raises; iterating batches keeps the complete ones."""
        data = (VECTORS / "sealed.aos").read_bytes()
        cut = tmp_path / "cut.aos"
        cut.write_bytes(data[: len(data) - 100])  # inside the seal's batch
        with pytest.raises((pa.ArrowInvalid, OSError)):
            ipc.open_stream(cut.read_bytes()).read_all()
        got = []
        reader = ipc.open_stream(cut.read_bytes())
        with contextlib.suppress(pa.ArrowInvalid, OSError):
            for batch in reader:
                got.extend(batch.column("kind").to_pylist())
        assert "verdict" == got[-1]

    def test_nested_step_and_byte_text(self) -> None:
        """The vectors hold a nested step, and byte text (FORMAT.md 3.7) in values, keys and the step column."""
        table = ipc.open_stream((VECTORS / "sealed.aos").read_bytes()).read_all()
        rows = table.to_pylist()
        starts = [r for r in rows if r["kind"] == "step.start"]
        outer, inner = (json.loads(r["attrs"]) for r in starts)
        assert (None, starts[0]["step"]) == (outer["parent"], inner["parent"])
        assert (b"link\xff", [b"ld", b"-o\xfe"], b"s2\xff") == (
            _value_bytes(inner["name"]),
            [_value_bytes(a) for a in inner["argv"]],
            _key_bytes(starts[1]["step"]),
        )
        opened = json.loads(rows[0]["attrs"])
        env = {_key_bytes(k): _value_bytes(v) for k, v in opened["env"].items()}
        assert (b"caf\xe9", b"\xe9t\xe9") == (_value_bytes(opened["argv"][-1]), env[b"LATIN\xff"])

    def test_numbers_in_ecmascript_form(self) -> None:
        """The receipt's floats are written as FORMAT.md 3.1 says (1.5, 1e-7, 2, 1e+21), its big integer exactly."""
        table = ipc.open_stream((VECTORS / "sealed.aos").read_bytes()).read_all()
        (attrs,) = [r["attrs"] for r in table.to_pylist() if r["kind"] == "receipt"]
        assert '"fields":{"big":1e+21,"exact":1180591620717411303424,"n":1.5,' in attrs
        assert '"small":1e-7,"whole":2}' in attrs
