"""``alpha observe query`` over many streams: load (verify) time, query times, peak RSS.

Two sets, written with ``aos.writer`` directly (fast, no recorder):

- SMALL streams (default 10,000): each a command with 3 steps (stdout inside
  each), 2 receipts, an exit, a sealed verdict with 3 checks, spread over 14
  days, lanes cycling through the four built-in gates;
- LARGE streams (default 10 of 100 MB on disk): stdout in 64 KiB events (log
  text plus random hex ids, so zstd cannot shrink it to nothing), a step every
  400 events, a verdict.

Each query runs in a fresh process (so its peak RSS is its own): the load time
(verifying every stream, ``open_sources``) and the query time (DuckDB scanning
the tables, ``query_sources``) are printed apart. The issue sets no target
beyond "report query times", so the ROW lines carry target ``-``.

    python bench/bench_query.py                          # 10,000 small + 10 x 100 MB
    python bench/bench_query.py --small 500 --large 2 --large-mb 20    # quick
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aos.writer import StreamWriter

LANES = ("exit-zero", "distributed-device", "coordinate-device", "independent-device")
CHECKS = ("static-build", "preflight", "exit-code")
DAY_NS = 86_400 * 10**9

SMALL_QUERIES = {
    "checks failed most this week": (
        "SELECT name, count(*) AS failed FROM checks "
        "WHERE status = 'fail' AND time > now() - INTERVAL 7 DAY GROUP BY name ORDER BY failed DESC"
    ),
    "max step duration per lane": (
        "SELECT gate AS lane, max(duration_ns) / 1e9 AS max_step_s FROM events "
        "WHERE kind = 'step.end' GROUP BY lane ORDER BY lane"
    ),
    "failing receipts by name": (
        "SELECT name, count(*) FROM events WHERE kind = 'receipt' AND status = 'fail' GROUP BY name"
    ),
    "streams per verdict": "SELECT verdict, count(*) FROM streams GROUP BY verdict",
}
LARGE_QUERIES = {
    "stdout bytes per stream": (
        "SELECT stream_id, sum(octet_length(data)) AS stdout_bytes FROM events WHERE kind = 'stdout' GROUP BY stream_id"
    ),
    "max step duration per lane": (
        "SELECT gate AS lane, max(duration_ns) / 1e9 AS max_step_s FROM events WHERE kind = 'step.end' GROUP BY lane"
    ),
}


def write_small(path: Path, rng: random.Random, now_ns: int) -> None:
    t = now_ns - rng.randrange(14 * DAY_NS)
    lane = LANES[rng.randrange(len(LANES))]
    clock = iter(range(t, t + 10**12, 1_000_000))
    w = StreamWriter(path, background_flush=False, fsync="never", clock=lambda: (next(clock), 0))
    w.append("stream.open", {"stream_id": w.stream_id, "argv": ["lane.sh"], "gate": lane, "labels": {}, "host": "ci"})
    w.append("process.start", {"pid": 1, "argv": ["lane.sh"]})
    for name in ("build", "test", "package"):
        w.append("step.start", {"name": name, "argv": [name], "parent": None}, step=name)
        w.append("stdout", {}, f"{name}: ok\n".encode() * rng.randrange(1, 20), step=name)
        code = 0 if rng.random() < 0.9 else 1
        w.append(
            "step.end",
            {"name": name, "argv": [name], "exit_code": code, "signal": None, "duration_ns": rng.randrange(10**10)},
            step=name,
        )
    statuses = ["pass" if rng.random() < 0.8 else "fail" for _ in CHECKS]
    w.append("receipt", {"name": "unit-tests", "status": statuses[0], "fields": {"passed": rng.randrange(500)}})
    w.append("receipt", {"name": "lint", "status": statuses[1], "fields": {}})
    w.append("process.exit", {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 10**9, "rusage": {}})
    checks = [
        {"name": c, "status": s, "reason": "synthetic", "evidence": [3]} for c, s in zip(CHECKS, statuses, strict=True)
    ]
    verdict = "pass" if all(s == "pass" for s in statuses) else "fail"
    w.append("verdict", {"gate": lane, "verdict": verdict, "scope": "static", "checks": checks})
    w.seal()


def write_large(path: Path, rng: random.Random, size: int, pool: list[bytes], now_ns: int) -> None:
    w = StreamWriter(path, background_flush=False, fsync="never", pipelined=True)
    lane = LANES[rng.randrange(len(LANES))]
    w.append("stream.open", {"stream_id": w.stream_id, "argv": ["train.sh"], "gate": lane, "labels": {}})
    w.append("process.start", {"pid": 1, "argv": ["train.sh"]})
    i = 0
    step = None
    while w.bytes_written < size:
        if i % 400 == 0:
            if step is not None:
                dur = rng.randrange(10**11)
                attrs = {"name": step, "argv": [step], "exit_code": 0, "signal": None, "duration_ns": dur}
                w.append("step.end", attrs, step=step)
            step = f"epoch-{i // 400}"
            w.append("step.start", {"name": step, "argv": [step], "parent": None}, step=step)
        ids = base64.b16encode(rng.randbytes(8 << 10)).lower()
        w.append("stdout", {}, pool[i % len(pool)] + ids, step=step)
        i += 1
    if step is not None:
        attrs = {"name": step, "argv": [step], "exit_code": 0, "signal": None, "duration_ns": rng.randrange(10**11)}
        w.append("step.end", attrs, step=step)
    w.append("process.exit", {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 10**9, "rusage": {}})
    w.append("verdict", {"gate": lane, "verdict": "pass", "scope": "static", "checks": []})
    w.seal()


def log_pool(rng: random.Random, n: int = 64, size: int = 48 << 10) -> list[bytes]:
    words = ("step", "loss", "lr", "grad_norm", "tokens", "rank", "shard", "bytes", "latency", "retry")
    out = []
    for _ in range(n):
        lines = []
        total = 0
        while total < size:
            kv = " ".join(f"{w}={rng.random() * 10 ** rng.randrange(6):.4g}" for w in rng.sample(words, 4))
            line = f"2026-11-30T12:00:{rng.randrange(60):02d}.{rng.randrange(10**6):06d}Z INFO [trainer] {kv}\n"
            lines.append(line)
            total += len(line)
        out.append("".join(lines).encode())
    return out


_CHILD = r"""
import json, resource, sys, time
from observe.query.run import expand_paths, open_sources, query_sources
sql, folder = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
paths, skipped = expand_paths([folder])
sources, more = open_sources(paths)
t1 = time.perf_counter()
columns, rows = query_sources(sql, sources)
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"load_s": t1 - t0, "query_s": t2 - t1, "rss": rss, "worker_rss": worker, "streams": len(sources),
                  "skipped": len(skipped) + len(more), "rows": len(rows)}))
