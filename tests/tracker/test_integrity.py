"""Tamper-evidence: forged rows, replaced rows, dropped and extra triggers are named by `audit` or refused.

Every attack here is made as an attacker would make it: a plain client
(``sqlite3``, ``psycopg``) or the stock shell (``sqlite3``, ``psql``), never the
tool. Every test runs on both backends (the ``tracker_backend`` fixture); where
SQLite's spelling has no PostgreSQL twin (``INSERT OR REPLACE``), PostgreSQL
meets its nearest form (``INSERT ... ON CONFLICT``, a plain ``UPDATE`` onto a taken key).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from aos.signing import generate_keypair, load_signer
from tests.helpers.backends import PlainClient, integrity_errors, without_triggers
from tests.helpers.cli import Cli
from tracker import records
from tracker.attach import attach
from tracker.audit import AuditReport, audit
from tracker.db import connect, init
from tracker.journal import entries
from tracker.testing import ExampleTracker, sealed_stream


@pytest.fixture
def t(example_built: tuple[str, ExampleTracker], example_copy: str) -> Iterator[ExampleTracker]:
    """A fresh copy of the example tracker (streams keep their absolute paths in the built folder)."""
    _source, proto = example_built
    db = example_copy
    conn = connect(db)
    yield ExampleTracker(
        db, conn, proto.static_run, proto.physical_run, proto.open_run, proto.streams, proto.stream_ids
    )
    conn.close()


def attacker(db: Path | str) -> PlainClient:
    """A plain connection in autocommit: no foreign keys (SQLite), no busy timeout, nothing of the tool."""
    return PlainClient(db, autocommit=True)


def report_of(db: Path | str) -> AuditReport:
    conn = connect(db)
    try:
        return audit(conn)
    finally:
        conn.close()


def evidence_id(t: ExampleTracker, name: str) -> int:
    row = t.conn.execute("SELECT id FROM evidence WHERE stream_id = ?", (t.stream_ids[name],)).fetchone()
    return int(row[0])


class TestForgedEvidence:
    def test_deleted_and_reinserted_row_claiming_physical_pass(self, t: ExampleTracker) -> None:
        """A static pass deleted and re-inserted as physical (signed/key_id copied) is named by audit, by column."""
        ev = evidence_id(t, "open")
        t.conn.close()
        without_triggers(
            t.db,
            "CREATE TEMP TABLE saved AS SELECT * FROM evidence WHERE id = ?",
            "DELETE FROM evidence WHERE id = ?",
            "UPDATE saved SET scope = 'physical'",
            "INSERT INTO evidence SELECT * FROM saved",
            "UPDATE runs SET state = 'completed', finished_at = 'x', physical_pass = 1"
            " WHERE id = (SELECT run_id FROM evidence WHERE id = ?)",
            "INSERT INTO item_evidence (item_id, evidence_id) VALUES ('H1', ?)",
            "UPDATE items SET status = 'verified' WHERE id = 'H1'",
            args=(ev,),
        )
        report = report_of(t.db)
        assert not report.ok
        finding = {f.stream_id: f for f in report.streams}[t.stream_ids["open"]]
        assert "changed" == finding.state
        assert ["scope"] == finding.columns
        assert "scope 'physical' in the tracker, 'static' in the stream" in finding.detail
        journal = "\n".join(report.journal)
        assert f"evidence {ev}: scope is 'physical' in the table, the journal recorded 'static'" in journal
        assert "state is 'completed' in the table, the journal recorded 'running'" in journal
        assert f"item_evidence ('H1', {ev}) is not in the journal (added outside the tool)" in journal

    @pytest.mark.parametrize(
        ("column", "value"),
        [
            ("verdict", "'fail'"),
            ("scope", "'physical'"),
            ("gate", "'exit-zero'"),
            ("signed", "1"),
            ("key_id", "'00112233445566778899aabbccddeeff'"),
            ("seal_head", "'" + "a" * 64 + "'"),
            ("file_digest", "'" + "b" * 64 + "'"),
            ("size", "size + 1"),
            ("events", "events - 1"),
            ("recorded_at", "'2000-01-01T00:00:00.000Z'"),
            ("devices", "'[\"GPU-forged\"]'"),
        ],
    )
    def test_every_derived_column_is_rederived(self, t: ExampleTracker, column: str, value: str) -> None:
        """Audit re-derives each derived column from the verified stream and names the one that differs."""
        ev = evidence_id(t, "static")
        t.conn.close()
        without_triggers(t.db, f"UPDATE evidence SET {column} = {value} WHERE id = ?", args=(ev,))
        report = report_of(t.db)
        finding = {f.stream_id: f for f in report.streams}[t.stream_ids["static"]]
        assert "changed" == finding.state
        assert [column] == finding.columns
        assert not report.ok

    def test_stream_id_of_another_stream(self, t: ExampleTracker) -> None:
        """A row that names another stream's id than its file holds is named (stream_id)."""
        ev = evidence_id(t, "static")
        t.conn.close()
        without_triggers(t.db, "UPDATE evidence SET stream_id = '" + "c" * 32 + "' WHERE id = ?", args=(ev,))
        finding = {f.stream_id: f for f in report_of(t.db).streams}["c" * 32]
        assert "stream_id" in finding.columns


