"""Artifacts: files captured as an artifact event and their bytes in bounded chunks."""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from blake3 import blake3

from aos.verify import verify_stream
from observe.recorder import artifacts
from observe.secrets.masking import Scanner
from tests.helpers.recorder import events, index, record
from tests.helpers.run import ALPHA


def _files(evs: list[Any]) -> dict[str, dict[str, Any]]:
    return {e.attrs["path"]: e.attrs for e in evs if e.kind == "artifact"}


def _content(evs: list[Any], path: str) -> bytes:
    chunks = [e for e in evs if e.kind == "artifact.chunk" and e.attrs["path"] == path]
    assert [c.attrs["offset"] for c in chunks] == sorted(c.attrs["offset"] for c in chunks)
    return b"".join(c.data or b"" for c in chunks)


class TestRecordArtifacts:
    def test_files_dirs_globs_links_and_missing(self, tmp_path: Path) -> None:
        """--artifact takes files, recursing directories and globs; links stay links; misses are recorded."""
        (tmp_path / "out" / "sub").mkdir(parents=True)
        (tmp_path / "out" / "a.txt").write_bytes(b"alpha\n")
        (tmp_path / "out" / "sub" / "b.bin").write_bytes(os.urandom(3000))
        (tmp_path / "out" / "escape").symlink_to("/etc/hostname")
        (tmp_path / "log1.json").write_text("{}")
        (tmp_path / "log2.json").write_text("[]")
        proc, path = record(
            tmp_path,
            ["sh", "-c", "echo made > made.txt"],
            "--artifact",
            "out",
            "--artifact",
            "*.json",
            "--artifact",
            "made.txt",
            "--artifact",
            "nope*.txt",
            cwd=tmp_path,
        )
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        files = _files(evs)
        assert {"out/a.txt", "out/sub/b.bin", "out/escape", "log1.json", "log2.json", "made.txt"} == set(files)
        for name in ("out/a.txt", "out/sub/b.bin", "log1.json", "made.txt"):
            data = (tmp_path / name).read_bytes()
            attrs = files[name]
            assert data == _content(evs, name)
            assert (len(data), hashlib.sha256(data).hexdigest(), blake3(data).hexdigest(), "inline", "file") == (
                attrs["size"],
                attrs["sha256"],
                attrs["blake3"],
                attrs["content"],
                attrs["kind"],
            )
            assert (tmp_path / name).stat().st_mode & 0o7777 == attrs["mode"]
        link = files["out/escape"]
        assert ("symlink", "/etc/hostname") == (link["kind"], link["target"])
        assert b"" == _content(evs, "out/escape")  # never followed out of the tree
        assert "nope*.txt" == next(e for e in evs if e.kind == "artifact.missing").attrs["pattern"]
        assert index(evs, "process.exit") < index(evs, "artifact")
        verify_stream(path)

    def test_max_bytes_records_hash_only(self, tmp_path: Path) -> None:
        """Above --artifact-max-bytes the file is hashed but its bytes are omitted."""
        (tmp_path / "big").write_bytes(b"x" * 5000)
        (tmp_path / "small").write_bytes(b"y" * 10)
        _proc, path = record(
            tmp_path, ["true"], "--artifact", "big", "--artifact", "small", "--artifact-max-bytes", "100", cwd=tmp_path
        )
        evs = events(path)
        files = _files(evs)
        assert ("omitted", hashlib.sha256(b"x" * 5000).hexdigest(), 5000) == (
            files["big"]["content"],
            files["big"]["sha256"],
            files["big"]["size"],
        )
        assert b"" == _content(evs, "big")
        assert b"y" * 10 == _content(evs, "small")

    def test_absolute_path_outside_cwd(self, tmp_path: Path) -> None:
        """A file outside the working directory keeps its absolute, normalised path."""
        (tmp_path / "work").mkdir()
        (tmp_path / "f").write_text("z")
        _proc, path = record(tmp_path, ["true"], "--artifact", "../f", cwd=tmp_path / "work")
        assert {str(tmp_path / "f")} == set(_files(events(path)))

    def test_artifact_command_captures_during_the_run(self, tmp_path: Path) -> None:
        """alpha observe artifact captures the file as it is then, before process.exit, in the current span."""
        script = (
            "echo one > f.txt; alpha observe artifact f.txt; echo rc=$?; echo two > f.txt;"
            "alpha observe step s -- alpha observe artifact f.txt"
        )
        proc, path = record(tmp_path, ["sh", "-c", script], cwd=tmp_path)
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        arts = [e for e in evs if e.kind == "artifact"]
        assert 2 == len(arts)
        chunks = [e.data for e in evs if e.kind == "artifact.chunk"]
        assert [b"one\n", b"two\n"] == chunks
        assert all(i < index(evs, "process.exit") for i, e in enumerate(evs) if e.kind == "artifact")
        assert arts[0].step is None
        assert arts[1].step == next(e for e in evs if e.kind == "step.start").step
        assert b"rc=0\n" == b"".join(e.data or b"" for e in evs if e.kind == "stdout")

    def test_big_file_is_streamed_with_bounded_memory(self, tmp_path: Path) -> None:
        """A 48 MB artifact is captured in 1 MiB chunks; the recorder's peak RSS stays far below the file's size."""
        big = tmp_path / "big.bin"
        block = os.urandom(1 << 20)
        with big.open("wb") as f:
            for i in range(48):
                f.write(block[i:] + block[:i])
        code = (
            "import resource, subprocess, sys;"
            "subprocess.run(sys.argv[1:], check=True);"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
        )
        out = tmp_path / "a.aos"
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                code,
                ALPHA,
                "observe",
                "record",
                "--quiet",
                "--out",
                str(out),
                "--artifact",
                str(big),
                "--",
                "true",
            ],
            capture_output=True,
            check=True,
        )
        peak_kb = int(probe.stdout.split()[-1])
        # The baseline recorder is ~85 MB; holding the file whole would add 48 MB or more.
        assert peak_kb < 125_000, peak_kb
        evs = events(out)
        chunks = [e for e in evs if e.kind == "artifact.chunk"]
        assert max(len(c.data or b"") for c in chunks) <= artifacts.CHUNK
        digest = hashlib.sha256()
        for c in chunks:
            digest.update(c.data or b"")
        assert hashlib.sha256(big.read_bytes()).hexdigest() == digest.hexdigest()


