"""Sizes and durations read one way in `show`, the HTML report and the tracker's site, whatever a stream holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from aos.writer import StreamWriter
from observe.cli.root import main
from observe.readback.summary import format_summary, summarize
from observe.util.formatting import seconds, size
from tracker import records
from tracker.attach import attach
from tracker.db import init

#: A size no float can hold: ``float(HUGE)`` raises OverflowError.
HUGE = 10**400


class TestSize:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (1536, "1.5 KiB"),
            (5 << 20, "5.0 MiB"),
            (3 << 30, "3.0 GiB"),
            (1 << 40, "1024.0 GiB"),
            (-5, "-5 B"),
            (1 << 60, f"{1 << 60} B"),
            (2**70, f"{2**70} B"),
            (HUGE, f"{HUGE} B"),
            (None, "?"),
            (True, "?"),
            ("12", "?"),
            (1.5, "?"),
        ],
    )
    def test_size(self, value: object, expected: str) -> None:
        """A byte count in binary units to one place; an integer too large for a float whole; a non-integer ``?``."""
        assert expected == size(value)


class TestSeconds:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (0, "0.00 s"),
            (1_250_000_000, "1.25 s"),
            (-1_000_000_000, "-1.00 s"),
            (1 << 62, f"{1 << 62} ns"),
            (HUGE, f"{HUGE} ns"),
            (None, "?"),
            (False, "?"),
            ("1", "?"),
        ],
    )
    def test_seconds(self, value: object, expected: str) -> None:
        """Nanoseconds as seconds to two places; beyond a float's reach the nanoseconds whole; a non-integer ``?``."""
        assert expected == seconds(value)


def huge_artifact_stream(path: Path, gate: str) -> None:
    """A sealed stream whose recorded command claims an artifact of ``HUGE`` bytes (the attrs are its to write)."""
    w = StreamWriter(path, background_flush=False, fsync="never")
    try:
        w.append("stream.open", {"stream_id": w.stream_id, "argv": ["true"], "gate": gate})
        w.append("process.start", {"pid": 1, "argv": ["true"]})
        w.append("artifact", {"path": "big.bin", "size": HUGE, "sha256": "ab" * 32, "content": "omitted"})
        exit_seq = w.append(
            "process.exit", {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": HUGE, "rusage": {}}
        )
        checks = [{"name": "exit-zero", "status": "pass", "reason": "exit 0", "evidence": [exit_seq]}]
        w.append("verdict", {"gate": gate, "verdict": "pass", "scope": "static", "checks": checks})
        w.seal()
    finally:
        w.close()


def test_the_site_shows_a_huge_artifact_size(tmp_path: Path) -> None:
    """`alpha tracker site` renders a run whose stream claims an artifact of 10**400 bytes (it raised
    OverflowError), showing the size whole, as `show` does."""
    db = str(tmp_path / "t.sqlite3")
    conn = init(db)
    try:
        run = records.start_run(conn, lane="exit-zero")
        huge_artifact_stream(tmp_path / "huge.aos", "exit-zero")
        attach(conn, tmp_path / "huge.aos", run)
    finally:
        conn.close()
    result = CliRunner().invoke(main, ["tracker", "--db", db, "site", str(tmp_path / "site")])
    assert (0, None) == (result.exit_code, result.exception), result.output
    pages = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "site").rglob("*.html"))
    assert f"{HUGE} B" in pages
    assert f"big.bin  {HUGE} B  sha256" in format_summary(summarize(tmp_path / "huge.aos"))
