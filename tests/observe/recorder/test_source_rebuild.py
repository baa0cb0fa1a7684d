"""Source identity (stream.open's `source`) and rebuild identity (`[[rebuild]]`), through `alpha observe gate`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from aos.event import Event
from aos.text import value_bytes
from gates.engine import evaluate
from gates.language import GateFileError, parse_gate_text
from gates.registry import resolve_gate
from observe.recorder import source as source_mod
from observe.recorder.source import record_source
from tests.helpers.paths import ROOT
from tests.helpers.recorder import events
from tests.helpers.run import alpha

GATE = """
[gate]
name = "rebuilt"

[exit]
code = 0

[[rebuild]]
command = ["sh", "build.sh", "OUT"]
outputs = ["**"]
"""

BUILD = 'mkdir -p "$1" && printf "#!/bin/sh\\necho app %s\\n" "$(cat version)" > "$1/app" && chmod +x "$1/app"\n'
STAMPED = 'mkdir -p "$1" && date +%s%N > "$1/app" && chmod +x "$1/app"\n'
#: The run builds into out/ and captures the executable.
RUN = "sh build.sh out && alpha observe artifact out/app"
FAST = {"ALPHA_OBSERVE_DRAIN": "0", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
FAST["GIT_COMMITTER_EMAIL"] = "t@t"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env={**os.environ, **FAST}
    ).stdout.strip()


def make_repo(tmp_path: Path, build: str = BUILD) -> Path:
    """A committed repository whose build.sh builds out/app from `version`."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "build.sh").write_text(build)
    (repo / "version").write_text("1\n")
    (repo / ".gitignore").write_text("out/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")
    return repo


def gate(tmp_path: Path, cwd: Path, command: str) -> tuple[list[Event], dict[str, Any]]:
    """`alpha observe gate rebuilt -- sh -c COMMAND` in ``cwd``: the stream's events and its `rebuild` check."""
    gate_file = tmp_path / "rebuilt.toml"
    gate_file.write_text(GATE)
    out = tmp_path / f"run-{len(list(tmp_path.glob('run-*.aos')))}.aos"
    args = ["observe", "gate", "--gate-file", str(gate_file), "rebuilt", "--out", str(out), "--quiet"]
    done = alpha(*args, "--observe-devices", "off", "--", "sh", "-c", command, cwd=cwd, env=FAST)
    assert out.exists(), done.stderr
    evs = events(out)
    verdict = next(e.attrs for e in evs if e.kind == "verdict")
    return evs, next(c for c in verdict["checks"] if c["name"] == "rebuild")


def opened(evs: list[Event]) -> dict[str, Any]:
    return next(e.attrs for e in evs if e.kind == "stream.open")


class TestSource:
    def test_clean_repository_names_its_commit(self, tmp_path: Path) -> None:
        """A clean checkout: commit, tree, branch, masked remote, clean; and its executable rebuilds: pass."""
        repo = make_repo(tmp_path)
        git(repo, "remote", "add", "origin", "https://someone:hunter2@example.com/r.git")
        evs, check = gate(tmp_path, repo, RUN)
        src = opened(evs)["source"]
        expected = {
            "commit": git(repo, "rev-parse", "HEAD"),
            "tree": git(repo, "rev-parse", "HEAD^{tree}"),
            "branch": "main",
            "remote": "https://***@example.com/r.git",
            "dirty": False,
        }
        assert expected == {k: src[k] for k in expected}
        assert "changes" not in src
        assert ("pass", True) == (check["status"], "out/app" in check["reason"]), check

    def test_tracked_edit_and_untracked_file_recorded_as_at_start(self, tmp_path: Path) -> None:
        """A tracked edit and an untracked file before the start are recorded; the command's later edits are not."""
        repo = make_repo(tmp_path)
        (repo / "version").write_text("2\n")
        (repo / "notes.txt").write_bytes(b"untracked\n")
        diff = subprocess.run(["git", "-C", str(repo), "diff", "--binary", "HEAD"], capture_output=True, check=True)
        evs, check = gate(tmp_path, repo, "echo 3 > version && echo more > other.txt && " + RUN)
        changes = opened(evs)["source"]["changes"]
        assert (1, 1, hashlib.sha256(diff.stdout).hexdigest()) == (
            changes["tracked"],
            changes["untracked"],
            changes["diff_sha256"],
        )
        expected = [
            {"path": "notes.txt", "kind": "file", "size": 10, "sha256": hashlib.sha256(b"untracked\n").hexdigest()}
        ]
        assert expected == changes["untracked_files"]
        assert True is opened(evs)["source"]["dirty"]
        assert "inconclusive" == check["status"]
        assert "dirty" in check["reason"]
        assert "out/app" in check["reason"]

    def test_edit_made_by_the_command_after_start_fails(self, tmp_path: Path) -> None:
        """Clean at the start, then the command edits a tracked file and builds from it: recorded clean, and the
        executable, built from an uncommitted change, is not what the commit builds: fail, naming it."""
        repo = make_repo(tmp_path)
        evs, check = gate(tmp_path, repo, "echo 2 > version && " + RUN)
        assert False is opened(evs)["source"]["dirty"]
        assert "fail" == check["status"], check
        assert "out/app" in check["reason"]
        assert "differ" in check["reason"]

    def test_build_that_embeds_a_timestamp_fails_naming_the_file(self, tmp_path: Path) -> None:
        """A build that is not reproducible (a timestamp in the executable) fails, with both digests named."""
        repo = make_repo(tmp_path, STAMPED)
        _evs, check = gate(tmp_path, repo, RUN)
        assert "fail" == check["status"], check
        assert "out/app (sha256 " in check["reason"]
        assert "rebuilt app: " in check["reason"]

    def test_no_repository_is_inconclusive(self, tmp_path: Path) -> None:
        """Outside any repository the source is null and the rebuild inconclusive, saying why."""
        plain = tmp_path / "plain"
        plain.mkdir()
        (plain / "build.sh").write_text(BUILD)
        (plain / "version").write_text("1\n")
        evs, check = gate(tmp_path, plain, RUN)
        assert None is opened(evs)["source"]
        assert ("inconclusive", True) == (check["status"], "no git repository" in check["reason"]), check


