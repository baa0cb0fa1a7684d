"""The PostgreSQL backend: SQL translation, the schema as shipped, the write lock, and the database's edges.

The rules themselves are tested on both backends by test_tracker_rules.py and its
neighbours; this module holds what only PostgreSQL has (or does differently).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from aos.refusals import Refusal
from tests.helpers.backends import PlainClient, integrity_errors
from tests.helpers.cli import Cli
from tracker import db as trackerdb
from tracker import pg, records
from tracker.audit import audit, format_audit
from tracker.testing import example_tracker, sealed_stream

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests need the test extra (pip install '.[test]')")


@pytest.fixture
def url(pg_server: Any, request: pytest.FixtureRequest) -> str:
    """A URL for a database that does not exist yet (init creates it); dropped afterwards."""
    name = "pg_" + request.node.name.lower().translate({ord(c): "_" for c in "[]-. "})[:50]
    pg_server.drop_database(name)
    yield pg_server.url(name)
    pg_server.drop_database(name)


class TestTranslate:
    def test_placeholders(self) -> None:
        """`?` becomes `%s`; `?N` reuses argument N; `?` and `%` inside literals and comments stay text."""
        q = pg.translate("SELECT * FROM t WHERE a = ? AND b LIKE ? || '%' AND c = '?' -- what?")
        assert "SELECT * FROM t WHERE a = %s AND b LIKE %s || '%%' AND c = '?' -- what?" == q.sql
        assert ["x", "y"] == q.arrange(("x", "y"))
        q = pg.translate("SELECT (?1 IS NULL OR a = ?1) AND (?2 IS NULL OR b = ?2)")
        assert "SELECT (%s IS NULL OR a = %s) AND (%s IS NULL OR b = %s)" == q.sql
        assert ["m", "m", None, None] == q.arrange(("m", None))
        with pytest.raises(TypeError):
            q.arrange(("only one",))

    def test_sqlite_spellings(self) -> None:
        """INSERT OR IGNORE, strftime('...', 'now') and lastrowid have their PostgreSQL forms."""
        q = pg.translate("INSERT OR IGNORE INTO item_deps (item_id, depends_on) VALUES (?, ?)")
        assert "INSERT INTO item_deps (item_id, depends_on) VALUES (%s, %s) ON CONFLICT DO NOTHING" == q.sql
        assert not q.returning_id
        q = pg.translate("INSERT INTO measurements (run_id, name, value) VALUES (?, ?, ?)")
        assert q.sql.endswith(" RETURNING id")
        assert q.returning_id
        q = pg.translate("SELECT a IS NOT 'pass', b IS c, d IS NULL, e IS NOT NULL, f IS NOT DISTINCT FROM g, 'x IS y'")
        assert (
            "SELECT a IS DISTINCT FROM 'pass', b IS NOT DISTINCT FROM c, d IS NULL, e IS NOT NULL,"
            " f IS NOT DISTINCT FROM g, 'x IS y'" == q.sql
        )
        q = pg.translate("UPDATE items SET updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
        assert 'to_char(statement_timestamp() AT TIME ZONE \'UTC\', \'YYYY"-"MM"-"DD"T"HH24":"MI":"SS.MS"Z"\')' in q.sql

    def test_times_match_sqlite(self, url: str) -> None:
        """The translated strftime prints the same shape of UTC time as SQLite's."""
        import re
        import sqlite3

        conn = trackerdb.init(url)
        try:
            sql = "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
            shape = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            assert shape.match(conn.execute(sql).fetchone()[0])
            assert shape.match(sqlite3.connect(":memory:").execute(sql).fetchone()[0])
            assert shape.match(
                conn.execute("SELECT created_at FROM milestones UNION SELECT tracker_now()").fetchone()[0]
            )
        finally:
            conn.close()

    def test_rows_and_cursors(self, url: str) -> None:
        """Rows read by index, by name and as dicts; lastrowid and rowcount as sqlite3 gives them."""
        conn = trackerdb.init(url)
        try:
            cur = conn.execute("INSERT INTO devices (product, uuid) VALUES (?, ?)", ("RTX", "GPU-1"))
            assert (1, 1) == (cur.lastrowid, cur.rowcount)
            assert cur.fetchone() is None
            row = conn.execute("SELECT id, product, uuid FROM devices").fetchone()
            assert (1, "RTX", "GPU-1") == (row[0], row["product"], row[2])
            assert {"id": 1, "product": "RTX", "uuid": "GPU-1"} == dict(row)
            assert conn.execute("UPDATE devices SET driver = 'x'").fetchone() is None
            records.add_milestone(conn, "M1", "one")
            records.add_item(conn, "N1", "a", "M1")
            records.add_item(conn, "N2", "b", "M1", depends_on=["N1"])
            records.set_item(conn, "N2", depends_on=["N1"])  # INSERT OR IGNORE: already there, nothing happens
            assert 1 == conn.execute("SELECT count(*) FROM item_deps").fetchone()[0]
        finally:
            conn.close()


