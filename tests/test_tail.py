"""``alpha observe tail``: follow a stream while it is written, stop at the seal."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from recorder_util import ALPHA, alpha, events, output, record


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
