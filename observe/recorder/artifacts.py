"""Capturing files as ``artifact`` events followed by their bytes in ``artifact.chunk`` events.

A file is read twice, in chunks, never whole: once for its hashes (which the
``artifact`` event states before any chunk), once to emit the chunks. If the
bytes change between the two reads an ``artifact.error`` says so. Symlinks are
recorded as links and never followed; a file that cannot be read is recorded as
``unreadable`` with the error, never skipped silently. A pattern that matches
nothing gives an ``artifact.missing`` event.

The first read also scans for masked values (observe.secrets.masking), split across
chunks too: a file holding one is recorded with ``content: "omitted"`` and
``masked: true``, its digests kept. The second read passes the bytes through a
masker, so a file that gains a secret in between still never records it (and
its ``artifact.error`` says ``masked``). Paths and link targets are masked by
the recorder's sink, like every attr.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from blake3 import blake3

from aos import kinds
from aos.bounds import cut_text
from observe.secrets.masking import Masker, Scanner, SecretSet

__all__ = ["CHUNK", "Append", "capture", "capture_file", "expand", "relative_name"]

CHUNK = 1 << 20

#: ``append(kind, attrs, data, step)`` (the recorder's safe wrapper over the writer).
Append = Callable[[str, dict[str, Any], bytes | None, str | None], object]


def relative_name(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when inside it, else absolute; normalised, ``/``-separated."""
    absolute = os.path.normpath(os.path.join(cwd, path))
    try:
        rel = os.path.relpath(absolute, cwd)
    except ValueError:
        return absolute
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return absolute
    return rel


def _walk(root: str, stop: Callable[[], bool]) -> Iterator[str]:
    """``root`` and, if it is a real directory (not a link), everything under it, sorted.

    Links (to directories too) are listed, never followed; a directory reached twice
    (a bind mount of its own parent) is listed once.
    """
    try:
        st = os.lstat(root)
    except OSError:
        yield root
        return
    if not stat.S_ISDIR(st.st_mode):
        yield root
        return
    seen = {(st.st_dev, st.st_ino)}
    stack = [root]
    while stack:
        if stop():
            raise _Stopped
        directory = stack.pop()
        files: list[str] = []
        subdirs: list[str] = []
        for entry in _entries(directory):
            if entry.is_dir(follow_symlinks=False):
                try:
                    est = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (est.st_dev, est.st_ino) not in seen:
                    seen.add((est.st_dev, est.st_ino))
                    subdirs.append(entry.path)
            else:
                files.append(entry.path)  # files, links (to directories too), anything else
        yield from sorted(files)
        stack.extend(sorted(subdirs, reverse=True))


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return list(it)
    except OSError:
        return []


def _hidden_ok(name: str, part: str) -> bool:
    """Like glob: a wildcard matches a leading dot only when the pattern starts with one."""
    return not name.startswith(".") or part.startswith(".")


def _glob(full: str, stop: Callable[[], bool]) -> list[str]:
    """``glob.glob(full, recursive=True)``, except that no directory link is ever followed.

    The literal part before the first wildcard is taken as given; from there on,
    only real directories are entered, so a link loop under ``out/**`` ends.
    """
    parts = full.split(os.sep)
    first = next(i for i, p in enumerate(parts) if glob.has_magic(p))
    base = os.sep.join(parts[:first]) or os.sep
    if not os.path.isdir(base):
        return []
    current = [base]
    rest = parts[first:]
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        nxt: list[str] = []
        for directory in current:
            if stop():
                raise _Stopped
            if part == "**":
                nxt.extend(_recursive(directory, stop, dirs_only=not last))
            elif glob.has_magic(part):
                nxt.extend(
                    entry.path
                    for entry in _entries(directory)
                    if _hidden_ok(entry.name, part)
                    and fnmatch.fnmatchcase(entry.name, part)
                    and (last or entry.is_dir(follow_symlinks=False))
                )
            elif part == "":
                nxt.append(directory)
            else:
                path = os.path.join(directory, part)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if last or stat.S_ISDIR(st.st_mode):
                    nxt.append(path)
        current = nxt
    return sorted({os.path.normpath(p) for p in current})


def _recursive(directory: str, stop: Callable[[], bool], *, dirs_only: bool) -> list[str]:
    """What ``**`` matches under ``directory``: itself and everything below (not hidden), no links followed."""
    out = [directory]
    seen: set[tuple[int, int]] = set()
    stack = [directory]
    while stack:
        if stop():
            raise _Stopped
        here = stack.pop()
        for entry in _entries(here):
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                try:
                    est = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (est.st_dev, est.st_ino) in seen:
                    continue
                seen.add((est.st_dev, est.st_ino))
                out.append(entry.path)
                stack.append(entry.path)
            elif not dirs_only:
                out.append(entry.path)
    return out


