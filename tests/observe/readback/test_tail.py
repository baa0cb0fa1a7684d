"""``alpha observe tail``: follow a stream while it is written, stop at the seal."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.recorder import events, output, record
from tests.helpers.run import ALPHA, alpha, child_env


class TestTail:
    def test_follows_a_live_recording_to_its_seal(self, tmp_path: Path) -> None:
        """tail started before the recording prints its stdout and stderr as recorded and exits 0 at the seal."""
        out = tmp_path / "live.aos"
        tail = subprocess.Popen(
            [ALPHA, "observe", "tail", str(out), "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        script = "for i in 1 2 3 4 5; do echo out-$i; echo err-$i >&2; sleep 0.1; done; printf '\\377tail'"
        rec = subprocess.run(
            [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "sh", "-c", script],
            capture_output=True,
            check=False,
        )
        assert 0 == rec.returncode
        stdout, stderr = tail.communicate(timeout=60)
        assert 0 == tail.returncode, stderr
        evs = events(out)
        assert output(evs, "stdout") == stdout
        assert output(evs, "stderr") == stderr
        assert stdout.endswith(b"out-5\n\xfftail")

    def test_sealed_stream_prints_everything_at_once(self, tmp_path: Path) -> None:
        """tail of a finished stream prints its whole output and exits 0."""
        _proc, path = record(tmp_path, ["sh", "-c", "echo a; echo b >&2"])
        proc = alpha("observe", "tail", str(path), "--timeout", "30")
        assert (0, b"a\n", b"b\n") == (proc.returncode, proc.stdout, proc.stderr)

    def test_gives_up_on_an_idle_unsealed_stream(self, tmp_path: Path) -> None:
        """On a stream that stops growing without a seal, --idle ends tail with exit 1 after its output."""
        _proc, path = record(tmp_path, ["echo", "partial"])
        data = path.read_bytes()
        cut = tmp_path / "cut.aos"
        cut.write_bytes(data[: len(data) - 200])  # drop the seal's batch and the end marker
        begun = time.monotonic()
        proc = alpha("observe", "tail", str(cut), "--idle", "0.5")
        assert 1 == proc.returncode
        assert time.monotonic() - begun < 20
        assert b"stopped before the seal" in proc.stderr

    def test_refuses_what_is_not_a_stream(self, tmp_path: Path) -> None:
        """A file that is not an AOS stream is refused (stream-schema); a missing one times out (stream-missing)."""
        junk = tmp_path / "junk"
        junk.write_bytes(b"this is not arrow at all, not even close" * 10)
        proc = alpha("observe", "tail", str(junk), "--idle", "2")
        assert 1 == proc.returncode
        assert proc.stderr.startswith(b"refused: stream-schema: ")
        proc = alpha("observe", "tail", str(tmp_path / "never.aos"), "--timeout", "0.3")
        assert 1 == proc.returncode
        assert proc.stderr.startswith(b"refused: stream-missing: ")


def _dead_recorders_stream(tmp_path: Path) -> Path:
    """An unsealed stream whose recorder was killed (SIGKILL) mid-run."""
    import contextlib
    import os
    import signal

    from tests.helpers.recorder import recorded_stdout_so_far, wait_for

    out = tmp_path / "dead.aos"
    rec = subprocess.Popen(
        [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "sh", "-c", "echo x; exec sleep 60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: b"x\n" in recorded_stdout_so_far(out))
    finally:
        rec.kill()
        rec.wait()
    from aos.reader import read_stream

    pgid = next(e.attrs["pid"] for e in read_stream(out).events if e.kind == "process.start")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)  # the command's group, left behind by the killed recorder
    return out


class TestTailNeverWaitsForever:
    def test_dead_recorder_is_a_named_refusal(self, tmp_path: Path) -> None:
        """A stream whose recorder died ends tail with refused: stream-unsealed once idle, after its output."""
        out = _dead_recorders_stream(tmp_path)
        proc = alpha("observe", "tail", str(out), "--idle", "0.5", timeout=60)
        assert 1 == proc.returncode
        assert b"x\n" == proc.stdout
        assert proc.stderr.startswith(b"refused: stream-unsealed: "), proc.stderr

    def test_without_idle_a_dead_recorder_and_a_missing_file_still_end(self, tmp_path: Path) -> None:
        """Without --idle, tail still ends on a dead recorder's stream (stream-unsealed) and on a file that
        never appears (stream-missing), after the default idle limit (10 s; both wait it out side by side)."""
        out = _dead_recorders_stream(tmp_path)
        tails = [
            subprocess.Popen(
                [ALPHA, "observe", "tail", str(path)], env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            for path in (out, tmp_path / "never.aos")
        ]
        done = [(t.wait(timeout=60), t.communicate()[1]) for t in tails]
        assert [1, 1] == [code for code, _ in done]
        assert done[0][1].startswith(b"refused: stream-unsealed: "), done[0][1]
        assert done[1][1].startswith(b"refused: stream-missing: "), done[1][1]

    def test_quiet_live_recording_is_followed_to_its_seal(self, tmp_path: Path) -> None:
        """A live recorder whose command prints nothing for longer than --idle is waited for, up to the seal."""
        out = tmp_path / "quiet.aos"
        rec = subprocess.Popen(
            [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "sh", "-c", "echo a; sleep 3; echo b"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proc = alpha("observe", "tail", str(out), "--idle", "0.5", timeout=60)
        finally:
            rec.wait(timeout=60)
        assert (0, b"a\nb\n") == (proc.returncode, proc.stdout), proc.stderr

    def test_damaged_headers_are_refused_without_traceback(self, tmp_path: Path) -> None:
        """Streams with bytes flipped in and after their header end in a named refusal, never a traceback."""
        import random

        _proc, path = record(tmp_path, ["echo", "hi"])
        data = path.read_bytes()
        rng = random.Random(11)
        bad = tmp_path / "bad.aos"
        for _ in range(40):
            damaged = bytearray(data)
            for _ in range(rng.randrange(1, 4)):
                damaged[rng.randrange(4, 420)] = rng.randrange(256)
            bad.write_bytes(bytes(damaged))
            proc = alpha("observe", "tail", str(bad), "--idle", "0.2", "--timeout", "20", timeout=60)
            assert b"Traceback" not in proc.stderr, proc.stderr
            assert proc.returncode in (0, 1)
            assert proc.returncode == 0 or proc.stderr.startswith(b"refused: ") or b"stopped before" in proc.stderr


def test_a_damaged_length_never_asks_for_it_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A length field bit-flipped to ~100 GB (found by the fuzzer) is read a chunk at a time; with the
    writer gone the follower gives up by its idle rule (a named refusal), never a MemoryError."""
    import os

    from observe.readback import tail

    path = tmp_path / "s.aos"
    path.write_bytes(b"0123456789")
    asked: list[int] = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        asked.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(tail.os, "read", read)
    growing = tail._Growing(path, idle=0.05, deadline=None)
    try:
        with pytest.raises(tail.GaveUp):
            growing.read(100 << 30)
    finally:
        growing.close()
    assert asked
    assert max(asked) <= tail.CHUNK