class TestReplace:
    """``INSERT OR REPLACE`` deletes the old row without firing delete triggers; the database refuses it."""

    def test_failed_run_cannot_be_replaced_by_a_running_one(self, t: ExampleTracker) -> None:
        """A terminal run replaced by a fresh running row (then completed as a pass) is refused at the replace."""
        records.finish_run(t.conn, t.open_run, "failed")
        raw = attacker(t.db)
        replace = "INSERT INTO" if raw.postgres else "INSERT OR REPLACE INTO"
        upsert = " ON CONFLICT (id) DO UPDATE SET state = 'running', started_at = EXCLUDED.started_at"
        try:
            with pytest.raises(integrity_errors(), match=r"^tracker-exists: "):
                raw.execute(
                    f"{replace} runs (id, lane, state, started_at) VALUES (?, 'distributed-device',"
                    " 'running', '2000-01-01T00:00:00.000Z')" + (upsert if raw.postgres else ""),
                    (t.open_run,),
                )
            assert ("failed",) == raw.execute("SELECT state FROM runs WHERE id = ?", (t.open_run,)).fetchone()
        finally:
            raw.close()

    def test_shell_replace_refused(self, t: ExampleTracker) -> None:
        """The stock shell (sqlite3, psql) meets the same refusal."""
        records.finish_run(t.conn, t.open_run, "failed")
        if str(t.db).startswith("postgresql://"):
            from tracker.pglocal import server_binaries

            sql = (
                f"INSERT INTO runs (id, state) VALUES ('{t.open_run}', 'running')"
                " ON CONFLICT (id) DO UPDATE SET state = 'running';"
            )
            cmd = [str(server_binaries() / "psql"), "--no-psqlrc", "-v", "ON_ERROR_STOP=1", str(t.db), "-c", sql]
        else:
            if shutil.which("sqlite3") is None:
                pytest.skip("no sqlite3 shell")
            sql = f"INSERT OR REPLACE INTO runs (id, state) VALUES ('{t.open_run}', 'running');"
            cmd = ["sqlite3", str(t.db), sql]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
        assert 0 != proc.returncode
        assert "tracker-exists: " in proc.stderr

    @pytest.mark.parametrize(
        "table",
        [
            "milestones",
            "items",
            "item_deps",
            "experiments",
            "devices",
            "runs",
            "run_devices",
            "evidence",
            "item_evidence",
            "measurements",
            "trusted_keys",
            "journal",
        ],
    )
    def test_no_table_takes_a_replace(self, t: ExampleTracker, tmp_path: Path, table: str) -> None:
        """Replacing any row of any table with a copy of itself is refused, and the row stays."""
        uuid = "GPU-11111111-2222-3333-4444-555555555555"
        records.add_device(t.conn, "NVIDIA GeForce RTX 3090", uuid)
        records.start_run(t.conn, lane="distributed-device", devices=[uuid])
        records.add_measurement(t.conn, t.open_run, "updates", 5)
        records.set_item(t.conn, "N2", evidence=[t.stream_ids["static"]])
        _, pub = generate_keypair(tmp_path / "lab")
        records.add_key(t.conn, pub)
        raw = attacker(t.db)
        try:
            before = raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            assert before > 0
            copy = (  # PostgreSQL's nearest form: a copy of a row, conflicts skipped
                f"INSERT INTO {table} SELECT * FROM {table} LIMIT 1 ON CONFLICT DO NOTHING"
                if raw.postgres
                else f"INSERT OR REPLACE INTO {table} SELECT * FROM {table} LIMIT 1"
            )
            with pytest.raises(integrity_errors(), match=r"^tracker-(exists|journal): "):
                raw.execute(copy)
            assert before == raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        finally:
            raw.close()

    def test_update_or_replace_refused(self, t: ExampleTracker) -> None:
        """``UPDATE OR REPLACE`` onto another row's unique key (which would delete it silently) is refused."""
        records.add_device(t.conn, "RTX 3090", "GPU-a")
        records.add_device(t.conn, "RTX 3070", "GPU-b")
        records.add_experiment(t.conn, "other")
        raw = attacker(t.db)
        try:
            for sql in (
                "UPDATE OR REPLACE devices SET uuid = 'GPU-a' WHERE uuid = 'GPU-b'",
                "UPDATE OR REPLACE experiments SET name = 'distributed' WHERE name = 'other'",
                "UPDATE OR REPLACE milestones SET id = 'M1' WHERE id = 'M2'",
            ):
                with pytest.raises(integrity_errors(), match=r"^tracker-"):
                    raw.execute(sql.replace("UPDATE OR REPLACE", "UPDATE") if raw.postgres else sql)
            assert 2 == raw.execute("SELECT count(*) FROM devices").fetchone()[0]
            assert 2 == raw.execute("SELECT count(*) FROM experiments").fetchone()[0]
        finally:
            raw.close()


