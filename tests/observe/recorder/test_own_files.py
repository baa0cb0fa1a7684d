"""The recorder's own files are not changes: `source.dirty` in a fresh user repository (issue 31).

A repository that does not ignore `aos-streams/` (a user's, not this project's) records
`dirty: false` for the stream being written, the default folder the recorder made, earlier
streams there and a captured lane config; any other untracked file still counts, in that
folder too.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.recorder import events
from tests.helpers.run import alpha

FAST = {"ALPHA_OBSERVE_DRAIN": "0", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
FAST["GIT_COMMITTER_EMAIL"] = "t@t"


def fresh_repo(tmp_path: Path) -> Path:
    """A user's repository: one commit, nothing ignored."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, **FAST}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "README").write_text("a project\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "first"], check=True, env=env)
    return repo


def record(repo: Path, *args: str, env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """`alpha observe record ARGS -- true` in ``repo``: the recorded source, and the recorder's stderr."""
    before = set((repo / "aos-streams").glob("*.aos")) if (repo / "aos-streams").is_dir() else set()
    done = alpha(
        "observe",
        "record",
        "--observe-devices",
        "off",
        *args,
        "--",
        "true",
        cwd=repo,
        env={**FAST, **(env or {})},
        text=True,
    )
    assert 0 == done.returncode, done.stderr
    if "--out" in args:
        stream = repo / args[args.index("--out") + 1]
    else:
        (stream,) = set((repo / "aos-streams").glob("*.aos")) - before
    return next(e.attrs for e in events(stream) if e.kind == "stream.open")["source"], done.stderr


def untracked(src: dict[str, Any]) -> list[str]:
    return [f["path"] for f in src.get("changes", {}).get("untracked_files", [])]


def test_default_folder_the_recorder_made_is_not_a_change(tmp_path: Path) -> None:
    """`record -- true` in a fresh repository: the ./aos-streams/ it made holds only its stream: clean."""
    repo = fresh_repo(tmp_path)
    src, _ = record(repo)
    assert (False, []) == (src["dirty"], untracked(src)), src
    assert ["the stream being written"] == [n["why"] for n in src["not_counted"]]
    # A second recording: the first one's stream is the recorder's too.
    src, _ = record(repo)
    assert False is src["dirty"], src
    assert {"the stream being written", "an earlier stream in the recorder's folder"} == {
        n["why"] for n in src["not_counted"]
    }


def test_out_inside_the_checkout_is_not_a_change(tmp_path: Path) -> None:
    repo = fresh_repo(tmp_path)
    src, _ = record(repo, "--out", "run.aos")
    assert (False, [{"path": "run.aos", "why": "the stream being written"}]) == (src["dirty"], src["not_counted"])


def test_captured_lane_config_inside_the_checkout_is_not_a_change(tmp_path: Path) -> None:
    """The docs' `ALPHA_COORDINATE_DEVICE_CONFIG=config.json`, inside the checkout: its bytes are in the stream."""
    repo = fresh_repo(tmp_path)
    (repo / "config.json").write_text(json.dumps({"host": "local", "minors": [0, 1], "transport": "loopback"}))
    src, stderr = record(repo, "--out", "run.aos", env={"ALPHA_COORDINATE_DEVICE_CONFIG": "config.json"})
    assert False is src["dirty"], src
    assert "config.json" in [n["path"] for n in src["not_counted"]]
    assert "working tree is dirty" not in stderr


def test_another_file_in_the_recorders_folder_still_counts(tmp_path: Path) -> None:
    """Forgery: a file in aos-streams/ the recorder did not write (a script, a file named as a stream that is
    not one) is a change; so is any other untracked file. With a device config set, stderr names them."""
    repo = fresh_repo(tmp_path)
    record(repo)  # the folder exists, holding one real stream
    folder = repo / "aos-streams"
    (folder / "x.py").write_text("print('built from here')\n")
    (folder / f"20250101T000000.000000Z-{'0' * 32}.aos").write_text("not a stream\n")
    (repo / "notes.txt").write_text("scratch\n")
    (repo / "README").write_text("a project, edited\n")
    (repo / "config.json").write_text("{}")
    src, stderr = record(repo, env={"ALPHA_COORDINATE_DEVICE_CONFIG": "config.json"})
    assert True is src["dirty"]
    expected = ["aos-streams/20250101T000000.000000Z-" + "0" * 32 + ".aos", "aos-streams/x.py", "notes.txt"]
    assert expected == untracked(src)
    line = next(ln for ln in stderr.splitlines() if "working tree is dirty" in ln)
    assert all(path in line for path in expected), line
    assert "changed: README" in line
    # Without a device config nothing is said (the source is still recorded).
    _, quiet = record(repo)
    assert "working tree is dirty" not in quiet
