"""The writer's pipelined mode (batches encoded by a pool, written in order by one thread)."""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path

import pytest

from aos.refusals import StreamWrite
from aos.verify import verify_stream
from aos.writer import StreamWriter


def _clock() -> object:
    ticks = itertools.count(1)

    def now() -> tuple[int, int]:
        t = next(ticks)
        return 1_700_000_000_000_000_000 + t, t

    return now


def _write(path: Path, *, pipelined: bool, events: int = 300) -> None:
    w = StreamWriter(
        path,
        stream_id="0123456789abcdef0123456789abcdef",
        flush_interval=3600,
        checkpoint_interval=3600,
        background_flush=False,
        batch_max_events=7,
        clock=_clock(),  # type: ignore[arg-type]
        pipelined=pipelined,
    )
    for i in range(events):
        w.append("stdout", {"i": i}, bytes([i % 256]) * (i * 37 % 5000))
    w.seal()


class TestPipelinedWriter:
    """Pipelining changes when bytes are written, never which bytes."""

    def test_same_bytes_as_the_synchronous_writer(self, tmp_path: Path) -> None:
        """Many batches encoded concurrently land in order, byte-identical to writing them one by one."""
        _write(tmp_path / "sync.aos", pipelined=False)
        _write(tmp_path / "pipe.aos", pipelined=True)
        assert (tmp_path / "sync.aos").read_bytes() == (tmp_path / "pipe.aos").read_bytes()
        assert 301 == verify_stream(tmp_path / "pipe.aos").events

    def test_write_failure_surfaces_by_name(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A full disk on the writing thread makes the next flush and the seal refuse with stream-write."""
        w = StreamWriter(tmp_path / "full.aos", pipelined=True, background_flush=False, batch_max_events=2)
        real_write = os.write

        def full(fd: int, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr("aos.writer.os.write", full)
        w.append("stdout", {}, b"a")
        w.append("stdout", {}, b"b")
        with pytest.raises(StreamWrite) as caught:
            w.flush()
        assert "stream-write" == caught.value.name
        assert "No space left" in caught.value.detail
        with pytest.raises(StreamWrite):
            w.append("stdout", {}, b"c")
        monkeypatch.setattr("aos.writer.os.write", real_write)
        with pytest.raises(StreamWrite):
            w.seal()
        w.close()
