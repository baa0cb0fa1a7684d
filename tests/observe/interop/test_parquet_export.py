"""``alpha observe export --format parquet``: one verified stream's events, the columns of query's ``events``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from observe.query.run import EVENT_COLUMNS, run_query
from tests.helpers.run import alpha
from tracker.testing import sealed_stream


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    """ci.aos (a real gated recording with a step) and ci.parquet, its export, as the --help example writes it."""
    gate = alpha(
        *["observe", "gate", "exit-zero", "--quiet", "--out", "ci.aos", "--"],
        *["sh", "-c", "printf 'hello\\n'; alpha observe step build -- printf 'built\\n'"],
        cwd=tmp_path,
        timeout=120,
    )
    assert 0 == gate.returncode, gate.stderr
    done = alpha("observe", "export", "ci.aos", "--format", "parquet", "-o", "ci.parquet", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    return tmp_path


def test_the_events_of_query(exported: Path) -> None:
    """The file holds what `alpha observe query` gives as `events` for the stream, row for row."""
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    got = con.execute("SELECT * FROM read_parquet(?) ORDER BY seq", [str(exported / "ci.parquet")])
    columns = [d[0] for d in got.description]
    rows = got.fetchall()
    want = run_query("SELECT * FROM events ORDER BY seq", [str(exported / "ci.aos")])
    assert list(EVENT_COLUMNS) == columns == want.columns
    attrs = columns.index("attrs")
    assert len(want.rows) == len(rows) > 5
    for mine, theirs in zip(rows, want.rows, strict=True):
        assert json.loads(mine[attrs]) == json.loads(theirs[attrs])
        assert mine[:attrs] + mine[attrs + 1 :] == theirs[:attrs] + theirs[attrs + 1 :]
    assert ("exit-zero", "pass") == (rows[0][columns.index("gate")], rows[0][columns.index("verdict")])
    assert ["build"] == [r[columns.index("name")] for r in rows if r[columns.index("kind")] == "step.end"]


def test_metadata_names_the_stream(exported: Path) -> None:
    import pyarrow.parquet as pq

    from aos.verify import verify_stream

    v = verify_stream(exported / "ci.aos")
    meta = pq.read_schema(exported / "ci.parquet").metadata
    assert {b"aos.stream_id": v.stream_id, b"aos.file_blake3": v.file_blake3, b"aos.head": v.head} == {
        k: meta[k].decode() for k in (b"aos.stream_id", b"aos.file_blake3", b"aos.head")
    }


def test_datafusion_reads_it(exported: Path) -> None:
    from datafusion import SessionContext

    ctx = SessionContext()
    ctx.register_parquet("events", str(exported / "ci.parquet"))
    kinds = ctx.sql("SELECT kind FROM events ORDER BY seq").to_pydict()["kind"]
    assert ("stream.open", "seal") == (kinds[0], kinds[-1])


def test_deterministic(tmp_path: Path) -> None:
    """The same stream exports to the same bytes."""
    sealed_stream(tmp_path / "s.aos")
    for out in ("a.parquet", "b.parquet"):
        done = alpha("observe", "export", "s.aos", "--format", "parquet", "-o", out, cwd=tmp_path)
        assert 0 == done.returncode, done.stderr
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
