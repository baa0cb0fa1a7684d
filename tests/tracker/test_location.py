"""A stream attached from a path gets its store URL added later: journalled, digest-checked, on a finished run too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aos.refusals import Refusal
from aos.signing import generate_keypair, load_signer
from observe.store import push
from tests.helpers.backends import PlainClient, integrity_errors
from tracker import journal, records
from tracker.attach import attach
from tracker.audit import audit
from tracker.backends import Connection
from tracker.testing import sealed_stream


def _url_of(conn: Connection) -> Any:
    return conn.execute("SELECT url FROM evidence").fetchone()[0]


def _attached_then_pushed(conn: Connection, run: str, tmp_path: Path) -> tuple[Path, str]:
    """A stream attached from the runner's path, the run finished, the stream pushed and the runner's file gone."""
    path = tmp_path / "runner" / "lane.aos"
    path.parent.mkdir()
    sealed_stream(path)
    attach(conn, path, run)
    records.finish_run(conn, run, "completed")
    url = push(path, tmp_path / "store")
    path.unlink()
    return path, url


class TestAddLocation:
    def test_attach_by_url_after_path_adds_the_url_and_audit_refetches(
        self, conn: Connection, run: str, tmp_path: Path
    ) -> None:
        """Attaching the pushed URL of a stream attached by path adds the URL on the finished run; audit is clean."""
        _, url = _attached_then_pushed(conn, run, tmp_path)
        assert ["missing"] == [f.state for f in audit(conn).streams]
        a = attach(conn, url, run)
        assert (False, True, url) == (a.new, a.located, a.url)
        assert url == _url_of(conn)
        report = audit(conn)
        assert (["ok"], True) == ([f.state for f in report.streams], report.ok)

    def test_the_location_is_journalled(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """The added URL is one journal entry (attach.location) holding the row as it is after."""
        _, url = _attached_then_pushed(conn, run, tmp_path)
        attach(conn, url, run)
        last = journal.entries(conn)[-1]
        assert "attach.location" == last.op
        assert (url, None) == (last.args["url"], last.args["was"])
        assert url == last.changes[0]["row"]["url"]

    def test_again_is_unchanged(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """Attaching the same URL a second time changes nothing and writes no journal entry."""
        _, url = _attached_then_pushed(conn, run, tmp_path)
        attach(conn, url, run)
        entries = len(journal.entries(conn))
        again = attach(conn, url, run)
        assert (False, False, entries) == (again.new, again.located, len(journal.entries(conn)))

    def test_other_bytes_under_the_same_stream_id_are_refused(
        self, conn: Connection, run: str, tmp_path: Path, surgery: Any
    ) -> None:
        """A URL whose bytes are the same stream re-sealed (another digest) is tracker-stream-changed; url stays."""
        path = tmp_path / "lane.aos"
        sealed_stream(path)
        attach(conn, path, run)
        generate_keypair(tmp_path / "forger")
        forged = tmp_path / "forged.aos"
        forged.write_bytes(surgery.reseal(surgery.split(path), load_signer(tmp_path / "forger.key")).join())
        url = push(forged, tmp_path / "store")
        with pytest.raises(Refusal) as info:
            attach(conn, url, run)
        assert "tracker-stream-changed" == info.value.name
        assert _url_of(conn) is None


class TestLocationRulesInSQL:
    def test_a_plain_client_cannot_point_evidence_at_other_bytes(
        self, conn: Connection, run: str, tmp_path: Path, tracker_db: str
    ) -> None:
        """A plain SQL client setting a URL that names another digest is refused by the database (stream-changed)."""
        _attached_then_pushed(conn, run, tmp_path)
        raw = PlainClient(tracker_db)
        try:
            with pytest.raises(integrity_errors()) as info:
                raw.execute("UPDATE evidence SET url = ?", (f"s3://evil/{'0' * 64}.aos",))
            raw.rollback()
        finally:
            raw.close()
        assert "tracker-stream-changed" in str(info.value)
        assert _url_of(conn) is None

    def test_a_plain_client_cannot_edit_anything_else(
        self, conn: Connection, run: str, tmp_path: Path, tracker_db: str
    ) -> None:
        """Editing any other column with the URL (here the verdict) is still refused: the run is finished."""
        _, url = _attached_then_pushed(conn, run, tmp_path)
        raw = PlainClient(tracker_db)
        try:
            with pytest.raises(integrity_errors()) as info:
                raw.execute("UPDATE evidence SET url = ?, verdict = 'fail'", (url,))
            raw.rollback()
        finally:
            raw.close()
        assert "tracker-run-immutable" in str(info.value)

    @pytest.mark.parametrize(
        ("column", "value"),
        [("verdict", "'fail'"), ("scope", "'physical'"), ("source_commit", "'" + "f" * 40 + "'"), ("devices", "NULL")],
    )
    def test_no_other_column_rides_along_with_the_url(
        self, conn: Connection, run: str, tmp_path: Path, tracker_db: str, column: str, value: str
    ) -> None:
        """Every column but the URL is compared, the recorded commit (a later migration's column) included."""
        _, url = _attached_then_pushed(conn, run, tmp_path)
        raw = PlainClient(tracker_db)
        try:
            with pytest.raises(integrity_errors()) as info:
                raw.execute(f"UPDATE evidence SET url = ?, {column} = {value}", (url,))
            raw.rollback()
        finally:
            raw.close()
        assert "tracker-run-immutable" in str(info.value)
        assert _url_of(conn) is None

    def test_a_url_moved_around_the_tool_is_named_by_audit(
        self, conn: Connection, run: str, tmp_path: Path, tracker_db: str
    ) -> None:
        """A plain client may name the same bytes elsewhere, but the journal did not record it: audit says so."""
        _, url = _attached_then_pushed(conn, run, tmp_path)
        raw = PlainClient(tracker_db)
        try:
            raw.execute("UPDATE evidence SET url = ?", (url,))
            raw.commit()
        finally:
            raw.close()
        report = audit(conn)
        assert any("url is" in p and "the journal recorded None" in p for p in report.journal), report.journal
