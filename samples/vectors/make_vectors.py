"""Generate the format test vectors in samples/vectors/ (deterministic, byte for byte).

    python samples/vectors/make_vectors.py [OUTDIR]

Writes sealed.aos (unsigned), signed.aos with test-key.pub (its private key
test-key.key is published here on purpose: it signs test vectors and nothing
else), and vectors.json: for every event its canonical encoding and hash, the
genesis, and what each seal commits to. tests/aos/test_vectors.py regenerates these
files and checks they are identical, and verifies them with an independent
implementation written from docs/FORMAT.md alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aos.canonical import encode_event
from aos.chain import genesis
from aos.reader import read_stream
from aos.signing import Signer
from aos.text import text_key, text_value
from aos.writer import StreamWriter

SEED = bytes(range(32))  # the published test key's seed
BASE_WALL = 1_795_000_000_000_000_000
BASE_MONO = 5_000_000_000


class _Clock:
    def __init__(self) -> None:
        self.tick = 0

    def __call__(self) -> tuple[int, int]:
        self.tick += 1
        return BASE_WALL + self.tick * 1_000_000, BASE_MONO + self.tick * 1_000_000


#: What process.start and process.stray say of the containment (FORMAT.md 4).
_CONTAINED = {"containment": "cgroup", "guaranteed": True, "containment_note": "/sys/fs/cgroup/alpha-observe-vectors"}
#: A remote node as device.observed and node.lost name it (FORMAT.md 4.1).
_NODE = {"host": "lane@gpu0.example", "address": "gpu0.example", "port": 22, "user": "observer", "lane_user": "lane"}


#: RFC 8032 section 7.1's published Ed25519 public keys (TESTs 1, 2 and 3), as a session declares its members'.
_RFC8032 = (
    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
    "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
)


def _observed(phase: str) -> dict[str, object]:
    """A device.observed of the simulated observer with no GPU (FORMAT.md 4.1)."""
    return {
        "phase": phase,
        "observer": "simulated",
        "library": None,
        "driver": None,
        "cuda_driver": None,
        "namespace": {"pid": "initial", "ns": None, "pid1_ns": None, "nspid": None, "markers": []},
        "gpus": [],
        "processes": [],
    }


def _write(path: Path, stream_id: str, signer: Signer | None) -> None:
    path.unlink(missing_ok=True)
    w = StreamWriter(
        path,
        stream_id=stream_id,
        signer=signer,
        flush_interval=3600,
        checkpoint_interval=0,
        background_flush=False,
        clock=_Clock(),
    )
    w.append(
        "stream.open",
        {
            "stream_id": stream_id,
            "tool": "alpha-observe",
            "version": "0.1.0",
            "argv": ["sh", "-c", "echo hello; printf '\\000\\377' >&2", text_value(b"caf\xe9")],
            "recorder_argv": ["alpha", "observe", "record", "--", "sh", "-c", "..."],
            "cwd": "/work",
            "env": {"HOME": "/root", "API_TOKEN": "[REDACTED]", text_key(b"LATIN\xff"): text_value(b"\xe9t\xe9")},
            "host": "vectors",
            "gate": None,
            "labels": {"lane": "vectors", "unicode": "\u00e9\u4e2d\U0001f600"},
        },
    )
    w.append("device.observed", _observed("start"))
    w.append("process.start", {"pid": 4242, "argv": ["sh", "-c", "..."], **_CONTAINED})
    w.append("stdout", {}, b"hello\n")
    w.append("stderr", {}, b"\x00\xff")
    w.append("telemetry", {"tree": {"processes": 1, "cpu_ns": 1_500_000, "rss": 4096}, "gpus": []})
    w.append("node.lost", {"node": _NODE, "reason": "connection closed", "at_ns": BASE_MONO + 3_500_000})
    w.flush()  # first batch, closed by a checkpoint
    w.append("step.start", {"name": "build", "argv": ["make"], "parent": None}, step="s1")
    w.append("stdout", {}, b"", step="s1")
    fields = {"role": "coordinator", "n": 1.5, "small": 1e-7, "whole": 2.0, "big": 1e21, "exact": 2**70}
    w.append("receipt", {"name": "static-build", "status": "pass", "fields": fields}, step="s1")
    w.append("receipt.invalid", {"reason": "not JSON"}, b"{oops\n", step="s1")
    w.append("recorder.error", {"error": "bad control message: not a JSON object"}, step="s1")
    # A step nested in s1 whose name, argument and span id are not UTF-8 (byte text, FORMAT.md 3.7).
    inner = {"name": text_value(b"link\xff"), "argv": ["ld", text_value(b"-o\xfe")], "parent": "s1"}
    span = text_key(b"s2\xff")
    w.append("step.start", inner, step=span)
    w.append("stderr", {}, b"warning\n", step=span)
    w.append("step.end", {**inner, "exit_code": 0, "signal": None, "duration_ns": 500}, step=span)
    w.append(
        "step.end",
        {"name": "build", "argv": ["make"], "parent": None, "exit_code": 0, "signal": None, "duration_ns": 1000},
        step="s1",
    )
    w.flush()
    content = b"artifact bytes\n"
    import hashlib

    from blake3 import blake3

    w.append(
        "artifact",
        {
            "path": "out/a.txt",
            "size": len(content),
            "mode": "0644",
            "sha256": hashlib.sha256(content).hexdigest(),
            "blake3": blake3(content).hexdigest(),
            "content": "inline",
            "kind": "file",
        },
    )
    w.append("artifact.chunk", {"path": "out/a.txt", "offset": 0}, content)
    exit_seq = w.append(
        "process.exit",
        {
            "exit_code": 0,
            "signal": None,
            "timed_out": False,
            "duration_ns": 2_000_000,
            "rusage": {},
            "interrupted": None,
            "stray_writers": True,
        },
    )
    w.append("recorder.interrupted", {"signal": "SIGINT"})  # after the exit: no "during"
    ended = [{"pid": 4243, "argv": ["sleep", "60"], "signal": "SIGTERM"}]
    stray = {"still_open": ["stdout"], "drained_ns": 2_000_000_000, "ended": ended, "survivors": []}
    w.append("process.stray", {**stray, **_CONTAINED})
    w.append("device.observed", _observed("end"))
    w.append("artifact.error", {"path": "out/locked.bin", "error": "Permission denied"})
    w.append("artifact.missing", {"pattern": "out/*.log", "error": "no such file or no match"})
    origin = "example.com/session/0001"  # FORMAT.md 9.6's session of two
    w.append(
        "session.open",
        {
            "origin": origin,
            "name": None,
            "parent": None,
            "members": [  # each node's raw Ed25519 public key: RFC 8032 7.1's TEST 1, 2 and 3 keys
                {"name": "node-0", "kind": "stream", "gpus": 2, "roles": ["owner-0", "owner-1"], "key": _RFC8032[0]},
                {"name": "node-1", "kind": "stream", "gpus": None, "roles": [], "key": _RFC8032[1]},
                {"name": "node-2", "kind": "stream", "gpus": None, "roles": [], "key": _RFC8032[2]},
            ],
            "fanout": 64,
            "unsigned": False,
        },
    )
    for name, sid, fb3, head, leaf in (
        (
            "node-0",
            "0" * 31 + "1",
            "ab" * 32,
            "cd" * 32,
            "d821a35601a36937292075ab69eb9797f35b6bff30b30f73518ffd0d1d828eaf",
        ),
        (
            "node-1",
            "0" * 31 + "2",
            "ef" * 32,
            "01" * 32,
            "b0c25dfad060fd5316ae272c50289cad382c3b5326a06bfcbc1378b5081c8ef6",
        ),
    ):
        member = {"name": name, "kind": "stream", "status": "proven", "reason": None, "at": "sealed", "stream_id": sid}
        w.append("session.member", {**member, "file_blake3": fb3, "head": head, "leaf": leaf, "received_ns": 5})
    missing = {"name": "node-2", "kind": "stream", "status": "did-not-run", "reason": "no stream at nodes/node-2.aos"}
    w.append("session.member", {**missing, "at": "end", "received_ns": 6})
    w.append(
        "session.checkpoint",
        {
            "origin": origin,
            "size": 2,
            "root": "C4VLGLGVA+BZelHzOiKeaZGB25EOqJrykRmDioDGkdI=",
            "note": f"{origin}\n2\nC4VLGLGVA+BZelHzOiKeaZGB25EOqJrykRmDioDGkdI=\n",
            "key": None,
            "leaves": ["node-0", "node-1"],
            "not_proven": [{k: missing[k] for k in ("name", "status", "reason")}],
        },
    )
    w.append(
        "verdict",
        {
            "gate": "exit-zero",
            "verdict": "pass",
            "scope": "command",
            "checks": [{"name": "exit-code", "status": "pass", "reason": "exit 0", "evidence": [exit_seq]}],
        },
    )
    w.seal()


def _describe(path: Path) -> dict[str, object]:
    c = read_stream(path)
    events = []
    for ev in c.events:
        enc = encode_event(ev.seq, ev.wall_ns, ev.mono_ns, ev.kind, ev.step, ev.attrs_json, ev.data)
        events.append({"seq": ev.seq, "kind": ev.kind, "encoding_hex": enc.hex(), "hash": ev.hash.hex()})
    seal = c.events[-1].attrs
    return {
        "file": path.name,
        "stream_id": c.stream_id,
        "genesis": genesis(c.stream_id).hex(),
        "file_bytes": path.stat().st_size,
        "events": events,
        "seal": seal,
    }


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    private = Ed25519PrivateKey.from_private_bytes(SEED)
    (out / "test-key.key").write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (out / "test-key.pub").write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    _write(out / "sealed.aos", "00112233445566778899aabbccddeeff", None)
    _write(out / "signed.aos", "ffeeddccbbaa99887766554433221100", Signer(private))
    raw_pub = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    doc = {
        "format": "AOS",
        "version": "1",
        "public_key_raw_hex": raw_pub.hex(),
        "streams": [_describe(out / "sealed.aos"), _describe(out / "signed.aos")],
    }
    (out / "vectors.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
