"""The fixtures' start retry (tests/helpers/eagain.py) on a real EAGAIN from fork: a process limit reached."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.eagain import retry_eagain
from tests.helpers.paths import ROOT
from tests.helpers.run import child_env

#: Runs as ``nobody`` with its process limit at 1 (itself): every fork fails with EAGAIN until ``start`` lifts
#: the limit on the try named by argv[1] (0: never). Prints the number of tries, or the error's name.
LIMITED = textwrap.dedent(
    """
    import os, resource, subprocess, sys
    from tests.helpers.eagain import retry_eagain
    lift = int(sys.argv[1])
    tries = []
    os.setgid(65534); os.setgroups([]); os.setuid(65534)
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    resource.setrlimit(resource.RLIMIT_NPROC, (1, hard))
    def start():
        tries.append(1)
        if len(tries) == lift:
            resource.setrlimit(resource.RLIMIT_NPROC, (hard, hard))
        return subprocess.Popen(["true"]).wait()
    try:
        retry_eagain(start, "a test process", attempts=3, pause_s=0.01)
        print("started after", len(tries))
    except OSError as exc:
        print(type(exc).__name__, exc.errno, "after", len(tries))
    """
)


def _limited(lift: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LIMITED, str(lift)],
        cwd=ROOT,
        env=child_env({"PYTHONPATH": str(ROOT)}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="becomes nobody to reach a process limit: root only")
class TestRealEagain:
    def test_a_transient_eagain_is_tried_again_and_said(self) -> None:
        """fork fails with EAGAIN twice, then the limit is lifted: the third try starts, and each retry is said."""
        done = _limited(3)
        assert "started after 3\n" == done.stdout, done.stderr
        said = [line for line in done.stderr.splitlines() if line.startswith("tests: starting a test process")]
        assert 2 == len(said), done.stderr
        assert "(attempt 3 of 3)" in said[-1]

    def test_a_lasting_eagain_gives_up_after_the_bound(self) -> None:
        """The limit never lifts: three tries, then the last EAGAIN itself is raised."""
        done = _limited(0)
        assert "BlockingIOError 11 after 3\n" == done.stdout, done.stderr


def test_any_other_error_is_raised_at_once() -> None:
    """A start that fails for another reason (no such program) is tried once."""
    tries: list[int] = []

    def start() -> None:
        tries.append(1)
        subprocess.run(["/nonexistent/program"], check=False)

    with pytest.raises(FileNotFoundError):
        retry_eagain(start, "a missing program")
    assert [1] == tries
