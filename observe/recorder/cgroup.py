"""A cgroup v2 of the command's own: found, made, listed, frozen, killed and removed.

The recorder makes ``alpha-observe-<stream id>`` below its own cgroup (the
``0::`` line of ``/proc/self/cgroup``, under the cgroup2 mount that
``/proc/self/mountinfo`` names, wherever it is mounted: ``/sys/fs/cgroup``, or
``/sys/fs/cgroup/unified`` on a hybrid system). That needs write access there:
root, or a subtree delegated to the recorder's user. Every process forked inside
stays inside, whatever it does to its session, process group or parent, unless
it writes itself out (which needs the same write access); ``cgroup.kill``
(Linux 5.14) ends all of them at once, also those forking meanwhile, and
``cgroup.freeze`` (Linux 5.2) stops them all first, so the list of what was
ended is exact.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass

from observe.recorder.proctree import info

__all__ = ["Cgroup", "CgroupUnavailable", "make_cgroup"]

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class CgroupUnavailable(Exception):
    """No cgroup v2 of its own can be made here (the message says why)."""


def _unescape(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _own_directory() -> tuple[str, str]:
    """``(directory, path)``: this process's cgroup v2 directory and its path as /proc/self/cgroup names it."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise CgroupUnavailable(f"cannot read /proc/self/cgroup: {exc.strerror or exc}") from None
    paths = [line[3:] for line in lines if line.startswith("0::")]
    if not paths:
        raise CgroupUnavailable("no cgroup v2 hierarchy in /proc/self/cgroup (cgroup v1 only)")
    own = paths[0]
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            mounts = fh.read().splitlines()
    except OSError as exc:
        raise CgroupUnavailable(f"cannot read /proc/self/mountinfo: {exc.strerror or exc}") from None
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail or tail[0] != "cgroup2":
            continue
        root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        if own != root and not own.startswith(root.rstrip("/") + "/"):
            continue  # this mount shows another part of the hierarchy
        rel = own[len(root.rstrip("/")) :].lstrip("/")
        directory = os.path.join(mountpoint, rel) if rel else mountpoint
        if os.path.isdir(directory):
            return directory, own
    raise CgroupUnavailable(f"the recorder's cgroup {own} is under no cgroup2 mount it can see")


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as fh:
        return fh.read()


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


@dataclass
class Cgroup:
    """A cgroup v2 directory made for one recording, and the recorder's own cgroup it sits in."""

    directory: str
    path: str  # as /proc/PID/cgroup names it
    parent: str  # the recorder's own cgroup directory (where it goes back to)
    can_kill: bool  # cgroup.kill exists (else: freeze, SIGKILL every member, thaw)

    def enter(self) -> None:
        """Move this process (all its threads) into the cgroup: what it forks from now on is inside."""
        _write(os.path.join(self.directory, "cgroup.procs"), "0")

    def leave(self) -> None:
        """Move this process back to its own cgroup."""
        _write(os.path.join(self.parent, "cgroup.procs"), "0")

    def add(self, pid: int) -> None:
        """Move the running process ``pid`` into the cgroup (what it forked before stays where it is)."""
        _write(os.path.join(self.directory, "cgroup.procs"), str(pid))

    def members(self) -> list[int]:
        """Every process in the cgroup or a cgroup the command made below it, in order."""
        pids: set[int] = set()
        for here, _dirs, _files in os.walk(self.directory):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in _read(os.path.join(here, "cgroup.procs")).split())
        return sorted(pids)

    def _event(self, key: str, unknown: bool) -> bool:
        """A flag of ``cgroup.events``; ``unknown`` when it cannot be read (False once the cgroup is gone)."""
        try:
            text = _read(os.path.join(self.directory, "cgroup.events"))
        except FileNotFoundError:
            return False
        except OSError:
            return unknown
        return f"{key} 1" in text.splitlines()

    @property
    def populated(self) -> bool:
        """Whether a live process is still in the cgroup or below it (zombies do not count; unknown counts)."""
        return self._event("populated", True)

    def freeze(self, timeout: float) -> bool:
        """Stop every member (they cannot fork once frozen); True when the kernel says all are frozen in time."""
        try:
            _write(os.path.join(self.directory, "cgroup.freeze"), "1")
        except OSError:
            return False
        deadline = time.monotonic() + timeout
        while not self._event("frozen", False):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    def thaw(self) -> None:
        with contextlib.suppress(OSError):
            _write(os.path.join(self.directory, "cgroup.freeze"), "0")

    def kill(self) -> None:
        """SIGKILL every member at once (``cgroup.kill``), or each member, frozen, then thawed."""
        if self.can_kill:
            with contextlib.suppress(OSError):
                _write(os.path.join(self.directory, "cgroup.kill"), "1")
                return
        import signal

        for pid in self.members():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # a frozen task still dies of SIGKILL
        self.thaw()

    def remove(self, timeout: float = 2.0) -> bool:
        """Remove the cgroup (and any the command made below it) once empty; True when it is gone."""
        deadline = time.monotonic() + timeout
        while True:
            dirs = [here for here, _d, _f in os.walk(self.directory, topdown=False)]
            try:
                for here in dirs:
                    os.rmdir(here)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.01)


