"""Starting the recorded command (its own process group, pipes or a pseudo-terminal), and ending its tree.

A command that cannot start is not an exception for the caller: :func:`spawn`
returns a :class:`SpawnFailure` carrying the exit code the GNU conventions give
it (127 not found, 126 cannot execute).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from observe.channel.protocol import ENV_STDERR_ID, ENV_STDOUT_ID
from observe.exits import Exit

__all__ = ["SpawnFailure", "Spawned", "exit_status", "signal_name", "spawn", "spawn_step"]

_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


@dataclass
class Spawned:
    """A running command. ``err_fd`` is None under a pseudo-terminal (one stream)."""

    proc: subprocess.Popen[bytes]
    out_fd: int
    err_fd: int | None
    out_id: str
    err_id: str
    give_back_terminal: Callable[[], None] | None = None
    #: Under ``--pty``: the recorder copies its stdin to the terminal (``out_fd``).
    forward_stdin: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass(frozen=True)
class SpawnFailure:
    """The command never ran."""

    exit_code: int
    error: str


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``SIG<n>`` for numbers Python has no name for."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def exit_status(status: int) -> tuple[int | None, str | None, int]:
    """``(exit_code, signal_name, shell_code)`` from a ``wait`` status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return None, signal_name(sig), 128 + sig
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else Exit.RECORDER
    return code, None, code


def _identity(fd: int) -> str:
    st = os.fstat(fd)
    return f"{st.st_dev}:{st.st_ino}"


def _pipe(size: int) -> tuple[int, int]:
    r, w = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError):  # a bigger pipe means fewer wake-ups when output floods
        fcntl.fcntl(r, _F_SETPIPE_SZ, size)
    return r, w


def _failure(argv: Sequence[str], exc: OSError) -> SpawnFailure:
    what = argv[0] if argv else ""
    if isinstance(exc, FileNotFoundError) or exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return SpawnFailure(127, f"{what}: command not found ({exc.strerror or exc})")
    return SpawnFailure(126, f"{what}: cannot execute ({exc.strerror or exc})")


def spawn(
    argv: Sequence[str], env: Mapping[str, str], *, pty: bool = False, pipe_size: int = 1 << 20
) -> Spawned | SpawnFailure:
    """Start ``argv`` in a process group of its own, its output going to fresh pipes.

    The command's environment also gets ``AOS_STDOUT_ID``/``AOS_STDERR_ID``, the
    identities of those pipes, so ``alpha observe step`` can tell whether its own
    output goes straight to the recorder.
    """
    if not argv:
        return SpawnFailure(127, "no command given")
    if pty:
        return _spawn_pty(argv, env)
    out_r, out_w = _pipe(pipe_size)
    err_r, err_w = _pipe(pipe_size)
    out_id, err_id = _identity(out_w), _identity(err_w)
    env = {**env, ENV_STDOUT_ID: out_id, ENV_STDERR_ID: err_id}
    try:
        proc = subprocess.Popen(list(argv), stdout=out_w, stderr=err_w, env=env, process_group=0, close_fds=True)
    except OSError as exc:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        return _failure(argv, exc)
    except ValueError as exc:  # embedded NUL and the like
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        return SpawnFailure(126, f"cannot execute: {exc}")
    os.close(out_w)
    os.close(err_w)
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
    return Spawned(proc, out_r, err_r, out_id, err_id, _hand_terminal(proc.pid))


