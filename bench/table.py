"""Run every benchmark once and print the issue's target table: each row, its value and its target.

    python bench/table.py                 # record 1G, the default sizes of the others
    python bench/table.py --size 256M     # a smaller recording (and report) for a quick look
    python bench/table.py --only record,latency

Each bench script prints, at its end, one tab-separated line per row of the table::

    ROW<TAB>measurement<TAB>value<TAB>target<TAB>met|missed

This script runs them one after another (never side by side: each one's ratios are measured against a
baseline in its own run, on a quiet machine), echoes their output, and then prints the rows together.
It asserts nothing and exits 0 unless a script failed to run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: name -> (script, arguments, given the --size): in the order of the issue's table.
BENCHES: dict[str, tuple[str, list[str]]] = {
    "record": ("bench_record.py", ["{size}"]),
    "gate": ("bench_gate.py", ["{size}"]),
    "latency": ("bench_latency.py", []),
    "format": ("bench_format.py", []),
    "sampler": ("bench_sampler.py", ["200M"]),
    "query": ("bench_query.py", []),
    "index": ("bench_index.py", []),
    "history": ("bench_history.py", []),
    "report": ("bench_report.py", ["{size}"]),
    "containment": ("bench_containment.py", []),
    "session": ("bench_session.py", []),
}


def rows_of(text: str) -> list[list[str]]:
    """The ROW lines of a bench's output, split into their four fields."""
    rows = []
    for line in text.splitlines():
        if line.startswith("ROW\t"):
            fields = line.split("\t")[1:]
            rows.append([*fields, "", "", "", ""][:4])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G", help="what bench_record and bench_report record (K/M/G)")
    parser.add_argument("--only", default="", help="comma-separated names among: " + ", ".join(BENCHES))
    args = parser.parse_args()
    chosen = [n for n in args.only.split(",") if n] or list(BENCHES)
    unknown = [n for n in chosen if n not in BENCHES]
    if unknown:
        parser.error(f"no bench named {', '.join(unknown)}")

    table: list[tuple[str, list[str]]] = []
    failed: list[str] = []
    for name in chosen:
        script, argv = BENCHES[name]
        path = HERE / script
        if not path.exists():
            print(f"== {name}: {script} is not here; skipped", flush=True)
            continue
        cmd = [sys.executable, str(path), *(a.format(size=args.size) for a in argv)]
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        t = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        sys.stdout.write(proc.stdout)
        print(f"== {name}: exit {proc.returncode} after {time.perf_counter() - t:.0f} s", flush=True)
        if proc.returncode != 0:
            failed.append(name)
        table.extend((name, row) for row in rows_of(proc.stdout))

    print()
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")
    widths = [max([len(r[i]) for _, r in table] + [len(h)]) for i, h in enumerate(("measurement", "value", "target"))]
    header = ("measurement", "value", "target", "")
    print("  ".join(h.ljust(w) for h, w in zip(header, [*widths, 0], strict=True)).rstrip())
    for _, (what, value, target, met) in table:
        met = "" if target.strip() in ("", "-") else met  # a row with no target is a measurement only
        print(f"{what.ljust(widths[0])}  {value.ljust(widths[1])}  {target.ljust(widths[2])}  {met}".rstrip())
    if failed:
        print(f"benches that failed to run: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
