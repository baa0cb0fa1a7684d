"""Run ids are globally unique text; an integer-id tracker migrates keeping every reference; CI jobs recorded."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from aos.refusals import Refusal
from observe.ci.systems import CiJob, ci_job
from tests.helpers.backends import PlainClient, integrity_errors
from tests.helpers.cli import Cli
from tracker import records
from tracker.audit import audit
from tracker.db import connect, init, schema_version
from tracker.ids import is_run_id, new_run_id
from tracker.journal import entries


class TestRunIds:
    def test_uuid7_text(self) -> None:
        """A run id is a version-7 UUID in text form whose time is the run's start, to the millisecond."""
        run = new_run_id(1_718_000_000_123_456_789)
        u = uuid.UUID(run)
        assert (7, uuid.RFC_4122, run) == (u.version, u.variant, str(u))
        assert 1_718_000_000_123 == u.int >> 80

    def test_unique_and_time_ordered(self) -> None:
        """Ids never repeat, and a later millisecond sorts later."""
        ids = [new_run_id() for _ in range(5000)]
        assert len(ids) == len(set(ids))
        assert new_run_id(2_000_000_000_000_000_000) > new_run_id(1_999_999_999_999_000_000)

    def test_run_start_prints_a_text_id_alone(self, tracker_db: str, cli: Cli) -> None:
        """`run start` prints the new id alone; it names the run everywhere, as does a unique prefix."""
        db = tracker_db
        assert 0 == cli("tracker", "--db", db, "init").exit_code
        out = cli("tracker", "--db", db, "run", "start", "--lane", "exit-zero", env={}).stdout
        run = out.strip()
        assert (True, f"{run}\n") == (is_run_id(run), out)
        shown = json.loads(cli("tracker", "--db", db, "show", run[:13], "--json").stdout)
        assert run == shown["id"]
        result = cli("tracker", "--db", db, "run", "finish", run[:13], "--state", "failed")
        assert (0, f"run {run}: failed\n") == (result.exit_code, result.stdout)


def legacy_tracker(db: str) -> None:
    """A tracker at schema 2 (integer run ids) with two runs, evidence, a device, a measurement, a verified item."""
    conn = init(db, target=2)
    conn.close()
    raw = PlainClient(db, autocommit=True)
    script = """
        INSERT INTO milestones (id, title) VALUES ('M1', 'first');
        INSERT INTO items (id, title, milestone_id, hardware) VALUES ('H1', 'two GPUs', 'M1', 1);
        INSERT INTO devices (product, uuid) VALUES ('RTX 3090', 'GPU-a');
        INSERT INTO runs (lane, started_at) VALUES ('distributed-device', '2024-06-10T06:13:20.123Z');
        INSERT INTO runs (lane, started_at) VALUES ('distributed-device', '2024-06-11T00:00:00.000Z');
        INSERT INTO run_devices (run_id, device_id) VALUES (1, 1);
        INSERT INTO evidence (run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope, gate)
            VALUES (1, 'aaaa0000aaaa0000aaaa0000aaaa0000', '/gone/a.aos',
                    printf('%064d', 1), printf('%064d', 2), 10, 5, 'pass', 'physical', 'distributed-device');
        INSERT INTO evidence (run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope, gate)
            VALUES (2, 'bbbb0000bbbb0000bbbb0000bbbb0000', '/gone/b.aos',
                    printf('%064d', 3), printf('%064d', 4), 10, 5, 'fail', 'static', 'distributed-device');
        INSERT INTO measurements (run_id, name, value) VALUES (1, 'updates', 5.5);
        UPDATE runs SET state = 'completed', finished_at = 'x', physical_pass = 1 WHERE id = 1;
        INSERT INTO item_evidence (item_id, evidence_id) VALUES ('H1', 1);
        UPDATE items SET status = 'verified' WHERE id = 'H1';
        """
    if raw.postgres:
        script = re.sub(r"printf\('%064d', (\d+)\)", r"lpad('\1', 64, '0')", script)
    try:
        for statement in script.split(";"):
            if statement.strip():
                raw.execute(statement)
    finally:
        raw.close()


