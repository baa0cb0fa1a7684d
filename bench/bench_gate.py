"""Benchmark ``alpha observe gate``'s peak memory: it must not grow with the output's size.

    python bench/bench_gate.py [SIZE]          # SIZE in bytes, or with K/M/G; default 1G
    ALPHA_BENCH_SIZE=256M python bench/bench_gate.py
    ALPHA_BENCH_ALPHA=/path/to/old/alpha python bench/bench_gate.py 1G   # the same, for another build

Runs ``alpha observe gate exit-zero --out X -- cat LOG`` (stdout to /dev/null) over
SIZE/4 and SIZE of realistic log text (bench/bench_record.py's generator) and prints
the peak RSS of each (the gate process's ``ru_maxrss`` from ``os.wait4``: the largest
of it and the processes it waited for). The gate reads back everything it recorded
before it seals the verdict, so before issue 16's follow-up this grew with SIZE.
It prints numbers, then one ``ROW`` line (tab-separated, for bench/table.py); nothing
here asserts: the machine may be noisy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_record import human, make_log, parse_size, row

#: ``ALPHA_BENCH_ALPHA``: another ``alpha`` to measure (say, a build of the code before a change).
ALPHA = (
    os.environ.get("ALPHA_BENCH_ALPHA")
    or shutil.which("alpha", path=str(Path(sys.executable).parent))
    or shutil.which("alpha")
    or "alpha"
)

#: The target: peak RSS of the gate at SIZE, and flat in the size.
RSS_TARGET_MB = 150
#: Peak RSS counts as flat when it grows by less than this from SIZE/4 to SIZE.
RSS_FLAT_MB = 15


def gate_run(log: Path, stream: Path) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KB) and exit status of one ``alpha observe gate exit-zero``.

    Run from a fresh, small probe process: a child's ``ru_maxrss`` starts from what its
    parent held when it forked, and this process has just written SIZE bytes of log.
    """
    argv = [ALPHA, "observe", "gate", "exit-zero", "--out", str(stream), "--", "cat", str(log)]
    probe = (
        "import json, os, subprocess, sys, time\n"
        "argv = json.loads(sys.argv[1])\n"
        "t = time.perf_counter()\n"
        "proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, close_fds=True)\n"
        "_, status, ru = os.wait4(proc.pid, 0)\n"
        "print(time.perf_counter() - t, ru.ru_maxrss, os.waitstatus_to_exitcode(status))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(argv)], capture_output=True, check=True, text=True
    ).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


def main() -> None:
    size = parse_size(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ALPHA_BENCH_SIZE", "1G"))
    sizes = [size // 4, size]
    peaks: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        root = Path(tmp)
        log = root / "app.log"
        make_log(log, size)
        small = root / "small.log"
        with log.open("rb") as src, small.open("wb") as dst:
            left = size // 4
            while left:
                block = src.read(min(left, 1 << 20))
                dst.write(block)
                left -= len(block)
        for n, path in zip(sizes, (small, log), strict=True):
            stream = root / f"gate-{n}.aos"
            wall, peak_kb, rc = gate_run(path, stream)
            peaks.append(peak_kb)
            print(f"gate exit-zero over {human(n)}: exit {rc}, {wall:.2f} s, peak RSS {peak_kb / 1024:.1f} MB")
            stream.unlink()
    lo, hi = peaks[0] / 1024, peaks[1] / 1024
    flat = hi - lo < RSS_FLAT_MB
    print(f"peak RSS {human(size // 4)} -> {human(size)}: {lo:.1f} MB -> {hi:.1f} MB ({'flat' if flat else 'grows'})")
    print(
        row(
            f"gate {human(size)} of stdout, peak RSS (at {human(size // 4)})",
            f"{hi:.0f} MB ({lo:.0f} MB)",
            f"<= {RSS_TARGET_MB} MB, flat in the size",
            hi <= RSS_TARGET_MB and flat,
        )
    )


if __name__ == "__main__":
    main()