class TestTriggersAroundAnEdit:
    def test_dropped_and_recreated_triggers_named(self, t: ExampleTracker) -> None:
        """An edit made with the triggers dropped and re-created word for word is named: the row and the schema."""
        records.finish_run(t.conn, t.open_run, "failed")
        t.conn.close()
        without_triggers(t.db, "UPDATE runs SET state = 'completed' WHERE id = ?", args=(t.open_run,))
        report = report_of(t.db)
        assert not report.ok
        assert any("the schema was changed outside the tool" in p for p in report.rules)
        assert any(
            f"runs {t.open_run!r}: state is 'completed' in the table, the journal recorded 'failed'" in p
            for p in report.journal
        )

    def test_extra_trigger_named_and_never_silently_obeyed(self, t: ExampleTracker, tmp_path: Path) -> None:
        """A trigger that silently drops failing evidence is named; attach refuses rather than report success."""
        t.conn.close()
        raw = attacker(t.db)
        if raw.postgres:
            raw.execute(
                "CREATE FUNCTION ignore_fail() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF NEW.verdict = 'fail' THEN RETURN NULL; END IF; RETURN NEW; END $$"
            )
            raw.execute(
                "CREATE TRIGGER evidence_ignore_fail BEFORE INSERT ON evidence"
                " FOR EACH ROW EXECUTE FUNCTION ignore_fail()"
            )
        else:
            raw.execute(
                "CREATE TRIGGER evidence_ignore_fail BEFORE INSERT ON evidence WHEN NEW.verdict = 'fail'"
                " BEGIN SELECT RAISE(IGNORE); END"
            )
        raw.close()
        report = report_of(t.db)
        assert not report.ok
        assert "trigger evidence_ignore_fail is not one of the tracker's" in report.rules
        conn = connect(t.db)
        try:
            run = records.start_run(conn, lane="distributed-device")
            sealed_stream(tmp_path / "fail.aos", verdict="fail", scope="static")
            from aos.refusals import Refusal

            with pytest.raises(Refusal) as info:
                attach(conn, tmp_path / "fail.aos", run)
            assert "tracker-schema" == info.value.name
        finally:
            conn.close()

    def test_row_edited_within_the_rules_but_outside_the_tool(self, t: ExampleTracker) -> None:
        """Even an edit the rules allow (a running run's note) is named when it bypassed the tool."""
        t.conn.close()
        raw = attacker(t.db)
        raw.execute("UPDATE runs SET note = 'edited by hand' WHERE id = ?", (t.open_run,))
        raw.execute("INSERT INTO milestones (id, title) VALUES ('M9', 'added by hand')")
        raw.close()
        report = report_of(t.db)
        assert not report.ok
        journal = "\n".join(report.journal)
        assert f"runs {t.open_run!r}: note is 'edited by hand' in the table, the journal recorded None" in journal
        assert "milestones 'M9' is not in the journal (added outside the tool)" in journal

    def test_untouched_tracker_is_clean(self, t: ExampleTracker) -> None:
        """The example tracker, changed only through the tool, audits clean: journal, schema, rows and streams."""
        report = audit(t.conn)
        assert [] == report.rules
        assert [] == report.journal
        assert report.ok