class TestSchema:
    def test_same_migrations_as_sqlite(self) -> None:
        """Both backends ship the same migration versions and names, and raise the same refusal names."""
        import re

        sqlite_side, pg_side = trackerdb.migrations(), pg.migrations()
        assert [(m.version, m.name) for m in sqlite_side] == [(m.version, m.name) for m in pg_side]
        raised_sqlite = {n for m in sqlite_side for n in re.findall(r"RAISE\(ABORT, '(tracker-[a-z-]+): ", m.sql)}
        raised_pg = {n for m in pg_side for n in re.findall(r"tracker_refuse\('(tracker-[a-z-]+): ", m.sql)}
        assert raised_sqlite <= raised_pg
        from aos.refusals import refusal_by_name

        for name in raised_pg:
            assert name == refusal_by_name(name).name

    def test_every_sqlite_trigger_has_its_namesake(self) -> None:
        """Every SQLite trigger has a PostgreSQL trigger of the same name (audit names them the same way)."""
        from tracker.audit import expected_triggers

        assert set(expected_triggers()) <= set(pg.expected_objects().triggers)

    def test_shipped_schema_audits_clean(self, url: str) -> None:
        """A new tracker's catalog matches the shipped text exactly: audit reports no rule problem."""
        conn = trackerdb.init(url)
        try:
            assert [] == pg.catalog_problems(conn)
            expected = pg.expected_objects()
            assert len(expected.triggers) > 50
            assert len(expected.functions) > 25
        finally:
            conn.close()

    def test_migrated_forward(self, url: str) -> None:
        """A tracker at schema version 1 is brought to the latest on open, its rows kept and the new rules in force."""
        old = trackerdb.init(url, target=1)
        old.execute("INSERT INTO milestones (id, title) VALUES ('M1', 'first')")
        old.execute("INSERT INTO items (id, title, milestone_id) VALUES ('N1', 'one', 'M1')")
        assert 1 == trackerdb.schema_version(old)
        old.close()
        conn = trackerdb.connect(url)
        try:
            assert len(pg.migrations()) == trackerdb.schema_version(conn) >= 2
            rows = conn.execute("SELECT version, name, sql_blake3 FROM schema_migrations ORDER BY version").fetchall()
            assert [(m.version, m.name, m.digest) for m in pg.migrations()] == [tuple(r) for r in rows]
            with pytest.raises(integrity_errors(), match=r"^tracker-invalid: a milestone with work items"):
                conn.execute("DELETE FROM milestones WHERE id = 'M1'")
        finally:
            conn.close()

    def test_integer_runs_become_text_ids(self, url: str, tmp_path: Path) -> None:
        """A tracker made before run ids were text (version 2) is migrated: each run gets a UUIDv7 from its start
        time and keeps its number as legacy_id, its evidence and measurements follow it, and the migration's
        journal entry holds every row, so audit's journal check is clean."""
        old = trackerdb.init(url, target=2)
        old.execute("INSERT INTO milestones (id, title) VALUES ('M1', 'first')")
        old.execute("INSERT INTO runs (lane, started_at) VALUES ('distributed-device', '2026-05-09T07:35:25.123Z')")
        old.execute(
            "INSERT INTO evidence (run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope, gate)"
            " VALUES (1, ?, '/gone.aos', ?, ?, 10, 3, 'pass', 'static', 'distributed-device')",
            ("e" * 32, "a" * 64, "b" * 64),
        )
        old.execute("INSERT INTO measurements (run_id, name, value) VALUES (1, 'updates', 5)")
        old.close()
        conn = trackerdb.connect(url)
        try:
            run, legacy, started = conn.execute("SELECT id, legacy_id, started_at FROM runs").fetchone()
            assert (1, "2026-05-09T07:35:25.123Z") == (legacy, started)
            from tracker.ids import is_run_id

            assert is_run_id(run)
            assert run.startswith(f"{1778312125123 >> 16:08x}-")  # the start time, in ms, leads the id
            assert [(run,)] == [tuple(r) for r in conn.execute("SELECT run_id FROM evidence")]
            assert [(run,)] == [tuple(r) for r in conn.execute("SELECT run_id FROM measurements")]
            assert run == records.run_id_of(conn, "1")
            report = audit(conn)
            assert [] == report.journal
            assert [] == report.rules
            # Integer ids go on from the largest, whoever inserted it.
            conn.execute("INSERT INTO measurements (id, run_id, name, value) VALUES (100, ?, 'x', 1)", (run,))
            assert 101 == records.add_measurement(conn, run, "y", 2)
        finally:
            conn.close()