class TestMigration:
    def test_integer_ids_become_text_keeping_references(self, tracker_db: str) -> None:
        """Opening a schema-2 tracker gives each run a UUIDv7 from its start time; every reference follows it."""
        db = tracker_db
        legacy_tracker(db)
        conn = connect(db)
        assert 3 <= schema_version(conn)
        runs = {r[0]: r[1] for r in conn.execute("SELECT legacy_id, id FROM runs")}
        assert {1, 2} == set(runs)
        assert all(is_run_id(r) for r in runs.values())
        assert 1_718_000_000_123 == uuid.UUID(runs[1]).int >> 80
        assert runs[1] < runs[2]
        assert [(runs[1], "aaaa0000aaaa0000aaaa0000aaaa0000"), (runs[2], "bbbb0000bbbb0000bbbb0000bbbb0000")] == [
            tuple(r) for r in conn.execute("SELECT run_id, stream_id FROM evidence ORDER BY id")
        ]
        assert [(runs[1], 5.5)] == [tuple(r) for r in conn.execute("SELECT run_id, value FROM measurements")]
        assert [(runs[1], 1)] == [tuple(r) for r in conn.execute("SELECT run_id, device_id FROM run_devices")]
        assert ("verified", 1) == tuple(
            conn.execute(
                "SELECT max(i.status), count(*) FROM items i JOIN item_evidence l ON l.item_id = i.id"
                " JOIN evidence e ON e.id = l.evidence_id JOIN runs r ON r.id = e.run_id AND r.physical_pass = 1"
            ).fetchone()
        )
        if not db.startswith("postgresql://"):
            assert [] == conn.execute("PRAGMA foreign_key_check").fetchall()
        assert runs[1] == records.run_id_of(conn, "1")

    def test_rules_hold_after_migration(self, tracker_db: str) -> None:
        """The migrated runs are held to every rule: the completed one never changes, nothing is replaced."""
        db = tracker_db
        legacy_tracker(db)
        connect(db).close()
        raw = PlainClient(db, autocommit=True)
        replace = (
            "INSERT INTO runs (id, lane) SELECT id, lane FROM runs WHERE legacy_id = 1"
            " ON CONFLICT (id) DO UPDATE SET lane = EXCLUDED.lane"
            if raw.postgres
            else "INSERT OR REPLACE INTO runs (id, lane) SELECT id, lane FROM runs WHERE legacy_id = 1"
        )
        try:
            with pytest.raises(integrity_errors(), match=r"^tracker-run-immutable: "):
                raw.execute("UPDATE runs SET state = 'failed' WHERE legacy_id = 1")
            with pytest.raises(integrity_errors(), match=r"^tracker-exists: "):
                raw.execute(replace)
        finally:
            raw.close()

    def test_journal_starts_with_every_migrated_row(self, tracker_db: str) -> None:
        """The migration is the journal's first entry: a snapshot of every row; the replay matches the tables."""
        db = tracker_db
        legacy_tracker(db)
        conn = connect(db)
        first = entries(conn)[0]
        assert ("schema.migrate", 3, True) == (first.op, first.args["version"], first.body["snapshot"])
        tables = {c["table"] for c in first.changes}
        assert {"runs", "evidence", "measurements", "run_devices", "item_evidence", "items"} <= tables
        report = audit(conn)
        assert ([], []) == (report.rules, report.journal)
        assert {"missing"} == {f.state for f in report.streams}  # the legacy stream files are gone

    def test_dangling_reference_stops_the_migration(self, tracker_db: str) -> None:
        """Evidence of a run that does not exist (a dropped trigger let it in) stops the migration; nothing changes.

        PostgreSQL also enforces the foreign key; a superuser's replica role switches both off."""
        db = tracker_db
        legacy_tracker(db)
        raw = PlainClient(db, autocommit=True)
        if raw.postgres:
            raw.execute("SET session_replication_role = replica")
        else:
            raw.execute("DROP TRIGGER measurements_insert")
        raw.execute("INSERT INTO measurements (run_id, name, value) VALUES (99, 'orphan', 1)")
        raw.close()
        with pytest.raises(Refusal) as info:
            connect(db)
        assert "tracker-schema" == info.value.name
        raw = PlainClient(db)
        try:
            if raw.postgres:
                assert 2 == raw.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
                assert "bigint" == raw.execute("SELECT pg_typeof(id)::text FROM runs LIMIT 1").fetchone()[0]
            else:
                assert 2 == raw.execute("PRAGMA user_version").fetchone()[0]
                assert "integer" == raw.execute("SELECT typeof(id) FROM runs LIMIT 1").fetchone()[0]
        finally:
            raw.close()


