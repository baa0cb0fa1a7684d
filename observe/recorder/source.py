"""The source a recording describes: the git repository holding its working directory, at the start.

``stream.open`` carries it as ``source`` (docs/FORMAT.md, "The source"): ``None``
outside a git repository, ``{"error": ...}`` where git cannot or will not read one
(not installed, "dubious ownership", a broken repository), else::

    {"commit", "tree", "branch", "remote", "dirty", "shallow", "git_dir", "object_format",
     "changes": {"tracked", "untracked", "hidden", "diff_sha256", "diff_bytes",
                 "untracked_files": [{"path", "kind", "size", "sha256"}], "untracked_omitted"}}

``changes`` only when ``dirty``. It is read before the command starts, so what the
command does to the tree later never changes it.

The recorder's own files are not changes (``OwnFiles``): the stream being written,
earlier streams in the recorder's default folder (named as the recorder names them,
beginning as an Arrow IPC stream does), and the lane configs it captures (their bytes
are in the stream). They are listed in ``not_counted``, never in ``changes``; any
other untracked file counts, in that folder too.

Git is run as plumbing the command cannot steer: never interactive (stdin
``/dev/null``, ``GIT_TERMINAL_PROMPT=0``, no pager), no system or global
configuration (a ``safe.directory`` the command planted in ``~/.gitconfig`` is not
followed), no replace refs, no lazy fetch, no transport at all, and everything a
repository's own ``.git/config`` could make git execute switched off on the command
line: ``core.fsmonitor``, hooks, external diff and textconv drivers, and every
``filter.<driver>`` that configuration names. Each call has a deadline (the whole
reading is bounded by ``ALPHA_OBSERVE_SOURCE_TIMEOUT`` seconds, default 30) and its
output is streamed: the diff into its SHA-256, never held whole; at most
``MAX_DIFF_BYTES`` are hashed and ``MAX_UNTRACKED`` untracked files digested.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aos.text import printable, text_value
from observe.env import RecorderVars

__all__ = [
    "MAX_DIFF_BYTES",
    "MAX_UNTRACKED",
    "GitResult",
    "OwnFiles",
    "changed_paths",
    "git_env",
    "mask_userinfo",
    "record_source",
    "run_git",
    "safe_config",
]

#: The most bytes of ``git diff --binary HEAD`` hashed; a longer diff is recorded with ``diff_sha256`` null.
MAX_DIFF_BYTES = 1 << 30
#: The most untracked files digested (all are counted).
MAX_UNTRACKED = 1000
#: The most bytes of untracked files hashed in all; files past it are listed with ``sha256`` null.
MAX_UNTRACKED_BYTES = 256 << 20
#: Seconds the whole reading may take (``ALPHA_OBSERVE_SOURCE_TIMEOUT`` overrides).
SOURCE_TIMEOUT = 30.0

#: Configuration given on every git command line: nothing a repository's own config names runs.
_SAFE = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.askPass=",
    "core.sshCommand=false",
    "credential.helper=",
    "protocol.allow=never",
    "diff.external=",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.relative=false",
    "diff.renames=false",
    "color.ui=false",
    "submodule.recurse=false",
    "core.untrackedCache=false",
)

_DRIVER = re.compile(rb"^filter\.(.+)\.[^.]+$", re.DOTALL)


def git_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment git runs in: the recorder's without any ``GIT_*`` variable, plus the safe settings."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("GIT_")}
    env.pop("SSH_ASKPASS", None)
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ATTR_NOSYSTEM="1",
        GIT_OPTIONAL_LOCKS="0",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_NO_LAZY_FETCH="1",
        GIT_PROTOCOL_FROM_USER="0",
        GIT_PAGER="cat",
        PAGER="cat",
        LC_ALL="C",
    )
    return env


def safe_config(drivers: Sequence[bytes] = ()) -> list[str]:
    """``-c`` arguments that switch off what configuration could run; with ``drivers``, only those filter drivers."""
    args: list[str] = []
    for item in () if drivers else _SAFE:
        args += ["-c", item]
    for raw in drivers:
        name = raw.decode("utf-8", "surrogateescape")
        for key in ("clean", "smudge", "process"):
            args += ["-c", f"filter.{name}.{key}="]
        args += ["-c", f"filter.{name}.required=false"]
    return args


@dataclass(frozen=True)
class GitResult:
    """How one git command ended: its exit code (None: not run or stopped), stdout (when kept), stderr's start."""

    code: int | None
    out: bytes
    err: str
    stopped: str = ""  # why it was stopped: a deadline, or the consumer had enough

    @property
    def ok(self) -> bool:
        return self.code == 0 and not self.stopped