class TestOpening:
    def test_missing_database(self, url: str, pg_server: Any) -> None:
        """Opening a tracker whose database does not exist is tracker-missing, and creates nothing."""
        with pytest.raises(Refusal) as info:
            trackerdb.connect(url)
        assert "tracker-missing" == info.value.name
        with psycopg.connect(pg_server.url("postgres")) as admin:
            name = url.split("?")[0].rsplit("/", 1)[1]
            assert admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None

    def test_empty_database(self, url: str, pg_server: Any, cli: Cli) -> None:
        """An existing database without a tracker is tracker-missing to every command but init."""
        pg_server.create_database(url.split("?")[0].rsplit("/", 1)[1])
        result = cli("tracker", "--db", url, "status")
        assert 1 == result.exit_code
        assert result.stderr.startswith("refused: tracker-missing: no tracker at ")
        assert 0 == cli("tracker", "--db", url, "init").exit_code
        assert 0 == cli("tracker", "--db", url, "status").exit_code

    def test_other_database_refused(self, url: str, pg_server: Any) -> None:
        """Another application's database is refused as tracker-schema, by init and by open, and left alone."""
        pg_server.create_database(url.split("?")[0].rsplit("/", 1)[1])
        with psycopg.connect(url) as other:
            other.execute("CREATE TABLE accounts (id int)")
        for action in (trackerdb.init, trackerdb.connect):
            with pytest.raises(Refusal) as info:
                action(url)
            assert info.value.name in ("tracker-schema", "tracker-missing")
        with pytest.raises(Refusal) as info:
            trackerdb.init(url)
        assert "tracker-schema" == info.value.name
        with psycopg.connect(url) as other:
            assert other.execute("SELECT to_regclass('items')").fetchone()[0] is None

    def test_newer_schema_refused(self, url: str) -> None:
        """A tracker from a newer tool is refused as tracker-schema, not guessed at."""
        trackerdb.init(url).close()
        with psycopg.connect(url) as raw:
            raw.execute("INSERT INTO schema_migrations (version, name, sql_blake3) VALUES (99, 'future', 'x')")
        with pytest.raises(Refusal) as info:
            trackerdb.connect(url)
        assert "tracker-schema" == info.value.name

    def test_unreachable_server_and_password_kept_out(self, tmp_path: Path, cli: Cli) -> None:
        """A server that is not there is tracker-database; the password in the URL is never printed."""
        url = f"postgresql://alice:s3cret@/db?host={tmp_path}&port=1"
        result = cli("tracker", "--db", url, "status")
        assert 1 == result.exit_code
        assert result.stderr.startswith("refused: tracker-database: postgresql://alice:***@/db")
        assert "s3cret" not in result.output + result.stderr


