"""Reading and verifying a stream holds a batch's worth of the file, not all of it (issue 16, issue 14's
big-stream report): the mapped pages of the batches already read are given back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aos.writer import StreamWriter

MIB = 1 << 20

#: Verify the stream named by argv[1], in a process of its own.
VERIFY = "import sys; from aos.verify import verify_stream; verify_stream(sys.argv[1])"


def _stream(path: Path, mib: int) -> Path:
    """A sealed stream of ``mib`` MiB of incompressible output (the file is as big as the data)."""
    with StreamWriter(path) as w:
        w.append("process.start", {"argv": ["bench"], "pid": 1})
        for _ in range(mib):
            w.append("stdout", data=os.urandom(MIB))
        w.append("process.exit", {"exit_code": 0})
        w.seal()
    return path


def _peak_rss_mib(stream: Path) -> float:
    """The peak resident set (``ru_maxrss``: file pages mapped in count too) of a process verifying it."""
    proc = subprocess.Popen([sys.executable, "-c", VERIFY, str(stream)])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert 0 == proc.returncode
    return usage.ru_maxrss / 1024


def test_verifying_a_big_stream_does_not_keep_the_file_resident(tmp_path: Path) -> None:
    small = _peak_rss_mib(_stream(tmp_path / "small.aos", 4))
    big_path = _stream(tmp_path / "big.aos", 160)
    assert big_path.stat().st_size > 160 * MIB
    big = _peak_rss_mib(big_path)
    # Before the pages were given back, the whole 160 MiB file was resident at the end (a last pass
    # hashed it all): the peak grew by the file's size. Now it grows by a few batches at most.
    assert big - small < 64, (small, big)
