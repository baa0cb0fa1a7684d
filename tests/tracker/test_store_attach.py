"""Attaching by store URL: the tracker keeps the URL and the file's BLAKE3, and audits from the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from aos.refusals import Refusal
from aos.verify import verify_stream
from observe.store import push
from tests.helpers.cli import Cli
from tests.helpers.run import alpha
from tests.helpers.s3 import S3Bucket
from tracker import records
from tracker.attach import attach
from tracker.audit import audit
from tracker.db import init
from tracker.testing import sealed_stream


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """An empty tracker with one running run (``the_run``)."""
    c = init(tmp_path / "progress.sqlite3")
    records.start_run(c, lane="distributed-device")
    yield c
    c.close()


def the_run(conn: sqlite3.Connection) -> str:
    """The id of the tracker's one run."""
    return str(conn.execute("SELECT id FROM runs").fetchone()[0])


def row(conn: sqlite3.Connection) -> sqlite3.Row:
    r: sqlite3.Row = conn.execute("SELECT * FROM evidence").fetchone()
    return r


def pushed(tmp_path: Path, store: str, **kw: str) -> tuple[str, str]:
    """A stream made in a "runner" folder, pushed, then deleted there: its URL and BLAKE3."""
    runner = tmp_path / "runner"
    runner.mkdir(exist_ok=True)
    path = runner / "s.aos"
    sealed_stream(path, **kw)  # type: ignore[arg-type]
    digest = verify_stream(path).file_blake3
    url = push(path, store)
    path.unlink()
    return url, digest


class TestAttachByUrl:
    def test_s3_url(self, conn: sqlite3.Connection, tmp_path: Path, s3_bucket: S3Bucket) -> None:
        """A stream attached from S3 records its URL (as url and path), its BLAKE3, seal and verdict; no copy kept."""
        url, digest = pushed(tmp_path, f"{s3_bucket.url}/runs", verdict="pass", scope="physical")
        a = attach(conn, url, the_run(conn))
        r = row(conn)
        assert (url, url, digest) == (r["url"], r["path"], r["file_digest"])
        assert ("pass", "physical", True) == (a.verdict, a.scope, a.new)
        assert url == a.path

    def test_file_url_and_again(self, conn: sqlite3.Connection, tmp_path: Path) -> None:
        """A file:// URL attaches the same way; attaching it again changes nothing."""
        url, digest = pushed(tmp_path, str(tmp_path / "store"))
        first, second = attach(conn, url, the_run(conn)), attach(conn, url, the_run(conn))
        assert (True, False) == (first.new, second.new)
        assert (url, digest) == (row(conn)["url"], row(conn)["file_digest"])

    def test_local_path_keeps_no_url(self, conn: sqlite3.Connection, tmp_path: Path) -> None:
        """A stream attached from a path has no URL."""
        sealed_stream(tmp_path / "s.aos")
        attach(conn, tmp_path / "s.aos", the_run(conn))
        assert row(conn)["url"] is None

    def test_tampered_object_is_not_attached(
        self, conn: sqlite3.Connection, tmp_path: Path, s3_bucket: S3Bucket
    ) -> None:
        """An object whose bytes are not its name is refused (stream-digest) and nothing is recorded."""
        url, _ = pushed(tmp_path, s3_bucket.url)
        other = tmp_path / "other.aos"
        sealed_stream(other, stdout=b"other\n")
        s3_bucket.client.upload_file(str(other), s3_bucket.name, url.rsplit("/", 1)[1])
        with pytest.raises(Refusal) as info:
            attach(conn, url, the_run(conn))
        assert "stream-digest" == info.value.name
        assert 0 == conn.execute("SELECT count(*) FROM evidence").fetchone()[0]

    def test_unknown_run_before_download(self, conn: sqlite3.Connection, tmp_path: Path) -> None:
        """An unknown run is refused first, even for a URL that names nothing."""
        with pytest.raises(Refusal) as info:
            attach(conn, f"s3://nowhere/{'0' * 64}.aos", 42)
        assert "tracker-unknown" == info.value.name

    def test_url_is_immutable(self, conn: sqlite3.Connection, tmp_path: Path) -> None:
        """The recorded URL cannot be edited to one that names other bytes (only to another copy of the same)."""
        url, _ = pushed(tmp_path, str(tmp_path / "store"))
        attach(conn, url, the_run(conn))
        with pytest.raises(sqlite3.IntegrityError, match="tracker-stream-changed"):
            conn.execute("UPDATE evidence SET url = 's3://elsewhere/x.aos'")

    def test_cli(self, tmp_path: Path, s3_bucket: S3Bucket) -> None:
        """`alpha observe attach s3://... --tracker DB --run N` fetches, verifies and attaches (the URL kept whole)."""
        db = tmp_path / "t.sqlite3"
        init(db).close()
        c = init(db)
        run = records.start_run(c, lane="distributed-device")
        c.close()
        url, _ = pushed(tmp_path, f"{s3_bucket.url}/p")
        done = alpha("observe", "attach", url, "--tracker", str(db), "--run", run, "--json", text=True, timeout=300)
        assert 0 == done.returncode, done.stderr
        assert f'"path": "{url}"' in done.stdout


