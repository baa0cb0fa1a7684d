"""Benchmark start-up and per-call latency: the rows of issue 16 that a user feels on every command.

    python bench/bench_latency.py

Measures, in one run, each beside a baseline measured in the same run (it asserts nothing):
- ``alpha observe record --quiet -- true`` versus ``python -c pass`` (the same interpreter):
  the start-up ``record`` adds (median of ``ALPHA_BENCH_STARTS``, default 10);
- ``alpha observe receipt`` and ``alpha observe step NAME -- true`` inside a recording
  (median of ``ALPHA_BENCH_CALLS``, default 20), and, to split them, the same ``receipt``
  outside a recording (process start, click and imports, no round trip: it exits 2);
- gate evaluation of a stream of ``ALPHA_BENCH_EVENTS`` (default 100,000) receipts and steps,
  written with ``aos.writer``: ``gates.evaluation.evaluate_stream`` (read back + evaluate), best of 3;
- ``alpha observe read --json`` of a recorded log (``ALPHA_BENCH_LOG``, default 100M of log
  text, recorded with ``record -- cat``) and of the 100,000-event stream: MB/s of the JSON
  it writes, and MB/s of the recorded bytes it reads (the events' data, uncompressed); and, in this
  process, its lines of the 100,000-event stream a batch at a time against event by event (what it
  did before issue 39): the ratio of CPU seconds, pair by pair, the bytes checked equal.

Children run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed) after one warm-up
call, as an installed tool runs: compiling the project's sources on every start is not start-up.
Ends with one ``ROW`` line per target (DEADLINE.md), tab-separated, for ``bench/table.py``.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_record import make_log  # the same log text every bench records

ALPHA = shutil.which("alpha", path=str(Path(sys.executable).parent)) or shutil.which("alpha") or "alpha"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ROWS: list[tuple[str, str, str, bool]] = []

GATE = """
[gate]
name = "bench-latency"
description = "receipts and steps, every rule kind that reads them"

[exit]

[[step]]
name = "unit"
min = 1
max = 1000000

[[receipt]]
name = "test"
min = 1
max = 1000000
step = "unit"
[receipt.schema]
type = "object"
required = ["case", "ms"]
properties = { case = { type = "string" }, ms = { type = "integer" } }

[[receipt]]
name = "summary"
count = 1
status = ["pass", "info"]

[[equal]]
values = ["summary.commit", "build.commit"]

[[each]]
receipt = "test"
needs = "test"
on = ["case"]