"""


def run(sql: str, folder: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, sql, str(folder)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"query failed: {out.stderr.strip()}")
    result: dict[str, float] = json.loads(out.stdout.splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small", type=int, default=10_000, help="how many small streams (default 10000)")
    p.add_argument("--large", type=int, default=10, help="how many large streams (default 10)")
    p.add_argument("--large-mb", type=int, default=100, help="size of each large stream on disk, MB (default 100)")
    p.add_argument("--dir", type=Path, default=None, help="where to write the streams (default: a temp folder)")
    args = p.parse_args(argv)

    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-query-"))
    small_dir, large_dir = base / "small", base / "large"
    small_dir.mkdir(parents=True, exist_ok=True)
    large_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(16)
    now_ns = time.time_ns()
    rows: list[tuple[str, str]] = []
    try:
        t = time.perf_counter()
        for i in range(args.small):
            write_small(small_dir / f"s{i:05d}.aos", rng, now_ns)
        small_mb = sum(f.stat().st_size for f in small_dir.iterdir()) / 1e6
        print(f"wrote {args.small} small streams ({small_mb:.1f} MB) in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        pool = log_pool(rng)
        for i in range(args.large):
            write_large(large_dir / f"l{i:02d}.aos", rng, args.large_mb * 1_000_000, pool, now_ns)
        large_mb = sum(f.stat().st_size for f in large_dir.iterdir()) / 1e6
        print(f"wrote {args.large} large streams ({large_mb:.0f} MB) in {time.perf_counter() - t:.1f} s")

        for label, folder, queries, n in (
            (f"{args.small} small streams", small_dir, SMALL_QUERIES, args.small),
            (f"{args.large} x {args.large_mb} MB streams", large_dir, LARGE_QUERIES, args.large),
        ):
            if n == 0:
                continue
            peak: dict[str, float] = {"load_s": 0.0, "rss": 0.0, "worker_rss": 0.0}
            for name, sql in queries.items():
                r = run(sql, folder)
                print(
                    f"{label}: {name}: load (verify) {r['load_s']:.2f} s, query {r['query_s']:.2f} s, "
                    f"peak RSS {r['rss'] / 1e6:.0f} MB (largest verifying worker {r['worker_rss'] / 1e6:.0f} MB), "
                    f"{r['rows']:.0f} rows, {r['streams']:.0f} streams"
                )
                rows.append((f"query {label}: {name}, query time", f"{r['query_s']:.2f} s"))
                peak = {k: max(v, r[k]) for k, v in peak.items()}
            rows.append((f"query {label}: load (verify every stream), slowest of the runs", f"{peak['load_s']:.2f} s"))
            rows.append((f"query {label}: peak RSS", f"{peak['rss'] / 1e6:.0f} MB"))
            if peak["worker_rss"]:
                rows.append((f"query {label}: peak RSS of a verifying worker", f"{peak['worker_rss'] / 1e6:.0f} MB"))
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus)")
    for measurement, value in rows:
        print(f"ROW\t{measurement}\t{value}\t-\tmet")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