def spawn_step(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str,
    stdin: int | None,
    echo: tuple[bool, bool],
    pipe_size: int = 1 << 16,
) -> Spawned | SpawnFailure:
    """Start a step's command for ``alpha observe step``: the recorder's own child, in a session of its own.

    Its stdin is ``stdin`` (the step client's, passed over the control socket; /dev/null
    when None), its stdout and stderr fresh pipes the recorder reads. A session of its
    own (so a process group of its own, and no controlling terminal it could be stopped
    by: the recorder's terminal is not the client's foreground). ``AOS_STDOUT_ID`` and
    ``AOS_STDERR_ID`` name those pipes where the recorder echoes them (``echo``), else
    are empty, as for the command itself.
    """
    if not argv:
        return SpawnFailure(127, "no command given")
    out_r, out_w = _pipe(pipe_size)
    err_r, err_w = _pipe(pipe_size)
    out_id, err_id = _identity(out_w), _identity(err_w)
    env = {**env, ENV_STDOUT_ID: out_id if echo[0] else "", ENV_STDERR_ID: err_id if echo[1] else ""}
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL if stdin is None else stdin,
            stdout=out_w,
            stderr=err_w,
            env=env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        if exc.filename == cwd and exc.filename != (argv[0] if argv else None):
            return SpawnFailure(126, f"{argv[0]}: cannot execute in {cwd} ({exc.strerror or exc})")
        return _failure(argv, exc)
    except (ValueError, subprocess.SubprocessError) as exc:  # embedded NUL and the like
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        return SpawnFailure(126, f"cannot execute: {exc}")
    os.close(out_w)
    os.close(err_w)
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
    return Spawned(proc, out_r, err_r, out_id, err_id)


def _hand_terminal(pgid: int) -> Callable[[], None] | None:
    """Make the command's process group the terminal's foreground group, if ours is.

    The command runs in a group of its own (so a timeout can signal all of it);
    without this, a command reading the terminal would be stopped by SIGTTIN and
    the recording would hang. Returns the function that hands the terminal back.
    """
    import threading

    fd = 0
    try:
        if threading.current_thread() is not threading.main_thread() or not os.isatty(fd):
            return None
        if os.tcgetpgrp(fd) != os.getpgrp():
            return None
    except OSError:
        return None
    if not _tcsetpgrp(fd, pgid):
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGCONT)  # in case it read the terminal before it was its own
    # Now in the background, the recorder still echoes to the terminal, even under `stty tostop`.
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)

    def give_back() -> None:
        _tcsetpgrp(fd, os.getpgrp())
        signal.signal(signal.SIGTTOU, previous)

    return give_back


def _tcsetpgrp(fd: int, pgid: int) -> bool:
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may not set it otherwise
    try:
        os.tcsetpgrp(fd, pgid)
        return True
    except OSError:
        return False
    finally:
        signal.signal(signal.SIGTTOU, previous)


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _spawn_pty(argv: Sequence[str], env: Mapping[str, str]) -> Spawned | SpawnFailure:
    import pty as _pty
    import termios

    master, slave = _pty.openpty()
    os.set_inheritable(master, False)
    for fd in (1, 2, 0):  # the command sees the size of the recorder's terminal, if it has one
        with contextlib.suppress(OSError):
            fcntl.ioctl(slave, termios.TIOCSWINSZ, fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
            break
    if not _isatty(0):  # piped input is forwarded (observe.recorder.capture): input, not output, so no echo
        with contextlib.suppress(OSError, termios.error):
            attrs = termios.tcgetattr(slave)
            attrs[3] &= ~(termios.ECHO | termios.ECHONL)
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
    slave_id = _identity(slave)
    env = {**env, ENV_STDOUT_ID: slave_id, ENV_STDERR_ID: slave_id}

    def _controlling_tty() -> None:  # runs in the child, after setsid
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=_controlling_tty,
            close_fds=True,
        )
    except OSError as exc:
        os.close(master)
        os.close(slave)
        return _failure(argv, exc)
    except (ValueError, subprocess.SubprocessError) as exc:
        os.close(master)
        os.close(slave)
        return SpawnFailure(126, f"cannot execute: {exc}")
    os.close(slave)
    os.set_blocking(master, False)
    return Spawned(proc, master, None, slave_id, slave_id, forward_stdin=True)


# -- the command's whole process tree ------------------------------------------------------

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def become_subreaper() -> Callable[[], None]:
    """Make this process a child subreaper (Linux): whatever the command starts and
    orphans (``setsid``, double forks) is reparented here, so it can be found and ended.
    Returns the function that restores the previous setting."""
    if not os.path.isdir("/proc/self"):
        return lambda: None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        before = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return lambda: None
    except (OSError, AttributeError):  # pragma: no cover - no prctl
        return lambda: None
    previous = before.value

    def restore() -> None:
        with contextlib.suppress(OSError, AttributeError):
            libc.prctl(_PR_SET_CHILD_SUBREAPER, previous, 0, 0, 0)

    return restore