[[order]]
sequence = ["step:build", "step:unit", "receipt:summary"]
"""


def row(measurement: str, value: str, target: str, met: bool) -> None:
    ROWS.append((measurement, value, target, met))


CPU: dict[str, list[float]] = {}


def median_run(argv: list[str], n: int, *, ok: tuple[int, ...] = (0,), before: object = None, cpu: str = "") -> float:
    """Median wall seconds of ``n`` runs of ``argv`` (exit code in ``ok``); with ``cpu``, each run's CPU
    seconds (user + system, its children included) are kept in ``CPU[cpu]``: less noisy on a busy machine."""
    times = []
    for _ in range(n):
        if callable(before):
            before()
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        rc = subprocess.run(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu:
            CPU.setdefault(cpu, []).append(after.ru_utime + after.ru_stime - ru.ru_utime - ru.ru_stime)
        if rc.returncode not in ok:
            raise SystemExit(f"{argv} exited {rc.returncode}")
    return statistics.median(times)


def cpu_ms(name: str) -> float:
    return statistics.median(CPU[name]) * 1e3


def startup(tmp: Path, n: int) -> None:
    out = tmp / "true.aos"
    argv = [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "true"]
    clean = lambda: out.unlink(missing_ok=True)  # noqa: E731
    median_run(argv, 1, before=clean)  # warm-up: bytecode caches
    bare = rec = 0.0
    bares, recs = [], []
    for _ in range(n):  # interleaved: the machine's noise hits both alike
        bares.append(median_run([sys.executable, "-c", "pass"], 1, cpu="bare"))
        recs.append(median_run(argv, 1, before=clean, cpu="record"))
    bare, rec = statistics.median(bares), statistics.median(recs)
    added = (rec - bare) * 1e3
    print(
        f"start-up: python -c pass {bare * 1e3:.0f} ms, record -- true {rec * 1e3:.0f} ms: added {added:.0f} ms"
        f" (CPU, user + system: {cpu_ms('bare'):.0f} ms and {cpu_ms('record'):.0f} ms, added"
        f" {cpu_ms('record') - cpu_ms('bare'):.0f} ms; median of {n}, load {os.getloadavg()[0]:.1f})"
    )
    row("`record -- true` start-up added over `python3 -c pass`", f"{added:.0f} ms", "<= 150 ms", added <= 150)


def channel(tmp: Path, n: int) -> None:
    outside = median_run([ALPHA, "observe", "receipt", "bench"], max(n // 2, 3), ok=(2,), cpu="outside")
    bare = median_run([sys.executable, "-c", "pass"], max(n // 2, 3), cpu="bare2")
    driver = tmp / "latency.py"
    driver.write_text(
        "import os, subprocess, sys, time, statistics\n"
        f"n = {n}\n"
        "alpha = os.environ['AOS_ALPHA']\n"
        "def med(argv):\n"
        "    ts = []\n"
        "    for _ in range(n):\n"
        "        t = time.perf_counter(); subprocess.run(argv, check=True); ts.append(time.perf_counter() - t)\n"
        "    return statistics.median(ts)\n"
        f"path = med([{ALPHA!r}, 'observe', 'receipt', 'bench', '--field', 'i=1'])\n"
        f"step = med([{ALPHA!r}, 'observe', 'step', 'bench', '--', 'true'])\n"
        "shim = med([alpha, 'observe', 'receipt', 'bench', '--field', 'i=1'])\n"
        f"open({str(tmp / 'lat.txt')!r}, 'w').write(f'{{path}} {{step}} {{shim}}')\n"
    )
    subprocess.run(
        [ALPHA, "observe", "record", "--quiet", "--out", str(tmp / "lat.aos"), "--", sys.executable, str(driver)],
        check=True,
        env=ENV,
    )
    r, s, shim = (float(x) for x in (tmp / "lat.txt").read_text().split())
    print(
        f"inside a recording: receipt {r * 1e3:.0f} ms, step -- true {s * 1e3:.0f} ms,"
        f" receipt through $AOS_ALPHA {shim * 1e3:.0f} ms; outside (start-up only, exit 2) receipt"
        f" {outside * 1e3:.0f} ms ({cpu_ms('outside'):.0f} ms CPU); python -c pass {bare * 1e3:.0f} ms"
        f" ({cpu_ms('bare2'):.0f} ms CPU); load {os.getloadavg()[0]:.1f}"
    )
    row(
        "`receipt`, `step -- true` inside a recording",
        f"receipt {r * 1e3:.0f} ms, step {s * 1e3:.0f} ms",
        "<= 60 ms each",
        max(r, s) <= 0.060,
    )


def gate_stream(path: Path, events: int) -> None:
    """A stream of about ``events`` events: steps with receipts inside, as a test suite's lane makes."""
    from aos.writer import StreamWriter

    rnd = random.Random(16)
    w = StreamWriter(path)
    w.append("stream.open", {"stream_id": w.stream_id, "argv": ["lane.sh"], "cwd": "/lane", "env": {}, "labels": {}})
    w.append("process.start", {"pid": 1, "argv": ["lane.sh"]})
    w.append("step.start", {"name": "build", "argv": ["make"], "parent": None}, None, "b0")
    w.append("receipt", {"name": "build", "status": "pass", "fields": {"commit": "abc123"}}, None, "b0")
    w.append("step.end", {"name": "build", "argv": ["make"], "exit_code": 0, "duration_ns": 5}, None, "b0")
    n, case = 5, 0
    while n < events - 3:
        span = f"s{n:08x}"
        w.append("step.start", {"name": "unit", "argv": ["pytest"], "parent": None}, None, span)
        w.append("stdout", {}, b"collected 8 items\n", span)
        for _ in range(8):
            case += 1
            fields = {"case": f"test_{case}", "ms": rnd.randrange(1000), "file": f"tests/test_{case % 97}.py"}
            w.append("receipt", {"name": "test", "status": "pass", "fields": fields}, None, span)
        w.append("step.end", {"name": "unit", "argv": ["pytest"], "exit_code": 0, "duration_ns": 9}, None, span)
        n += 11
    w.append("receipt", {"name": "summary", "status": "pass", "fields": {"commit": "abc123"}})
    w.append("process.exit", {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 1})
    w.seal()


def gates(tmp: Path, events: int) -> Path:
    from aos.reader import read_stream
    from gates.engine import evaluate
    from gates.evaluation import evaluate_stream
    from gates.language import parse_gate_text

    path = tmp / "gate.aos"
    t = time.perf_counter()
    gate_stream(path, events)
    made = time.perf_counter() - t
    gate = parse_gate_text(GATE, "bench.toml")
    best = read = ev = cpu = float("inf")
    verdict = None
    for _ in range(3):
        t, c = time.perf_counter(), time.process_time()
        verdict = evaluate_stream(gate, path)
        best, cpu = min(best, time.perf_counter() - t), min(cpu, time.process_time() - c)
        t = time.perf_counter()
        contents = read_stream(path)
        read = min(read, time.perf_counter() - t)
        t = time.perf_counter()
        evaluate(gate, contents.events)
        ev = min(ev, time.perf_counter() - t)
    assert verdict is not None
    count = len(read_stream(path).events)
    print(
        f"gate evaluation: {count} events ({path.stat().st_size / 1e6:.1f} MB stream, written in {made:.1f} s):"
        f" evaluate_stream {best:.2f} s, {cpu:.2f} s CPU (read back {read:.2f} s + evaluate {ev:.2f} s),"
        f" verdict {verdict.verdict}"
        f" ({'; '.join(f'{c.name} {c.status}' for c in verdict.checks)})"
    )
    row(f"gate evaluation of a stream with {count:,} events (receipts and steps)", f"{best:.2f} s", "<= 2 s", best <= 2)
    return path


