"""Benchmark the tracker on both backends: attach N small streams, then time status, next and audit.

    python bench/bench_tracker.py                     # N = 10,000 runs (one stream each), both backends
    python bench/bench_tracker.py --n 500             # a quick run
    python bench/bench_tracker.py --backend sqlite    # one backend only
    python bench/bench_tracker.py --pg-url postgresql://USER@HOST/DB   # an existing server (DB is created by init)

Then (with the SQLite side run) the SQLite tracker is moved with ``alpha tracker
import`` into a fresh tracker on each backend benched: its audit, every stream
verified again, every row replayed under the target's rules, in one transaction.

For each backend, with a fresh tracker: N runs are started, one small sealed
stream (written with ``aos.writer``, as a gate leaves it) is attached to each,
one transaction (and one journal entry) per attach as ``alpha observe attach``
does, and each run is finished; N/10 work items in a dependency chain give ``next`` something to
walk. Then ``status``, ``next`` and ``audit`` (which re-verifies every stream)
are timed, in-process and through the ``alpha`` CLI. Without ``--pg-url`` the
PostgreSQL side runs on a throw-away local server (tracker/pglocal.py; fsync
off, so its write numbers are a best case for a server's disk).

It prints numbers; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracker import records
from tracker.attach import attach
from tracker.audit import audit
from tracker.db import connect, init
from tracker.status import next_items, status
from tracker.testing import sealed_stream

# `alpha`, as this interpreter imports it (a copy of the tree on PYTHONPATH is what gets measured).
ALPHA = [sys.executable, "-c", "from observe.cli.root import main; main()"]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def make_streams(folder: Path, n: int) -> list[Path]:
    # Evidence must be recorded after its run started (tracker-evidence-time); the streams are written once,
    # before any run, so they are dated a day ahead.
    opened = time.time_ns() + 86_400 * 10**9
    paths = []
    for i in range(n):
        path = folder / f"s{i:06d}.aos"
        verdict, scope = ("pass", "fail", "inconclusive")[i % 3], ("static", "physical")[i % 2]
        sealed_stream(path, verdict=verdict, scope=scope, opened_ns=opened)
        paths.append(path)
    return paths


def bench_backend(name: str, db: str, streams: list[Path]) -> dict[str, float]:
    n = len(streams)
    out: dict[str, float] = {}
    conn = init(db)
    try:
        records.add_milestone(conn, "M1", "bench")
        items = max(1, n // 10)
        for i in range(items):
            deps = [f"N{i - 1}"] if i else []
            records.add_item(conn, f"N{i}", f"item {i}", "M1", status="implemented" if i < items // 2 else "planned")
            if deps:
                records.set_item(conn, f"N{i}", depends_on=deps)

        def start_all() -> list[str]:
            return [records.start_run(conn, lane="distributed-device", environ={}) for _ in range(n)]

        out["run start, each (ms)"], runs = timed(start_all)
        out["run start, each (ms)"] *= 1000 / n

        def attach_all() -> None:
            for run, path in zip(runs, streams, strict=True):
                attach(conn, path, run)

        seconds, _ = timed(attach_all)
        out["attach, streams/s"] = n / seconds
        out["attach, each (ms)"] = seconds * 1000 / n

        def finish_all() -> None:
            for run in runs:
                records.finish_run(conn, run, "completed")

        seconds, _ = timed(finish_all)
        out["run finish, each (ms)"] = seconds * 1000 / n
    finally:
        conn.close()

    conn = connect(db)
    try:
        out["status (s)"], s = timed(lambda: status(conn))
        assert s["runs"]["completed"] == n
        out["next (s)"], _ = timed(lambda: next_items(conn))
        out["audit (s)"], report = timed(lambda: audit(conn))
        if not report.ok:
            print(f"  {name}: audit found problems: {report.counts()} {report.rules[:3]}", file=sys.stderr)
    finally:
        conn.close()
    for command in ("status", "next"):
        seconds, _ = timed(
            lambda command=command: subprocess.run(
                [*ALPHA, "tracker", "--db", db, command], capture_output=True, check=False
            )
        )
        out[f"alpha tracker {command}, process (s)"] = seconds
    return out


def bench_import(source: str, targets: dict[str, str]) -> dict[str, float]:
    """Seconds to import the tracker at ``source`` into a fresh tracker at each target."""
    from tracker.importing import import_tracker

    out: dict[str, float] = {}
    for name, db in targets.items():
        conn = init(db)
        try:
            out[name], result = timed(lambda conn=conn: import_tracker(conn, source))
            assert result.added["evidence"] > 0
        finally:
            conn.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="runs, one stream each (default 10,000)")
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--pg-url", help="an existing PostgreSQL server's database URL (default: a local one)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-tracker-"))
    server = None
    try:
        print(f"writing {args.n} small sealed streams ...", flush=True)
        seconds, streams = timed(lambda: make_streams(work, args.n))
        print(f"  {seconds:.1f} s ({seconds * 1000 / args.n:.2f} ms each, {streams[0].stat().st_size} bytes each)")
        results: dict[str, dict[str, float]] = {}
        if args.backend in ("sqlite", "both"):
            print("sqlite ...", flush=True)
            results["sqlite"] = bench_backend("sqlite", str(work / "progress.sqlite3"), streams)
        if args.backend in ("postgresql", "both"):
            url = args.pg_url
            if url is None:
                from tracker.pglocal import LocalServer

                server = LocalServer().start()
                url = server.url("bench")
            print("postgresql ...", flush=True)
            results["postgresql"] = bench_backend("postgresql", url, streams)
        if "sqlite" in results:
            targets = {"sqlite": str(work / "imported.sqlite3")}
            if server is not None:  # a fresh database on the local server (not on a server given by --pg-url)
                targets["postgresql"] = server.url("imported")
            print("import the SQLite tracker ...", flush=True)
            moved = bench_import(str(work / "progress.sqlite3"), targets)
            for b in results:
                results[b]["import the SQLite tracker here (s)"] = moved.get(b, float("nan"))
        names = list(next(iter(results.values())))
        print(f"\ntracker with N = {args.n} runs, one stream each")
        print(f"{'':38}" + "".join(f"{b:>14}" for b in results))
        for key in names:
            print(f"{key:38}" + "".join(f"{results[b][key]:>14.3f}" for b in results))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
