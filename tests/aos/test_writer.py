"""StreamWriter: append-only, timely flushes and checkpoints, bounded memory, write failures refused."""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from aos.reader import StreamFile, read_stream
from aos.refusals import StreamWrite
from aos.verify import verify_stream
from aos.writer import StreamWriter


def quiet_writer(path: Path, **options: Any) -> StreamWriter:
    """A writer that flushes only by size or count (no clock-driven batches or checkpoints)."""
    options.setdefault("flush_interval", 1e9)
    options.setdefault("checkpoint_interval", float("inf"))
    options.setdefault("background_flush", False)
    return StreamWriter(path, **options)


class TestAppendOnly:
    """The file only ever grows, one whole batch at a time."""

    def test_file_only_grows(self, tmp_path: Path) -> None:
        """Every snapshot of the file taken while writing is a prefix of every later one."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path, batch_max_events=3)
        snapshots = [path.read_bytes()]
        for i in range(20):
            w.append("stdout", {"i": i}, b"line %d\n" % i)
            snapshots.append(path.read_bytes())
        w.seal()
        snapshots.append(path.read_bytes())
        assert [True] * (len(snapshots) - 1) == [b.startswith(a) for a, b in itertools.pairwise(snapshots)]
        assert len(set(snapshots)) > 5

    def test_every_flush_leaves_a_readable_prefix(self, tmp_path: Path) -> None:
        """After each flushed batch the file so far reads back every event flushed, undamaged."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path, batch_max_events=4)
        seen = []
        for i in range(17):
            w.append("stdout", {"i": i}, b"x" * i)
            contents = read_stream(path)
            seen.append((contents.damage, len(contents.events)))
        w.seal()
        assert [(None, (i + 1) // 4 * 4) for i in range(17)] == seen

    def test_never_seeks(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The writer writes with os.write only, never seeking or writing at an offset."""
        calls: list[str] = []
        for name in ("lseek", "pwrite", "ftruncate", "truncate"):
            real = getattr(os, name)

            def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
                calls.append(_name)
                return _real(*args)

            monkeypatch.setattr(f"aos.writer.os.{name}", spy)
        w = quiet_writer(tmp_path / "s.aos", batch_max_events=2)
        for i in range(9):
            w.append("stdout", {}, b"%d" % i)
        w.seal()
        monkeypatch.undo()
        assert [] == calls

    def test_one_write_per_batch(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each batch reaches the file in a single os.write call (so a torn batch is a cut batch)."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path, batch_max_events=3)
        fd = w._fd
        sizes: list[int] = []
        real = os.write

        def spy(f: int, b: Any) -> int:
            if f == fd:
                sizes.append(len(b))
            return real(f, b)

        monkeypatch.setattr("aos.writer.os.write", spy)
        for i in range(9):
            w.append("stdout", {"i": i}, b"y" * 100)
        w.seal()
        monkeypatch.undo()
        with StreamFile(path) as f:
            spans = [raw.end - raw.start for raw in f.batches()]
        assert spans[:3] == sizes[:3]

    def test_refuses_to_overwrite(self, tmp_path: Path) -> None:
        """A writer refuses (stream-write) to open over an existing file, and leaves it untouched."""
        path = tmp_path / "s.aos"
        path.write_bytes(b"precious")
        with pytest.raises(StreamWrite):
            StreamWriter(path)
        assert b"precious" == path.read_bytes()

    def test_unwritable_path(self, tmp_path: Path) -> None:
        """A path in a missing directory is refused with stream-write."""
        with pytest.raises(StreamWrite) as info:
            StreamWriter(tmp_path / "no" / "such" / "dir" / "s.aos")
        assert "stream-write" == info.value.name

    def test_nothing_after_the_seal(self, tmp_path: Path) -> None:
        """Appending after the seal is refused; sealing twice returns the same seal."""
        w = quiet_writer(tmp_path / "s.aos")
        w.append("stdout", {}, b"a")
        first = w.seal()
        with pytest.raises(StreamWrite):
            w.append("stdout", {}, b"b")
        assert first == w.seal()

    def test_seal_info_matches_verification(self, tmp_path: Path) -> None:
        """SealInfo states the seal's seq, the head and count before it, and the bytes before its batch."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path, batch_max_events=2)
        for i in range(5):
            w.append("stdout", {}, b"%d" % i)
        info = w.seal()
        v = verify_stream(path)
        with StreamFile(path) as f:
            seal_start = [raw.start for raw in f.batches()][-1]
        assert (5, 5, info.head, seal_start, info.file_blake3) == (
            info.seq,
            info.events,
            v.seal["head"],
            info.bytes,
            v.seal["file_blake3"],
        )

    @pytest.mark.parametrize("kind", ["seal", "checkpoint"])
    def test_reserved_kinds_refused(self, tmp_path: Path, kind: str) -> None:
        """append refuses the kinds only the writer writes (seal, checkpoint); the stream stays usable."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path)
        with pytest.raises(ValueError, match="written by the writer itself"):
            w.append(kind, {"head": "00" * 32, "events": 0})
        w.append("stdout", {}, b"ok")
        w.seal()
        assert {"stdout": 1, "seal": 1} == verify_stream(path).kinds

    def test_unencodable_text_refused(self, tmp_path: Path) -> None:
        """Text that is not valid Unicode (a lone surrogate) is refused with ValueError before anything is stored."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path)
        for bad in ({"kind": "std\ud800"}, {"attrs": {"x": "\udfff"}}, {"step": "\ud800"}):
            with pytest.raises(ValueError, match="surrogates not allowed"):
                w.append(bad.get("kind", "stdout"), bad.get("attrs", {}), None, bad.get("step"))  # type: ignore[arg-type]
        w.append("stdout", {}, b"ok")
        w.seal()
        assert [0, 1] == [e.seq for e in read_stream(path).events]

    def test_concurrent_appends(self, tmp_path: Path) -> None:
        """Appends from many threads at once give dense seqs, every event once, and a stream that verifies."""
        path = tmp_path / "s.aos"
        w = StreamWriter(path, flush_interval=0.01, batch_max_events=7)

        def work(t: int) -> None:
            for i in range(200):
                w.append("stdout", {"t": t, "i": i}, b"%d:%d" % (t, i))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        w.seal()
        v = verify_stream(path)
        got = sorted((e.attrs["t"], e.attrs["i"]) for e in read_stream(path).events if e.kind == "stdout")
        assert ([(t, i) for t in range(4) for i in range(200)], 800) == (got, v.kinds["stdout"])


class TestFlushing:
    """Batches reach the file within the flush interval; checkpoints come at theirs."""

    def test_background_flush(self, tmp_path: Path) -> None:
        """One event appended and nothing else: the background thread writes it within ~0.3 s."""
        path = tmp_path / "s.aos"
        w = StreamWriter(path, flush_interval=0.1, checkpoint_interval=float("inf"))
        try:
            w.append("stdout", {}, b"hello\n")
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline and not read_stream(path).events:
                time.sleep(0.02)
            events = read_stream(path).events
        finally:
            w.close()
        assert [b"hello\n"] == [e.data for e in events]

    def test_no_background_flush_waits(self, tmp_path: Path) -> None:
        """Without the background thread a lone event stays pending until the next append or flush."""
        path = tmp_path / "s.aos"
        w = StreamWriter(path, flush_interval=0.05, checkpoint_interval=float("inf"), background_flush=False)
        w.append("stdout", {}, b"a")
        time.sleep(0.15)
        before = len(read_stream(path).events)
        w.flush()
        after = len(read_stream(path).events)
        w.close()
        assert (0, 1) == (before, after)

    def test_flush_interval_while_output_flows(self, tmp_path: Path) -> None:
        """While events keep arriving, no event waits in memory much longer than the flush interval."""
        path = tmp_path / "s.aos"
        w = StreamWriter(path, flush_interval=0.05, checkpoint_interval=float("inf"))
        lags = []
        try:
            for i in range(20):
                w.append("stdout", {"i": i}, b"tick\n")
                time.sleep(0.01)
                contents = read_stream(path)
                lags.append(i + 1 - len(contents.events))
        finally:
            w.close()
        # 0.05 s at one event per ~0.01 s is ~5 events; allow for a loaded machine
        assert max(lags) <= 15, lags

    def test_checkpoints_at_interval(self, tmp_path: Path) -> None:
        """Checkpoints come about every checkpoint_interval, each closing its batch, naming the head and count."""
        path = tmp_path / "s.aos"
        w = StreamWriter(path, flush_interval=0.02, checkpoint_interval=0.2)
        start = time.monotonic()
        while time.monotonic() - start < 1.1:
            w.append("stdout", {}, b".")
            time.sleep(0.005)
        w.seal()
        v = verify_stream(path)
        events = read_stream(path).events
        cps = [e for e in events if e.kind == "checkpoint"]
        gaps = [(b.mono_ns - a.mono_ns) / 1e9 for a, b in itertools.pairwise(cps)]
        with StreamFile(path) as f:
            last_in_batch = {raw.batch.column("seq")[-1].as_py() for raw in f.batches()}
        assert 3 <= len(cps) <= 6, len(cps)
        assert all(g >= 0.2 for g in gaps), gaps
        assert {c.seq for c in cps} <= last_in_batch
        assert [c.seq for c in cps] == [c.attrs["events"] for c in cps]
        assert len(cps) == v.checkpoints

    def test_fsync_policy(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """fsync "batch" syncs every batch, "seal" once at the seal, "never" not at all."""
        counts = {}
        real = os.fsync
        for policy in ("batch", "seal", "never"):
            calls: list[int] = []

            def spy(fd: int, _calls: list[int] = calls) -> None:
                _calls.append(fd)
                real(fd)

            monkeypatch.setattr("aos.writer.os.fsync", spy)
            w = quiet_writer(tmp_path / f"{policy}.aos", batch_max_events=2, fsync=policy)
            for i in range(6):
                w.append("stdout", {}, b"%d" % i)
            w.seal()
            counts[policy] = len(calls)
        monkeypatch.undo()
        assert (True, 1, 0) == (counts["batch"] >= 4, counts["seal"], counts["never"])


class TestBoundedMemory:
    """The writer never holds more than one batch (plus the event that filled it)."""

    def test_batches_close_when_full(self, tmp_path: Path) -> None:
        """Each batch on disk is closed by the event that took it to batch_max_bytes, never later."""
        path = tmp_path / "s.aos"
        limit = 10_000
        w = quiet_writer(path, batch_max_bytes=limit)
        sizes = [1, 500, 3000, 7000, 20_000, 9_999, 64, 0, 12_345, 2, 4000, 4000, 4000]
        for n in sizes * 3:
            w.append("stdout", {}, b"z" * n)
        w.seal()

        def weight(row: dict[str, Any]) -> int:
            return len(row["attrs"]) + len(row["data"] or b"") + 64

        with StreamFile(path) as f:
            batches = [raw.batch.to_pylist() for raw in f.batches()][:-1]
        before_last = [sum(weight(r) for r in rows[:-1]) for rows in batches]
        assert all(b < limit for b in before_last), before_last
        assert len(batches) > 5

    def test_pending_never_exceeds_a_batch(self, tmp_path: Path) -> None:
        """After every append the events held in memory weigh less than batch_max_bytes."""
        w = quiet_writer(tmp_path / "s.aos", batch_max_bytes=4096)
        held = []
        for i in range(300):
            w.append("stdout", {"i": i}, b"q" * (i * 7 % 1500))
            held.append(w._pending_bytes)
        w.seal()
        assert max(held) < 4096

    def test_batch_max_events(self, tmp_path: Path) -> None:
        """No batch holds more than batch_max_events events."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path, batch_max_events=5)
        for _ in range(23):
            w.append("stdout", {}, None)
        w.seal()
        with StreamFile(path) as f:
            rows = [raw.batch.num_rows for raw in f.batches()]
        assert [5, 5, 5, 5, 3, 1] == rows


class TestWriteFailure:
    """A full disk: the writer refuses with stream-write and keeps what it had written."""

    @staticmethod
    def _fail_writes(monkeypatch: pytest.MonkeyPatch, fd: int | None) -> None:
        real = os.write

        def enospc(f: int, b: Any) -> int:
            if f == fd:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(f, b)

        monkeypatch.setattr("aos.writer.os.write", enospc)

    def test_enospc(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A failed write raises StreamWrite; every later append, flush and seal refuses too."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path, batch_max_events=2)
        for i in range(4):
            w.append("stdout", {}, b"%d" % i)
        self._fail_writes(monkeypatch, w._fd)
        w.append("stdout", {}, b"4")
        with pytest.raises(StreamWrite) as info:
            w.append("stdout", {}, b"5")
        assert "stream-write" == info.value.name
        refused = []
        for action in (lambda: w.append("stdout", {}, b"6"), w.flush, w.seal):
            try:
                action()
            except StreamWrite:
                refused.append(True)
        w.close()
        monkeypatch.undo()
        contents = read_stream(path)
        assert ([True] * 3, [b"0", b"1", b"2", b"3"], None) == (
            refused,
            [e.data for e in contents.events],
            contents.damage,
        )

    def test_enospc_in_background_flush(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A write failure in the background flush thread makes the next append refuse."""
        path = tmp_path / "s.aos"
        w = StreamWriter(path, flush_interval=0.02, checkpoint_interval=float("inf"))
        self._fail_writes(monkeypatch, w._fd)
        w.append("stdout", {}, b"lost")
        deadline = time.monotonic() + 2
        while w.failure is None and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(StreamWrite):
            w.append("stdout", {}, b"after")
        w.close()

    def test_short_writes(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """When os.write writes only part of a buffer the writer writes the rest; the stream verifies."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path, batch_max_events=3)
        real = os.write
        fd = w._fd

        def short(f: int, b: Any) -> int:
            return real(f, bytes(b)[:7]) if f == fd else real(f, b)

        monkeypatch.setattr("aos.writer.os.write", short)
        for i in range(10):
            w.append("stdout", {}, b"%d" % i * 50)
        w.seal()
        monkeypatch.undo()
        assert 11 == verify_stream(path).events

    def test_failure_mid_batch_leaves_intact_prefix(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A disk that fills part way through a batch leaves a file whose complete batches verify up to the cut."""
        path = tmp_path / "s.aos"
        w = quiet_writer(path, batch_max_events=3)
        for i in range(6):
            w.append("stdout", {}, b"%d" % i)
        real = os.write
        fd = w._fd
        state = {"left": 100}

        def filling(f: int, b: Any) -> int:
            if f != fd:
                return real(f, b)
            if state["left"] <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n = real(f, bytes(b)[: state["left"]])
            state["left"] -= n
            return n

        monkeypatch.setattr("aos.writer.os.write", filling)
        w.append("stdout", {}, b"6")
        w.append("stdout", {}, b"7")
        with pytest.raises(StreamWrite):
            w.append("stdout", {}, b"8")
        w.close()
        monkeypatch.undo()
        with pytest.raises(StreamWrite):
            w.append("stdout", {}, b"9")
        from aos.verify import refusal_of

        exc = refusal_of(path)
        assert ("stream-truncated", True) == (exc.name if exc else None, "last intact seq 5" in str(exc))
