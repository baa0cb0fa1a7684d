"""The rebuild's checkout is the recorded tree entry by entry, or refused (a malformed tree loses entries)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from observe.recorder.rebuild import checkout

IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=data,
        capture_output=True,
        check=True,
        env={**IDENTITY, "PATH": "/usr/bin:/bin"},
    )
    return done.stdout.decode().strip()


def commit_of(repo: Path, entries: list[tuple[bytes, str]]) -> dict[str, str]:
    """A commit whose tree holds exactly ``entries`` (name, blob id), in that order, as written: the source
    the recorder records for it."""
    raw = b"".join(b"100644 " + name + b"\0" + bytes.fromhex(oid) for name, oid in entries)
    tree = git(repo, "hash-object", "-t", "tree", "--literally", "-w", "--stdin", data=raw)
    commit = git(repo, "commit-tree", tree, "-m", "recorded")
    return {"commit": commit, "tree": tree, "git_dir": str(repo / ".git")}


def test_a_malformed_tree_is_refused_and_a_sound_one_checked_out(tmp_path: Path) -> None:
    """A tree with two entries named ``a`` reads into an index of one: the checkout refuses it, naming the
    tree, instead of reporting the exact tree (``write-tree`` answers the id read-tree cached). The same
    blobs in a sound tree are checked out."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    one = git(repo, "hash-object", "-w", "--stdin", data=b"one\n")
    two = git(repo, "hash-object", "-w", "--stdin", data=b"two\n")

    def run(source: dict[str, str], name: str) -> tuple[str | None, Path]:
        into, work = tmp_path / f"{name}-tree", tmp_path / f"{name}-work"
        into.mkdir()
        work.mkdir()
        return checkout(source, str(into), str(work), time.monotonic() + 60), into

    malformed = commit_of(repo, [(b"a", one), (b"a", two), (b"b", two)])
    problem, _ = run(malformed, "malformed")
    assert problem is not None
    assert f"tree {malformed['tree']} is malformed" in problem, problem

    sound = commit_of(repo, [(b"a", one), (b"b", two)])
    problem, into = run(sound, "sound")
    assert None is problem
    assert {"a": b"one\n", "b": b"two\n"} == {p.name: p.read_bytes() for p in into.iterdir()}
