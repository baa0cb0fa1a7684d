"""The recorder at speed: a flood gathered into large events (quiet output never held), and its
memory settings kept to itself."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from observe.recorder import capture
from observe.recorder.capture import Capture, _Source
from observe.secrets.masking import Masker, SecretSet
from tests.helpers.recorder import events, output, record
from tests.helpers.run import ALPHA, child_env

PY = sys.executable


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    return r, w


def _later(delay: float, fd: int, data: bytes, *, close: bool) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        os.write(fd, data)
        if close:
            os.close(fd)

    t = threading.Thread(target=run)
    t.start()
    return t


def _gather(fd: int) -> tuple[bytes, bool | None]:
    src = _Source(fd, "stdout", Masker(SecretSet()))
    return Capture._gather(SimpleNamespace(sink=None), src)  # type: ignore[arg-type]


class TestGather:
    def test_a_flood_is_one_event_across_pipe_refills(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Once a pass has a flood's worth, a pipe that runs dry is waited for: both writes make one chunk."""
        monkeypatch.setattr(capture, "COALESCE_S", 60.0)
        r, w = _pipe()
        first, second = b"a" * capture.FLOOD, b"b" * 1000
        os.write(w, first)
        writer = _later(0.2, w, second, close=True)
        try:
            assert (first + second, None) == _gather(r)
        finally:
            writer.join()
            os.close(r)

    def test_quiet_output_is_not_held(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Less than a flood goes out at once, however long the coalescing window: the echo stays live."""
        monkeypatch.setattr(capture, "COALESCE_S", 60.0)
        r, w = _pipe()
        os.write(w, b"a prompt> ")
        writer = _later(0.5, w, b"later", close=False)
        try:
            assert (b"a prompt> ", False) == _gather(r)
        finally:
            writer.join()
            os.close(w)
            os.close(r)

    def test_never_more_than_one_read_size(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A chunk stops at READ_SIZE and says more may be waiting."""
        monkeypatch.setattr(capture, "READ_SIZE", 4096)
        r, w = _pipe()
        os.write(w, b"x" * 10_000)
        try:
            assert (b"x" * 4096, True) == _gather(r)
        finally:
            os.close(w)
            os.close(r)


def test_many_small_writes_are_recorded_exactly_in_few_events(tmp_path: Path) -> None:
    """20,000 small writes (a flood) are recorded byte for byte, in far fewer events than writes."""
    script = "import os\nfor i in range(20000): os.write(1, b'%05d line of a flood\\n' % i)\n"
    proc, path = record(tmp_path, [PY, "-c", script])
    assert 0 == proc.returncode, proc.stderr
    expected = b"".join(b"%05d line of a flood\n" % i for i in range(20000))
    evs = events(path)
    assert expected == output(evs, "stdout")
    assert expected == proc.stdout
    assert len([e for e in evs if e.kind == "stdout"]) < 20000


def test_a_flood_then_a_pause_is_echoed_whole(tmp_path: Path) -> None:
    """The end of a flood reaches the terminal while the command still runs (it is held a moment at most)."""
    import select

    script = "import os, time\nos.write(1, b'x' * 300000 + b'END')\ntime.sleep(60)\n"
    proc = subprocess.Popen(
        [ALPHA, "observe", "record", "--out", str(tmp_path / "flood.aos"), "--", PY, "-c", script],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        seen = b""
        deadline = time.monotonic() + 30
        while not seen.endswith(b"END") and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                seen += os.read(proc.stdout.fileno(), 1 << 20)
        assert b"x" * 300000 + b"END" == seen
        assert proc.poll() is None  # the command is still sleeping
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("outer", [None, "jemalloc"])
def test_the_allocator_choice_stays_in_the_recorder(tmp_path: Path, outer: str | None) -> None:
    """The recorder picks Arrow's system allocator for itself: the command's environment (and the recorded
    one) is the recorder's own, with ARROW_DEFAULT_MEMORY_POOL as it was (absent or the user's value)."""
    env = child_env({"ARROW_DEFAULT_MEMORY_POOL": None})
    if outer is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = outer
    script = "import os; print(repr(os.environ.get('ARROW_DEFAULT_MEMORY_POOL')))"
    proc = subprocess.run(
        [ALPHA, "observe", "record", "--out", str(tmp_path / "env.aos"), "--", PY, "-c", script],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr
    assert repr(outer).encode() + b"\n" == proc.stdout
    opened = events(tmp_path / "env.aos")[0]
    assert "stream.open" == opened.kind
    assert (outer is not None) == ("ARROW_DEFAULT_MEMORY_POOL" in opened.attrs["env"])


@pytest.mark.parametrize(
    ("value", "expected"), [("", None), ("3", 3), ("1", 1), ("64", 64), ("0", None), ("2.5", None), ("many", None)]
)
def test_encoders_tuning_variable(monkeypatch: pytest.MonkeyPatch, value: str, expected: int | None) -> None:
    """ALPHA_OBSERVE_ENCODERS picks the compressing threads (1 to 64); anything else keeps the per-core default."""
    from observe.recorder.tuning import encoders

    monkeypatch.setenv("ALPHA_OBSERVE_ENCODERS", value)
    assert expected == encoders()


def test_one_encoder_records_the_same_output(tmp_path: Path) -> None:
    """A single compressing thread (ALPHA_OBSERVE_ENCODERS=1) records the same bytes, sealed and verified."""
    from aos.verify import verify_stream

    blob = os.urandom(3 << 20)
    (tmp_path / "blob").write_bytes(blob)
    proc, path = record(tmp_path, ["cat", str(tmp_path / "blob")], env={"ALPHA_OBSERVE_ENCODERS": "1"})
    assert 0 == proc.returncode, proc.stderr
    assert blob == output(events(path), "stdout")
    verify_stream(path)