class TestHostileRepository:
    def test_rewriting_git_during_the_run_cannot_change_the_checkout(self, tmp_path: Path) -> None:
        """The command commits a new version, moves the branch, adds a replace ref, plants a hook, fsmonitor and a
        filter: the recorder still builds the recorded commit (so the run's executable differs: fail), and
        nothing it planted ran."""
        repo = make_repo(tmp_path)
        recorded = git(repo, "rev-parse", "HEAD")
        marker = tmp_path / "ran"
        evil = tmp_path / "evil.sh"
        evil.write_text(f"#!/bin/sh\necho ran >> {marker}\ncat\n")
        evil.chmod(0o755)
        hostile = (
            "echo 2 > version && git commit -qam second && "
            f"git replace {recorded} HEAD && "
            f"mkdir -p .git/hooks && cp {evil} .git/hooks/post-checkout && cp {evil} .git/hooks/pre-commit && "
            f"git config core.fsmonitor {evil} && git config filter.x.smudge {evil} && "
            f"git config filter.x.clean {evil} && git config diff.external {evil} && "
            "echo '* filter=x' > .git/info/attributes && " + RUN
        )
        evs, check = gate(tmp_path, repo, hostile)
        start = next(e for e in evs if e.kind == "step.start" and e.attrs.get("origin") == "recorder")
        assert (recorded, recorded) == (opened(evs)["source"]["commit"], start.attrs["commit"])
        assert "fail" == check["status"], check
        assert not marker.exists()

    def test_replaced_loose_object_is_inconclusive(self, tmp_path: Path) -> None:
        """The command swaps a loose object's bytes for another blob's: the checkout does not hash to the
        recorded tree, so the rebuild is inconclusive, never built from the swapped bytes."""
        repo = make_repo(tmp_path)
        blob = git(repo, "rev-parse", "HEAD:version")
        swap = (
            "other=$(echo 9 | git hash-object -w --stdin) && "
            f"chmod u+w .git/objects/{blob[:2]}/{blob[2:]} && "
            "cp .git/objects/$(echo $other | cut -c1-2)/$(echo $other | cut -c3-) "
            f".git/objects/{blob[:2]}/{blob[2:]} && " + RUN
        )
        _evs, check = gate(tmp_path, repo, swap)
        assert ("inconclusive", True) == (check["status"], "hashes to" in check["reason"]), check

    def test_commit_missing_from_the_repository_is_inconclusive(self, tmp_path: Path) -> None:
        """A repository that no longer holds the recorded commit (a shallow or partial clone that lacks it,
        objects removed) is inconclusive, naming the commit."""
        repo = make_repo(tmp_path)
        evs, check = gate(tmp_path, repo, RUN + " && rm -rf .git/objects/??")
        commit = opened(evs)["source"]["commit"]
        assert "inconclusive" == check["status"], check
        assert f"commit {commit} is not in the repository" in check["reason"]

    def test_shallow_clone_holding_the_commit_rebuilds(self, tmp_path: Path) -> None:
        """A shallow clone (depth 1) holds its commit: recorded as shallow, and the rebuild passes."""
        repo = make_repo(tmp_path)
        (repo / "version").write_text("2\n")
        git(repo, "commit", "-qam", "second")
        clone = tmp_path / "clone"
        git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
        evs, check = gate(tmp_path, clone, RUN)
        assert True is opened(evs)["source"]["shallow"]
        assert "pass" == check["status"], check

    def test_hostile_config_never_runs_while_the_source_is_read(self, tmp_path: Path) -> None:
        """A repository whose own config names an fsmonitor, an external diff and a clean filter (with attributes
        that apply it) is read without running any of them."""
        repo = make_repo(tmp_path)
        marker = tmp_path / "ran"
        evil = tmp_path / "evil.sh"
        evil.write_text(f"#!/bin/sh\necho ran >> {marker}\ncat\n")
        evil.chmod(0o755)
        for key in ("core.fsmonitor", "diff.external", "filter.x.clean", "filter.x.process", "core.pager"):
            git(repo, "config", key, str(evil))
        (repo / ".git" / "info" / "attributes").write_text("* filter=x diff=x\n")
        git(repo, "config", "diff.x.textconv", str(evil))
        (repo / "version").write_text("2\n")
        os.utime(repo / "version", (1, 1))  # stat-dirty: git must hash it, through the filter if it could
        src = record_source(str(repo))
        assert src is not None
        assert (True, 1) == (src["dirty"], src["changes"]["tracked"])
        assert not marker.exists()

    def test_repository_git_refuses_is_recorded_as_refused(self, tmp_path: Path) -> None:
        """A repository owned by someone else is refused by git (no safe.directory is followed): recorded so."""
        if os.geteuid() != 0:
            pytest.skip("needs root to give the repository to another user")
        repo = make_repo(tmp_path)
        shutil.chown(repo, user=65534)
        src = record_source(str(repo))
        assert src is not None
        assert "dubious ownership" in src["error"]