class TestCaptureLibrary:
    def _capture(self, tmp_path: Path, *patterns: str, **kw: Any) -> list[tuple[str, dict[str, Any], bytes | None]]:
        got: list[tuple[str, dict[str, Any], bytes | None]] = []
        artifacts.capture(lambda k, a, d, s: got.append((k, a, d)), patterns, cwd=str(tmp_path), **kw)
        return got

    def test_unreadable_file_is_recorded_not_skipped(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A file that cannot be opened is an artifact of kind unreadable, with the error."""
        (tmp_path / "secret.txt").write_text("no")
        real_open = os.open

        def deny(path: Any, flags: int, *a: Any) -> int:
            if str(path).endswith("secret.txt"):
                raise PermissionError(13, "Permission denied")
            return real_open(path, flags, *a)

        monkeypatch.setattr(os, "open", deny)
        got = self._capture(tmp_path, "secret.txt")
        assert [("artifact", "unreadable", "Permission denied", None)] == [
            (k, a["kind"], a["error"], a["sha256"]) for k, a, _ in got
        ]

    def test_file_changing_during_capture_is_flagged(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """When the bytes read for the chunks differ from the bytes hashed, an artifact.error says so."""
        f = tmp_path / "f"
        f.write_bytes(b"a" * 100)
        real = artifacts._hash

        def hash_then_change(fd: int, scanner: Scanner, stop: Callable[[], bool]) -> tuple[int, str, str]:
            result = real(fd, scanner, stop)
            f.write_bytes(b"b" * 100)
            return result

        monkeypatch.setattr(artifacts, "_hash", hash_then_change)
        got = self._capture(tmp_path, "f")
        assert ["artifact", "artifact.chunk", "artifact.error"] == [k for k, _, _ in got]
        assert "changed" in got[-1][1]["error"]

    def test_relative_name(self) -> None:
        """Paths are relative to the working directory when inside it, absolute otherwise."""
        assert "a/b" == artifacts.relative_name("./a//c/../b", "/w")
        assert "/x/y" == artifacts.relative_name("../x/y", "/w")
        assert "/x/y" == artifacts.relative_name("/x/y", "/w")


def test_rusage_probe_is_meaningful() -> None:
    """RUSAGE_CHILDREN reports kilobytes on Linux (the memory test depends on it)."""
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 1000