def read_json(tmp: Path, size: int, gate_path: Path) -> None:
    from aos.reader import read_stream

    log = tmp / "app.log"
    make_log(log, size)
    stream = tmp / "log.aos"
    subprocess.run(
        [ALPHA, "observe", "record", "--quiet", "--out", str(stream), "--", "cat", str(log)], check=True, env=ENV
    )
    log.unlink()
    rates = []
    for name, path in (("recorded log", stream), ("100k receipts and steps", gate_path)):
        data = sum(len(ev.data or b"") for ev in read_stream(path).events)
        out = tmp / "out.jsonl"
        best = float("inf")
        for _ in range(2):
            with out.open("wb") as f:
                t = time.perf_counter()
                subprocess.run([ALPHA, "observe", "read", str(path), "--json"], stdout=f, check=True, env=ENV)
                best = min(best, time.perf_counter() - t)
        json_mb = out.stat().st_size / 1e6
        out.unlink()
        rates.append(json_mb / best)
        print(
            f"read --json, {name}: {json_mb:.0f} MB of JSON in {best:.2f} s: {json_mb / best:.0f} MB/s of JSON out;"
            f" {data / 1e6 / best:.0f} MB/s of recorded data,"
            f" {path.stat().st_size / 1e6 / best:.0f} MB/s of stream file"
        )
    batch_vs_events(gate_path)
    # One target, two kinds of stream: each its own line, so neither hides the other.
    row(
        "`read --json` throughput, a recorded log (MB/s of JSON out)",
        f"{rates[0]:.0f} MB/s",
        ">= 100 MB/s",
        rates[0] >= 100,
    )
    row(
        "`read --json` throughput, 100k small events: receipts and steps (MB/s of JSON out)",
        f"{rates[1]:.0f} MB/s",
        ">= 100 MB/s",
        rates[1] >= 100,
    )


def batch_vs_events(path: Path, repeats: int = 5) -> None:
    """``read --json``'s lines of the 100k-event stream in this process, a batch at a time (what the command
    does) against event by event (``event_json`` on each event, what it did): CPU seconds, pair by pair,
    interleaved, median ratio; the bytes compared once."""
    import io

    from aos.reader import StreamFile, iter_events
    from observe.readback.events import event_json
    from observe.readback.jsonl import write_json_lines

    def by_event() -> bytes:
        return "".join(event_json(ev) + "\n" for ev in iter_events(path)).encode()

    def by_batch() -> bytes:
        out = io.BytesIO()
        with StreamFile(path) as f:
            write_json_lines((raw.batch for raw in f.batches()), event_json, out)
        return out.getvalue()

    assert by_event() == by_batch(), "read --json: the batch path's bytes differ from event_json's"
    ratios, olds, news = [], [], []
    for _ in range(repeats):
        t = time.process_time()
        by_event()
        old = time.process_time() - t
        t = time.process_time()
        by_batch()
        new = time.process_time() - t
        ratios.append(old / new)
        olds.append(old)
        news.append(new)
    ratio = statistics.median(ratios)
    print(
        f"read --json in process, 100k receipts and steps: event by event {statistics.median(olds):.3f} s CPU,"
        f" a batch at a time {statistics.median(news):.3f} s CPU: {ratio:.1f}x (median of {repeats} pairs)"
    )
    row("`read --json` of 100k small events, in process: event by event / a batch at a time (CPU)", f"{ratio:.1f}x",
        ">= 5x", ratio >= 5)  # fmt: skip


def main() -> None:
    starts = int(os.environ.get("ALPHA_BENCH_STARTS", "10"))
    calls = int(os.environ.get("ALPHA_BENCH_CALLS", "20"))
    events = int(os.environ.get("ALPHA_BENCH_EVENTS", "100000"))
    size = os.environ.get("ALPHA_BENCH_LOG", "100M").upper().rstrip("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
    log_size = int(float(size[:-1] if scale > 1 else size) * scale)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}; alpha: {ALPHA}")
    tmp = Path(tempfile.mkdtemp(prefix="alpha-bench-latency-"))
    try:
        startup(tmp, starts)
        channel(tmp, calls)
        gate_path = gates(tmp, events)
        read_json(tmp, log_size, gate_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for measurement, value, target, met in ROWS:
        print(f"ROW\t{measurement}\t{value}\t{target}\t{'met' if met else 'missed'}")


if __name__ == "__main__":
    main()
