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


def _write(path: Path, *, pipelined: bool, events: int = 300, encoders: int | None = None) -> int:
    """Write the same events as every other call; returns the writer's number of encoders."""
    w = StreamWriter(
        path,
        stream_id="0123456789abcdef0123456789abcdef",
        flush_interval=3600,
        checkpoint_interval=3600,
        background_flush=False,
        batch_max_events=7,
        clock=_clock(),  # type: ignore[arg-type]
        pipelined=pipelined,
        encoders=encoders,
    )
    for i in range(events):
        w.append("stdout", {"i": i}, bytes([i % 256]) * (i * 37 % 5000))
    w.seal()
    return w.encoders


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


class TestEncoderPool:
    """Compression spreads over the cores, and still lands byte for byte in order."""

    @pytest.mark.parametrize("encoders", [1, 3, 8])
    def test_any_pool_size_writes_the_same_bytes(self, tmp_path: Path, encoders: int) -> None:
        """More encoders than batches in flight, or one: the file is the synchronous writer's, byte for byte."""
        _write(tmp_path / "sync.aos", pipelined=False)
        assert encoders == _write(tmp_path / "pool.aos", pipelined=True, encoders=encoders)
        assert (tmp_path / "sync.aos").read_bytes() == (tmp_path / "pool.aos").read_bytes()

    def test_default_pool_follows_the_cores(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """One encoder per usable core, at least 2 and at most MAX_ENCODERS; the queue of batches is bounded by it."""
        from aos import writer

        for cores, expected in ((1, 2), (4, 4), (64, writer.MAX_ENCODERS)):
            monkeypatch.setattr(writer.os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)))
            assert expected == writer.default_encoders()
        w = StreamWriter(tmp_path / "s.aos", pipelined=True, background_flush=False)
        assert writer.MAX_ENCODERS == w.encoders
        assert w._jobs is not None
        assert w.encoders + 1 == w._jobs.maxsize
        w.seal()


class TestDataColumn:
    """The data column holds a lone chunk as it is (no copy), with the bytes pyarrow's own conversion gives."""

    @pytest.mark.parametrize(
        "values",
        [
            [b"x" * (1 << 20)],
            [b"a" * 70_000, None, b"", b"b" * 100_000],
            [None, b"q" * (200 << 10), None],
            [b"", b"z" * (65 << 10)],
            [b"tiny", None, b""],
        ],
    )
    def test_same_encoding_as_pyarrow(self, tmp_path: Path, values: list[bytes | None]) -> None:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        from aos.schema import arrow_schema
        from aos.writer import _Job

        w = StreamWriter(tmp_path / "s.aos", background_flush=False)
        n = len(values)
        job = _Job(
            seq=list(range(n)),
            wall=[1] * n,
            mono=[2] * n,
            kind=["stdout"] * n,
            step=[None] * n,
            attrs=["{}"] * n,
            data=values,
            hash=[b"h" * 32] * n,
        )
        schema = arrow_schema(w.stream_id)
        batch = pa.record_batch(
            [
                pa.array(job.seq, pa.uint64()),
                pa.array(job.wall, pa.int64()),
                pa.array(job.mono, pa.int64()),
                pa.array(job.kind, pa.string()),
                pa.array(job.step, pa.string()),
                pa.array(job.attrs, pa.string()),
                pa.array(values, pa.binary()),
                pa.array(job.hash, pa.binary(32)),
            ],
            schema=schema,
        )
        sink = pa.BufferOutputStream()
        options = ipc.IpcWriteOptions(compression=pa.Codec("zstd", 1), use_threads=False)
        with ipc.new_stream(sink, schema, options=options) as writer:
            writer.write_batch(batch)
        whole = sink.getvalue().to_pybytes()
        start = len(schema.serialize().to_pybytes())
        assert whole[start:-8] == bytes(w._encode_job(job))
        w.close()

    def test_a_large_chunk_is_not_copied(self) -> None:
        """One chunk in a batch becomes the column's data buffer as it is (no second copy of the output)."""
        from aos.ipc import _variable

        chunk = os.urandom(1 << 20)
        assert _variable([None, chunk, b""])[1][2] is chunk
