"""Write and verify throughput of the AOS format, as ratios against the floor.

The floor is what any writer or verifier of this format must at least do to the
same bytes: BLAKE3-hash them and zstd-compress them (level 1, the ``zstandard``
package), one chunk at a time. The issue's target is a ratio of at least 0.5 for
both write and verify; issue 16's, that verify take at most 1.5x the time of its own
floor (zstd-decompress and BLAKE3 the same chunks), printed as a ``ROW`` line
(bench/table.py). This prints numbers; it asserts nothing.

    python bench/bench_format.py                 # ~200 MB of 64 KiB log-text chunks
    python bench/bench_format.py --mb 50         # or AOS_BENCH_MB=50
    python bench/bench_format.py --profile       # add a cProfile of write and verify
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import zstandard
from blake3 import blake3

from aos.reader import read_stream
from aos.verify import verify_stream
from aos.writer import StreamWriter

TARGET = 0.5
MB = 1_000_000

_LEVELS = ["INFO"] * 8 + ["DEBUG"] * 4 + ["WARN", "ERROR"]
_MODULES = ["trainer", "dataloader", "nccl", "checkpoint", "scheduler", "eval", "io.shard", "cuda.alloc"]
_WORDS = [
    *("step", "loss", "lr", "grad_norm", "tokens", "throughput", "shard", "epoch", "rank", "world_size"),
    *("allreduce", "bucket", "latency", "p50", "p99", "queue", "depth", "bytes", "written", "read"),
    *("cache", "hit", "miss", "retry", "backoff", "ok", "done"),
]


def log_chunk(rng: random.Random, size: int, t0: float) -> bytes:
    """``size`` bytes of plausible CI/training log text (timestamps, levels, numbers, ids, paths)."""
    lines: list[str] = []
    n = 0
    t = t0
    while n < size:
        t += rng.expovariate(200.0)
        kind = rng.random()
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1e6) % 1_000_000:06d}Z"
        if kind < 0.65:
            words = " ".join(f"{w}={rng.random() * 10 ** rng.randint(0, 6):.4g}" for w in rng.sample(_WORDS, 4))
            line = f"{ts} {rng.choice(_LEVELS):5} [{rng.choice(_MODULES)}] rank={rng.randrange(8)} {words}"
        elif kind < 0.7:
            line = (
                f"{ts} INFO  [io.shard] wrote /data/run-{rng.randrange(1000):04d}/shard-{rng.randrange(10**5):05d}.bin "
                f"sha256={rng.getrandbits(256):064x}"
            )
        elif kind < 0.95:
            line = f"{ts} DEBUG [{rng.choice(_MODULES)}] " + " ".join(rng.choices(_WORDS, k=rng.randint(3, 14)))
        else:
            line = f'  File "/src/pkg/{rng.choice(_MODULES)}.py", line {rng.randrange(2000)}, in {rng.choice(_WORDS)}'
        lines.append(line)
        n += len(line) + 1
    return ("\n".join(lines) + "\n").encode()[:size]


def chunks(total: int, chunk_size: int, pool: list[bytes]) -> Iterator[bytes]:
    """``total`` bytes as chunks cycled from ``pool``."""
    sent = 0
    i = 0
    while sent < total:
        c = pool[i % len(pool)]
        yield c
        sent += len(c)
        i += 1


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def floor(total: int, chunk_size: int, pool: list[bytes]) -> tuple[float, int]:
    """Seconds to BLAKE3-hash and zstd-compress (level 1) every chunk; and the compressed size."""
    cctx = zstandard.ZstdCompressor(level=1)
    out = 0

    def run() -> None:
        nonlocal out
        for c in chunks(total, chunk_size, pool):
            blake3(c).digest()
            out += len(cctx.compress(c))

    return timed(run), out


def decode_floor(total: int, chunk_size: int, pool: list[bytes]) -> float:
    """Seconds to zstd-decompress and BLAKE3-hash every chunk (the floor for the verifier alone)."""
    cctx, dctx = zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor()
    frames = [cctx.compress(c) for c in pool]

    def run() -> None:
        for i, _ in enumerate(chunks(total, chunk_size, pool)):
            blake3(dctx.decompress(frames[i % len(frames)])).digest()

    return timed(run)


def write(path: Path, total: int, chunk_size: int, pool: list[bytes], *, pipelined: bool = False) -> None:
    w = StreamWriter(path, pipelined=pipelined)
    for c in chunks(total, chunk_size, pool):
        w.append("stdout", {}, c)
    w.seal()


def profile(label: str, fn: Callable[[], object]) -> None:
    prof = cProfile.Profile()
    prof.runcall(fn)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    print(f"\n--- cProfile: {label} (by own time) ---")
    print("\n".join(line for line in buf.getvalue().splitlines() if line.strip())[:4000])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=float(os.environ.get("AOS_BENCH_MB", "200")), help="total MB of data")
    p.add_argument("--chunk-kib", type=int, default=64, help="bytes per event (KiB)")
    p.add_argument("--dir", type=Path, default=None, help="where to write the stream (default: a temp dir)")
    p.add_argument("--repeat", type=int, default=3, help="take the best of N runs of each measurement")
    p.add_argument("--profile", action="store_true", help="also cProfile write and verify")
    args = p.parse_args(argv)

    chunk_size = args.chunk_kib * 1024
    total = int(args.mb * MB)
    rng = random.Random(20261129)
    pool = [log_chunk(rng, chunk_size, 1.78e9 + i * 60) for i in range(128)]
    total_sent = sum(len(c) for c in chunks(total, chunk_size, pool))

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "bench.aos"
        # warm up: the first writer and verifier import pyarrow (a one-time cost, not throughput)
        write(path, chunk_size, chunk_size, pool)
        verify_stream(path)
        t_floor, compressed = min((floor(total, chunk_size, pool) for _ in range(args.repeat)), key=lambda r: r[0])
        t_decode = min(decode_floor(total, chunk_size, pool) for _ in range(args.repeat))
        t_write = t_pipe = t_verify = t_read = float("inf")
        for _ in range(args.repeat):
            path.unlink(missing_ok=True)
            t_pipe = min(t_pipe, timed(lambda: write(path, total, chunk_size, pool, pipelined=True)))
            path.unlink(missing_ok=True)
            t_write = min(t_write, timed(lambda: write(path, total, chunk_size, pool)))
            t_verify = min(t_verify, timed(lambda: verify_stream(path)))
            t_read = min(t_read, timed(lambda: read_stream(path)))
        size = path.stat().st_size
        if args.profile:
            path.unlink()
            profile("write", lambda: write(path, total, chunk_size, pool))
            profile("verify", lambda: verify_stream(path))

    def mbps(seconds: float) -> float:
        return total_sent / MB / seconds

    r_write, r_verify = t_floor / t_write, t_floor / t_verify
    ratio = total_sent / compressed
    print(f"data: {total_sent / MB:.1f} MB in {args.chunk_kib} KiB log-text chunks (zstd-1 ratio {ratio:.2f}x)")
    print(f"stream file: {size / MB:.1f} MB  (python {sys.version.split()[0]}, {os.cpu_count()} cpus)")
    print(f"floor  (blake3 + zstd-1): {mbps(t_floor):8.1f} MB/s")
    print(
        f"write  (StreamWriter)   : {mbps(t_write):8.1f} MB/s   ratio {r_write:.2f}x of floor  "
        f"(target >= {TARGET}x: {'met' if r_write >= TARGET else 'MISSED'})"
    )
    print(
        f"verify (verify_stream)  : {mbps(t_verify):8.1f} MB/s   ratio {r_verify:.2f}x of floor  "
        f"(target >= {TARGET}x: {'met' if r_verify >= TARGET else 'MISSED'})"
    )
    print(
        f"verify vs blake3 + zstd decompress ({mbps(t_decode):.1f} MB/s): "
        f"ratio {t_decode / t_verify:.2f}x  (information)"
    )
    print(
        f"write, pipelined (what the recorder uses): {mbps(t_pipe):8.1f} MB/s   "
        f"ratio {t_floor / t_pipe:.2f}x of floor  (information)"
    )
    print(f"read   (read_stream)    : {mbps(t_read):8.1f} MB/s   ratio {t_floor / t_read:.2f}x of floor  (information)")
    # issue 16's row: verify must stay within 1.5x of its floor (zstd decompress + BLAKE3 of the same chunks)
    slower = t_verify / t_decode
    print(
        f"ROW\tverify time / (zstd decompress + BLAKE3) floor time\t{slower:.2f}x"
        f" ({mbps(t_verify):.0f} vs {mbps(t_decode):.0f} MB/s)\t<= 1.5x\t{'met' if slower <= 1.5 else 'missed'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