class TestBounds:
    def test_non_utf8_paths_are_recorded_as_bytes(self, tmp_path: Path) -> None:
        """An untracked file whose name is not UTF-8 is recorded by its exact bytes."""
        repo = make_repo(tmp_path)
        name = b"caf\xe9.txt"
        with open(os.path.join(os.fsencode(repo), name), "wb") as f:
            f.write(b"x")
        src = record_source(str(repo))
        assert src is not None
        (entry,) = src["changes"]["untracked_files"]
        assert (name, hashlib.sha256(b"x").hexdigest()) == (value_bytes(entry["path"]), entry["sha256"])

    def test_huge_diff_is_hashed_in_bounds(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A diff longer than the bound is not hashed whole: its digest is null, the reason given, the read bounded."""
        monkeypatch.setattr(source_mod, "MAX_DIFF_BYTES", 64 << 10)
        repo = make_repo(tmp_path)
        (repo / "version").write_bytes(os.urandom(4 << 20).hex().encode())
        src = record_source(str(repo))
        assert src is not None
        changes = src["changes"]
        assert (None, True, True) == (
            changes["diff_sha256"],
            "longer than" in changes["error"],
            changes["diff_bytes"] <= (64 << 10) + (64 << 10),
        )

    def test_untracked_files_are_listed_in_bounds(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past the bound untracked files are counted, not listed."""
        monkeypatch.setattr(source_mod, "MAX_UNTRACKED", 2)
        repo = make_repo(tmp_path)
        for i in range(5):
            (repo / f"u{i}").write_text(str(i))
        src = record_source(str(repo))
        assert src is not None
        changes = src["changes"]
        assert (5, 2, 3) == (changes["untracked"], len(changes["untracked_files"]), changes["untracked_omitted"])


class TestGateRule:
    def test_forged_rebuild_step_does_not_pass(self, tmp_path: Path) -> None:
        """The command's own step named `rebuild`, with a copy of its executable, is not the recorder's rebuild."""
        repo = make_repo(tmp_path, STAMPED)
        forged = RUN + " && alpha observe step rebuild -- sh -c 'mkdir -p /tmp/x && cp out/app /tmp/x/app'"
        _evs, check = gate(tmp_path, repo, forged)
        assert "fail" == check["status"], check

    def test_bad_rebuild_tables_are_refused(self) -> None:
        """`outputs` must be relative to OUT and `command` non-empty."""
        for body in ('command = ["make"]\noutputs = ["/etc/*"]', 'command = []\noutputs = ["a"]'):
            with pytest.raises(GateFileError):
                parse_gate_text(f'[gate]\nname = "g"\n[[rebuild]]\n{body}\n', "g.toml")

    def test_streams_recorded_before_sources_keep_their_checks(self) -> None:
        """A stream.open without `source` (an older recorder) gets no source or rebuild check; one with it does."""
        env = {"ALPHA_PARTITIONED_DEVICE_CONFIG": "c.json"}
        old = Event(0, 0, 0, "stream.open", None, json.dumps({"env": env}), None, b"")
        new = Event(0, 0, 0, "stream.open", None, json.dumps({"env": env, "source": None}), None, b"")
        names = [{c.name for c in evaluate(resolve_gate("distributed-device"), [e]).checks} for e in (old, new)]
        assert (set(), {"source", "rebuild"}) == ({"source", "rebuild"} & names[0], {"source", "rebuild"} & names[1])


@pytest.mark.slow  # the reference lane runs to its preflight and rebuilds
def test_reference_lane_rebuilds_from_its_commit(tmp_path: Path) -> None:
    """The reference lane, committed: its physical part (here stopped at the preflight) rebuilds the static
    executables from the commit byte for byte: rebuild passes, and the source check says the tree was clean."""
    repo = tmp_path / "lane"
    repo.mkdir()
    for part in ("scripts", "samples/lane"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / ".gitignore").write_text("OUT/\n__pycache__/\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "lane")
    out = tmp_path / "lane.aos"
    env = {**FAST, "ALPHA_PARTITIONED_DEVICE_CONFIG": str(tmp_path / "absent.json")}
    args = ["observe", "gate", "distributed-device", "--out", str(out), "--quiet", "--observe-devices", "off"]
    alpha(*args, "--", "bash", "scripts/ci/distributed-device.sh", "OUT", cwd=repo, env=env, timeout=180)
    verdict = next(e.attrs for e in events(out) if e.kind == "verdict")
    checks = {c["name"]: c for c in verdict["checks"]}
    assert "pass" == checks["rebuild"]["status"], checks["rebuild"]
    assert "OUT/static/owner-0.pyz" in checks["rebuild"]["reason"]
    assert "clean at the start" in checks["source"]["reason"]


def _repos(tmp_path: Path) -> dict[str, Path]:
    """Places a recording can start from: a repository with a commit (clean and dirty, a SHA-256 one, a shallow
    clone), one with no commit yet, a .git folder, a plain folder."""

    def git(cwd: Path, *args: str) -> None:
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)

    def repo(name: str, *init: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        git(path, "init", "-q", *init)
        git(path, "config", "user.email", "t@example.com")
        git(path, "config", "user.name", "t")
        (path / "f").write_text("1\n")
        git(path, "add", "f")
        git(path, "commit", "-qm", "one")
        return path

    places = {"clean": repo("clean"), "sha256": repo("sha256", "--object-format=sha256")}
    places["dirty"] = repo("dirty")
    (places["dirty"] / "f").write_text("2\n")
    (places["dirty"] / "new").write_text("x\n")
    places["shallow"] = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{places['clean']}", "shallow")
    places["unborn"] = tmp_path / "unborn"
    places["unborn"].mkdir()
    git(places["unborn"], "init", "-q")
    places["dotgit"] = places["clean"] / ".git"
    places["plain"] = tmp_path / "plain"
    places["plain"].mkdir()
    return places


class OneByOne(source_mod._Reader):
    """The reading as it was before issue 39: each fact from a git process of its own."""

    def together(self) -> list[str] | None:
        return None


def test_one_rev_parse_reads_what_four_did(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source read with one rev-parse for the work tree, commit, tree and shallowness is the one read a fact
    at a time, in every kind of place (refusals included); a clean repository takes 5 git processes, not 8, and a
    folder outside any repository one."""
    runs: list[str] = []
    real = source_mod.run_git

    def counted(args: Any, **kw: Any) -> Any:
        runs.append(args[0])
        return real(args, **kw)

    monkeypatch.setattr(source_mod, "run_git", counted)
    for name, place in _repos(tmp_path).items():
        runs.clear()
        now = source_mod._Reader(str(place), time.monotonic() + 60, source_mod.OwnFiles())
        got: Any = source_mod.record_source(str(place))
        count = len(runs)
        try:
            was: Any = OneByOne(str(place), time.monotonic() + 60, source_mod.OwnFiles()).read()
        except source_mod._Refused as exc:
            was = {"error": str(exc)}
        assert got == was, name
        assert now.together() is not None or name in ("unborn", "dotgit", "plain"), name
        if name == "clean":
            assert count == 5
        if name == "plain":
            assert got is None
            assert count == 1
        if name == "unborn":
            assert "no commit" in got["error"]
        if name == "shallow":
            assert got["shallow"] is True
        if name == "sha256":
            assert got["object_format"] == "sha256"
