"""Benchmark the recorder: throughput, start-up, channel latency and memory, as ratios to baselines.

    python bench/bench_record.py [SIZE]          # SIZE in bytes, or with K/M/G; default 1G
    ALPHA_BENCH_SIZE=100M python bench/bench_record.py

Measures, in one run:
- recording SIZE of realistic log text (``cat LOG``) to a stream, echo to /dev/null,
  versus ``cat LOG | tee FILE >/dev/null`` and versus ``in-toto-run -s`` (skipped,
  with a message, when in-toto is not installed);
- the recorder's peak RSS while recording SIZE, and while capturing a SIZE file as an artifact;
- ``alpha observe record -- true`` versus ``python3 -c pass`` (start-up overhead);
- ``alpha observe receipt`` and ``alpha observe step NAME -- true`` latency inside a recording.

It prints numbers; nothing here asserts a time.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ALPHA = shutil.which("alpha", path=str(Path(sys.executable).parent)) or shutil.which("alpha") or "alpha"
WORDS = [
    "INFO",
    "DEBUG",
    "WARN",
    "ERROR",
    "request",
    "handled",
    "user",
    "id",
    "latency",
    "ms",
    "GET",
    "POST",
    "/api/v1/items",
    "/healthz",
    "status",
    "200",
    "404",
    "cache",
    "miss",
    "hit",
    "db",
    "query",
    "rows",
    "worker-3",
    "shard=7",
    "retry",
    "backoff",
    "upstream",
    "timeout",
    "tls",
    "handshake",
    "ok",
]


def parse_size(text: str) -> int:
    text = text.strip().upper().rstrip("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def make_log(path: Path, size: int) -> None:
    """Timestamped, varied log lines (compressible like real logs, not like a repeated line)."""
    rnd = random.Random(7)
    written = 0
    i = 0
    with path.open("wb") as f:
        while written < size:
            lines = []
            for _ in range(2000):
                i += 1
                lines.append(
                    f"2026-11-29T12:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}Z "
                    f"{rnd.choice(WORDS)} {' '.join(rnd.choices(WORDS, k=9))} "
                    f"req={rnd.getrandbits(64):016x} dur={rnd.random() * 100:.3f}ms\n"
                )
            block = "".join(lines).encode()[: size - written]
            f.write(block)
            written += len(block)


def timed(argv: list[str], cwd: Path | None = None) -> tuple[float, int, float, int]:
    """Wall seconds, peak RSS (KB), CPU seconds and exit code of one command, from a fresh probe process."""
    probe = (
        "import json, resource, subprocess, sys, time\n"
        "argv = json.loads(sys.argv[1])\n"
        "t = time.perf_counter()\n"
        "rc = subprocess.run(argv, stdout=subprocess.DEVNULL, check=False).returncode\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(time.perf_counter() - t, ru.ru_maxrss, ru.ru_utime + ru.ru_stime, rc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(argv)], capture_output=True, check=True, text=True, cwd=cwd
    ).stdout.split()
    return float(out[0]), int(out[1]), float(out[2]), int(out[3])


def best_of(
    n: int, argv: list[str], cleanup: list[Path] | None = None, cwd: Path | None = None
) -> tuple[float, int, float]:
    """Best wall time, worst peak RSS and best CPU time of ``n`` runs (each must exit 0)."""
    runs = []
    for _ in range(n):
        for p in cleanup or []:
            p.unlink(missing_ok=True)
        run = timed(argv, cwd)
        if run[3] != 0:
            raise SystemExit(f"{argv[0]} exited {run[3]}")
        runs.append(run)
    return min(r[0] for r in runs), max(r[1] for r in runs), min(r[2] for r in runs)


def startup(n: int, tmp: Path) -> tuple[float, float]:
    bare, rec = [], []
    out = tmp / "true.aos"
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(["python3", "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t)
        out.unlink(missing_ok=True)
        t = time.perf_counter()
        subprocess.run([ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "true"], check=True)
        rec.append(time.perf_counter() - t)
    return statistics.median(bare), statistics.median(rec)


def channel_latency(n: int, tmp: Path) -> tuple[float, float]:
    driver = tmp / "latency.py"
    driver.write_text(
        "import subprocess, sys, time, statistics\n"
        f"n = {n}\n"
        "def med(argv):\n"
        "    ts = []\n"
        "    for _ in range(n):\n"
        "        t = time.perf_counter(); subprocess.run(argv, check=True); ts.append(time.perf_counter() - t)\n"
        "    return statistics.median(ts)\n"
        f"r = med([{ALPHA!r}, 'observe', 'receipt', 'bench', '--field', 'i=1'])\n"
        f"s = med([{ALPHA!r}, 'observe', 'step', 'bench', '--', 'true'])\n"
        f"open({str(tmp / 'lat.txt')!r}, 'w').write(f'{{r}} {{s}}')\n"
    )
    subprocess.run(
        [ALPHA, "observe", "record", "--quiet", "--out", str(tmp / "lat.aos"), "--", sys.executable, str(driver)],
        check=True,
    )
    r, s = (tmp / "lat.txt").read_text().split()
    return float(r), float(s)


def main() -> None:
    size = parse_size(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ALPHA_BENCH_SIZE", "1G"))
    repeat = int(os.environ.get("ALPHA_BENCH_REPEAT", "2"))
    tmp = Path(tempfile.mkdtemp(prefix="alpha-bench-"))
    try:
        log = tmp / "app.log"
        t = time.perf_counter()
        make_log(log, size)
        print(f"log: {size / 1e6:.0f} MB of log text (made in {time.perf_counter() - t:.1f} s), best of {repeat}")

        tee_out = tmp / "tee.out"
        tee_s, _, tee_cpu = best_of(repeat, ["sh", "-c", f"cat {log} | tee {tee_out} >/dev/null"], [tee_out])
        tee_out.unlink(missing_ok=True)
        stream = tmp / "run.aos"
        rec_s, rec_kb, rec_cpu = best_of(
            repeat, [ALPHA, "observe", "record", "--out", str(stream), "--", "cat", str(log)], [stream]
        )
        stream_mb = stream.stat().st_size / 1e6
        stream.unlink()
        print(f"tee:          {tee_s:7.2f} s wall ({size / tee_s / 1e6:5.0f} MB/s), {tee_cpu:6.2f} s CPU")
        print(
            f"record:       {rec_s:7.2f} s wall ({size / rec_s / 1e6:5.0f} MB/s), {rec_cpu:6.2f} s CPU;"
            f" wall ratio to tee {rec_s / tee_s:.2f}x (target <= 1.5x); stream {stream_mb:.0f} MB"
        )
        print(f"record peak RSS: {rec_kb / 1024:.0f} MB (target < 150 MB)")
        art_s, art_kb, _ = best_of(
            1, [ALPHA, "observe", "record", "--out", str(stream), "--artifact", str(log), "--", "true"], [stream]
        )
        stream.unlink()
        print(
            f"artifact:     {art_s:7.2f} s wall ({size / art_s / 1e6:5.0f} MB/s) capturing the {size / 1e6:.0f} MB log"
            f" as an artifact; peak RSS {art_kb / 1024:.0f} MB"
        )

        if shutil.which("in-toto-run"):
            from aos.signing import generate_keypair

            key, _pub = generate_keypair(tmp / "intoto")
            work = tmp / "intoto-work"
            work.mkdir()
            intoto_s, intoto_kb, intoto_cpu = best_of(
                1,
                ["in-toto-run", "-n", "bench", "-s", "--signing-key", str(key), "--", "cat", str(log)],
                cwd=work,
            )
            links = list(work.glob("*.link"))
            kept = len(json.loads(links[0].read_text())["signed"]["byproducts"].get("stdout", "")) if links else 0
            print(
                f"in-toto-run -s: {intoto_s:5.2f} s wall, {intoto_cpu:6.2f} s CPU, peak RSS {intoto_kb / 1024:.0f} MB;"
                f" record/in-toto wall ratio {rec_s / intoto_s:.2f}x; its link kept {kept} of {size} stdout bytes"
            )
            shutil.rmtree(work)
        else:
            print("in-toto-run: skipped (pip install in-toto to compare)")

        bare, rec = startup(int(os.environ.get("ALPHA_BENCH_STARTS", "10")), tmp)
        print(
            f"start-up: python3 -c pass {bare * 1e3:.0f} ms, record -- true {rec * 1e3:.0f} ms:"
            f" added {(rec - bare) * 1e3:.0f} ms (target < 250 ms)"
        )
        r, s = channel_latency(int(os.environ.get("ALPHA_BENCH_CALLS", "20")), tmp)
        print(f"inside a recording: receipt {r * 1e3:.0f} ms, step -- true {s * 1e3:.0f} ms (target < 100 ms each)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
