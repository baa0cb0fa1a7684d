"""An independent verifier of sessions written from docs/FORMAT.md section 9 alone (none of aos/), and its vectors.

It is used again by tests/observe/session/ on sessions the tool recorded.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from blake3 import blake3
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tests.aos.test_vectors import _independent_verify

# FORMAT.md 9.6
NODE0 = ("stream", "node-0", "0" * 31 + "1", "ab" * 32, "cd" * 32)
NODE1 = ("stream", "node-1", "0" * 31 + "2", "ef" * 32, "01" * 32)
NODE0_LEAF = "d821a35601a36937292075ab69eb9797f35b6bff30b30f73518ffd0d1d828eaf"
ROOT_OF_TWO = "C4VLGLGVA+BZelHzOiKeaZGB25EOqJrykRmDioDGkdI="
NODE1_PROOF = b"aos-inclusion-proof v1\nexample.com/session/0001\n1\n2\n2CGjVgGjaTcpIHWraeuXl/Nba/8wsw9zUY/9DR2Cjq8=\n"


def _sha(x: bytes) -> bytes:
    return hashlib.sha256(x).digest()


def _leaf(data: bytes) -> bytes:
    """9.1: SHA-256(0x00 || d)."""
    return _sha(b"\x00" + data)


def _mth(hashes: list[bytes]) -> bytes:
    """9.1: MTH, recursively, with k the largest power of two smaller than n."""
    if not hashes:
        return _sha(b"")
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return _sha(b"\x01" + _mth(hashes[:k]) + _mth(hashes[k:]))


def _path_root(m: int, n: int, leaf: bytes, path: list[bytes]) -> bytes | None:
    """9.1: the root a path gives, or None when it is too long or too short."""
    if not 0 <= m < n:
        return None
    fn, sn, r = m, n - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn % 2 == 1 or fn == sn:
            r = _sha(b"\x01" + p + r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn //= 2
                    sn //= 2
        else:
            r = _sha(b"\x01" + r + p)
        fn //= 2
        sn //= 2
    return r if sn == 0 else None


def _leaf_data(kind: str, name: str, sid: str, fb3: str, head: str, cp: tuple[str, int, str] | None = None) -> bytes:
    """9.3: the leaf's lines."""
    lines = ["aos-session-leaf v1", kind, name, sid, fb3, head]
    if cp is not None:
        lines += [cp[0], str(cp[1]), cp[2]]
    return "".join(x + "\n" for x in lines).encode()


def _read_proof(text: bytes) -> tuple[str, int, int, list[bytes]]:
    """9.4: origin, index, size, path."""
    lines = text.decode("ascii").split("\n")
    assert ("aos-inclusion-proof v1", "") == (lines[0], lines[-1])
    return lines[1], int(lines[2]), int(lines[3]), [base64.b64decode(x, validate=True) for x in lines[4:-1]]


def _checkpoint_text(note: bytes, origin: str, public: bytes | None) -> tuple[str, int, str]:
    """9.2: the checkpoint's three lines, after checking the note's signature by ``public`` when given."""
    if public is None:
        text = note.split(b"\n\n")[0] + b"\n" if b"\n\n" in note else note
    else:
        text, sigs = note.rsplit(b"\n\n", 1)
        text += b"\n"
        keyid = _sha(origin.encode() + b"\n\x01" + public)[:4]
        good = 0
        for line in sigs.decode().split("\n")[:-1]:
            assert line.startswith("\u2014 ")
            name, sig64 = line[2:].split(" ")
            raw = base64.b64decode(sig64, validate=True)
            if name == origin and raw[:4] == keyid:
                Ed25519PublicKey.from_public_bytes(public).verify(raw[4:], text)
                good += 1
        assert good, "no signature of the key"
    o, size, root = text.decode().split("\n")[:3]
    assert (origin, size, 32) == (o, str(int(size)), len(base64.b64decode(root, validate=True)))
    return o, int(size), root


def _stream_facts(path: Path, public: bytes | None = None) -> dict[str, Any]:
    """The facts a leaf needs from a stream (verified by the suite's independent stream verifier; with ``public``,
    a raw Ed25519 key, its seal and checkpoints must be signed by it)."""
    events = _independent_verify(path, public)
    data = path.read_bytes()
    reader = ipc.open_stream(pa.BufferReader(data))
    sid = reader.schema.metadata[b"aos.stream_id"].decode()
    rows = [row for batch in reader for row in batch.to_pylist()]
    by_kind: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], json.loads(row["attrs"]))
    return {
        "sid": sid,
        "fb3": blake3(data).hexdigest(),
        "head": events[-1]["hash"],
        "labels": by_kind["stream.open"].get("labels", {}),
        "checkpoint": by_kind.get("session.checkpoint"),
        "opened": by_kind.get("session.open"),
        "members": [json.loads(r["attrs"]) for r in rows if r["kind"] == "session.member"],
    }


