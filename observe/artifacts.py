"""Capturing files as ``artifact`` events followed by their bytes in ``artifact.chunk`` events.

A file is read twice, in chunks, never whole: once for its hashes (which the
``artifact`` event states before any chunk), once to emit the chunks. If the
bytes change between the two reads an ``artifact.error`` says so. Symlinks are
recorded as links and never followed; a file that cannot be read is recorded as
``unreadable`` with the error, never skipped silently. A pattern that matches
nothing gives an ``artifact.missing`` event.

The first read also scans for masked values (observe.masking), split across
chunks too: a file holding one is recorded with ``content: "omitted"`` and
``masked: true``, its digests kept. The second read passes the bytes through a
masker, so a file that gains a secret in between still never records it (and
its ``artifact.error`` says ``masked``). Paths and link targets are masked by
the recorder's sink, like every attr.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from blake3 import blake3

from aos.text import text_value
from observe.masking import Masker, Scanner, SecretSet

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


def _walk(root: str) -> Iterator[str]:
    """``root`` and, if it is a real directory (not a link), everything under it, sorted."""
    try:
        st = os.lstat(root)
    except OSError:
        yield root
        return
    if not stat.S_ISDIR(st.st_mode):
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=None):
        dirnames.sort()
        names = sorted(filenames)
        # os.walk lists links to directories among dirnames; record them as links too.
        names += sorted(d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))
        for name in names:
            yield os.path.join(dirpath, name)


def expand(patterns: Iterable[str], cwd: str) -> tuple[list[str], list[str]]:
    """Files named by ``patterns`` (globs, directories recurse) and patterns matching nothing."""
    files: list[str] = []
    missing: list[str] = []
    seen: set[str] = set()
    for pattern in patterns:
        full = os.path.join(cwd, pattern)
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(full, recursive=True))
        else:
            matches = [full] if os.path.lexists(full) else []
        if not matches:
            missing.append(pattern)
            continue
        for match in matches:
            for path in _walk(match):
                key = os.path.normpath(path)
                if key not in seen:
                    seen.add(key)
                    files.append(key)
    return files, missing


def capture(
    append: Append,
    patterns: Iterable[str],
    *,
    cwd: str,
    base: str | None = None,
    max_bytes: int | None = None,
    step: str | None = None,
    secrets: SecretSet | None = None,
) -> list[str]:
    """Record every file ``patterns`` name (relative to ``cwd``); return the recorded paths.

    Paths in events are relative to ``base`` (the recording's working directory),
    which defaults to ``cwd``.
    """
    base = base or cwd
    secrets = secrets if secrets is not None else SecretSet()
    files, missing = expand(patterns, cwd)
    for pattern in missing:
        append("artifact.missing", {"pattern": text_value(pattern), "error": "no such file or no match"}, None, step)
    recorded = []
    for path in files:
        recorded.append(_capture_one(append, path, relative_name(path, base), max_bytes, step, secrets))
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
        return append(kind, event_attrs if kind == "artifact.chunk" else {**event_attrs, **extra}, data, step)

    full = os.path.normpath(os.path.join(cwd, path))
    return _capture_one(tagged, full, relative_name(full, cwd), max_bytes, None, secrets or SecretSet())


def _capture_one(
    append: Append, path: str, name: str, max_bytes: int | None, step: str | None, secrets: SecretSet
) -> str:
    try:
        st = os.lstat(path)
    except OSError as exc:
        append("artifact", _unreadable(name, None, exc), None, step)
        return name
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError as exc:
            append("artifact", _unreadable(name, st, exc), None, step)
            return name
        attrs = _base(name, "symlink", len(os.fsencode(target)), mode)
        attrs["target"] = text_value(target)  # paths are any bytes (FORMAT.md 3.7)
        append("artifact", attrs, None, step)
        return name
    if not stat.S_ISREG(st.st_mode):
        attrs = _base(name, "other", 0, mode)
        attrs["error"] = f"not a regular file (mode {stat.filemode(st.st_mode)})"
        append("artifact", attrs, None, step)
        return name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        append("artifact", _unreadable(name, st, exc), None, step)
        return name
    try:
        scanner = Scanner(secrets)
        size, sha256, b3 = _hash(fd, scanner)
        inline = (max_bytes is None or size <= max_bytes) and not scanner.found
        attrs = _base(name, "file", size, mode)
        attrs.update(sha256=sha256, blake3=b3, content="inline" if inline else "omitted")
        if scanner.found:
            attrs["masked"] = True
        append("artifact", attrs, None, step)
        if inline:
            os.lseek(fd, 0, os.SEEK_SET)
            _emit_chunks(append, fd, name, size, sha256, step, Masker(secrets, commands=False))
    except OSError as exc:
        error = f"read failed: {exc.strerror or exc}"
        append("artifact.error", {"path": text_value(name), "error": error}, None, step)
    finally:
        os.close(fd)
    return name


def _emit_chunks(append: Append, fd: int, name: str, size: int, sha256: str, step: str | None, masker: Masker) -> None:
    digest = hashlib.sha256()
    read = 0
    offset = 0  # of the bytes recorded: equal to ``read`` but for what the masker holds back
    while read < size:
        chunk = os.read(fd, min(CHUNK, size - read))
        if not chunk:
            break
        digest.update(chunk)
        read += len(chunk)
        out = masker.feed(chunk)
        if out:
            append("artifact.chunk", {"path": text_value(name), "offset": offset}, out, step)
            offset += len(out)
    out = masker.finish()
    if out:
        append("artifact.chunk", {"path": text_value(name), "offset": offset}, out, step)
    if read != size or digest.hexdigest() != sha256 or masker.masked:
        attrs: dict[str, Any] = {
            "path": text_value(name),
            "error": "file changed while it was captured",
            "sha256": digest.hexdigest(),
            "bytes": read,
        }
        if masker.masked:
            attrs["masked"] = True
        append("artifact.error", attrs, None, step)


def _hash(fd: int, scanner: Scanner) -> tuple[int, str, str]:
    sha, b3 = hashlib.sha256(), blake3()
    size = 0
    while chunk := os.read(fd, CHUNK):
        sha.update(chunk)
        b3.update(chunk)
        scanner.feed(chunk)
        size += len(chunk)
    return size, sha.hexdigest(), b3.hexdigest()


def _base(name: str, kind: str, size: int, mode: int) -> dict[str, Any]:
    return {
        "path": text_value(name),
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