class TestLoad:
    def test_write_skew_is_serialised(self, url: str, tmp_path: Path) -> None:
        """A failing stream attached to a run while another client records the run's physical pass: the lock row
        makes one wait for the other, so the pass is refused instead of landing beside a failing stream (write skew:
        each check alone saw a consistent state)."""
        t = example_tracker(url, tmp_path)
        run = records.start_run(t.conn, lane="distributed-device")
        sealed_stream(tmp_path / "phys.aos", scope="physical")
        from tracker.attach import attach

        attach(t.conn, tmp_path / "phys.aos", run)
        t.conn.close()
        failing, finish = PlainClient(url), PlainClient(url)
        try:
            failing.execute(  # not committed yet
                "INSERT INTO evidence (run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope,"
                " gate, recorded_at, devices) VALUES (?, ?, '/x.aos', ?, ?, 1, 1, 'fail', 'physical',"
                " 'distributed-device', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), '[]')",
                (run, "f" * 32, "a" * 64, "b" * 64),
            )
            outcome: list[BaseException | None] = []

            def finish_run() -> None:
                try:
                    finish.execute(
                        "UPDATE runs SET state = 'completed', finished_at = 'now', physical_pass = 1 WHERE id = ?",
                        (run,),
                    )
                    finish.commit()
                    outcome.append(None)
                except integrity_errors() as exc:
                    finish.rollback()
                    outcome.append(exc)

            worker = threading.Thread(target=finish_run)
            worker.start()
            worker.join(timeout=1.0)
            assert worker.is_alive(), "the second writer did not wait for the first"
            failing.commit()
            worker.join(timeout=60)
            assert 1 == len(outcome)
            assert str(outcome[0]).startswith("tracker-physical-pass: ")
        finally:
            failing.close()
            finish.close()

    def test_repeatable_read_cannot_check_a_stale_snapshot(self, url: str, tmp_path: Path) -> None:
        """A REPEATABLE READ transaction that saw run 3 running cannot attach to it after another finished it:
        its first write fails to serialise (the lock row changed under it) instead of passing a stale check."""
        t = example_tracker(url, tmp_path)
        t.conn.close()
        stale, other = PlainClient(url), PlainClient(url)
        try:
            stale.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            run = t.open_run
            assert "running" == stale.execute("SELECT state FROM runs WHERE id = ?", (run,)).fetchone()[0]
            other.execute("UPDATE runs SET state = 'failed', finished_at = 'now' WHERE id = ?", (run,))
            other.commit()
            with pytest.raises(psycopg.errors.SerializationFailure):
                stale.execute("INSERT INTO measurements (run_id, name, value) VALUES (?, 'late', 1)", (run,))
            stale.rollback()
            assert 0 == other.execute("SELECT count(*) FROM measurements").fetchone()[0]
        finally:
            stale.close()
            other.close()


class TestAuditCatalog:
    """Ways a client with DDL rights can switch a rule off in PostgreSQL; audit names each."""

    @pytest.mark.parametrize(
        ("ddl", "finding"),
        [
            ("ALTER TABLE items DISABLE TRIGGER items_update", "trigger items_update is disabled"),
            (
                "CREATE FUNCTION quiet() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF NEW.verdict = 'fail' THEN RETURN NULL; END IF; RETURN NEW; END $$;"
                " CREATE TRIGGER evidence_aa_quiet BEFORE INSERT ON evidence FOR EACH ROW EXECUTE FUNCTION quiet()",
                "trigger evidence_aa_quiet is not one of the tracker's",
            ),
            (
                "CREATE OR REPLACE FUNCTION items_update() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RETURN NEW; END $$",
                "function items_update was altered",
            ),
            (
                "DROP TRIGGER runs_update ON runs;"
                " CREATE TRIGGER runs_update BEFORE DELETE ON runs FOR EACH ROW EXECUTE FUNCTION runs_update()",
                "trigger runs_update was altered",
            ),
            (
                "CREATE RULE no_fail AS ON INSERT TO evidence WHERE NEW.verdict = 'fail' DO INSTEAD NOTHING",
                "rule no_fail on evidence is not one of the tracker's",
            ),
        ],
        ids=["disabled", "extra-trigger", "function-body", "trigger-event", "rewrite-rule"],
    )
    def test_switched_off_rule_is_found(self, url: str, tmp_path: Path, ddl: str, finding: str) -> None:
        t = example_tracker(url, tmp_path)
        assert audit(t.conn).ok
        with psycopg.connect(url) as raw:
            raw.execute(ddl.encode())
        report = audit(t.conn)
        t.conn.close()
        assert not report.ok
        assert any(p.startswith(finding) for p in report.rules), format_audit(report)

    def test_replica_role_bypass_is_named_by_the_journal(self, url: str, tmp_path: Path) -> None:
        """A superuser can switch every trigger off for a session (session_replication_role = replica) without a
        trace in the catalog; the edit it lets through is still named, by the journal."""
        t = example_tracker(url, tmp_path)
        static = t.static_run
        t.conn.close()
        raw = PlainClient(url)
        try:
            raw.execute("SET session_replication_role = replica")
            raw.execute("UPDATE runs SET state = 'failed' WHERE id = ?", (static,))
            raw.commit()
        finally:
            raw.close()
        conn = trackerdb.connect(url)
        try:
            report = audit(conn)
            assert [] == report.rules  # the catalog is as shipped
            assert any(f"runs {static!r}: state is 'failed' in the table" in p for p in report.journal)
        finally:
            conn.close()

    def test_truncate_refused(self, url: str, tmp_path: Path) -> None:
        """TRUNCATE would skip every row trigger: it is refused on every tracker table."""
        t = example_tracker(url, tmp_path)
        t.conn.close()
        raw = PlainClient(url)
        try:
            for table in ("evidence", "runs", "items", "item_evidence", "journal", "tracker_lock"):
                with pytest.raises(integrity_errors(), match=r"^tracker-invalid: "):
                    raw.execute(f"TRUNCATE {table} CASCADE")
                raw.rollback()
            assert 3 == raw.execute("SELECT count(*) FROM evidence").fetchone()[0]
        finally:
            raw.close()

    def test_lock_row_cannot_be_removed(self, url: str) -> None:
        """The lock row is only ever locked: deleting or re-keying it is refused."""
        trackerdb.init(url).close()
        raw = PlainClient(url)
        try:
            for sql in ("DELETE FROM tracker_lock", "UPDATE tracker_lock SET application = 1"):
                with pytest.raises(integrity_errors(), match=r"^tracker-invalid: "):
                    raw.execute(sql)
                raw.rollback()
        finally:
            raw.close()