def run_git(
    args: Sequence[str],
    *,
    cwd: str,
    deadline: float,
    config: Sequence[str] = (),
    on_out: Callable[[bytes], bool] | None = None,
    max_out: int = 1 << 20,
    env: dict[str, str] | None = None,
    git: str | None = None,
) -> GitResult:
    """Run ``git CONFIG ARGS`` in ``cwd``, killed at ``deadline`` (``time.monotonic``).

    Stdout goes to ``on_out`` chunk by chunk when given (it returns False to stop the
    command), else is kept up to ``max_out`` bytes (more stops it). Stderr's first
    4 KiB are kept. Never raises for git's failures; a missing git is code None.
    """
    exe = git or shutil.which("git")
    if exe is None:
        return GitResult(None, b"", "git is not installed (not on PATH)")
    try:
        proc = subprocess.Popen(
            [exe, *safe_config(), *config, *args],
            cwd=cwd,
            env=env or git_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return GitResult(None, b"", f"cannot run git: {exc.strerror or exc}")
    out = bytearray()
    err = bytearray()
    stopped = ""
    assert proc.stdout is not None
    assert proc.stderr is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        while sel.get_map() and not stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                stopped = "timed out"
                break
            for key, _ in sel.select(timeout=min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.data == "err":
                    err += chunk[: max(0, 4096 - len(err))]
                elif on_out is not None:
                    if not on_out(chunk):
                        stopped = "output limit"
                        break
                else:
                    out += chunk
                    if len(out) > max_out:
                        stopped = "output limit"
                        break
    if stopped:
        proc.kill()
    try:
        code: int | None = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
        stopped = stopped or "timed out"
    proc.stdout.close()
    proc.stderr.close()
    return GitResult(code, bytes(out), printable(err.decode("utf-8", "replace")).strip(), stopped)


def mask_userinfo(url: str) -> str:
    """A remote URL with the userinfo of ``scheme://USER:PASS@host`` replaced by ``***``."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", url)


def changed_paths(cwd: str, limit: int, *, timeout: float = 5.0) -> list[str]:
    """The first ``limit`` tracked files that differ from HEAD in the repository holding ``cwd`` (as git, run as
    ``record_source`` runs it, names them; empty when it cannot): for saying so, never for the stream."""
    done = run_git(
        ["diff", "--name-only", "-z", "--no-ext-diff", "--no-textconv", "--no-renames", "HEAD", "--"],
        cwd=cwd,
        deadline=time.monotonic() + timeout,
    )
    names = [n for n in done.out.split(b"\0") if n] if done.code == 0 or done.stopped == "output limit" else []
    return [printable(n.decode("utf-8", "replace")) for n in names[:limit]]


class _Refused(Exception):
    """Git could not or would not read the repository: recorded as ``{"error": ...}``."""


def _timeout() -> float:
    raw = os.environ.get(RecorderVars.SOURCE_TIMEOUT, "")
    try:
        value = float(raw)
    except ValueError:
        return SOURCE_TIMEOUT
    return value if 0 < value <= 3600 else SOURCE_TIMEOUT


#: How the recorder names a stream in its default folder (observe.recorder.record.default_out).
_STREAM_NAME = re.compile(rb"^[0-9]{8}T[0-9]{6}\.[0-9]{6}Z-[0-9a-f]{32}\.aos$")
#: The first bytes of every stream the recorder writes: an Arrow IPC stream's continuation marker.
_STREAM_START = b"\xff\xff\xff\xff"
#: The most ``not_counted`` entries listed (all are left out of ``dirty``).
MAX_NOT_COUNTED = 100


@dataclass(frozen=True)
class OwnFiles:
    """The recorder's own files in the tree, which are not changes: ``files`` maps an absolute path to why it is
    the recorder's (the stream being written, a captured lane config); in ``folder`` (the default stream folder),
    earlier streams as the recorder names and writes them."""

    files: dict[str, str] = field(default_factory=dict)
    folder: str | None = None

    def why(self, path: bytes) -> str | None:
        """Why ``path`` (absolute) is the recorder's own, or None when it is not."""
        text = os.fsdecode(path)
        own = self.files.get(os.path.normpath(text))
        if own is not None:
            return own
        if self.folder is None or os.path.dirname(os.path.normpath(text)) != self.folder:
            return None
        if not _STREAM_NAME.match(os.path.basename(path)):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or os.read(fd, len(_STREAM_START)) != _STREAM_START:
                return None
        finally:
            os.close(fd)
        return "an earlier stream in the recorder's folder"


def record_source(cwd: str, *, timeout: float | None = None, own: OwnFiles | None = None) -> dict[str, Any] | None:
    """The ``source`` attr of ``stream.open`` for ``cwd``: None outside a repository; never raises.

    ``own`` names the recorder's own files, which never make the tree dirty (listed as ``not_counted``).
    """
    deadline = time.monotonic() + (timeout if timeout is not None else _timeout())
    try:
        return _Reader(cwd, deadline, own or OwnFiles()).read()
    except _Refused as exc:
        return {"error": printable(str(exc))}
    except OSError as exc:  # pragma: no cover - a pipe or process the machine cannot give
        return {"error": printable(f"cannot read the repository: {exc}")}


class _Reader:
    """One reading of the repository holding ``cwd``."""

    def __init__(self, cwd: str, deadline: float, own: OwnFiles) -> None:
        self.cwd = cwd
        self.deadline = deadline
        self.own = own
        self.not_counted: list[dict[str, Any]] = []
        self.not_counted_total = 0
        self.env = git_env()
        self.drivers: list[bytes] = []

    def git(self, *args: str, on_out: Callable[[bytes], bool] | None = None) -> GitResult:
        return run_git(
            args,
            cwd=self.cwd,
            deadline=self.deadline,
            config=safe_config(self.drivers) if self.drivers else (),
            on_out=on_out,
            env=self.env,
        )

    def must(self, *args: str) -> bytes:
        done = self.git(*args)
        if not done.ok:
            raise _Refused(f"git {args[0]} failed: {done.stopped or done.err or f'exit {done.code}'}")
        return done.out

    def together(self) -> list[str] | None:
        """The work tree, the common git folder, shallowness, HEAD's commit and its tree from one ``rev-parse``
        (one git process where there were four); ``[]`` outside a repository; None when it fails otherwise (a HEAD
        with no commit, a repository git refuses...): the calls one by one then say why, as they always did."""
        done = self.git(
            "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir", "--is-shallow-repository",
            "HEAD^{commit}", "HEAD^{tree}",
        )  # fmt: skip
        if not done.ok and done.code is not None and not done.stopped and "not a git repository" in done.err.lower():
            return []
        lines = done.out.decode("utf-8", "surrogateescape").splitlines() if done.ok else []
        if len(lines) != 5 or lines[2] not in ("true", "false"):
            return None
        if not all(len(h) in (40, 64) and all(c in "0123456789abcdef" for c in h) for h in lines[3:]):
            return None
        return lines

    def read(self) -> dict[str, Any] | None:
        known = self.together()
        if known == []:
            return None
        if known is not None:
            return self.read_from(known[1], commit=known[3], tree=known[4], shallow=known[2] == "true")
        where = self.git("rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir")
        if where.code is None:
            raise _Refused(where.err)
        if not where.ok:
            if where.stopped:
                raise _Refused(f"git rev-parse {where.stopped}")
            if "not a git repository" in where.err.lower():
                return None
            raise _Refused(f"git refuses to read the repository: {where.err or f'exit {where.code}'}")
        lines = where.out.decode("utf-8", "surrogateescape").splitlines()
        if len(lines) != 2:
            raise _Refused("git rev-parse gave no work tree (a bare repository, or inside .git)")
        git_dir = lines[1]
        ids = self.git("rev-parse", "--verify", "-q", "HEAD^{commit}")
        if not ids.ok:
            raise _Refused("HEAD names no commit (a repository with no commit yet)")
        commit = ids.out.decode("ascii", "replace").strip()
        tree = self.must("rev-parse", "--verify", "-q", f"{commit}^{{tree}}").decode("ascii", "replace").strip()
        shallow = self.must("rev-parse", "--is-shallow-repository").strip() == b"true"
        return self.read_from(git_dir, commit=commit, tree=tree, shallow=shallow)

    def read_from(self, git_dir: str, *, commit: str, tree: str, shallow: bool) -> dict[str, Any]:
        """The rest of the reading, once the repository, its commit and its tree are known."""
        config = self.git("config", "-z", "--get-regexp", r"^(remote\.origin\.url|filter\..*)$")
        remote = None
        for entry in config.out.split(b"\0"):
            key, _, value = entry.partition(b"\n")
            match = _DRIVER.match(key)
            if match:
                name = match.group(1)
                if b"=" in name or b"\n" in name or b"\0" in name:
                    raise _Refused("the repository's configuration names a filter driver git cannot be kept from")
                if name not in self.drivers:
                    self.drivers.append(name)
            elif key == b"remote.origin.url":
                remote = mask_userinfo(value.decode("utf-8", "surrogateescape"))
        branch_out = self.git("symbolic-ref", "-q", "--short", "HEAD")
        changes = self.changes()
        dirty = bool(changes["tracked"] or changes["untracked"] or changes["hidden"] or changes.get("error"))
        source: dict[str, Any] = {
            "commit": commit,
            "tree": tree,
            "branch": text_value(branch_out.out.rstrip(b"\n")) if branch_out.ok and branch_out.out.strip() else None,
            "remote": text_value(remote) if remote is not None else None,
            "dirty": dirty,
            "shallow": shallow,
            "git_dir": text_value(git_dir),
            "object_format": "sha256" if len(commit) == 64 else "sha1",
        }
        if dirty:
            source["changes"] = changes
        if self.not_counted_total:
            source["not_counted"] = self.not_counted
            source["not_counted_omitted"] = self.not_counted_total - len(self.not_counted)
        return source

    def changes(self) -> dict[str, Any]:
        """Counts and digests of what differs from HEAD: the diff's SHA-256, each untracked file's."""
        import hashlib  # OpenSSL's hashes: loaded when a file is hashed, not at start-up

        listing = bytearray()
        untracked: list[bytes] = []
        counts = {"untracked": 0, "hidden": 0}

        def entries(chunk: bytes) -> bool:
            listing.extend(chunk)
            *done, rest = bytes(listing).split(b"\0")
            listing[:] = rest
            for entry in done:
                tag, path = entry[:1], entry[2:]
                if tag == b"?":
                    why = self.own.why(os.path.join(os.fsencode(self.cwd), path))
                    if why is not None:  # the recorder's own file: not a change
                        self.not_counted_total += 1
                        if len(self.not_counted) < MAX_NOT_COUNTED:
                            self.not_counted.append({"path": text_value(path), "why": why})
                        continue
                    counts["untracked"] += 1
                    if len(untracked) < MAX_UNTRACKED:
                        untracked.append(path)
                elif tag == b"S" or tag.islower():  # assume-unchanged or skip-worktree: changes git would not see
                    counts["hidden"] += 1
            return True

        listed = self.git("ls-files", "-z", "-v", "--cached", "--others", "--exclude-standard", on_out=entries)
        digest = hashlib.sha256()
        size = [0, 0]  # bytes hashed, files changed
        carry = [b"\n"]

        def diff(chunk: bytes) -> bool:
            size[0] += len(chunk)
            if size[0] > MAX_DIFF_BYTES:
                return False
            digest.update(chunk)
            size[1] += _count_headers(chunk, carry)
            return True

        diffed = self.git(
            "diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
            "--ignore-submodules=dirty", "--src-prefix=a/", "--dst-prefix=b/", "HEAD", "--",
            on_out=diff,
        )  # fmt: skip
        out: dict[str, Any] = {
            "tracked": size[1],
            "untracked": counts["untracked"],
            "hidden": counts["hidden"],
            "diff_sha256": digest.hexdigest() if diffed.ok else None,
            "diff_bytes": size[0],
            "untracked_files": _digests(self.cwd, untracked, self.deadline),
            "untracked_omitted": max(0, counts["untracked"] - len(untracked)),
        }
        problems = []
        if not listed.ok:
            problems.append(f"git ls-files: {listed.stopped or listed.err or f'exit {listed.code}'}")
        if not diffed.ok:
            why = f"longer than {MAX_DIFF_BYTES} bytes" if size[0] > MAX_DIFF_BYTES else diffed.stopped or diffed.err
            problems.append(f"git diff: {why or f'exit {diffed.code}'}")
        if problems:
            out["error"] = printable("; ".join(problems))
        return out


_HEADER = b"\ndiff --git "


def _count_headers(chunk: bytes, carry: list[bytes]) -> int:
    """How many lines of the diff begin ``diff --git `` (one per changed file), counted chunk by chunk.

    ``carry`` holds the previous chunk's last bytes (shorter than the header, so no header is counted
    twice): a header cut across two chunks is still counted once.
    """
    text = carry[0] + chunk
    carry[0] = text[-(len(_HEADER) - 1) :]
    return text.count(_HEADER)


def _digests(root: str, paths: list[bytes], deadline: float) -> list[dict[str, Any]]:
    """Each untracked path's kind, size and SHA-256 (links: of the target text; never followed, never a FIFO)."""
    import hashlib  # OpenSSL's hashes: loaded when a file is hashed, not at start-up

    out: list[dict[str, Any]] = []
    budget = MAX_UNTRACKED_BYTES
    base = os.fsencode(root)
    for rel in sorted(paths):
        entry: dict[str, Any] = {"path": text_value(rel), "kind": "other", "size": 0, "sha256": None}
        out.append(entry)
        full = os.path.join(base, rel)
        try:
            st = os.lstat(full)
            entry["size"] = st.st_size
            if stat.S_ISLNK(st.st_mode):
                entry.update(kind="symlink", sha256=hashlib.sha256(os.readlink(full)).hexdigest())
            elif stat.S_ISREG(st.st_mode):
                entry["kind"] = "file"
                if st.st_size <= budget and time.monotonic() < deadline:
                    entry["sha256"] = _hash_file(full)
                    budget -= st.st_size
        except OSError as exc:
            entry["error"] = printable(exc.strerror or str(exc))
    return out


def _hash_file(path: bytes) -> str:
    import hashlib  # OpenSSL's hashes: loaded when a file is hashed, not at start-up

    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "replaced by a non-regular file")
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()
