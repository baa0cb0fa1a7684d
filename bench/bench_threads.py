"""Where the recorder's CPU goes, thread by thread, while it records SIZE of log text.

    python bench/bench_threads.py [SIZE] [ENCODERS...]     # default 512M; e.g. 512M 2 4 8

Runs ``alpha observe record --out X -- cat LOG`` (once per ENCODERS value, through
``ALPHA_OBSERVE_ENCODERS``; once with the default when none is given), reads
``/proc/PID/task/*/stat`` of the recorder every 50 ms, and prints each thread's CPU
seconds (the busiest eight; Python does not name its threads for the kernel, so
they are told apart by their CPU: the main thread reads the command's output, the
others compress, hash, write and sample), beside the wall time. A thread whose CPU
is close to the wall time is the serial limit. It asserts nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_record import ALPHA, make_log, parse_size

TICK = os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of ``pid``: its name and CPU seconds (user + system)."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index(b"(") + 1 : stat.rindex(b")")].decode(errors="replace")
        fields = stat[stat.rindex(b")") + 2 :].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def run(log: Path, out: Path, encoders: str | None) -> None:
    env = dict(os.environ)
    if encoders is not None:
        env["ALPHA_OBSERVE_ENCODERS"] = encoders
    cmd = [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "cat", str(log)]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    last: dict[int, tuple[str, float]] = {}
    while proc.poll() is None:
        last.update(threads(proc.pid))
        time.sleep(0.05)
    wall = time.perf_counter() - t
    total = sum(cpu for _, cpu in last.values())
    size = log.stat().st_size
    label = encoders or "default"
    print(f"encoders {label}: wall {wall:.2f} s ({size / wall / 1e6:.0f} MB/s), recorder CPU seen {total:.2f} s")
    # Python does not name its threads for the kernel: they are told apart by CPU, the main one by its id.
    ranked = sorted(last.items(), key=lambda kv: -kv[1][1])
    for tid, (name, cpu) in ranked[:8]:
        main = " (main thread)" if tid == proc.pid else ""
        print(f"  thread {tid:<8} {name:<14} {cpu:6.2f} s CPU, {cpu / wall:4.0%} of the wall{main}")
    rest = ranked[8:]
    if rest:
        print(f"  {len(rest)} other threads: {sum(c for _, (_, c) in rest):.2f} s CPU")
    out.unlink(missing_ok=True)


def main() -> None:
    size = parse_size(sys.argv[1] if len(sys.argv) > 1 else "512M")
    choices: list[str | None] = list(sys.argv[2:]) or [None]
    with tempfile.TemporaryDirectory(prefix="alpha-threads-") as tmp:
        log = Path(tmp) / "app.log"
        make_log(log, size)
        print(f"{size / 1e6:.0f} MB of log text; {os.cpu_count()} cores")
        for encoders in choices:
            run(log, Path(tmp) / "run.aos", encoders)


if __name__ == "__main__":
    main()