class TestCiJob:
    @pytest.mark.parametrize(
        ("env", "job"),
        [
            (
                {
                    "GITHUB_ACTIONS": "true",
                    "GITHUB_SERVER_URL": "https://github.com",
                    "GITHUB_REPOSITORY": "acme/lane",
                    "GITHUB_RUN_ID": "42",
                    "GITHUB_SHA": "c0ffee",
                },
                CiJob("github", "https://github.com/acme/lane/actions/runs/42", "c0ffee"),
            ),
            (
                {
                    "GITHUB_ACTIONS": "true",
                    "GITHUB_SERVER_URL": "https://ghe.example/",
                    "GITHUB_REPOSITORY": "acme/lane",
                    "GITHUB_RUN_ID": "42",
                    "GITHUB_RUN_ATTEMPT": "2",
                },
                CiJob("github", "https://ghe.example/acme/lane/actions/runs/42/attempts/2", None),
            ),
            (
                {
                    "GITLAB_CI": "true",
                    "CI_JOB_URL": "https://gitlab.example/acme/lane/-/jobs/7",
                    "CI_COMMIT_SHA": "abc",
                },
                CiJob("gitlab", "https://gitlab.example/acme/lane/-/jobs/7", "abc"),
            ),
            (
                {"BUILDKITE": "true", "BUILDKITE_BUILD_URL": "https://buildkite.com/acme/lane/builds/9"},
                CiJob("buildkite", "https://buildkite.com/acme/lane/builds/9", None),
            ),
            ({"CI": "true", "GITHUB_ACTIONS": "false"}, None),
            ({}, None),
        ],
    )
    def test_from_environment(self, env: dict[str, str], job: CiJob | None) -> None:
        """GitHub Actions, GitLab and Buildkite name their job; anything else names none."""
        assert job == ci_job(env)

    def test_run_start_records_the_job(self, tracker_db: str, cli: Cli) -> None:
        """`run start` under GitHub Actions records provider, job URL and commit; `show` prints them."""
        db = tracker_db
        cli("tracker", "--db", db, "init")
        env = {
            "GITHUB_ACTIONS": "true",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": "acme/lane",
            "GITHUB_RUN_ID": "42",
            "GITHUB_SHA": "c0ffee",
        }
        out = cli("tracker", "--db", db, "run", "start", env=env).stdout
        run = out.strip()
        assert f"{run}\n" == out
        shown = json.loads(cli("tracker", "--db", db, "show", run, "--json").stdout)
        assert {
            "provider": "github",
            "job_url": "https://github.com/acme/lane/actions/runs/42",
            "commit": "c0ffee",
        } == (shown["ci"])
        text = cli("tracker", "--db", db, "show", run).stdout
        assert "  CI: github https://github.com/acme/lane/actions/runs/42 at c0ffee\n" in text

    def test_outside_ci_none(self, tracker_db: str) -> None:
        """Outside CI the run records no job."""
        conn = init(tracker_db)
        run = records.start_run(conn, environ={})
        assert (None, None, None) == tuple(
            conn.execute("SELECT ci_provider, ci_job_url, ci_commit FROM runs WHERE id = ?", (run,)).fetchone()
        )