class TestJournal:
    def test_every_mutation_is_an_entry(self, t: ExampleTracker) -> None:
        """Each change made through the tool appends one entry that names what it did and the rows it wrote."""
        before = len(entries(t.conn))
        records.add_measurement(t.conn, t.open_run, "updates", 5, "count")
        after = entries(t.conn)
        assert before + 1 == len(after)
        last = after[-1]
        assert "measurement.add" == last.op
        assert ["measurements"] == [c["table"] for c in last.changes]
        assert 5 == last.changes[0]["row"]["value"]

    def test_append_only(self, t: ExampleTracker) -> None:
        """The journal is never edited or shortened, and an entry must follow the last one."""
        t.conn.close()
        raw = attacker(t.db)
        try:
            for sql in (
                "UPDATE journal SET entry = '{}' WHERE seq = 1",
                "DELETE FROM journal WHERE seq = (SELECT max(seq) FROM journal)",
                "INSERT INTO journal (seq, prev, hash, entry) VALUES (0, '" + "0" * 64 + "', '" + "1" * 64 + "', '{}')",
                "INSERT INTO journal (seq, prev, hash, entry) SELECT max(seq) + 1, '"
                + "0" * 64
                + "', '"
                + "1" * 64
                + "', '{}' FROM journal",
            ):
                with pytest.raises(integrity_errors(), match=r"^tracker-journal: "):
                    raw.execute(sql)
        finally:
            raw.close()

    def test_edited_entry_named(self, t: ExampleTracker) -> None:
        """An entry rewritten to match a forged row breaks the chain, and audit names the entry."""
        t.conn.close()
        without_triggers(
            t.db,
            'UPDATE journal SET entry = replace(entry, \'"scope":"static"\', \'"scope":"physical"\')'
            ' WHERE seq = (SELECT min(seq) FROM journal WHERE entry LIKE \'%"scope":"static"%\')',
        )
        report = report_of(t.db)
        assert any("does not follow from the entry before it" in p for p in report.journal)
        assert not report.ok

    def test_signed_journal(self, tracker_db: str, tmp_path: Path, cli: Cli) -> None:
        """With a signing key every entry is signed; re-chaining the journal without the key is named."""
        key, pub = generate_keypair(tmp_path / "tracker")
        db = tracker_db
        for args in (["init"], ["milestone", "add", "M1", "first"]):
            result = cli("tracker", "--db", str(db), "--signing-key", str(key), *args)
            assert 0 == result.exit_code, result.output
        result = cli("tracker", "--db", str(db), "audit", "--journal-key", str(pub))
        assert 0 == result.exit_code, result.output
        from tracker.backends import JOURNAL_VERSION
        from tracker.db import migrations

        entries = len(migrations()) - JOURNAL_VERSION + 1 + 1  # a snapshot per journalled migration, the milestone
        assert f"journal intact: {entries} entries, every one signed by" in result.stdout
        # An attacker without the key re-chains the journal after an edit: every hash good, no signature.
        from tracker import journal

        raw = attacker(db)
        rows = raw.execute("SELECT seq, entry FROM journal ORDER BY seq").fetchall()
        raw.drop_trigger("journal_update", "journal")
        prev = journal.GENESIS
        for seq, entry in rows:
            h = journal.entry_hash(prev, entry)
            raw.execute(
                "UPDATE journal SET prev = ?, hash = ?, key_id = NULL, signature = NULL WHERE seq = ?", (prev, h, seq)
            )
            prev = h
        raw.close()
        result = cli("tracker", "--db", str(db), "audit", "--journal-key", str(pub))
        assert 1 == result.exit_code
        assert "journal entry 0 is not signed by the journal key" in result.stdout
        assert load_signer(key).key_id in result.stdout


