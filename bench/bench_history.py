"""Benchmark issue 36's history readers in memory and time: ``audit`` (whole and ``--since``), ``site`` and gate
evaluation, each as a ratio to ``alpha tracker status`` measured in the same run.

    python bench/bench_history.py                   # 1,000 and 10,000 runs (SQLite), 100,000 extrapolated
    python bench/bench_history.py --sizes 500,2000  # a quick look
    python bench/bench_history.py --site            # also `alpha tracker site`: first, again, one run added
    python bench/bench_history.py --events 1000000  # the gate's stream (default 1,000,000 events)

For each size, a fresh SQLite tracker gets N runs, one small sealed stream attached to each (as
bench/bench_tracker.py builds them), then each command runs in a fresh ``alpha`` process, measured from a
small probe process (a child's peak RSS starts at its parent's): wall seconds and peak RSS. ``audit
--since`` checks the last 1% of the journal (the entries written since an audit a day's work before). The
gate row evaluates ``tests``' long lane (``gates.testing.write_long_lane``: 1,000-event build steps, nearly
all output) with the built-in ``exit-zero`` and with a gate searching every step's stderr and receipts.
The 100,000 rows are extrapolated linearly from the two largest sizes measured, and say so.

It prints the table, then ``ROW`` lines (bench/table.py); nothing here asserts: the machine may be noisy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_record import row
from bench_tracker import make_streams

#: ``alpha`` as this interpreter imports it (a copy of the tree on PYTHONPATH is what gets measured).
HISTORY_ALPHA = [sys.executable, "-c", "from observe.cli.root import main; main()"]

#: Issue 36's targets.
HISTORY_AUDIT_100K_MB = 300
HISTORY_GATE_1M_MB = 200

_PROBE = (
    "import json, os, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "proc = subprocess.Popen(json.loads(sys.argv[1]), stdout=subprocess.DEVNULL, close_fds=True)\n"
    "_, status, ru = os.wait4(proc.pid, 0)\n"
    "cpu = ru.ru_utime + ru.ru_stime\n"
    "print(json.dumps([time.perf_counter() - t, ru.ru_maxrss >> 10, os.waitstatus_to_exitcode(status), cpu]))\n"
)

_LONG_GATE = """
[gate]
name = "bench-builds"
scope = "command"

[exit]
code = 0

[[step]]
name = "build"
min = 1
max = 100000
stderr_contains = "warning: unused"

[[receipt]]
name = "build"
min = 1
max = 100000
step = "build"
step_exit = "exit_code"
step_stderr = ["warning"]
"""


def history_measure(argv: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (MB) and exit status of ``argv`` in a fresh process."""
    wall, mb, rc, _ = history_measure_cpu(argv)
    return wall, mb, rc


def history_measure_cpu(argv: list[str]) -> tuple[float, int, int, float]:
    """Wall seconds, peak RSS (MB), exit status and CPU seconds (user and system) of ``argv`` in a fresh
    process: on a loaded machine the CPU seconds say what the command costs when the wall time does not."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, check=True, text=True
    ).stdout
    wall, mb, rc, cpu = json.loads(out)
    return float(wall), int(mb), int(rc), float(cpu)


def history_tracker(folder: Path, n: int) -> str:
    """A fresh SQLite tracker of ``n`` completed runs, one stream attached to each; its path."""
    from tracker import records
    from tracker.attach import attach
    from tracker.db import init

    streams = make_streams(folder, n)
    db = str(folder / "tracker.sqlite3")
    conn = init(db)
    try:
        runs = [records.start_run(conn, lane="distributed-device", environ={}) for _ in range(n)]
        for run, path in zip(runs, streams, strict=True):
            attach(conn, path, run)
        for run in runs:
            records.finish_run(conn, run, "completed")
    finally:
        conn.close()
    return db


def history_journal_tail(db: str, share: float = 0.01) -> int:
    """The seq of the journal entry ``share`` of the way from its end (what ``audit --since`` starts at)."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        last = int(conn.execute("SELECT max(seq) FROM journal").fetchone()[0])
    return max(0, last - int(last * share))


