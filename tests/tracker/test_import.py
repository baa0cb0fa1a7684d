"""`alpha tracker import SOURCE`: a tracker moved into another, or two merged, without laundering evidence.

The source is untrusted: every forgery below is made with a plain client, as an
attacker holding the source would make it, and each is refused with nothing
written to the target. A naive copy of the source's rows would carry each one
over; the ``audit off`` variants show that even without the source's audit the
import re-derives every stream and lets the target's own rules judge every row.
Every test runs with the target on both backends (``tracker_backend``); the
source is SQLite, and PostgreSQL in ``test_postgresql_source``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from aos.refusals import Refusal
from aos.signing import generate_keypair, load_signer
from tests.helpers.backends import PlainClient, without_triggers
from tests.helpers.cli import Cli
from tests.helpers.paths import ROOT
from tests.helpers.refusals import refused as refused_by
from tracker import importing, records
from tracker.attach import attach
from tracker.audit import audit
from tracker.backends import Connection
from tracker.db import connect, init
from tracker.importing import import_tracker
from tracker.journal import TABLES, entries
from tracker.site import build_site
from tracker.status import next_items, show, status
from tracker.testing import example_tracker, flip_byte, sealed_stream

TWO_GPU = ROOT / "samples" / "evidence" / "two-gpu-h200"
GPU0 = "GPU-bb5a03ab-c28f-2074-5197-3838b9dd4798"
GPU1 = "GPU-275f8d7e-27b9-87cf-bff1-529752b689a5"
SESSION_START = int(datetime(2026, 11, 30, 13, 16, tzinfo=UTC).timestamp()) * 1_000_000_000


@pytest.fixture
def target(new_tracker_db: Callable[[], str]) -> Iterator[tuple[str, Connection]]:
    """An initialised, empty target tracker on this test's backend."""
    db = new_tracker_db()
    conn = init(db)
    yield db, conn
    conn.close()


def build_source(db: str, work: Path) -> dict[str, str]:
    """A tracker with every kind of row: the example tracker (a static pass, a physical pass, a running run),
    H1 verified by the physical pass, a measurement, a failed run, and the two-GPU H200 distributed lane's
    forward and swapped streams on a run naming both GPUs, finished as a physical pass."""
    t = example_tracker(db, work)
    conn = t.conn
    records.add_measurement(conn, t.open_run, "step-time", 0.42, "s")
    records.set_item(conn, "H1", status="verified", runs=[t.physical_run])
    for uuid in (GPU0, GPU1):
        records.add_device(conn, "NVIDIA H200", uuid, "580.159.04")
    records.add_item(conn, "N10", "Distributed lane on two GPUs", "M2", hardware=True)
    records.add_experiment(conn, "distributed-two-gpu", item="N10")
    gpu_run = records.start_run(
        conn,
        experiment="distributed-two-gpu",
        lane="distributed-device",
        devices=[GPU0, GPU1],
        note="two H200s",
        started_at_ns=SESSION_START,
    )
    attach(conn, TWO_GPU / "forward" / "distributed-device.aos", gpu_run)
    attach(conn, TWO_GPU / "swapped" / "distributed-device.aos", gpu_run)
    records.add_measurement(conn, gpu_run, "updates", 3.0)
    records.finish_run(conn, gpu_run, "completed", physical_pass=True)
    records.set_item(conn, "N10", status="verified", runs=[gpu_run])
    failed = records.start_run(conn, lane="distributed-device")
    sealed_stream(work / "fail.aos", verdict="fail")
    attach(conn, work / "fail.aos", failed)
    records.finish_run(conn, failed, "failed", note="it failed")
    conn.close()
    return {
        "static": t.static_run,
        "physical": t.physical_run,
        "open": t.open_run,
        "gpu": gpu_run,
        "failed": failed,
        **{f"stream:{k}": v for k, v in t.stream_ids.items()},
    }


