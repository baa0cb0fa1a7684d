"""The recorder's rebuild: the recorded commit, checked out fresh, built again, its outputs captured.

For each ``[[rebuild]]`` rule of the gate that applies (its part's and its own
``when`` hold at the start), after the command ended and before the verdict,
``rebuild_for_gate`` appends to the stream a step ``rebuild`` of the recorder's own
(``step.start`` with ``origin: "recorder"``, which no command can send), its
output, the files its ``outputs`` globs match under ``OUT`` (``artifact`` events
with ``origin: "recorder"`` and ``rebuild: RULE``) and its ``step.end``. The gate
compares (gates/rebuild.py). Nothing is run for a source that is not a clean commit.
The word ``OUT`` of the rule's command is a fresh output folder; the word ``CONFIG`` is a
private copy of the lane config the recorder itself captured at the start for the
variable of the rule's part's ``when`` (``origin: recorder``, ``env``), so a lane
built for the roles a config binds is rebuilt for those same roles; with no such
capture the word names a path where no file is, as the command found none.

The checkout never touches the user's repository or tree: a fresh bare repository
in a private temporary folder borrows the user's objects (``objects/info/alternates``)
and has no configuration, hooks or attributes of its own. The commit is the one
recorded at the start, by object id, never a ref; its tree is read into a private
index, which must hold the recorded tree's entries one by one (``ls-tree -r``: a
malformed tree, say two entries of one name, loses one in the index, and
``write-tree`` would only answer the id ``read-tree`` cached), and every file
is written from its blob by this module, the blob's bytes hashed as git hashes
them and compared with its id. So a command that rewrote
``.git`` while it ran (hooks, config, refs, replace refs, even loose objects) cannot
change what is built: the tree built is the recorded one, or the rebuild is
``inconclusive``. The command runs with a small environment (``ENV_KEPT``), stdin
``/dev/null``, in its own session, killed at the rule's ``timeout``.
"""

from __future__ import annotations

import hashlib
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.text import os_text, printable, text_value
from observe.exits import Exit
from observe.recorder import artifacts
from observe.recorder.source import GitResult, git_env, run_git

if TYPE_CHECKING:
    from aos.event import Event
    from aos.writer import StreamWriter
    from gates.language import Gate, RebuildRule
    from observe.recorder.record import RecordOptions
    from observe.secrets.masking import SecretSet

__all__ = ["CONFIG_WORD", "ENV_KEPT", "MAX_OUTPUT", "checkout", "rebuild_for_gate", "recording_secrets", "rules_to_run"]

#: The variables of the recorder's environment the rebuild command gets (no secrets, no ``AOS_*``).
ENV_KEPT = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "SOURCE_DATE_EPOCH")
#: The most bytes of each of the rebuild's stdout and stderr recorded (the rest is counted, not kept).
MAX_OUTPUT = 8 << 20
#: The word of a rebuild command that is replaced by a copy of the lane config the recorder captured.
CONFIG_WORD = "CONFIG"
#: Seconds the checkout may take.
CHECKOUT_TIMEOUT = 300.0


def rules_to_run(gate: Gate, opening: Event) -> list[RebuildRule]:
    """The gate's ``[[rebuild]]`` rules that apply to a recording that began with ``opening``."""
    from gates.engine import holds
    from gates.evidence import Evidence
    from gates.language import RebuildRule

    ev = Evidence([opening])
    return [
        rule
        for part in gate.parts
        if holds(part.when, ev)
        for rule in part.rules
        if isinstance(rule, RebuildRule) and holds(rule.when, ev)
    ]