def history_tracker_rows(n: int, site: bool) -> dict[str, tuple[float, int]]:
    """Each command's (seconds, MB) over a tracker of ``n`` runs; the site's also in CPU seconds (stderr)."""
    out: dict[str, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        folder = Path(tmp)
        t = time.perf_counter()
        db = history_tracker(folder, n)
        print(f"  {n} runs: tracker built in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        since = history_journal_tail(db)
        commands = {
            "status": ["status"],
            "audit": ["audit"],
            "audit --since (last 1%)": ["audit", "--since", str(since)],
        }
        if site:
            commands["site"] = ["site", str(folder / "site")]
        if site:
            commands["site again (nothing changed)"] = ["site", str(folder / "site")]
        for name, args in commands.items():
            wall, mb, rc, cpu = history_measure_cpu([*HISTORY_ALPHA, "tracker", "--db", db, *args])
            if rc != 0:
                print(f"  {n} runs: `{' '.join(args)}` exited {rc}", file=sys.stderr)
            out[name] = (wall, mb)
            print(f"  {n} runs: {name}: {wall:.2f} s, {cpu:.2f} CPU s", file=sys.stderr)
        if site:  # one more run, with its stream, then the site again: what an added run costs
            history_add_run(db, folder / "more")
            argv = [*HISTORY_ALPHA, "tracker", "--db", db, "site", str(folder / "site")]
            wall, mb, rc, cpu = history_measure_cpu(argv)
            if rc != 0:
                print(f"  {n} runs: `site` with one run added exited {rc}", file=sys.stderr)
            out["site, one run added"] = (wall, mb)
            print(f"  {n} runs: site, one run added: {wall:.2f} s, {cpu:.2f} CPU s", file=sys.stderr)
    return out


def history_add_run(db: str, folder: Path) -> None:
    """One more completed run in the tracker at ``db``, with one stream attached."""
    from tracker import records
    from tracker.attach import attach
    from tracker.db import connect

    folder.mkdir()
    (path,) = make_streams(folder, 1)
    conn = connect(db)
    try:
        run = records.start_run(conn, lane="distributed-device", environ={})
        attach(conn, path, run)
        records.finish_run(conn, run, "completed")
    finally:
        conn.close()


def history_gate_rows(events: int) -> dict[str, tuple[float, int]]:
    """Gate evaluation of a long lane of ``events`` events: (seconds, MB) per gate."""
    from gates.testing import write_long_lane

    evaluate = (
        "import sys\nfrom pathlib import Path\nfrom gates.evaluation import evaluate_stream\n"
        "from gates.language import parse_gate_text\nfrom gates.registry import resolve_gate\n"
        "g = resolve_gate(sys.argv[2]) if sys.argv[2] == 'exit-zero' else parse_gate_text(sys.argv[2], 'bench')\n"
        "sys.exit(0 if evaluate_stream(g, Path(sys.argv[1])).verdict == 'pass' else 1)\n"
    )
    out: dict[str, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-history-gate-") as tmp:
        stream = Path(tmp) / "long.aos"
        n = write_long_lane(stream, events)
        for name, gate in (("exit-zero", "exit-zero"), ("steps, stderr, receipts", _LONG_GATE)):
            wall, mb, rc = history_measure([sys.executable, "-c", evaluate, str(stream), gate])
            if rc != 0:
                print(f"  gate {name} over {n} events: not a pass (exit {rc})", file=sys.stderr)
            out[f"gate {name}, {n:,} events"] = (wall, mb)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="runs per tracker, comma-separated")
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the gate's stream")
    parser.add_argument("--site", action="store_true", help="also build the site (every page, slow)")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    measured = {n: history_tracker_rows(n, args.site) for n in sizes}
    gate = history_gate_rows(args.events)
    print(f"{'runs':>8}  {'command':<30} {'seconds':>9} {'x status':>9} {'peak MB':>8}")
    for n, rows in measured.items():
        base = rows["status"][0]
        for name, (wall, mb) in rows.items():
            print(f"{n:>8}  {name:<30} {wall:>9.2f} {wall / base:>9.1f} {mb:>8}")
    rows_out: list[str] = []
    if len(sizes) >= 2:
        a, b = sizes[-2], sizes[-1]
        target = 100_000
        for name in measured[b]:
            (wa, ma), (wb, mb_) = measured[a][name], measured[b][name]
            # A cost that fell from a to b (noise on a flat one: start-up) is held flat, never extrapolated down.
            wall = wb + max(0.0, wb - wa) * (target - b) / (b - a)
            rss = mb_ + max(0, mb_ - ma) * (target - b) / (b - a)
            print(f"{target:>8}  {name:<30} {wall:>9.2f} {'':>9} {rss:>8.0f}   (extrapolated from {a} and {b})")
            if name == "audit":
                rows_out.append(
                    row(
                        "audit at 100k runs, peak RSS (extrapolated)",
                        f"{rss:.0f} MB",
                        f"< {HISTORY_AUDIT_100K_MB} MB",
                        rss < HISTORY_AUDIT_100K_MB,
                    )
                )
    base = measured[sizes[-1]]["status"][0]
    for name, (wall, mb) in gate.items():
        print(f"{'':>8}  {name:<40} {wall:>9.2f} s ({wall / base:.1f} x status at {sizes[-1]}) {mb:>6} MB")
        rows_out.append(row(f"{name}, peak RSS", f"{mb} MB", f"< {HISTORY_GATE_1M_MB} MB", mb < HISTORY_GATE_1M_MB))
    for line in rows_out:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
