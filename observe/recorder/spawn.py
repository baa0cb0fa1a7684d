"""Starting the recorded command (its own process group, pipes or a pseudo-terminal, inside its container).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from observe.recorder.containment import Container

from observe.channel.protocol import ENV_STDERR_ID, ENV_STDOUT_ID
from observe.exits import Exit
from observe.recorder.proctree import children_of

__all__ = [
    "SpawnFailure",
    "Spawned",
    "become_subreaper",
    "children_of",
    "exit_status",
    "exit_waker",
    "signal_name",
    "spawn",
    "spawn_step",
]

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
        return None, signal_name(sig), Exit.SIGNAL + sig
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
        return SpawnFailure(Exit.NOT_FOUND, f"{what}: command not found ({exc.strerror or exc})")
    return SpawnFailure(Exit.CANNOT_EXECUTE, f"{what}: cannot execute ({exc.strerror or exc})")


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    pty: bool = False,
    pipe_size: int = 1 << 20,
    container: Container | None = None,
) -> Spawned | SpawnFailure:
    """Start ``argv`` in a process group of its own, its output going to fresh pipes, inside ``container``
    (observe.recorder.containment: it is inside before it runs).

    The command's environment also gets ``AOS_STDOUT_ID``/``AOS_STDERR_ID``, the
    identities of those pipes, so ``alpha observe step`` can tell whether its own
    output goes straight to the recorder.
    """
    if not argv:
        return SpawnFailure(Exit.NOT_FOUND, "no command given")
    inside = container.spawning() if container is not None else contextlib.nullcontext()
    with inside:
        if pty:
            return _spawn_pty(argv, env)
        return _spawn_pipes(argv, env, pipe_size)


def _spawn_pipes(argv: Sequence[str], env: Mapping[str, str], pipe_size: int) -> Spawned | SpawnFailure:
    def start(out_w: int, err_w: int, out_id: str, err_id: str) -> subprocess.Popen[bytes]:
        ids = {ENV_STDOUT_ID: out_id, ENV_STDERR_ID: err_id}
        return subprocess.Popen(
            list(argv), stdout=out_w, stderr=err_w, env={**env, **ids}, process_group=0, close_fds=True
        )

    started = _on_fresh_pipes(argv, pipe_size, start)
    if isinstance(started, SpawnFailure):
        return started
    return Spawned(*started, _hand_terminal(started[0].pid))


def spawn_step(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str,
    stdin: int | None,
    echo: tuple[bool, bool],
    pipe_size: int = 1 << 16,
    container: Container | None = None,
) -> Spawned | SpawnFailure:
    """Start a step's command for ``alpha observe step``: the recorder's own child, in a session of its own.

    Its stdin is ``stdin`` (the step client's, passed over the control socket; /dev/null
    when None), its stdout and stderr fresh pipes the recorder reads. A session of its
    own (so a process group of its own, and no controlling terminal it could be stopped
    by: the recorder's terminal is not the client's foreground), inside ``container`` (the
    command's: ended with it) before it runs. ``AOS_STDOUT_ID`` and
    ``AOS_STDERR_ID`` name those pipes where the recorder echoes them (``echo``), else
    are empty, as for the command itself.
    """
    if not argv:
        return SpawnFailure(Exit.NOT_FOUND, "no command given")
    inside = container.spawning() if container is not None else contextlib.nullcontext()

    def start(out_w: int, err_w: int, out_id: str, err_id: str) -> subprocess.Popen[bytes]:
        ids = {ENV_STDOUT_ID: out_id if echo[0] else "", ENV_STDERR_ID: err_id if echo[1] else ""}
        with inside:  # in the command's container before it runs, as the command is
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                stdout=out_w,
                stderr=err_w,
                env={**env, **ids},
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )

    started = _on_fresh_pipes(argv, pipe_size, start, cwd=cwd)
    if isinstance(started, SpawnFailure):
        return started
    return Spawned(*started)


def _on_fresh_pipes(
    argv: Sequence[str],
    pipe_size: int,
    start: Callable[[int, int, str, str], subprocess.Popen[bytes]],
    *,
    cwd: str | None = None,
) -> tuple[subprocess.Popen[bytes], int, int, str, str] | SpawnFailure:
    """``start(out_w, err_w, out_id, err_id)`` on two fresh pipes: the process and the non-blocking read
    ends with the pipes' identities, or why it could not start (every descriptor closed)."""
    out_r, out_w = _pipe(pipe_size)
    err_r, err_w = _pipe(pipe_size)
    out_id, err_id = _identity(out_w), _identity(err_w)
    try:
        proc = start(out_w, err_w, out_id, err_id)
    except OSError as exc:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        if cwd is not None and exc.filename == cwd and exc.filename != argv[0]:
            return SpawnFailure(Exit.CANNOT_EXECUTE, f"{argv[0]}: cannot execute in {cwd} ({exc.strerror or exc})")
        return _failure(argv, exc)
    except (ValueError, subprocess.SubprocessError) as exc:  # embedded NUL and the like
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        return SpawnFailure(Exit.CANNOT_EXECUTE, f"cannot execute: {exc}")
    os.close(out_w)
    os.close(err_w)
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
    return proc, out_r, err_r, out_id, err_id


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
        return SpawnFailure(Exit.CANNOT_EXECUTE, f"cannot execute: {exc}")
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


def exit_waker(pid: int) -> int:
    """An fd that becomes readable when ``pid`` exits (a pidfd, or a pipe fed by a thread): the command's, a step's."""
    import threading

    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        r, w = os.pipe2(os.O_CLOEXEC)

        def _wait() -> None:
            try:
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            except OSError:
                pass
            finally:
                os.write(w, b"x")
                os.close(w)

        threading.Thread(target=_wait, name="aos-wait", daemon=True).start()
        return r
