"""aos.ahead: the batches read one ahead on a second thread are StreamFile.batches()'s, with the same
damage and end-of-stream marker; closing the iterator early stops and joins its thread (issue 39)."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

from aos.ahead import batches_ahead
from aos.reader import StreamFile
from aos.refusals import Refusal
from aos.writer import StreamWriter

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def _walk(path: Path, ahead: bool) -> tuple[list[tuple[int, int, int]], str | None, int | None]:
    with StreamFile(path) as f:
        if ahead:
            with contextlib.closing(batches_ahead(f)) as batches:
                seen = [(raw.start, raw.end, raw.batch.num_rows) for raw in batches]
        else:
            seen = [(raw.start, raw.end, raw.batch.num_rows) for raw in f.batches()]
        damage = None if f.damage is None else f"{f.damage.name}: {f.damage}"
        return seen, damage, f.eos_at


@pytest.fixture(params=["thread", "small"])
def ahead_from(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Read ahead on a second thread (every file), or on the caller's (files under ``AHEAD_FROM``, issue 36)."""
    import aos.ahead

    monkeypatch.setattr(aos.ahead, "AHEAD_FROM", 0 if request.param == "thread" else 1 << 40)
    return str(request.param)


@pytest.mark.parametrize("asset", sorted(p.name for p in ASSETS.glob("*.aos")))
def test_the_same_batches_and_damage(asset: str, ahead_from: str) -> None:
    """Every test asset (intact, cut, forged): the same batches, the same damage, the same marker, on a second
    thread or on the caller's."""
    try:
        expected = _walk(ASSETS / asset, ahead=False)
    except Refusal:
        return  # refused when opened: there are no batches to read ahead
    assert expected == _walk(ASSETS / asset, ahead=True)


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "aos-read-ahead"]


def test_closed_early_the_thread_is_joined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped after the first batch of many: the second thread is gone when the iterator is closed."""
    import aos.ahead

    monkeypatch.setattr(aos.ahead, "AHEAD_FROM", 0)
    path = tmp_path / "s.aos"
    w = StreamWriter(path, batch_max_events=10)
    for i in range(200):
        w.append("stdout", {}, b"x" * 1000 + str(i).encode())
    w.seal()
    with StreamFile(path) as f:
        batches = batches_ahead(f)
        first = next(batches)
        assert first.batch.num_rows == 10
        assert _readers()  # it runs while the caller holds the first batch
        batches.close()
        assert not _readers()
    assert len(_walk(path, ahead=True)[0]) == len(_walk(path, ahead=False)[0]) > 20


def test_a_small_stream_is_read_on_the_callers_thread(tmp_path: Path) -> None:
    """A file under ``AHEAD_FROM`` starts no thread (issue 36); a larger one does."""
    from aos.ahead import AHEAD_FROM

    for name, size in (("small.aos", 2_000), ("large.aos", 2 * AHEAD_FROM)):
        w = StreamWriter(tmp_path / name, batch_max_events=10)
        for _ in range(size // 1_000):
            w.append("stdout", {}, os.urandom(1_000))
        w.seal()
    for name, threaded in (("small.aos", False), ("large.aos", True)):
        with StreamFile(tmp_path / name) as f, contextlib.closing(batches_ahead(f)) as batches:
            next(batches)
            assert threaded == bool(_readers()), name
