"""The path holds the recorder's stream: the check made when a recording ends, and the repair.

The recorded command knows ``$AOS_STREAM`` and runs as the same user: it can rename
the stream aside and put a forgery of its own at the path, edit the file in place,
delete it, or leave a folder, a symbolic link or a FIFO there. Whatever it did, the
gate judged the events the writer appended (its private copy), but a reader of the
path afterwards (``alpha observe verdict PATH``) would read what the command left.

So once the stream is sealed and closed the recorder checks the path (``keep``):
it must be the very file the writer opened (same device and inode, a regular file,
never followed through a symbolic link), of the size written, and its bytes must
hash to the writer's own running BLAKE3 digest. If not, the recorder writes its
stream again from the private copy (checked against the same digest) to a new file
in the same folder, syncs it, moves whatever is at the path aside to
``PATH.foreign-N`` (the first N free; a folder, link or FIFO is moved as it is,
never opened), renames its file onto the path and syncs the folder. It says so on
stderr, and the recording exits ``Exit.RESTORED`` (123). When it cannot put the
stream back, it says why and the recording is a recorder failure (125).

Limits: a process of the command that outlived the recording can still change the
path after this check; the folder is the one the path names at the end (a folder
the command replaced is written into as it is).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from blake3 import blake3

if TYPE_CHECKING:
    from aos.writer import StreamWriter

__all__ = ["FOREIGN", "Held", "Kept", "hold", "keep"]

#: The name the foreign file found at the path is kept under: ``PATH.foreign-N``.
FOREIGN = "{name}.foreign-{n}"
#: How much of a file is read and hashed at a time.
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Held:
    """What the recorder needs to check the path and, if it must, put its stream back."""

    writer: StreamWriter
    copy_fd: int  # the writer's private copy, a descriptor of the recorder's own


@dataclass(frozen=True)
class Kept:
    """What the check found at the path and what the recorder did about it."""

    path: Path
    problem: str | None = None  # why the path did not hold the stream (None: it did)
    foreign: Path | None = None  # where what was at the path was moved
    error: str | None = None  # why the stream could not be put back (a recorder failure)

    @property
    def restored(self) -> bool:
        """The path did not hold the stream, and the recorder put it back."""
        return self.problem is not None and self.error is None

    @property
    def failed(self) -> bool:
        """The path does not hold the stream, and the recorder could not put it back."""
        return self.error is not None


def hold(writer: StreamWriter) -> Held | None:
    """Take a descriptor of the writer's private copy before the seal closes the writer (None: no copy)."""
    fd = writer.dup_copy()
    return None if fd is None else Held(writer, fd)


def keep(held: Held, *, sealed: bool) -> Kept:
    """Check the sealed stream's path and put the stream back when it does not hold it; say so on stderr.

    ``sealed`` False (the recorder failed before its seal): nothing is checked.
    """
    path = held.writer.path
    try:
        if not sealed:
            return Kept(path)
        problem = _problem(held)
        if problem is None:
            return Kept(path)
        kept = _restore(held, problem)
    finally:
        os.close(held.copy_fd)
    _say(kept)
    return kept


def _problem(held: Held) -> str | None:
    """Why the path does not hold exactly the bytes the writer wrote (None when it does)."""
    w = held.writer
    path = w.path
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "it was deleted"
    except OSError as exc:
        return f"it cannot be examined ({exc.strerror or exc})"
    kind = _kind(st.st_mode)
    if kind is not None:
        return f"{kind} is there"
    if (st.st_dev, st.st_ino) != (w.opened.st_dev, w.opened.st_ino):
        return "another file is there, renamed onto it or swapped in"
    if st.st_size != w.bytes_written:
        return f"it was edited: it holds {st.st_size} bytes, the recorder wrote {w.bytes_written}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    try:
        again = os.fstat(fd)
        if not stat.S_ISREG(again.st_mode) or (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
            return "another file is there, renamed onto it or swapped in"
        if _digest(fd, st.st_size) != w.digest():
            return "it was edited in place: its bytes are not the ones the recorder wrote"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)
    return None


def _kind(mode: int) -> str | None:
    """What is at the path when it is not a regular file (None when it is one)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device file"


def _digest(fd: int, size: int) -> bytes:
    """The BLAKE3 digest of the first ``size`` bytes of ``fd`` (fewer when the file is shorter)."""
    h = blake3(max_threads=blake3.AUTO)
    at = 0
    while at < size:
        chunk = os.pread(fd, min(_CHUNK, size - at), at)
        if not chunk:
            break
        h.update(chunk)
        at += len(chunk)
    return h.digest()


def _restore(held: Held, problem: str) -> Kept:
    """Write the stream again from the private copy, move what is at the path aside, rename it into place."""
    path = held.writer.path
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)  # a folder the command removed
        tmp = _write_copy(held, folder)
    except (OSError, _CopyDiffers) as exc:
        return Kept(path, problem, error=f"cannot write the stream again beside {path}: {_text(exc)}")
    foreign = None
    try:
        for attempt in range(3):  # something put at the path again meanwhile (a process that outlived the command)
            if os.path.lexists(path):
                foreign = _aside(path) or foreign
            try:
                os.rename(tmp, path)
                break
            except OSError:
                if attempt == 2:
                    raise
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return Kept(path, problem, foreign, error=f"cannot put the stream back at {path}: {_text(exc)}")
    _sync_folder(folder)
    return Kept(path, problem, foreign)


class _CopyDiffers(Exception):
    """The private copy does not hold the bytes the writer wrote (it cannot be restored from)."""


def _write_copy(held: Held, folder: Path) -> Path:
    """A new file in ``folder`` holding the private copy's bytes, checked against the writer's digest and synced."""
    w = held.writer
    fd, name = tempfile.mkstemp(prefix=f".{w.path.name}.", suffix=".restoring", dir=folder)
    try:
        os.fchmod(fd, stat.S_IMODE(w.opened.st_mode))
        h = blake3(max_threads=blake3.AUTO)
        at, size = 0, w.bytes_written
        while at < size:
            chunk = os.pread(held.copy_fd, min(_CHUNK, size - at), at)
            if not chunk:
                raise _CopyDiffers("the private copy is shorter than the stream")
            h.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            at += len(chunk)
        if h.digest() != w.digest():
            raise _CopyDiffers("the private copy does not hold the bytes written")
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    os.close(fd)
    return Path(name)


def _aside(path: Path) -> Path | None:
    """Move what is at ``path`` (never following it) to the first free ``PATH.foreign-N``; None when it is gone."""
    n = 1
    while True:
        target = path.with_name(FOREIGN.format(name=path.name, n=n))
        if not os.path.lexists(target):
            try:
                os.rename(path, target)
                return target
            except OSError:
                if not os.path.lexists(path):
                    return None
                if not os.path.lexists(target):
                    raise
        n += 1


def _sync_folder(folder: Path) -> None:
    """Make the rename durable (best effort: a folder that cannot be opened is left as it is)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _text(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else None) or str(exc)


def _say(kept: Kept) -> None:
    """The recorder's own words on stderr about what it found and did."""
    path = kept.path
    if kept.failed:
        line = f"alpha observe: the command changed the stream file {path}: {kept.problem}; {kept.error}"
    else:
        moved = f"; what was there is kept as {kept.foreign}" if kept.foreign is not None else ""
        line = (
            f"alpha observe: the command changed the stream file {path}: {kept.problem}; "
            f"the recorder put its own stream back at {path}{moved}"
        )
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
