"""Load: 16 processes attaching at once lose nothing and meet every refusal; `init`s racing on a new database.

Both backends (the ``tracker_backend`` fixture): an SQLite file, and a PostgreSQL database (a new one for the
`init` race: the first `init` creates it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.run import child_env
from tracker import records
from tracker.audit import audit
from tracker.db import connect, init, migrations
from tracker.journal import entries
from tracker.testing import sealed_stream

WORKERS = 16

# Each worker loads everything first, waits at a start line until every worker is ready, then
# attaches its streams one by one and prints one JSON line per attempt: the refusal's name or "new".
_ATTACHER = textwrap.dedent(
    """
    import json, os, sys, time
    import aos.verify, gates.verdict  # noqa: F401 - load pyarrow before the start line
    from aos.refusals import Refusal
    from tracker.attach import attach
    from tracker.db import connect
    db, run, gate, jobs = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    conn = connect(db)
    open(gate + "." + str(os.getpid()), "w").close()
    while not os.path.exists(gate):
        time.sleep(0.002)
    for name, path, target in jobs:
        try:
            a = attach(conn, path, target or run)
            result = "new" if a.new else "unchanged"
        except Refusal as exc:
            result = exc.name
        print(json.dumps([name, result]), flush=True)
    conn.close()
    """
)

_INIT = textwrap.dedent(
    """
    import os, sys, time
    from observe.cli.root import main
    db, gate = sys.argv[1], sys.argv[2]
    open(gate + "." + str(os.getpid()), "w").close()
    while not os.path.exists(gate):
        time.sleep(0.001)
    main(["tracker", "--db", db, "init"])
    """
)


def start_together(tmp_path: Path, argvs: list[list[str]], timeout: float = 300) -> list[tuple[int, str, str]]:
    """Spawn every command, release them at once when all are ready, and return (exit, stdout, stderr) of each."""
    gate = tmp_path / "go"
    env = child_env({"PYTHONPATH": str(ROOT)})
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for argv in argvs
    ]
    deadline = time.monotonic() + timeout
    while len(list(tmp_path.glob("go.*"))) < len(procs) and time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.01)
    gate.touch()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        out.append((p.returncode, stdout, stderr))
    return out


class TestConcurrentAttach:
    def test_sixteen_attachers_lose_nothing_and_every_refusal_holds(self, tracker_db: str, tmp_path: Path) -> None:
        """16 processes at once: every good stream recorded once, each bad one refused by name, one contested winner."""
        db = tracker_db
        conn = init(db)
        finished = records.start_run(conn, lane="distributed-device")
        records.finish_run(conn, finished, "failed")
        old = time.time_ns() - 3_600_000_000_000
        runs = [records.start_run(conn, lane="distributed-device") for _ in range(WORKERS)]
        contested = tmp_path / "contested.aos"
        sealed_stream(contested)
        argvs = []
        for w, run in enumerate(runs):
            jobs: list[tuple[str, str, str | None]] = []
            for i in range(3):
                path = tmp_path / f"w{w}-{i}.aos"
                sealed_stream(path, verdict="pass" if i else "fail")
                jobs.append((f"good-{i}", str(path), None))
            sealed_stream(tmp_path / f"w{w}-lane.aos", gate="exit-zero")
            jobs.append(("lane", str(tmp_path / f"w{w}-lane.aos"), None))
            sealed_stream(tmp_path / f"w{w}-old.aos", opened_ns=old)
            jobs.append(("old", str(tmp_path / f"w{w}-old.aos"), None))
            sealed_stream(tmp_path / f"w{w}-late.aos")
            jobs.append(("terminal", str(tmp_path / f"w{w}-late.aos"), finished))
            jobs.append(("contested", str(contested), None))
            argvs.append([sys.executable, "-c", _ATTACHER, str(db), run, str(tmp_path / "go"), json.dumps(jobs)])
        before = len(entries(conn))
        results = start_together(tmp_path, argvs)
        assert [(0, "")] * WORKERS == [(code, err) for code, _, err in results]
        seen: dict[str, list[str]] = {}
        for _, out, _ in results:
            for line in out.splitlines():
                name, result = json.loads(line)
                seen.setdefault(name, []).append(result)
        assert {
            "good-0": ["new"] * WORKERS,
            "good-1": ["new"] * WORKERS,
            "good-2": ["new"] * WORKERS,
            "lane": ["tracker-evidence-lane"] * WORKERS,
            "old": ["tracker-evidence-time"] * WORKERS,
            "terminal": ["tracker-run-immutable"] * WORKERS,
        } == {k: v for k, v in seen.items() if k != "contested"}
        assert ["new"] + ["tracker-stream-attached"] * (WORKERS - 1) == sorted(seen["contested"], key=len)
        assert [3] * (WORKERS - 1) + [4] == sorted(
            r[0] for r in conn.execute("SELECT count(*) FROM evidence GROUP BY run_id")
        )
        assert 3 * WORKERS + 1 == conn.execute("SELECT count(*) FROM evidence").fetchone()[0]
        assert before + 3 * WORKERS + 1 == len(entries(conn))
        report = audit(conn)
        assert (True, [], []) == (report.ok, report.rules, report.journal)
        if not db.startswith("postgresql://"):
            assert "ok" == conn.execute("PRAGMA integrity_check").fetchone()[0]
        conn.close()


class TestInitRace:
    @pytest.mark.parametrize("attempt", range(3))
    def test_two_inits_on_a_new_database(self, tracker_db: str, tmp_path: Path, attempt: int) -> None:
        """Two `alpha tracker init` at the same moment on a database that does not exist: both succeed, once."""
        db = tracker_db
        argv = [sys.executable, "-c", _INIT, str(db), str(tmp_path / "go")]
        results = start_together(tmp_path, [argv, argv])
        shipped = migrations()
        for code, out, err in results:
            assert (0, "") == (code, err)
            assert out.endswith(f": schema version {len(shipped)}\n")
        conn = connect(db)
        try:
            versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
            assert [m.version for m in shipped] == versions
            assert ["schema.migrate"] * (len(shipped) - 2) == [e.op for e in entries(conn)]
            if not db.startswith("postgresql://"):
                assert "wal" == conn.execute("PRAGMA journal_mode").fetchone()[0]
            report = audit(conn)
            assert (True, [], []) == (report.ok, report.rules, report.journal)
        finally:
            conn.close()
