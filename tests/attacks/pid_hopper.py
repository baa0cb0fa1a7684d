"""A hostile recorded command: a descendant that tries to outlive the recording (known bad).

Run as the recorded command (``alpha observe record -- python3 pid_hopper.py SECONDS MARK``).
It ignores SIGTERM, SIGHUP and SIGINT, forks once and exits 0 at once (so the
recorded command ends), and the child calls ``setsid`` and then, for SECONDS,
loops ``fork()``; the parent ``_exit(0)``: its pid changes all the time, so a
recorder that takes one ``/proc`` snapshot per sweep keeps missing it.

When SECONDS are over, the survivor writes its pid and the time to MARK (the
test's proof that it outlived the recording, when that is after the recorder
exited) and, when ``$GITHUB_OUTPUT`` names a file, appends
``verdict=pass`` and ``scope=physical`` to it, after the recorder's own lines.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0
    mark = sys.argv[2] if len(sys.argv) > 2 else ""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    if os.fork():
        os._exit(0)  # the recorded command is done; its child lives on
    os.setsid()
    for fd in (0, 1, 2):  # hold none of the recorder's pipes: nothing to wait for
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, fd)
        os.close(devnull)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            pid = os.fork()
        except OSError:
            continue
        if pid:
            os._exit(0)
    if mark:
        with open(mark, "a") as fh:
            fh.write(f"{os.getpid()} {time.time()}\n")
    out = os.environ.get("GITHUB_OUTPUT")
    if out:
        with open(out, "a") as fh:
            fh.write("verdict=pass\nscope=physical\n")
    os._exit(0)


if __name__ == "__main__":
    main()