def rebuild_for_gate(gate: Gate, writer: StreamWriter, options: RecordOptions) -> None:
    """Run every applicable rebuild of ``gate`` and append it to ``writer`` (after the command, before the verdict).

    The recording's start is read back from the writer's private copy; a copy that does not read back
    leaves the rebuild out (the verdict that follows says the copy failed).
    """
    from aos.refusals import StreamWrite
    from gates.language import RebuildRule

    if not any(isinstance(r, RebuildRule) for r in gate.rules):
        return
    wants_config = any(isinstance(r, RebuildRule) and CONFIG_WORD in r.command for r in gate.rules)
    events = writer.iter_written_events()
    captured: list[Event] = []
    try:
        opening = next((e for e in events if e.kind == kinds.STREAM_OPEN), None)
        if wants_config:
            captured = _lane_config_events(events)
    except StreamWrite:
        return
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    if opening is None:
        return
    source = opening.attrs.get("source")
    if not isinstance(source, dict) or "error" in source or source.get("dirty") or not source.get("commit"):
        return  # nothing committed to build from: the gate says why
    cwd = os_text(opening.attrs.get("cwd")) or os.getcwd()
    rules = rules_to_run(gate, opening)
    secrets = recording_secrets(options) if rules else None
    for rule in rules:
        assert secrets is not None
        config = _captured_config(opening, captured, _part_env(gate, rule)) if CONFIG_WORD in rule.command else None
        _Rebuild(rule, source, cwd, writer, secrets, config).run()


def _lane_config_events(events: Iterator[Event]) -> list[Event]:
    """The recorder's captures of lane configs (``origin: recorder`` with ``env``, outside any step) and their
    chunks, read to the end of ``events``."""
    found: list[Event] = []
    paths: set[object] = set()
    for e in events:
        if e.step is not None:
            continue
        if e.kind == kinds.ARTIFACT and e.attrs.get("origin") == "recorder" and isinstance(e.attrs.get("env"), str):
            found.append(e)
            paths.add(e.attrs.get("path"))
        elif e.kind == kinds.ARTIFACT_CHUNK and e.attrs.get("path") in paths:
            found.append(e)
    return found


def _part_env(gate: Gate, rule: RebuildRule) -> str | None:
    """The variable the ``when`` of the part holding ``rule`` names (a lane's config variable), if any."""
    for part in gate.parts:
        if rule in part.rules and part.when is not None:
            return part.when.env
    return rule.when.env if rule.when is not None else None


def _captured_config(opening: Event, captured: list[Event], env: str | None) -> bytes | None:
    """The bytes of the lane config the recorder captured for ``env`` at the start; None when there is none."""
    from gates.evidence import Evidence

    if not env:
        return None
    arts = Evidence([opening, *captured]).artifacts_matching("**", {"origin": "recorder", "env": env})
    return arts[-1].content if arts else None


def recording_secrets(options: RecordOptions) -> SecretSet:
    """The values the recording masks from its start (``--mask``, ``--mask-env``, secret-named variables, the
    ``--sign-key-env`` key), as ``record`` gathers them: the rebuild's output and captures are masked with them.
    Values the command added while it ran (``::add-mask::``) are not among them; the rebuild's small
    environment (``ENV_KEPT``) keeps the secrets of the recorder's own from its command."""
    from observe.recorder.recording import command_environ
    from observe.secrets.sources import secrets_for_recording

    masks: tuple[str, ...] = options.masks
    pem = os.environ.get(options.sign_key_env, "") if options.sign_key_env else ""
    if pem.strip():
        masks = (*masks, pem)
    secrets, _unset = secrets_for_recording(command_environ(options), masks=masks, mask_env=options.mask_env)
    return secrets


def _git_failure(what: str, done: GitResult) -> str:
    return f"{what}: {done.stopped or done.err or f'git exit {done.code}'}"