def _gpus_hold(directory: Path, checkpoint: dict[str, Any]) -> bool:
    """FORMAT.md 9.5: DIR/gpus is the list the checkpoint's ``gpus`` seals (BLAKE3, line count), its
    ``UUID<TAB>PATH`` lines sorted by UUID then PATH; a session sealed before GPU lists has no ``gpus``."""
    sealed = checkpoint.get("gpus")
    if sealed is None:
        return True
    data = (directory / "gpus").read_bytes()
    lines = [tuple(line.split(b"\t", 1)) for line in data.splitlines()]
    return (
        blake3(data).hexdigest() == sealed["blake3"]
        and len(lines) == sealed["lines"]
        and all(len(x) == 2 for x in lines)
        and lines == sorted(lines)
    )


def independent_session_check(directory: Path, public: bytes | None = None, origin: str | None = None) -> set[str]:
    """Verify the session folder ``directory`` from FORMAT.md 9 alone; return the proven member paths.

    Raise AssertionError (or the failing library's error) when the session itself does not verify; a member
    whose stream, labels or proof does not hold is left out of the returned set.
    """
    facts = _stream_facts(directory / "session.aos")
    cp = facts["checkpoint"]
    note = (directory / "checkpoint").read_bytes()
    assert note == cp["note"].encode()
    o, size, root = _checkpoint_text(note, cp["origin"], public)
    assert (o, size, root) == (cp["origin"], cp["size"], cp["root"])
    if origin is not None:
        assert facts["labels"].get("aos.session.origin") == origin
    assert _gpus_hold(directory, cp)
    declared = {m["name"]: m for m in facts["opened"]["members"]}
    proven: set[str] = set()
    for index, name in enumerate(cp["leaves"]):
        kind = next(m["kind"] for m in facts["members"] if m["name"] == name)
        key = declared[name].get("key")  # 9.3: the member's stream is signed by the key declared for it
        assert key is not None or facts["opened"].get("unsigned") is True, f"{name} has no key and unsigned is not true"
        stream = (
            directory
            / ("sessions" if kind == "session" else "nodes")
            / (f"{name}/session.aos" if kind == "session" else f"{name}.aos")
        )
        try:
            f = _stream_facts(stream, None if key is None else bytes.fromhex(key))
        except (AssertionError, OSError, KeyError, pa.ArrowInvalid, InvalidSignature):
            continue
        if (f["labels"].get("aos.session.origin"), f["labels"].get("aos.session.member")) != (o, name):
            continue
        sub = None
        if kind == "session":
            if not _gpus_hold(stream.parent, f["checkpoint"]):
                continue
            sub = (f["checkpoint"]["origin"], f["checkpoint"]["size"], f["checkpoint"]["root"])
        leaf = _leaf(_leaf_data(kind, name, f["sid"], f["fb3"], f["head"], sub))
        p_origin, p_index, p_size, path = _read_proof((directory / "proofs" / f"{name}.proof").read_bytes())
        if (p_origin, p_index, p_size) != (o, index, size):
            continue
        if _path_root(p_index, p_size, leaf, path) != base64.b64decode(root):
            continue
        proven.add(name)
        if kind == "session":
            proven |= {f"{name}/{inner}" for inner in independent_session_check(stream.parent, None, o)}
    return proven


class TestIndependentVectors:
    """The independent verifier agrees with FORMAT.md 9.6's vectors."""

    def test_leaf_root_and_proof_vectors(self) -> None:
        """The leaf hash, the root of two and node-1's proof file are the page's."""
        l0, l1 = _leaf(_leaf_data(*NODE0)), _leaf(_leaf_data(*NODE1))
        assert NODE0_LEAF == l0.hex()
        assert ROOT_OF_TWO == base64.b64encode(_mth([l0, l1])).decode()
        origin, index, size, path = _read_proof(NODE1_PROOF)
        assert ("example.com/session/0001", 1, 2) == (origin, index, size)
        assert base64.b64decode(ROOT_OF_TWO) == _path_root(index, size, l1, path)
        assert base64.b64decode(ROOT_OF_TWO) != _path_root(index, size, l0, path)

    @pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 64])
    def test_agrees_with_the_library(self, n: int) -> None:
        """For trees of several sizes, the library's roots and paths check here (tlog is only the generator)."""
        from aos import tlog

        hashes = [_leaf(bytes([i])) for i in range(n)]
        assert _mth(hashes) == tlog.tree_root(hashes)
        for m in range(n):
            assert _mth(hashes) == _path_root(m, n, hashes[m], tlog.inclusion_proof(m, hashes))
            assert _path_root(m, n, hashes[m], [*tlog.inclusion_proof(m, hashes), hashes[0]]) is None