@pytest.fixture
def source(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A fresh SQLite source tracker (see :func:`build_source`), its streams under tmp_path/work."""
    db = str(tmp_path / "source.sqlite3")
    return db, build_source(db, tmp_path / "work")


def counts(conn: Connection) -> dict[str, Any]:
    """Every table's row count, the journal's length and head: what "nothing written" compares."""
    out: dict[str, Any] = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}
    js = entries(conn)
    out["journal"] = (len(js), js[-1].hash if js else None)
    return out


def refused(conn: Connection, db: str, *, drop_legacy_ids: bool = False) -> Refusal:
    """Import ``db`` into ``conn``; it must be refused with nothing written. Returns the refusal."""
    before = counts(conn)
    refusal = refused_by(import_tracker, conn, db, drop_legacy_ids=drop_legacy_ids)
    assert before == counts(conn)
    return refusal


def _substance(conn: Connection, runs: list[str]) -> dict[str, Any]:
    """status, next, every item and run as `show` gives them and the site's verdicts, without the target's own
    integer ids and times of attaching."""

    def clean(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: clean(v) for k, v in d.items() if k not in ("id", "attached_at", "updated_at", "evidence_id")}
        if isinstance(d, list):
            return [clean(v) for v in d]
        return d

    items = [str(r[0]) for r in conn.execute("SELECT id FROM items ORDER BY id")]
    out: dict[str, Any] = {
        "status": status(conn),
        "next": next_items(conn),
        "items": {i: clean(show(conn, i)) for i in items},
        "runs": {r: clean(show(conn, r)) for r in runs},
    }
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        site = build_site(conn, Path(tmp))
    out["site"] = {
        "runs": sorted((r.id, r.verdict, r.physical_pass_proven, r.state) for r in site.runs),
        "items": sorted((i.id, i.shown, i.proof) for m in site.milestones for i in m.items),
        "streams": sorted((s.stream_id, s.state) for r in site.runs for s in r.streams),
    }
    return out


class TestRoundTrip:
    def test_import_into_an_empty_tracker(self, source: tuple[str, dict[str, str]], target: Any) -> None:
        """Status, next, every item and run, and the site's verdicts of the target are the source's; audit is
        clean, and the import is one journal entry naming the source, its tracker id and its journal head."""
        src_db, ids = source
        _db, conn = target
        result = import_tracker(conn, src_db)
        runs = [ids[k] for k in ("static", "physical", "open", "gpu", "failed")]
        src = connect(src_db)
        try:
            assert _substance(src, runs) == _substance(conn, runs)
            src_audit = audit(src)
        finally:
            src.close()
        report = audit(conn)
        assert report.ok, report.as_dict()
        assert 6 == len(report.streams)
        physical = {r[0] for r in conn.execute("SELECT id FROM runs WHERE physical_pass = 1")}
        assert {ids["physical"], ids["gpu"]} == physical
        last = entries(conn)[-1]
        assert "import" == last.op
        assert str(Path(src_db).resolve()) == last.args["source"]
        assert src_audit.journal_check.tracker_id == last.args["source_tracker_id"]
        assert src_audit.journal_check.head == last.args["source_journal_head"]
        assert (5, 6, 2) == (result.added["runs"], result.added["evidence"], result.added["measurements"])
        # The streams were verified again: the evidence rows' derived columns are the streams'.
        rows = conn.execute("SELECT stream_id, verdict, scope, devices FROM evidence ORDER BY stream_id").fetchall()
        gpu = [r for r in rows if r[3] and GPU0 in r[3]]
        assert 2 == len(gpu)
        assert {("pass", "physical")} == {(r[1], r[2]) for r in gpu}


def test_postgresql_source_into_both_backends(tmp_path: Path, pg_server: Any) -> None:
    """A PostgreSQL tracker imports into a PostgreSQL tracker and into an SQLite one, the same in substance."""
    name = tmp_path.name.replace("-", "_")
    src_url = str(pg_server.url(f"src_{name}"[:50]))
    ids = build_source(src_url, tmp_path / "work")
    targets = [init(str(pg_server.url(f"dst_{name}"[:50]))), init(str(tmp_path / "target.sqlite3"))]
    try:
        for into in targets:
            import_tracker(into, src_url)
            assert audit(into).ok
            assert 2 == int(into.execute("SELECT count(*) FROM runs WHERE physical_pass = 1").fetchone()[0])
            assert "postgresql" == entries(into)[-1].args["source_backend"]
        runs = [ids[k] for k in ("static", "physical", "open", "gpu", "failed")]
        assert _substance(targets[0], runs) == _substance(targets[1], runs)
    finally:
        for conn in targets:
            conn.close()


def small_source(db: str, work: Path, *, title: str = "Static lanes") -> str:
    """A tracker with milestone M1, item N1 (verified by its run) and one run with a static pass."""
    conn = init(db)
    try:
        records.add_milestone(conn, "M1", title)
        records.add_item(conn, "N1", "Build every role", "M1")
        run = records.start_run(conn, lane="distributed-device")
        path = work / f"{run}.aos"
        work.mkdir(parents=True, exist_ok=True)
        sealed_stream(path)
        attach(conn, path, run)
        records.finish_run(conn, run, "completed")
        records.set_item(conn, "N1", status="verified", runs=[run])
        return run
    finally:
        conn.close()


class TestMerge:
    def test_two_trackers_merge(self, tmp_path: Path, target: Any) -> None:
        """Two trackers with the same milestone and item and disjoint runs merge: both runs, one M1 and N1."""
        _db, conn = target
        a, b = str(tmp_path / "a.sqlite3"), str(tmp_path / "b.sqlite3")
        run_a, run_b = small_source(a, tmp_path / "a"), small_source(b, tmp_path / "b")
        first = import_tracker(conn, a)
        second = import_tracker(conn, b)
        assert (1, 1) == (first.added["milestones"], first.added["items"])
        assert (0, 0, 1, 1) == (
            second.added["milestones"],
            second.added["items"],
            second.merged["milestones"],
            second.merged["items"],
        )
        assert {run_a, run_b} == {str(r[0]) for r in conn.execute("SELECT id FROM runs")}
        assert [("N1", "verified")] == [tuple(r) for r in conn.execute("SELECT id, status FROM items")]
        assert 2 == int(conn.execute("SELECT count(*) FROM item_evidence").fetchone()[0])
        assert audit(conn).ok
        assert ["import", "import"] == [e.op for e in entries(conn)[-2:]]

    def test_conflicting_item_refused(self, tmp_path: Path, target: Any) -> None:
        """The same milestone id with another title: refused naming it (tracker-exists); the target is unchanged."""
        _db, conn = target
        records.add_milestone(conn, "M1", "Something else")
        records.add_item(conn, "N0", "ours", "M1")
        small_source(str(tmp_path / "a.sqlite3"), tmp_path / "a")
        r = refused(conn, str(tmp_path / "a.sqlite3"))
        assert "tracker-exists" == r.name
        assert "milestone 'M1'" in str(r)
        assert "title" in str(r)

    def test_same_item_id_another_title_refused(self, tmp_path: Path, target: Any) -> None:
        """The same item id with another title: refused (tracker-exists), naming the item; nothing written."""
        _db, conn = target
        records.add_milestone(conn, "M1", "Static lanes")
        records.add_item(conn, "N1", "Another title", "M1")
        small_source(str(tmp_path / "a.sqlite3"), tmp_path / "a")
        r = refused(conn, str(tmp_path / "a.sqlite3"))
        assert "tracker-exists" == r.name
        assert "work item 'N1'" in str(r)
        assert "'Another title' there, 'Build every role' in the source" in str(r)

    def test_imported_twice_refused(self, tmp_path: Path, target: Any) -> None:
        """A run is imported once: the same source again is refused, nothing written."""
        _db, conn = target
        run = small_source(str(tmp_path / "a.sqlite3"), tmp_path / "a")
        import_tracker(conn, str(tmp_path / "a.sqlite3"))
        r = refused(conn, str(tmp_path / "a.sqlite3"))
        assert "tracker-exists" == r.name
        assert run in str(r)

    def test_the_target_itself_refused(self, target: Any, tracker_backend: str) -> None:
        """Importing a tracker into itself is refused."""
        db, conn = target
        assert "tracker-import" == refused(conn, db).name


class TestForgedSource:
    """Each forgery, made in the source with a plain client, refuses the import; nothing is written."""

    @pytest.fixture(params=["audited", "audit off"])
    def audited(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
        """``audit off``: the source's audit skipped, to show the re-derivation and the target's rules refuse too."""
        if request.param == "audit off":
            monkeypatch.setattr(importing, "_refuse_audit", lambda snap: None)
            return False
        return True

    def test_evidence_row_forged_as_physical_pass(
        self, source: tuple[str, dict[str, str]], target: Any, audited: bool
    ) -> None:
        """A static pass rewritten as physical (triggers dropped and re-created), its run then completed as a
        physical pass: audited, tracker-import naming the column; unaudited, the stream says static."""
        src_db, ids = source
        _db, conn = target
        without_triggers(
            src_db,
            "UPDATE evidence SET verdict = 'pass', scope = 'physical' WHERE stream_id = ?",
            args=(ids["stream:open"],),
        )
        without_triggers(
            src_db,
            "UPDATE runs SET state = 'completed', finished_at = '2030-01-01T00:00:00.000Z', physical_pass = 1"
            " WHERE id = ?",
            args=(ids["open"],),
        )
        r = refused(conn, src_db)
        if audited:
            assert "tracker-import" == r.name
            assert "scope 'physical' in the tracker, 'static' in the stream" in str(r)
        else:
            assert "tracker-stream-changed" == r.name
            assert "scope 'physical' in the source, 'static' in the stream" in str(r)

    def test_physical_pass_forged(self, source: tuple[str, dict[str, str]], target: Any, audited: bool) -> None:
        """A completed static run given a physical pass behind the rules' back: audited, tracker-import; unaudited,
        the target's own trigger refuses the run's finish (tracker-physical-pass)."""
        src_db, ids = source
        _db, conn = target
        without_triggers(src_db, "UPDATE runs SET physical_pass = 1 WHERE id = ?", args=(ids["static"],))
        r = refused(conn, src_db)
        assert ("tracker-import" if audited else "tracker-physical-pass") == r.name
        if audited:
            assert f"run {ids['static']} records a physical pass" in str(r)

    def test_stream_altered_after_attach(
        self, source: tuple[str, dict[str, str]], target: Any, audited: bool, tmp_path: Path
    ) -> None:
        """A stream file altered after it was attached: audited, tracker-import (changed); unaudited, the stream
        no longer verifies."""
        src_db, ids = source
        _db, conn = target
        flip_byte(tmp_path / "work" / "physical.aos")
        r = refused(conn, src_db)
        if audited:
            assert "tracker-import" == r.name
            assert f"CHANGED  {ids['stream:physical']}" in str(r)
        else:
            assert r.name.startswith("stream-"), r.diagnostics()

    def test_stream_missing(
        self, source: tuple[str, dict[str, str]], target: Any, audited: bool, tmp_path: Path
    ) -> None:
        """A stream whose file is gone: refused (the evidence cannot be re-derived)."""
        src_db, ids = source
        _db, conn = target
        (tmp_path / "work" / "static.aos").unlink()
        r = refused(conn, src_db)
        if audited:
            assert "tracker-import" == r.name
            assert f"MISSING  {ids['stream:static']}" in str(r)
        else:
            assert r.name.startswith("stream-"), r.diagnostics()

    def test_journal_entry_deleted(self, source: tuple[str, dict[str, str]], target: Any) -> None:
        """A journal entry deleted (triggers dropped around it): the source fails its audit; refused."""
        src_db, _ids = source
        _db, conn = target
        without_triggers(src_db, "DELETE FROM journal WHERE seq = 3")
        r = refused(conn, src_db)
        assert "tracker-import" == r.name
        assert "journal entry 3 is missing" in str(r)

    def test_source_key_does_not_vouch_for_its_streams(self, tmp_path: Path, target: Any) -> None:
        """The target trusts key A; the source trusts its own key B and its streams are signed by B. A copy that
        brought B's trust first would let them in; the target's keys judge them: refused (stream-signature)."""
        _db, conn = target
        for name in ("a", "b"):
            generate_keypair(tmp_path / name)
        records.add_key(conn, tmp_path / "a.pub")
        src = init(str(tmp_path / "s.sqlite3"))
        records.add_key(src, tmp_path / "b.pub")
        run = records.start_run(src, lane="distributed-device")
        sealed_stream(tmp_path / "s.aos", signer=load_signer(tmp_path / "b.key"))
        attach(src, tmp_path / "s.aos", run)
        src.close()
        assert "stream-signature" == refused(conn, str(tmp_path / "s.sqlite3")).name


class TestJournal:
    def test_imported_rows_tampered_in_the_target_are_named(
        self, source: tuple[str, dict[str, str]], target: Any
    ) -> None:
        """After the import the target's audit is clean; an imported row edited by a plain client, or one forged
        with the triggers dropped, is then named by the target's audit."""
        src_db, ids = source
        db, conn = target
        import_tracker(conn, src_db)
        assert audit(conn).ok
        conn.close()
        raw = PlainClient(db, autocommit=True)
        try:
            raw.execute("UPDATE items SET title = 'forged' WHERE id = 'N3'")
        finally:
            raw.close()
        without_triggers(db, "UPDATE evidence SET scope = 'physical' WHERE stream_id = ?", args=(ids["stream:open"],))
        again = connect(db)
        try:
            report = audit(again)
        finally:
            again.close()
        assert not report.ok
        journal = "\n".join(report.journal)
        assert "items 'N3': title is 'forged' in the table, the journal recorded 'Publish the static report'" in journal
        assert ": scope is 'physical' in the table, the journal recorded 'static'" in journal
        finding = {f.stream_id: f for f in report.streams}[ids["stream:open"]]
        assert ("changed", ["scope"]) == (finding.state, finding.columns)


def legacy_source(db: str) -> None:
    """A schema-2 tracker (integer run ids 1 and 2, no evidence), not yet opened by this tool."""
    conn = init(db, target=2)
    conn.close()
    raw = PlainClient(db, autocommit=True)
    try:
        raw.execute("INSERT INTO milestones (id, title) VALUES ('M1', 'first')")
        raw.execute("INSERT INTO runs (lane, started_at) VALUES ('exit-zero', '2024-06-10T06:13:20.123Z')")
        raw.execute("INSERT INTO runs (lane, started_at) VALUES ('exit-zero', '2024-06-11T00:00:00.000Z')")
    finally:
        raw.close()


class TestLegacyIds:
    def test_old_schema_refused_until_opened(self, tmp_path: Path, target: Any) -> None:
        """A source at schema 2 is refused with how to migrate it (the import never writes to its source); once
        opened by the tool it imports, keeping the old run numbers."""
        _db, conn = target
        src = str(tmp_path / "old.sqlite3")
        legacy_source(src)
        r = refused(conn, src)
        assert "tracker-import" == r.name
        assert f"alpha tracker --db {src} audit" in str(r)
        connect(src).close()  # the tool migrates it
        import_tracker(conn, src)
        assert [1, 2] == [int(r[0]) for r in conn.execute("SELECT legacy_id FROM runs ORDER BY legacy_id")]
        assert audit(conn).ok

    def test_colliding_old_numbers(self, tmp_path: Path, target: Any) -> None:
        """Two old trackers both have a run 1: the second is refused (`--run 1` would name another run) unless
        its old numbers are dropped, which the journal entry records."""
        _db, conn = target
        a, b = str(tmp_path / "a.sqlite3"), str(tmp_path / "b.sqlite3")
        for src in (a, b):
            legacy_source(src)
            connect(src).close()
        import_tracker(conn, a)
        r = refused(conn, b)
        assert "tracker-import" == r.name
        assert "`--run 1` name another run" in str(r)
        result = import_tracker(conn, b, drop_legacy_ids=True)
        assert 2 == result.legacy_ids_dropped
        assert 2 == int(conn.execute("SELECT count(*) FROM runs WHERE legacy_id IS NULL").fetchone()[0])
        assert entries(conn)[-1].args["drop_legacy_ids"] is True
        assert audit(conn).ok


class TestCli:
    def test_import_and_refusal(self, tmp_path: Path, target: Any, cli: Cli) -> None:
        """`alpha tracker --db TARGET import SOURCE` prints what it did; a forged source prints
        `refused: tracker-import: ...` and exits 1."""
        db, conn = target
        conn.close()
        src = str(tmp_path / "a.sqlite3")
        small_source(src, tmp_path / "a")
        r = cli("tracker", "--db", db, "import", src)
        assert 0 == r.exit_code, r.output
        assert r.output.startswith(f"imported {Path(src).resolve()} (tracker ")
        assert "added: 1 milestones, 1 items, 1 runs, 1 evidence, 1 item_evidence" in r.output
        shutil.copy(src, tmp_path / "b.sqlite3")
        without_triggers(str(tmp_path / "b.sqlite3"), "UPDATE items SET status = 'planned'")
        r = cli("tracker", "--db", str(tmp_path / "c.sqlite3"), "init")
        r = cli("tracker", "--db", str(tmp_path / "c.sqlite3"), "import", str(tmp_path / "b.sqlite3"))
        assert 1 == r.exit_code
        assert r.output.startswith("refused: tracker-import: the source ")
        r = cli("tracker", "--db", db, "import", str(tmp_path / "absent.sqlite3"), "--json")
        assert (1, True) == (r.exit_code, r.output.startswith("refused: tracker-missing: "))

    def test_json(self, tmp_path: Path, target: Any, cli: Cli) -> None:
        """--json gives the counts and the journal entry."""
        db, conn = target
        conn.close()
        src = str(tmp_path / "a.sqlite3")
        small_source(src, tmp_path / "a")
        r = cli("tracker", "--db", db, "import", src, "--json")
        data = json.loads(r.output)
        from tracker.backends import JOURNAL_VERSION
        from tracker.db import migrations

        seq = len(migrations()) - JOURNAL_VERSION + 1  # after one entry per journalled migration
        assert (1, 1, seq) == (data["added"]["runs"], data["added"]["evidence"], data["journal_seq"])
