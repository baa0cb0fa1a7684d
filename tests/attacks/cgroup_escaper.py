"""A hostile recorded command run as root: it writes itself out of its cgroup, then hops pids (known bad).

Run as the recorded command (``alpha observe record -- python3 cgroup_escaper.py SECONDS MARK
HOPPERS``). It ignores SIGTERM, SIGHUP and SIGINT, forks once and exits 0 at once (so the
recorded command ends); the child writes its pid to the ``cgroup.procs`` of the cgroup above
its own (the recorder's: root may), calls ``setsid``, forks into HOPPERS processes, and each,
for SECONDS, loops ``fork()`` while each parent ``_exit(0)``: outside the cgroup that the
recorder kills as a whole, with pids that change all the time (and a list of the recorder's
children that changes while it is read), so only a sweep of the recorder's tree that cannot
be slipped past finds them.

When SECONDS are over, each survivor writes its pid and the time to MARK (the test's proof
that it outlived the recording, when that is after the recorder exited).
"""

from __future__ import annotations

import os
import signal
import sys
import time


def parent_cgroup() -> str:
    """The directory of the cgroup above this process's own (cgroup v2, wherever it is mounted)."""
    with open("/proc/self/cgroup", encoding="utf-8") as fh:
        own = next(line[3:].strip() for line in fh if line.startswith("0::"))
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                root, mountpoint = left.split()[3], left.split()[4]
                rel = own[len(root.rstrip("/")) :].lstrip("/")
                return os.path.dirname(os.path.join(mountpoint, rel))
    raise SystemExit("no cgroup2 mount")


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0
    mark = sys.argv[2] if len(sys.argv) > 2 else ""
    hoppers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    above = parent_cgroup()
    if os.fork():
        os._exit(0)  # the recorded command is done; its child lives on
    with open(os.path.join(above, "cgroup.procs"), "w") as fh:
        fh.write(f"{os.getpid()}\n")  # out of the command's cgroup: what it forks from now on is too
    os.setsid()
    for fd in (0, 1, 2):  # hold none of the recorder's pipes: nothing to wait for
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, fd)
        os.close(devnull)
    deadline = time.monotonic() + seconds
    for _ in range(hoppers - 1):
        if not os.fork():
            break
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
    os._exit(0)


if __name__ == "__main__":
    main()
