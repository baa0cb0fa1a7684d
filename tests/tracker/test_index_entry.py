"""``attach`` and ``tracker import`` write the evidence index too: a stream is verified once where it enters.

The row comes from the verification that admitted the stream (never a second
one), is written only once the tracker recorded it, and lies in the index of
the tracker's folder (an SQLite tracker) or of ``--index STORE``; ``--no-index``
writes none. A refused attach or import writes no row.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.verify import verify_stream
from observe.store import open_store, push
from observe.store_index import Appender, read_index
from tests.helpers.cli import Cli
from tests.helpers.refusals import refused
from tests.helpers.s3 import S3Bucket
from tests.tracker.test_import import small_source
from tracker import records
from tracker.attach import attach
from tracker.backends import Connection
from tracker.db import init
from tracker.importing import import_tracker
from tracker.testing import sealed_stream


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Connection]:
    """An SQLite tracker in tmp_path/t with one running run."""
    (tmp_path / "t").mkdir()
    c = init(tmp_path / "t" / "progress.sqlite3")
    records.start_run(c, lane="distributed-device")
    yield c
    c.close()


def the_run(conn: Connection) -> str:
    return str(conn.execute("SELECT id FROM runs").fetchone()[0])


def index_of(store: Path | str) -> list[dict[str, Any]]:
    rows, _ = read_index(open_store(store))
    got: list[dict[str, Any]] = rows.to_pylist()
    return got


class TestAttach:
    def test_attach_appends_the_row_it_verified(self, conn: Connection, tmp_path: Path) -> None:
        path = tmp_path / "a.aos"
        sealed_stream(path, verdict="fail", scope="physical")
        v = verify_stream(path)
        attach(conn, path, the_run(conn), index=Appender(open_store(tmp_path / "t")))
        ((row,),) = [index_of(tmp_path / "t")]
        assert (v.stream_id, v.file_blake3, v.head, "fail", "physical", "attach", path.resolve().as_uri()) == (
            row["stream_id"],
            row["file_blake3"],
            row["head"],
            row["verdict"],
            row["scope"],
            row["entered_by"],
            row["url"],
        )

    def test_attached_again_unchanged_writes_no_second_row(self, conn: Connection, tmp_path: Path) -> None:
        path = tmp_path / "a.aos"
        sealed_stream(path)
        index = Appender(open_store(tmp_path / "t"))
        attach(conn, path, the_run(conn), index=index)
        attach(conn, path, the_run(conn), index=index)
        files = sorted((tmp_path / "t" / "index").rglob("*.parquet"))
        assert 2 == len(files)  # one streams file, one checks file: one append
        assert 1 == len(index_of(tmp_path / "t"))

    def test_a_refused_attach_writes_no_row(self, conn: Connection, tmp_path: Path) -> None:
        """A stream the tracker refuses (no verdict) enters no index."""
        path = tmp_path / "a.aos"
        sealed_stream(path, verdict=None)
        got = refused(attach, conn, path, the_run(conn), index=Appender(open_store(tmp_path / "t")))
        assert "stream-verdict" == got.name
        assert not (tmp_path / "t" / "index").exists()

    def test_attached_from_a_store_url_into_an_s3_index(
        self, conn: Connection, tmp_path: Path, s3_bucket: S3Bucket
    ) -> None:
        """A stream fetched from S3 and attached gets a row (entered by attach) in the index given, here S3."""
        path = tmp_path / "a.aos"
        sealed_stream(path)
        url = push(path, f"{s3_bucket.url}/runs", index=False)
        attach(conn, url, the_run(conn), index=Appender(open_store(f"{s3_bucket.url}/tracker")))
        ((row,),) = [index_of(f"{s3_bucket.url}/tracker")]
        assert (url, "attach") == (row["url"], row["entered_by"])


class TestCommand:
    def test_the_tracker_folder_by_default(self, tmp_path: Path, cli: Cli) -> None:
        db = tmp_path / "t" / "progress.sqlite3"
        db.parent.mkdir()
        c = init(db)
        run = records.start_run(c, lane="distributed-device")
        c.close()
        path = tmp_path / "a.aos"
        sealed_stream(path)
        r = cli("observe", "attach", str(path), "--db", str(db), "--run", run)
        assert 0 == r.exit_code, r.output
        assert ["attach"] == [row["entered_by"] for row in index_of(db.parent)]
        other = tmp_path / "b.aos"
        sealed_stream(other, stdout=b"other\n")
        r = cli("observe", "attach", str(other), "--db", str(db), "--run", run, "--index", str(tmp_path / "s"))
        assert 0 == r.exit_code, r.output
        assert 1 == len(index_of(tmp_path / "s")) == len(index_of(db.parent))
        third = tmp_path / "c.aos"
        sealed_stream(third, stdout=b"third\n")
        r = cli("observe", "attach", str(third), "--db", str(db), "--run", run, "--no-index")
        assert 0 == r.exit_code, r.output
        assert 1 == len(index_of(tmp_path / "s")) == len(index_of(db.parent))
        r = cli("observe", "attach", str(third), "--db", str(db), "--run", run, "--no-index", "--index", "x")
        assert 2 == r.exit_code


class TestImport:
    def test_import_appends_a_row_per_stream_verified(self, tmp_path: Path, cli: Cli) -> None:
        src = str(tmp_path / "a.sqlite3")
        small_source(src, tmp_path / "a")
        db = tmp_path / "t" / "progress.sqlite3"
        db.parent.mkdir()
        init(db).close()
        r = cli("tracker", "--db", str(db), "import", src)
        assert 0 == r.exit_code, r.output
        ((row,),) = [index_of(db.parent)]
        assert "import" == row["entered_by"]
        (stream,) = (tmp_path / "a").glob("*.aos")
        assert verify_stream(stream).file_blake3 == row["file_blake3"]

    def test_a_refused_import_writes_no_row(self, tmp_path: Path) -> None:
        """The source imported twice: the second is refused, and adds no row."""
        src = str(tmp_path / "a.sqlite3")
        small_source(src, tmp_path / "a")
        conn = init(tmp_path / "t.sqlite3")
        try:
            import_tracker(conn, src, index=Appender(open_store(tmp_path / "s")))
            assert 1 == len(index_of(tmp_path / "s"))
            before = sorted((tmp_path / "s").rglob("*"))
            refused(import_tracker, conn, src, index=Appender(open_store(tmp_path / "s")))
            assert before == sorted((tmp_path / "s").rglob("*"))
        finally:
            conn.close()
