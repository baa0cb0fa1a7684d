"""What a GPU process is, read by the recorder from what the kernel says, never from what the process says.

For each GPU process the sampler records:

- ``exe``: the SHA-256 of ``/proc/PID/exe``, the file the kernel executed (opened
  through that link, so a renamed, moved or deleted copy is still its bytes), and
  its path for display. A process cannot change it without ``CAP_SYS_RESOURCE``
  (``prctl(PR_SET_MM_EXE_FILE)``) short of exec'ing another file, which the next
  observation sees. ``exec -a NAME`` and any rewrite of argv change nothing here.
- ``script``: only for an interpreter (the basename of the exe's path matches
  ``INTERPRETERS``): the script file it holds open, read through the open
  descriptor (``/proc/PID/fd/N``), not by name. argv only chooses which held
  file is the script: the first argv word after ``argv[0]`` that names (same
  device and inode, resolved against ``/proc/PID/cwd``) a regular file the
  process holds open. bash holds its script on fd 255 and dash on a high fd;
  python closes its script once compiled, so a python program is identified
  only if it holds its own file open (the reference lane's role executables do).
  What this establishes is weaker than ``exe``: a process of the tree that runs
  code of its own can open a role's file and name it in its argv. docs/TRUST.md
  says so.

Digests are cached per file (device, inode, size, modification and change
times), so the interpreter every role runs on is hashed once; the process is
read again at every observation (an exec keeps the pid and its start time).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Any

__all__ = ["INTERPRETERS", "Identities", "Identity"]

#: Executables whose program is a script file (the basename of ``/proc/PID/exe``'s target).
INTERPRETERS = re.compile(
    r"^(?:python[0-9.]*|pypy[0-9.]*|bash|dash|sh|zsh|ksh|mksh|busybox|perl[0-9.]*|ruby[0-9.]*|node|Rscript)$"
)
#: The most open descriptors looked at per process (a process holding more is not searched further).
MAX_FDS = 1024

_FileKey = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class Identity:
    """One process, as the recorder read it: ``exe`` and (for an interpreter) ``script``, or why not."""

    exe: dict[str, Any] | None
    script: dict[str, Any] | None

    def attrs(self) -> dict[str, Any]:
        return {"exe": self.exe, "script": self.script}


def _key(st: os.stat_result) -> _FileKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Identities:
    """Reads process identities; keeps the digest of each file it hashed."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._digests: dict[_FileKey, str] = {}

    def _digest_fd(self, fd: int) -> str:
        import hashlib  # OpenSSL's hashes: loaded when a file is hashed, not at start-up

        st = os.fstat(fd)
        key = _key(st)
        found = self._digests.get(key)
        if found is None:
            digest = hashlib.sha256()
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
            found = self._digests[key] = digest.hexdigest()
        return found

    def _file(self, link: str) -> dict[str, Any]:
        """``{"path", "sha256"}`` of the file behind ``/proc/PID/exe`` or ``/proc/PID/fd/N``, or ``{"error"}``."""
        try:
            path = os.readlink(link)
        except OSError as exc:
            return {"path": None, "sha256": None, "error": exc.strerror or str(exc)}
        try:
            fd = os.open(link, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            return {"path": path, "sha256": None, "error": exc.strerror or str(exc)}
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {"path": path, "sha256": None, "error": "not a regular file"}
            return {"path": path, "sha256": self._digest_fd(fd)}
        except OSError as exc:
            return {"path": path, "sha256": None, "error": exc.strerror or str(exc)}
        finally:
            os.close(fd)

    def read(self, pid: int, argv: list[str] | None) -> Identity:
        """The identity of ``pid`` now (``argv`` only picks which held file is an interpreter's script)."""
        base = f"{self.proc}/{pid}"
        exe = self._file(f"{base}/exe")
        script = None
        exe_path = exe.get("path")
        if exe.get("sha256") and isinstance(exe_path, str):
            name = os.path.basename(exe_path.removesuffix(" (deleted)"))
            if INTERPRETERS.match(name):
                script = self._script(base, argv)
        return Identity(exe=exe, script=script)

    def _script(self, base: str, argv: list[str] | None) -> dict[str, Any]:
        """The held file that an argv word names (an interpreter's script), or ``{"error"}``."""
        held: dict[tuple[int, int], str] = {}
        try:
            fds = os.listdir(f"{base}/fd")
        except OSError as exc:
            return {"path": None, "sha256": None, "error": f"cannot list its descriptors: {exc.strerror or exc}"}
        for name in fds[:MAX_FDS]:
            try:
                st = os.stat(f"{base}/fd/{name}")
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                held.setdefault((st.st_dev, st.st_ino), name)
        try:
            cwd = os.readlink(f"{base}/cwd")
        except OSError:
            cwd = None
        for word in (argv or [])[1:]:
            if not word or word.startswith("-"):
                continue
            path = word if os.path.isabs(word) or cwd is None else os.path.join(cwd, word)
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                continue
            fd = held.get((st.st_dev, st.st_ino))
            if fd is not None:
                found = self._file(f"{base}/fd/{fd}")
                found["fd"] = int(fd)
                return found
        return {"path": None, "sha256": None, "error": "it holds no file that its argv names open"}