def expand(patterns: Iterable[str], cwd: str, *, stop: Callable[[], bool] | None = None) -> tuple[list[str], list[str]]:
    """Files named by ``patterns`` (globs, directories recurse) and patterns matching nothing.

    Directory links are recorded as links and never followed, under a glob too.
    """
    stop = stop or _never
    files: list[str] = []
    missing: list[str] = []
    seen: set[str] = set()
    for pattern in patterns:
        full = os.path.normpath(os.path.join(cwd, pattern))
        matches = _glob(full, stop) if glob.has_magic(pattern) else ([full] if os.path.lexists(full) else [])
        if not matches:
            missing.append(pattern)
            continue
        for match in matches:
            for path in _walk(match, stop):
                key = os.path.normpath(path)
                if key not in seen:
                    seen.add(key)
                    files.append(key)
    return files, missing


def capture(
    append: Append,
    patterns: Sequence[str],
    *,
    cwd: str,
    base: str | None = None,
    max_bytes: int | None = None,
    step: str | None = None,
    secrets: SecretSet | None = None,
    problems: list[str] | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[str]:
    """Record every file ``patterns`` name (relative to ``cwd``); return the recorded paths.

    Paths in events are relative to ``base`` (the recording's working directory),
    which defaults to ``cwd``. A file whose bytes hold one of ``secrets`` is recorded
    with its digests but no content (``masked: true``). ``problems`` (when given)
    gets each pattern that matched nothing and each file that could not be read
    whole. ``stop`` is polled while walking and reading: once it returns true the
    capture ends where it is, with an ``artifact.error`` saying what was not captured
    (``--timeout``, a signal).
    """
    base = base or cwd
    secrets = secrets if secrets is not None else SecretSet()
    stop = stop or _never
    problems = problems if problems is not None else []
    try:
        files, missing = expand(patterns, cwd, stop=stop)
    except _Stopped:
        _stopped(append, " ".join(patterns), "while listing the files to capture", step, problems)
        return []
    for pattern in missing:
        append(kinds.ARTIFACT_MISSING, {"pattern": cut_text(pattern), "error": "no such file or no match"}, None, step)
        problems.append(pattern)
    recorded = []
    for i, path in enumerate(files):
        name = relative_name(path, base)
        try:
            if stop():
                raise _Stopped
            ok = _capture_one(append, path, name, max_bytes, step, secrets, stop)
        except _Stopped:
            _stopped(append, name, f"{len(files) - i} file(s) not captured, from this one on", step, problems)
            break
        recorded.append(name)
        if not ok:
            problems.append(name)
    return recorded


def capture_file(
    append: Append,
    path: str,
    *,
    cwd: str,
    max_bytes: int | None = None,
    attrs: dict[str, Any] | None = None,
    secrets: SecretSet | None = None,
) -> str:
    """Record exactly the file at ``path`` (no glob, no recursion; a directory is ``other``).

    ``attrs`` are added to every event but the chunks (the recorder's ``origin``
    and ``env`` for a lane config it captures itself). Returns the recorded path.
    """
    extra = dict(attrs or {})

    def tagged(kind: str, event_attrs: dict[str, Any], data: bytes | None, step: str | None) -> object:
        return append(kind, event_attrs if kind == kinds.ARTIFACT_CHUNK else {**event_attrs, **extra}, data, step)

    full = os.path.normpath(os.path.join(cwd, path))
    name = relative_name(full, cwd)
    _capture_one(tagged, full, name, max_bytes, None, secrets or SecretSet(), _never)
    return name


class _Stopped(Exception):
    """The capture was told to stop (``--timeout`` or a signal)."""


def _never() -> bool:
    return False


def _stopped(append: Append, path: str, what: str, step: str | None, problems: list[str]) -> None:
    error = f"capture stopped (timeout or signal): {what}"
    append(kinds.ARTIFACT_ERROR, {"path": cut_text(path), "error": error, "stopped": True}, None, step)
    problems.append(f"{path} (capture stopped)")


def _capture_one(
    append: Append,
    path: str,
    name: str,
    max_bytes: int | None,
    step: str | None,
    secrets: SecretSet,
    stop: Callable[[], bool],
) -> bool:
    """Record one path; False when it could not be captured whole (recorded as such)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        append(kinds.ARTIFACT, _unreadable(name, None, exc), None, step)
        return False
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError as exc:
            append(kinds.ARTIFACT, _unreadable(name, st, exc), None, step)
            return False
        attrs = _base(name, "symlink", len(os.fsencode(target)), mode)
        attrs["target"] = cut_text(target)  # paths are any bytes (FORMAT.md 3.7)
        append(kinds.ARTIFACT, attrs, None, step)
        return True
    if not stat.S_ISREG(st.st_mode):
        attrs = _base(name, "other", 0, mode)
        attrs["error"] = f"not a regular file (mode {stat.filemode(st.st_mode)})"
        append(kinds.ARTIFACT, attrs, None, step)
        return True
    try:
        # O_NONBLOCK: a FIFO swapped in after the lstat must not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        append(kinds.ARTIFACT, _unreadable(name, st, exc), None, step)
        return False
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):
            attrs = _base(name, "other", 0, stat.S_IMODE(fst.st_mode))
            attrs["error"] = f"replaced while captured by a non-regular file (mode {stat.filemode(fst.st_mode)})"
            append(kinds.ARTIFACT, attrs, None, step)
            return False
        scanner = Scanner(secrets)
        size, sha256, b3 = _hash(fd, scanner, stop)
        inline = (max_bytes is None or size <= max_bytes) and not scanner.found
        attrs = _base(name, "file", size, mode)
        attrs.update(sha256=sha256, blake3=b3, content="inline" if inline else "omitted")
        if scanner.found:
            attrs["masked"] = True
        append(kinds.ARTIFACT, attrs, None, step)
        if inline:
            os.lseek(fd, 0, os.SEEK_SET)
            return _emit_chunks(append, fd, name, size, sha256, step, Masker(secrets, commands=False), stop)
        return True
    except OSError as exc:
        error = f"read failed: {exc.strerror or exc}"
        append(kinds.ARTIFACT_ERROR, {"path": cut_text(name), "error": error}, None, step)
        return False
    finally:
        os.close(fd)


def _emit_chunks(
    append: Append,
    fd: int,
    name: str,
    size: int,
    sha256: str,
    step: str | None,
    masker: Masker,
    stop: Callable[[], bool],
) -> bool:
    import hashlib  # OpenSSL's hashes: loaded when a file is hashed, not at start-up

    digest = hashlib.sha256()
    read = 0
    offset = 0  # of the bytes recorded: equal to ``read`` but for what the masker holds back
    while read < size:
        if stop():
            raise _Stopped
        chunk = os.read(fd, min(CHUNK, size - read))
        if not chunk:
            break
        digest.update(chunk)
        read += len(chunk)
        out = masker.feed(chunk)
        if out:
            append(kinds.ARTIFACT_CHUNK, {"path": cut_text(name), "offset": offset}, out, step)
            offset += len(out)
    out = masker.finish()
    if out:
        append(kinds.ARTIFACT_CHUNK, {"path": cut_text(name), "offset": offset}, out, step)
    if read != size or digest.hexdigest() != sha256 or masker.masked:
        attrs: dict[str, Any] = {
            "path": cut_text(name),
            "error": "file changed while it was captured",
            "sha256": digest.hexdigest(),
            "bytes": read,
        }
        if masker.masked:
            attrs["masked"] = True
        append(kinds.ARTIFACT_ERROR, attrs, None, step)
        return False
    return True


def _hash(fd: int, scanner: Scanner, stop: Callable[[], bool]) -> tuple[int, str, str]:
    import hashlib  # OpenSSL's hashes: loaded when a file is hashed, not at start-up

    sha, b3 = hashlib.sha256(), blake3()
    size = 0
    while chunk := os.read(fd, CHUNK):
        if stop():
            raise _Stopped
        sha.update(chunk)
        b3.update(chunk)
        scanner.feed(chunk)
        size += len(chunk)
    return size, sha.hexdigest(), b3.hexdigest()


def _base(name: str, kind: str, size: int, mode: int) -> dict[str, Any]:
    return {
        "path": cut_text(name),
        "kind": kind,
        "size": size,
        "mode": mode,
        "sha256": None,
        "blake3": None,
        "content": "omitted",
    }


def _unreadable(name: str, st: os.stat_result | None, exc: OSError) -> dict[str, Any]:
    attrs = _base(name, "unreadable", st.st_size if st else 0, stat.S_IMODE(st.st_mode) if st else 0)
    attrs["error"] = exc.strerror or str(exc)
    return attrs