class TestAuditFromTheStore:
    def test_another_machine_audits_with_no_local_copy(
        self, conn: sqlite3.Connection, tmp_path: Path, s3_bucket: S3Bucket, cli: Cli
    ) -> None:
        """With every local copy gone, audit re-fetches each stream by URL and finds it intact."""
        url, _ = pushed(tmp_path, s3_bucket.url)
        attach(conn, url, the_run(conn))
        report = audit(conn)
        assert report.ok, report.as_dict()
        assert [("ok", url)] == [(f.state, f.path) for f in report.streams]
        result = cli("tracker", "--db", str(tmp_path / "progress.sqlite3"), "audit")
        assert 0 == result.exit_code, result.output
        assert "1 intact, 0 changed, 0 missing" in result.stdout

    def test_tampered_in_the_store(self, conn: sqlite3.Connection, tmp_path: Path, s3_bucket: S3Bucket) -> None:
        """An object overwritten in the bucket after attach is `changed`, naming stream-digest."""
        url, _ = pushed(tmp_path, s3_bucket.url)
        attach(conn, url, the_run(conn))
        s3_bucket.client.put_object(Bucket=s3_bucket.name, Key=url.rsplit("/", 1)[1], Body=b"not the stream")
        report = audit(conn)
        assert not report.ok
        (f,) = report.streams
        assert "changed" == f.state
        assert "refused: stream-digest" in f.detail

    def test_gone_from_the_store(self, conn: sqlite3.Connection, tmp_path: Path, s3_bucket: S3Bucket) -> None:
        """An object deleted from the bucket is `missing`."""
        url, _ = pushed(tmp_path, s3_bucket.url)
        attach(conn, url, the_run(conn))
        s3_bucket.client.delete_object(Bucket=s3_bucket.name, Key=url.rsplit("/", 1)[1])
        (f,) = audit(conn).streams
        assert ("missing", url) == (f.state, f.path)
        assert "stream-missing" in f.detail

    def test_store_unreachable(
        self, conn: sqlite3.Connection, tmp_path: Path, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A store that cannot be reached fails the audit (`missing`, naming store-unreachable), never passes it."""
        from tests.helpers.s3 import free_port

        url, _ = pushed(tmp_path, s3_bucket.url)
        attach(conn, url, the_run(conn))
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        report = audit(conn)
        assert not report.ok
        assert "store-unreachable" in report.streams[0].detail

    def test_a_stored_stream_replaced_under_its_id(self, conn: sqlite3.Connection, tmp_path: Path) -> None:
        """A file:// object replaced by another good stream is `changed` (its bytes no longer hash to the name)."""
        url, _ = pushed(tmp_path, str(tmp_path / "store"))
        attach(conn, url, the_run(conn))
        obj = tmp_path / "store" / url.rsplit("/", 1)[1]
        obj.chmod(0o644)
        sealed_stream(tmp_path / "o.aos", stdout=b"other\n")
        obj.write_bytes((tmp_path / "o.aos").read_bytes())
        (f,) = audit(conn).streams
        assert "changed" == f.state