class TestAuditOutput:
    def test_vacuum_through_the_tool_keeps_audit_clean(self, t: ExampleTracker, cli: Cli) -> None:
        """VACUUM moves SQLite's schema cookie: outside the tool it is named, through `alpha tracker vacuum` not.
        (PostgreSQL's VACUUM changes no schema: clean either way.)"""
        t.conn.close()
        raw = attacker(t.db)
        raw.execute("VACUUM")
        raw.close()
        if raw.postgres:
            assert report_of(t.db).ok
        else:
            assert any("the schema was changed outside the tool" in p for p in report_of(t.db).rules)
        result = cli("tracker", "--db", str(t.db), "vacuum")
        assert 0 == result.exit_code, result.output
        assert report_of(t.db).ok

    def test_json(self, t: ExampleTracker, cli: Cli) -> None:
        """`audit --json` gives the journal's entries, head and problems beside streams and rules."""
        t.conn.close()
        raw = attacker(t.db)
        raw.execute("UPDATE runs SET note = 'x' WHERE id = ?", (t.open_run,))
        raw.close()
        result = cli("tracker", "--db", str(t.db), "audit", "--json")
        assert 1 == result.exit_code
        data = json.loads(result.stdout)
        assert (False, []) == (data["ok"], data["rules"])
        assert [f"runs {t.open_run!r}: note is 'x' in the table, the journal recorded None"] == data["journal"][
            "problems"
        ]
        assert 64 == len(data["journal"]["head"])
        assert data["journal"]["entries"] > 10
        assert 32 == len(data["journal"]["tracker_id"])

    def test_journal_key_mismatch(self, tmp_path: Path, cli: Cli) -> None:
        """Entries signed by one key are named when audited against another."""
        key, _ = generate_keypair(tmp_path / "tracker")
        _, other = generate_keypair(tmp_path / "other")
        db = tmp_path / "t.sqlite3"
        cli("tracker", "--db", str(db), "--signing-key", str(key), "init")
        result = cli("tracker", "--db", str(db), "audit", "--journal-key", str(other))
        assert 1 == result.exit_code
        assert f"journal entry 0 is signed by key {load_signer(key).key_id}, not by the journal key" in result.stdout

    def test_signatures_checked_against_trusted_keys(self, tmp_path: Path) -> None:
        """Without --journal-key, a signature by a key the tracker trusts is still checked: a forged one is named."""
        key, pub = generate_keypair(tmp_path / "lab")
        conn = init(tmp_path / "t.sqlite3", signer=load_signer(key))
        records.add_key(conn, pub)
        records.add_milestone(conn, "M1", "first")
        assert audit(conn).ok
        assert len(entries(conn)) == audit(conn).journal_check.signed
        conn.close()
        raw = attacker(tmp_path / "t.sqlite3")
        raw.execute("DROP TRIGGER journal_update")
        raw.execute("UPDATE journal SET signature = ? WHERE seq = 1", ("0" * 128,))
        raw.close()
        report = report_of(tmp_path / "t.sqlite3")
        assert f"journal entry 1 has a bad signature by key {load_signer(key).key_id}" in report.journal

    def test_dropped_tables_are_findings(self, t: ExampleTracker, cli: Cli) -> None:
        """A client that drops the journal (or evidence) outright gets findings from audit, not a traceback."""
        t.conn.close()
        raw = attacker(t.db)
        raw.execute("DROP TABLE journal")
        raw.execute("DROP TABLE item_evidence")
        raw.close()
        result = cli("tracker", "--db", str(t.db), "audit")
        assert 1 == result.exit_code
        missing = (
            'relation "journal" does not exist' if str(t.db).startswith("postgresql://") else "no such table: journal"
        )
        assert f"JOURNAL  the journal cannot be replayed: {missing}" in result.stdout
        assert "RULE     table journal is missing" in result.stdout
        assert "RULE     table item_evidence is missing" in result.stdout
