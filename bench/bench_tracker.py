"""The tracker under load: attach N small streams, then time status, next and audit with N runs.

Each run is started, gets one small sealed stream (written after the run
started, as a recorder would) attached, and is finished; only the ``attach``
calls are timed for the attach rate. Then ``status``, ``next`` and ``audit``
(which re-verifies every stream, re-derives every column and replays the whole
journal) are timed on the result. This prints numbers; it asserts nothing.

    python bench/bench_tracker.py                 # 10,000 runs, SQLite, in a temporary folder
    python bench/bench_tracker.py --runs 2000 --keep ./bench-tracker
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from tracker import records
from tracker.attach import attach
from tracker.audit import audit
from tracker.db import init
from tracker.journal import entries
from tracker.status import next_items, status
from tracker.testing import sealed_stream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="Work here (kept) instead of a temporary folder.")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-tracker-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "progress.sqlite3"
    db.unlink(missing_ok=True)
    conn = init(db)
    records.add_milestone(conn, "M1", "bench")
    for i in range(50):
        records.add_item(conn, f"N{i}", f"item {i}", "M1", depends_on=[f"N{i - 1}"] if i else [])
    attach_s = 0.0
    for i in range(args.runs):
        run = records.start_run(conn, lane="distributed-device", environ={})
        path = work / f"s{i}.aos"
        sealed_stream(path, verdict="pass" if i % 7 else "fail")
        t0 = time.perf_counter()
        attach(conn, path, run)
        attach_s += time.perf_counter() - t0
        records.finish_run(conn, run, "completed")
        if (i + 1) % 1000 == 0:
            print(f"  {i + 1} runs", flush=True)
    size = db.stat().st_size + (Path(f"{db}-wal").stat().st_size if Path(f"{db}-wal").exists() else 0)
    print(
        f"attach: {args.runs} streams in {attach_s:.1f} s"
        f" ({args.runs / attach_s:.0f}/s, {attach_s / args.runs * 1e3:.2f} ms each)"
    )
    for name, fn in (("status", lambda: status(conn)), ("next", lambda: next_items(conn))):
        t0 = time.perf_counter()
        fn()
        print(f"{name}: {time.perf_counter() - t0:.3f} s with {args.runs} runs")
    t0 = time.perf_counter()
    report = audit(conn)
    print(
        f"audit: {time.perf_counter() - t0:.1f} s with {args.runs} runs, {len(entries(conn))} journal entries"
        f" (ok={report.ok}); database {size / 1e6:.1f} MB"
    )
    conn.close()
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
