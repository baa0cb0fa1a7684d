"""Helpers for tests and examples: a small sealed stream with a verdict, made fast.

Public so users can test their own tracker workflows (in the spirit of
``structlog.testing``): ``sealed_stream(path, verdict="pass", scope="physical")``
writes a stream as a gate would leave it, without running any command.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aos.signing import Signer
    from aos.writer import SealInfo

__all__ = ["flip_byte", "sealed_stream"]


def sealed_stream(
    path: str | os.PathLike[str],
    *,
    verdict: str | None = "pass",
    scope: str | None = "static",
    gate: str = "distributed-device",
    signer: Signer | None = None,
    stdout: bytes = b"ok\n",
) -> SealInfo:
    """Write and seal a small stream: open, a process that printed ``stdout`` and exited 0,
    and (unless ``verdict`` is None) a sealed verdict of ``gate`` with ``scope``."""
    from aos.writer import StreamWriter

    w = StreamWriter(path, signer=signer, background_flush=False, fsync="never")
    try:
        w.append(
            "stream.open",
            {"stream_id": w.stream_id, "argv": ["true"], "gate": gate if verdict else None, "labels": {}},
        )
        w.append("process.start", {"pid": 1, "argv": ["true"]})
        seq = w.append("stdout", {}, data=stdout)
        exit_seq = w.append(
            "process.exit",
            {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 1, "rusage": {}},
        )
        if verdict is not None:
            checks: list[dict[str, Any]] = [
                {"name": "exit-zero", "status": "pass", "reason": "exited 0", "evidence": [exit_seq]},
                {"name": "output", "status": "pass", "reason": "printed", "evidence": [seq]},
            ]
            w.append("verdict", {"gate": gate, "verdict": verdict, "scope": scope, "checks": checks})
        return w.seal()
    finally:
        w.close()


def flip_byte(path: str | os.PathLike[str], offset: int | None = None) -> int:
    """Invert one byte of a file in place (default: the middle one); returns the offset."""
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        at = size // 2 if offset is None else (offset if offset >= 0 else size + offset)
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    return at
