"""No tracebacks: bad places to write, bad tuning variables, odd attribute types (issue 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aos.writer import StreamWriter
from tests.helpers.recorder import events, record
from tests.helpers.run import alpha


class TestWhereTheStreamGoes:
    def test_stream_folder_is_a_file(self, tmp_path: Path) -> None:
        """With the default --out, ./aos-streams being a file is stream-write (125); the command does not run."""
        (tmp_path / "aos-streams").write_text("not a folder")
        proc = alpha("observe", "record", "--", "touch", "ran", cwd=tmp_path)
        assert 125 == proc.returncode
        assert proc.stderr.startswith(b"refused: stream-write: "), proc.stderr
        assert b"Traceback" not in proc.stderr
        assert not (tmp_path / "ran").exists()

    @pytest.mark.parametrize("command", ["record", "gate"])
    def test_out_is_a_directory(self, tmp_path: Path, command: str) -> None:
        """--out naming an existing directory is refused as stream-write with exit 125, not a usage error."""
        args = ["observe", "record"] if command == "record" else ["observe", "gate", "exit-zero"]
        proc = alpha(*args, "--out", str(tmp_path), "--", "touch", str(tmp_path / "ran"))
        assert 125 == proc.returncode, proc.stderr
        assert proc.stderr.startswith(b"refused: stream-write: "), proc.stderr
        assert not (tmp_path / "ran").exists()


class TestTuningVariables:
    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("ALPHA_OBSERVE_ZSTD_LEVEL", "nan"),
            ("ALPHA_OBSERVE_ZSTD_LEVEL", "inf"),
            ("ALPHA_OBSERVE_ZSTD_LEVEL", "1e9"),
            ("ALPHA_OBSERVE_ZSTD_LEVEL", "2.5"),
            ("ALPHA_OBSERVE_ZSTD_LEVEL", "fast"),
            ("ALPHA_OBSERVE_DRAIN", "nan"),
            ("ALPHA_OBSERVE_DRAIN", "-1"),
            ("ALPHA_OBSERVE_KILL_GRACE", "inf"),
        ],
    )
    def test_garbage_is_ignored_with_a_warning(self, tmp_path: Path, name: str, value: str) -> None:
        """A tuning variable that is not a sensible number is ignored with a warning; the recording works."""
        proc, path = record(tmp_path, ["echo", "hi"], env={name: value}, timeout=60)
        assert 0 == proc.returncode, proc.stderr
        assert b"Traceback" not in proc.stderr
        assert b"ignoring a bad tuning variable" in proc.stderr
        assert name.encode() in proc.stderr
        assert b"hi\n" == b"".join(e.data or b"" for e in events(path) if e.kind == "stdout")


def _odd_stream(path: Path) -> None:
    """A sealed stream whose attrs have every type where another is expected."""
    with StreamWriter(path) as w:
        w.append("stream.open", {"stream_id": 7, "argv": 5, "cwd": [1], "host": {}, "labels": ["a"], "gate": 3})
        w.append("step.start", {"name": ["x"], "parent": [1]}, step="s1")
        w.append("step.end", {"exit_code": "zero", "duration_ns": "long"}, step="s1")
        w.append("receipt", {"name": {"a": 1}, "status": [], "fields": "f"})
        w.append("artifact", {"path": 3, "size": "big", "sha256": 5})
        w.append("artifact", {"path": "p", "size": -4, "sha256": None})
        w.append("process.exit", {"exit_code": [], "signal": 9, "timed_out": "yes", "duration_ns": "x"})
        w.append("verdict", {"gate": [], "verdict": 1, "scope": {}, "checks": {"a": 1}})
        w.append("verdict", {"gate": "g", "verdict": "pass", "scope": "s", "checks": [1, "x", {"status": []}]})
        w.seal()


class TestOddAttributeTypes:
    def test_show_prints_without_traceback(self, tmp_path: Path) -> None:
        """show summarises a stream whose attrs have unexpected types instead of printing a traceback."""
        path = tmp_path / "odd.aos"
        _odd_stream(path)
        proc = alpha("observe", "show", str(path))
        assert b"Traceback" not in proc.stderr, proc.stderr
        assert 0 == proc.returncode, proc.stderr
        assert b"integrity  intact and sealed" in proc.stdout
