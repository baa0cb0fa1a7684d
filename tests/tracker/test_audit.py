"""`alpha tracker audit` re-reads every attached stream and the rules, and reports what changed."""

from __future__ import annotations

import json
from pathlib import Path

from aos.writer import StreamWriter
from tests.helpers.backends import PlainClient
from tests.helpers.cli import Cli, invoke
from tracker.audit import audit, format_audit
from tracker.testing import example_tracker, flip_byte


def run_audit(db: Path | str) -> tuple[int, str, str]:
    result = invoke("tracker", "--db", str(db), "audit")
    return result.exit_code, result.stdout, result.stderr


class TestAudit:
    def test_clean_tracker(self, tracker_db: str, tmp_path: Path) -> None:
        """An untouched tracker audits clean and exits 0."""
        t = example_tracker(tracker_db, tmp_path)
        report = audit(t.conn)
        assert report.ok
        assert {"ok": 3, "changed": 0, "missing": 0} == report.counts()
        code, out, _ = run_audit(t.db)
        assert 0 == code
        assert out.endswith("audit: 3 streams: 3 intact, 0 changed, 0 missing; rules intact; journal intact\n")

    def test_edited_and_missing_streams(self, tracker_db: str, tmp_path: Path) -> None:
        """A stream with a flipped byte, one rewritten under its id, and one deleted are each reported; exit 1."""
        t = example_tracker(tracker_db, tmp_path)
        flip_byte(t.streams["static"])
        w = StreamWriter(
            t.streams["physical"], stream_id=t.stream_ids["physical"], exclusive=False, background_flush=False
        )
        w.append("stream.open", {})
        w.append("verdict", {"gate": "distributed-device", "verdict": "pass", "scope": "physical", "checks": []})
        w.seal()
        t.streams["open"].unlink()
        report = audit(t.conn)
        states = {f.stream_id: (f.state, f.detail) for f in report.streams}
        assert "changed" == states[t.stream_ids["static"]][0]
        assert "no longer verifies (refused: stream-" in states[t.stream_ids["static"]][1]
        assert "changed" == states[t.stream_ids["physical"]][0]
        assert "seal_head '" in states[t.stream_ids["physical"]][1]
        assert ("missing", "the file is gone") == states[t.stream_ids["open"]]
        assert not report.ok
        code, out, _ = run_audit(t.db)
        assert 1 == code
        assert out.endswith("audit: 3 streams: 0 intact, 2 changed, 1 missing; rules intact; journal intact\n")
        assert format_audit(report) + "\n" == out

    def test_json(self, tracker_db: str, tmp_path: Path, cli: Cli) -> None:
        """`audit --json` gives each stream's state and the counts."""
        t = example_tracker(tracker_db, tmp_path)
        t.streams["open"].unlink()
        result = cli("tracker", "--db", str(t.db), "audit", "--json")
        assert 1 == result.exit_code
        data = json.loads(result.stdout)
        assert {"ok": 2, "changed": 0, "missing": 1} == data["counts"]
        assert data["ok"] is False

    def test_dropped_trigger_and_what_it_let_in(self, tracker_db: str, tmp_path: Path) -> None:
        """A client that drops a rule's trigger is caught: the missing trigger and the dishonest row it let in."""
        t = example_tracker(tracker_db, tmp_path)
        t.conn.close()
        raw = PlainClient(t.db)
        raw.drop_trigger("items_update", "items")
        raw.execute("UPDATE items SET status = 'verified' WHERE id = 'H1'")
        raw.commit()
        raw.close()
        code, out, _ = run_audit(t.db)
        assert 1 == code
        assert "RULE     trigger items_update is missing: its rule is no longer enforced" in out
        assert "RULE     verified hardware item H1 lacks the evidence verification needs" in out