def checkout(source: dict[str, Any], into: str, work: str, deadline: float) -> str | None:
    """Write the recorded commit's tree into ``into`` (a new folder) using ``work`` (a private folder).

    Returns None when the tree written is exactly the recorded one, else why not.
    """
    commit, tree = str(source.get("commit")), str(source.get("tree"))
    git_dir = os_text(source.get("git_dir"))
    if not git_dir:
        return "the recorded source names no git directory"
    objects = os.path.join(git_dir, "objects")
    repo = os.path.join(work, "repo.git")
    fmt = "sha256" if len(commit) == 64 else "sha1"
    env = git_env()
    env["GIT_INDEX_FILE"] = os.path.join(work, "index")
    made = run_git(
        ["init", "--bare", "-q", "--template=", f"--object-format={fmt}", repo], cwd=work, deadline=deadline, env=env
    )
    if not made.ok:
        return _git_failure("cannot make a private repository", made)
    alternates = os.path.join(repo, "objects", "info", "alternates")
    with open(alternates, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(objects + "\n")

    def git(*args: str, on_out: Callable[[bytes], bool] | None = None) -> GitResult:
        return run_git(["--git-dir", repo, *args], cwd=work, deadline=deadline, env=env, on_out=on_out)

    kind = git("cat-file", "-t", commit)
    if not kind.ok or kind.out.strip() != b"commit":
        return (
            f"commit {commit} is not in the repository at {git_dir} (a shallow clone that lacks it, "
            "or objects removed since the start)"
        )
    named = git("rev-parse", "--verify", "-q", f"{commit}^{{tree}}")
    if not named.ok or named.out.decode("ascii", "replace").strip() != tree:
        got = named.out.decode("ascii", "replace").strip() or "nothing"
        return f"commit {commit} now names tree {got}, not the recorded {tree}: the repository's objects changed"
    read = git("read-tree", tree)
    if not read.ok:
        return _git_failure(f"cannot read tree {tree}", read)
    indexed, problem = _listing(git, ("ls-files", "-s", "-z"), "cannot list the index read from the tree")
    if problem is not None:
        return problem
    recorded, problem = _listing(git, ("ls-tree", "-r", "-z", "--full-tree", tree), f"cannot list tree {tree}")
    if problem is not None:
        return problem
    # ``write-tree`` would answer the id read-tree cached, whatever the index holds: compare entry by entry.
    if indexed != recorded:
        lost = sorted(set(recorded) - set(indexed)) or sorted(set(indexed) - set(recorded)) or recorded
        return (
            f"tree {tree} is malformed: the index read from it is not its {len(recorded)} entries "
            f"(first difference: {lost[0][2]!r}; {len(indexed)} entries read)"
        )
    return _write_tree(repo, env, indexed, into, fmt, deadline)


def _listing(
    git: Callable[..., GitResult], args: tuple[str, ...], what: str
) -> tuple[list[tuple[str, str, bytes]], str | None]:
    """``(mode, oid, path)`` of each entry git lists (``ls-files -s`` or ``ls-tree -r``, both ``-z``), in order."""
    listing = bytearray()

    def keep(chunk: bytes) -> bool:
        listing.extend(chunk)
        return len(listing) < (1 << 30)

    listed = git(*args, on_out=keep)
    if not listed.ok:
        return [], _git_failure(what, listed)
    entries = []
    for item in bytes(listing).split(b"\0"):
        if item:
            head, _, path = item.partition(b"\t")
            fields = head.split(b" ")  # ls-files: mode oid stage; ls-tree: mode type oid
            oid = fields[1] if args[0] == "ls-files" else fields[2]
            entries.append((fields[0].decode(), oid.decode(), path))
    return entries, None


def _safe_path(path: bytes) -> bool:
    parts = path.split(b"/")
    return not path.startswith(b"/") and all(p not in (b"", b".", b"..") and p.lower() != b".git" for p in parts)


def _write_tree(
    repo: str, env: dict[str, str], entries: list[tuple[str, str, bytes]], into: str, fmt: str, deadline: float
) -> str | None:
    """Write each entry's blob from ``git cat-file --batch``, hashing it as git does: it must be its id."""
    blobs = [(m, o, p) for m, o, p in entries if m != "160000"]
    base = os.fsencode(into)
    for mode, _oid, path in entries:
        if not _safe_path(path):
            return f"the tree holds a path that cannot be checked out safely: {path!r}"
        if mode == "160000":  # a submodule: its folder, empty (its commit is in the tree id)
            os.makedirs(os.path.join(base, path), exist_ok=True)
    git = shutil.which("git")
    if git is None:
        return "git is not installed (not on PATH)"
    proc = subprocess.Popen(
        [git, "--git-dir", repo, "cat-file", "--batch"],
        cwd=into,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin = proc.stdin

    def ask() -> None:
        try:
            for _m, oid, _p in blobs:
                stdin.write(oid.encode("ascii") + b"\n")
            stdin.close()
        except OSError:
            pass

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    timer = threading.Timer(max(0.1, deadline - time.monotonic()), proc.kill)
    timer.start()
    try:
        return _read_blobs(proc.stdout, blobs, base, fmt)
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
        proc.stdout.close()
        asker.join(timeout=5)


def _read_blobs(out: Any, blobs: list[tuple[str, str, bytes]], base: bytes, fmt: str) -> str | None:
    for mode, oid, path in blobs:
        header = out.readline()
        parts = header.split()
        if len(parts) != 3 or parts[1] != b"blob":
            return f"blob {oid} of {path.decode('utf-8', 'backslashreplace')} cannot be read: {header[:80]!r}"
        size = int(parts[2])
        digest = hashlib.sha256() if fmt == "sha256" else hashlib.sha1()
        digest.update(b"blob %d\0" % size)
        full = os.path.join(base, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        link = bytearray() if mode == "120000" else None
        fd = None if link is not None else os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            left = size
            while left:
                chunk = out.read(min(left, 1 << 20))
                if not chunk:
                    return f"blob {oid} ended early"
                left -= len(chunk)
                digest.update(chunk)
                if link is not None:
                    link.extend(chunk)
                else:
                    assert fd is not None
                    os.write(fd, chunk)
        finally:
            if fd is not None:
                os.close(fd)
        out.read(1)  # the newline after each object
        if digest.hexdigest() != oid:
            where = path.decode("utf-8", "backslashreplace")
            return f"blob {oid} of {where} hashes to {digest.hexdigest()}: the repository's objects changed"
        if link is not None:
            os.symlink(bytes(link), full)
        else:
            os.chmod(full, 0o755 if mode == "100755" else 0o644)
    return None


class _Rebuild:
    """One rule's rebuild, appended to the stream as it happens."""

    def __init__(
        self,
        rule: RebuildRule,
        source: dict[str, Any],
        cwd: str,
        writer: StreamWriter,
        secrets: SecretSet,
        config: bytes | None = None,
    ) -> None:
        self.rule = rule
        self.config = config
        self.source = source
        self.cwd = cwd
        self.writer = writer
        self.secrets = secrets
        self.span = f"rebuild-{uuid.uuid4().hex}"

    def append(self, kind: str, attrs: dict[str, Any], data: bytes | None = None) -> None:
        from observe.secrets.masking import mask_attrs

        self.writer.append(kind, mask_attrs(attrs, self.secrets), data, self.span)

    def run(self) -> None:
        root = _private_dir(self.cwd)
        try:
            self._run(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def _run(self, root: str) -> None:
        tree, out, work = (os.path.join(root, n) for n in ("tree", "out", "work"))
        for folder in (tree, out, work):
            os.mkdir(folder, 0o700)
        config = os.path.join(work, "lane-config.json")
        argv = [out if word == "OUT" else config if word == CONFIG_WORD else word for word in self.rule.command]
        start: dict[str, Any] = {
            "name": "rebuild",
            "origin": "recorder",
            "rule": self.rule.id,
            "argv": [text_value(a) for a in argv],
            "commit": self.source.get("commit"),
            "tree": self.source.get("tree"),
            "out": text_value(out),
            "parent": None,
            "pid": os.getpid(),
        }
        self.append(kinds.STEP_START, start)
        began = time.monotonic_ns()
        end = {k: start[k] for k in ("name", "origin", "rule", "argv", "parent", "pid")}
        try:
            problem = checkout(self.source, tree, work, time.monotonic() + CHECKOUT_TIMEOUT)
        except (OSError, ValueError) as exc:
            problem = f"the checkout failed: {exc}"
        if problem is None and CONFIG_WORD in self.rule.command and self.config is not None:
            self._write_config(config)
        if problem is not None:
            end.update(exit_code=None, signal=None, duration_ns=time.monotonic_ns() - began, error=printable(problem))
            self.append(kinds.STEP_END, end)
            return
        code, sig, error = self._command(argv, tree)
        if code == 0:
            self._capture(out)
        end.update(exit_code=code, signal=sig, duration_ns=time.monotonic_ns() - began)
        if error:
            end["failure"] = printable(error)
        self.append(kinds.STEP_END, end)

    def _write_config(self, path: str) -> None:
        """Write the captured lane config where the word ``CONFIG`` points (a fresh file of the private folder)."""
        assert self.config is not None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(self.config)

    def _command(self, argv: list[str], tree: str) -> tuple[int | None, str | None, str]:
        """Run the rebuild command in ``tree``; its output is recorded as the step's. (exit, signal, problem)."""
        from observe.secrets.masking import Masker

        env = {k: os.environ[k] for k in ENV_KEPT if k in os.environ}
        try:
            proc = subprocess.Popen(
                argv,
                cwd=tree,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            self.append(kinds.STDERR, {}, printable(f"cannot run {argv[0]}: {exc.strerror or exc}\n").encode())
            return Exit.NOT_FOUND, None, f"cannot run {argv[0]}: {exc.strerror or exc}"
        assert proc.stdout is not None
        assert proc.stderr is not None
        deadline = time.monotonic() + self.rule.timeout
        kept = dict.fromkeys(kinds.OUTPUT, 0)
        maskers = {name: Masker(self.secrets, commands=False) for name in kept}
        problem = ""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, kinds.STDOUT)
            sel.register(proc.stderr, selectors.EVENT_READ, kinds.STDERR)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    problem = f"timed out after {self.rule.timeout:g} s"
                    break
                for key, _ in sel.select(timeout=min(left, 1.0)):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    room = MAX_OUTPUT - kept[key.data]
                    if room > 0:
                        data = maskers[key.data].feed(chunk[:room])
                        kept[key.data] += min(room, len(chunk))
                        if data:
                            self.append(key.data, {}, data)
        for name, masker in maskers.items():
            rest = masker.finish()
            if rest:
                self.append(name, {}, rest)
        if problem:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        code = proc.returncode
        if code < 0:
            return None, signal.Signals(-code).name, problem
        return code, None, problem

    def _capture(self, out: str) -> None:
        """Capture what the ``outputs`` globs match under ``out``, tagged as the recorder's rebuild."""
        tags = {"origin": "recorder", "rebuild": self.rule.id}

        def append(kind: str, attrs: dict[str, Any], data: bytes | None, step: str | None) -> None:
            self.append(kind, attrs if kind == kinds.ARTIFACT_CHUNK else {**attrs, **tags}, data)

        artifacts.capture(append, self.rule.outputs, cwd=out, base=self.cwd, step=self.span, secrets=self.secrets)


def _private_dir(cwd: str) -> str:
    """A new private folder outside the recording's working directory (so rebuilt paths never look like its files)."""
    root = tempfile.mkdtemp(prefix="aos-rebuild-")
    real, base = os.path.realpath(root), os.path.realpath(cwd)
    if real == base or real.startswith(base.rstrip("/") + "/"):
        os.rmdir(root)
        root = tempfile.mkdtemp(prefix="aos-rebuild-", dir="/tmp")
    return root
