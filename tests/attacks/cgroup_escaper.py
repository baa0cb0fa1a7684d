"""A hostile recorded command run as root: it writes itself out of its cgroup, then hops pids (known bad).

Run as the recorded command (``alpha observe record -- python3 cgroup_escaper.py SECONDS MARK
HOPPERS``). It ignores SIGTERM, SIGHUP and SIGINT, forks once and exits 0 at once (so the
recorded command ends); the child writes its pid to the ``cgroup.procs`` of the cgroup above
its own (the recorder's: root may), calls ``setsid``, forks into HOPPERS processes, and each,
for SECONDS, loops ``fork()`` while each parent ``_exit(0)``: outside the cgroup that the
recorder kills as a whole, with pids that change all the time (and a list of the recorder's
children that changes while it is read), so only a sweep of the recorder's tree that cannot
be slipped past finds them.

With HOPPERS ``0``, the child does not hop: it starts a thread and ends its main thread
(``pthread_exit``), so that ``/proc`` shows it a zombie (``Z``) while its other thread runs on,
for SECONDS: a sweep that takes a zombie leader for a dead process passes it by.

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


def _state(pid: int) -> str:
    """What /proc/PID/stat says of ``pid``'s main thread ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    return raw[raw.rfind(b")") + 2 :].split()[0].decode()


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0
    mark = sys.argv[2] if len(sys.argv) > 2 else ""
    hoppers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    above = parent_cgroup()
    child = os.fork()
    if child:
        until = time.monotonic() + 10
        while hoppers == 0 and time.monotonic() < until and _state(child) not in ("Z", ""):
            time.sleep(0.005)  # the recorded command ends once its child shows as a zombie
        os._exit(0)  # the recorded command is done; its child lives on
    with open(os.path.join(above, "cgroup.procs"), "w") as fh:
        fh.write(f"{os.getpid()}\n")  # out of the command's cgroup: what it forks from now on is too
    os.setsid()
    for fd in (0, 1, 2):  # hold none of the recorder's pipes: nothing to wait for
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, fd)
        os.close(devnull)
    deadline = time.monotonic() + seconds
    if hoppers == 0:
        import ctypes
        import threading

        def survive() -> None:
            time.sleep(max(0.0, deadline - time.monotonic()))
            if mark:
                with open(mark, "a") as fh:
                    fh.write(f"{os.getpid()} {time.time()}\n")
            os._exit(0)

        threading.Thread(target=survive).start()
        ctypes.CDLL(None).pthread_exit(None)  # the main thread ends; ctypes let go of the GIL for the call
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
