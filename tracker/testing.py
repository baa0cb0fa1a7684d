"""Helpers for tests and examples: a small sealed stream with a verdict, made fast.

Public so users can test their own tracker workflows (in the spirit of
``structlog.testing``): ``sealed_stream(path, verdict="pass", scope="physical")``
writes a stream as a gate would leave it, without running any command.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos import kinds
from tracker.backends import Connection, is_postgres_url

if TYPE_CHECKING:
    from aos.signing import Signer
    from aos.writer import SealInfo

__all__ = ["ExampleTracker", "example_tracker", "flip_byte", "sealed_stream"]


def sealed_stream(
    path: str | os.PathLike[str],
    *,
    verdict: str | None = "pass",
    scope: str | None = "static",
    gate: str = "distributed-device",
    signer: Signer | None = None,
    stdout: bytes = b"ok\n",
    devices: Sequence[str] = (),
    opened_ns: int | None = None,
    source: dict[str, Any] | None = None,
) -> SealInfo:
    """Write and seal a small stream: open, a process that printed ``stdout`` and exited 0,
    and (unless ``verdict`` is None) a sealed verdict of ``gate`` with ``scope``.

    ``devices``: GPU UUIDs a (simulated) recorder observed, as one ``device.observed``
    event. ``opened_ns``: the wall time of ``stream.open`` (default: now). ``source``: the
    ``source`` attr of ``stream.open`` (docs/FORMAT.md; absent when None).
    """
    from aos.writer import StreamWriter

    w = StreamWriter(path, signer=signer, background_flush=False, fsync="never")
    try:
        w.append(
            kinds.STREAM_OPEN,
            {
                "stream_id": w.stream_id,
                "argv": ["true"],
                "gate": gate if verdict else None,
                "labels": {},
                **({"source": source} if source is not None else {}),
            },
            wall_ns=opened_ns,
        )
        if devices:
            gpus = [
                {"index": i, "minor": i, "uuid": u, "name": "Simulated GPU", "memory": 1 << 30}
                for i, u in enumerate(devices)
            ]
            w.append(
                kinds.DEVICE_OBSERVED,
                {"phase": "start", "observer": "simulated", "driver": "0.0", "gpus": gpus, "processes": []},
            )
        w.append(kinds.PROCESS_START, {"pid": 1, "argv": ["true"]})
        seq = w.append(kinds.STDOUT, {}, data=stdout)
        exit_seq = w.append(
            kinds.PROCESS_EXIT,
            {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 1, "rusage": {}},
        )
        if verdict is not None:
            checks: list[dict[str, Any]] = [
                {"name": "exit-zero", "status": "pass", "reason": "exited 0", "evidence": [exit_seq]},
                {"name": "output", "status": "pass", "reason": "printed", "evidence": [seq]},
            ]
            w.append(kinds.VERDICT, {"gate": gate, kinds.VERDICT: verdict, "scope": scope, "checks": checks})
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


@dataclass
class ExampleTracker:
    """A small tracker in a known state (see :func:`example_tracker`)."""

    db: Path | str  # an SQLite path, or a postgresql:// URL
    conn: Connection
    static_run: str
    physical_run: str
    open_run: str
    streams: dict[str, Path] = field(default_factory=dict)
    stream_ids: dict[str, str] = field(default_factory=dict)


def example_tracker(db: str | os.PathLike[str], workdir: str | os.PathLike[str]) -> ExampleTracker:
    """Build a tracker at ``db`` (an SQLite path or a ``postgresql://`` URL) with streams under ``workdir``.

    Milestones M1 (static) and M2 (physical). Items: N1 implemented; N2 in
    progress, needs N1; N3 planned, needs N2; H1 hardware, planned, needs N1.
    Runs: ``static_run`` completed with a passing static-scope stream;
    ``physical_run`` completed, a physical pass with a passing physical-scope
    stream; ``open_run`` still running, with a passing static-scope stream.
    """
    from tracker import records
    from tracker.attach import attach
    from tracker.db import init

    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    conn = init(db)
    records.add_milestone(conn, "M1", "Static lanes")
    records.add_milestone(conn, "M2", "Physical qualification")
    records.add_item(conn, "N1", "Build every role", "M1", status="implemented")
    records.add_item(conn, "N2", "Check every executable", "M1", status="in-progress", depends_on=["N1"])
    records.add_item(conn, "N3", "Publish the static report", "M1", depends_on=["N2"])
    records.add_item(conn, "H1", "Two GPUs, distributed lane", "M2", hardware=True, depends_on=["N1"])
    records.add_experiment(conn, "distributed", item="H1")
    streams: dict[str, Path] = {}
    ids: dict[str, str] = {}

    def stream(name: str, scope: str) -> Path:
        path = work / f"{name}.aos"
        info = sealed_stream(path, verdict="pass", scope=scope)
        streams[name], ids[name] = path, info.stream_id
        return path

    static_run = records.start_run(conn, experiment="distributed", lane="distributed-device")
    attach(conn, stream("static", "static"), static_run)
    records.finish_run(conn, static_run, "completed")
    physical_run = records.start_run(conn, experiment="distributed", lane="distributed-device")
    attach(conn, stream("physical", "physical"), physical_run)
    records.finish_run(conn, physical_run, "completed", physical_pass=True)
    open_run = records.start_run(conn, experiment="distributed", lane="distributed-device")
    attach(conn, stream("open", "static"), open_run)
    where = str(db) if is_postgres_url(db) else Path(db)
    return ExampleTracker(where, conn, static_run, physical_run, open_run, streams, ids)