@dataclass(frozen=True)
class ProcessInfo:
    """One process of the command's tree, as /proc shows it."""

    pid: int
    ppid: int
    state: str
    start: int  # clock ticks since boot: tells a pid from its reuse
    argv: tuple[str, ...]


def _stat(pid: int) -> tuple[int, str, int] | None:
    """``(ppid, state, starttime)`` of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), fields[0].decode("ascii", "replace"), int(fields[19])
    except (IndexError, ValueError):
        return None


def _argv(pid: int) -> tuple[str, ...]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read(1 << 16)
    except OSError:
        return ()
    return tuple(a.decode("utf-8", "backslashreplace") for a in raw.split(b"\0") if a)


def children_of(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` now."""
    return {r.pid for r in _table() if r.ppid == pid}


def _table() -> list[_Row]:
    out: list[_Row] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out.append(_Row(int(name), st[0], st[1], st[2]))
    return out


@dataclass(frozen=True)
class _Row:
    pid: int
    ppid: int
    state: str
    start: int


def descendants(root: int, exclude: Collection[int] = ()) -> list[ProcessInfo]:
    """Every live process below ``root`` (not ``root``), skipping the subtrees of ``exclude``."""
    rows = _table()
    kids: dict[int, list[_Row]] = {}
    for r in rows:
        kids.setdefault(r.ppid, []).append(r)
    out: list[ProcessInfo] = []
    stack = [root]
    while stack:
        for r in kids.get(stack.pop(), []):
            if r.pid in exclude or r.pid == root:
                continue
            stack.append(r.pid)
            out.append(ProcessInfo(r.pid, r.ppid, r.state, r.start, _argv(r.pid)))
    return sorted(out, key=lambda p: p.pid)


def signal_process(proc: ProcessInfo, signum: int) -> bool:
    """Send ``signum`` to ``proc`` if it is still that process (not a reused pid)."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        st = _stat(proc.pid)
        if st is None or st[2] != proc.start:
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signum)
        else:  # pragma: no cover - kernels before 5.3
            os.kill(proc.pid, signum)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def reap_children(parent: int, skip: set[int]) -> None:
    """Collect the exit status of ``parent``'s exited children (reparented orphans), except ``skip``."""
    for r in _table():
        if r.ppid == parent and r.pid not in skip and r.state == "Z":
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(r.pid, os.WNOHANG)


def end_tree(
    root: int, exclude: Collection[int], skip_reap: set[int], grace: float, first: int = signal.SIGTERM
) -> list[dict[str, Any]]:
    """End every process below ``root``: ``first`` (SIGTERM), then SIGKILL after ``grace`` seconds.

    Returns, for each live process found, ``{"pid", "argv", "signal"}``: the last signal sent
    (null when it exited before one could be). Exited, unreaped ones are only reaped.
    Bounded: ``grace`` plus a moment.
    """
    import time

    ended: dict[int, dict[str, Any]] = {}

    def sweep(signum: int) -> int:
        live = 0
        for p in descendants(root, exclude):
            if p.state in ("Z", "X"):
                continue  # already dead, only not yet reaped (reap_children collects it): not left running
            entry = ended.setdefault(p.pid, {"pid": p.pid, "argv": list(p.argv), "signal": None})
            live += 1
            if signal_process(p, signum):
                entry["signal"] = signal_name(signum)
        return live

    if sweep(first):
        deadline = time.monotonic() + max(grace, 0.0)
        while time.monotonic() < deadline:
            time.sleep(0.05)
            reap_children(os.getpid(), skip_reap)
            if not [p for p in descendants(root, exclude) if p.state not in ("Z", "X")]:
                break
            sweep(first)  # anything forked meanwhile gets the first signal too
        else:
            sweep(signal.SIGKILL)
    for _ in range(40):  # SIGKILL cannot be refused: wait (briefly) for the tree to be gone
        reap_children(os.getpid(), skip_reap)
        if not [p for p in descendants(root, exclude) if p.state not in ("Z", "X")]:
            break
        sweep(signal.SIGKILL)
        time.sleep(0.05)
    reap_children(os.getpid(), skip_reap)
    return [ended[pid] for pid in sorted(ended)]