def test_runner_role_works_but_cannot_touch_the_rules(url: str, pg_server: Any, tmp_path: Path) -> None:
    """The role docs/TRACKER.md suggests for runners (DML on the tables, not their owner) can do all the tool does,
    and cannot drop or disable a rule's trigger."""
    trackerdb.init(url).close()
    role = "runner_" + url.split("?")[0].rsplit("/", 1)[1][-20:]
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute(f"CREATE ROLE {role} LOGIN")
        owner.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
    try:
        runner_url = url.replace("user=postgres", f"user={role}")
        t = example_tracker(runner_url, tmp_path)
        for ddl in ("DROP TRIGGER runs_update ON runs", "ALTER TABLE runs DISABLE TRIGGER runs_update"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                t.conn.execute(ddl)
        assert audit(t.conn).ok
        t.conn.close()
    finally:
        pg_server.drop_database(url.split("?")[0].rsplit("/", 1)[1])
        pg_server.admin(f"DROP ROLE IF EXISTS {role}")


def test_local_server_runs_a_copy_of_its_binaries(tmp_path: Path) -> None:
    """Where the unprivileged server user cannot reach the installed binaries (a Python under /root, as root),
    the local server runs a copy from its temporary folder; here the copy is forced."""
    from tracker.pglocal import LocalServer, _world_reachable

    closed = tmp_path / "closed"
    (closed / "inner").mkdir(parents=True)
    closed.chmod(0o700)
    assert not _world_reachable(closed / "inner")
    assert _world_reachable(Path("/usr/bin"))
    with LocalServer(copy_binaries=True) as server:
        assert server.root in server.bin.parents
        url = server.create_database("copied")
        conn = trackerdb.init(url)
        try:
            assert len(pg.migrations()) == trackerdb.schema_version(conn)
        finally:
            conn.close()


def test_status_json_on_postgres(url: str, tmp_path: Path, cli: Cli) -> None:
    """`status --json` and `show --json` on a PostgreSQL tracker serialise (plain ints and strings, no Decimals)."""
    t = example_tracker(url, tmp_path)
    t.conn.close()
    runs = (["show", t.static_run, "--json"], ["run", "list", "--json"])
    for args in (["status", "--json"], ["next", "--json"], ["audit", "--json"], *runs):
        result = cli("tracker", "--db", url, *args)
        assert 0 == result.exit_code, result.output
        json.loads(result.stdout)