#: An empty ``alpha-observe-*`` cgroup older than this many seconds was left by a recorder that was killed
#: (SIGKILL ends nothing): the next recording beside it removes it, at once where the cgroup names its
#: recorder (``OWNER``) and that recorder is gone.
STALE_SECONDS = 600.0
PREFIX = "alpha-observe-"
#: The extended attribute of a recording's cgroup that names the recorder that made it: ``PID START NS``
#: (its start in clock ticks since boot, which tells a pid from its reuse, and its PID namespace, in which
#: the pid means something). Where the kernel keeps no such attribute on cgroups (before Linux 5.7), or
#: the recorder ran in another PID namespace, the age alone tells a left cgroup.
OWNER = "user.alpha-observe.recorder"


def _identity(pid: int) -> str | None:
    """``PID START NS`` of a running process, or None when it is gone."""
    proc = info(pid, with_argv=False)
    try:
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    return None if proc is None else f"{pid} {proc.start} {namespace}"


def _owner_gone(directory: str) -> bool:
    """Whether the cgroup names its recorder, of this PID namespace, and that recorder no longer runs."""
    try:
        owner = os.getxattr(directory, OWNER, follow_symlinks=False).decode("ascii")
        pid, _start, namespace = owner.split(" ")
        if namespace != os.readlink("/proc/self/ns/pid"):
            return False
        return _identity(int(pid)) != owner
    except (OSError, ValueError, UnicodeDecodeError):
        return False


def _remove_stale(parent: str) -> None:
    """Remove the empty cgroups killed recorders left beside ours: one whose recorder is gone, or one older
    than STALE_SECONDS (a cgroup in use is never empty that long; a populated one cannot be removed)."""
    now = time.time()
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                if _owner_gone(entry.path) or now - entry.stat(follow_symlinks=False).st_mtime > STALE_SECONDS:
                    os.rmdir(entry.path)


def make_cgroup(name: str) -> Cgroup:
    """Make the cgroup ``name`` below the recorder's own and check it can be ended as a whole.

    Raises :class:`CgroupUnavailable` (saying why) where it cannot: no cgroup v2, no
    write access to the recorder's cgroup, or a kernel with neither ``cgroup.kill``
    nor ``cgroup.freeze``.
    """
    parent, own = _own_directory()
    _remove_stale(parent)
    safe = _SAFE.sub("-", name)
    directory = os.path.join(parent, safe)
    try:
        os.mkdir(directory)
    except OSError as exc:
        raise CgroupUnavailable(f"cannot make a cgroup below {own}: {exc.strerror or exc}") from None
    can_kill = os.path.exists(os.path.join(directory, "cgroup.kill"))
    if not can_kill and not os.path.exists(os.path.join(directory, "cgroup.freeze")):
        with contextlib.suppress(OSError):
            os.rmdir(directory)
        raise CgroupUnavailable("the kernel has neither cgroup.kill nor cgroup.freeze (Linux 5.2 or later)")
    for control in ("cgroup.procs", os.path.join("..", "cgroup.procs")):
        if not os.access(os.path.join(directory, control), os.W_OK):
            with contextlib.suppress(OSError):
                os.rmdir(directory)
            raise CgroupUnavailable(f"no write access to {os.path.normpath(os.path.join(directory, control))}")
    with contextlib.suppress(OSError):  # who made it: a cgroup its killed recorder left is removed at once
        os.setxattr(directory, OWNER, str(_identity(os.getpid())).encode("ascii"))
    path = own.rstrip("/") + "/" + safe
    return Cgroup(directory, path, parent, can_kill)
