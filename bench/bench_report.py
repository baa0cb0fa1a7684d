"""The report of a big stream: wall time, page size and peak memory, at two stream sizes.

Builds a sealed stream with the writer (``tests/helpers/report.synthetic_stream``: steps printing
incompressible log lines, telemetry for two GPUs) of SIZE and of SIZE/8, writes the report of each
in a child process (``alpha observe report``'s library call), and prints the child's wall time,
peak RSS (``ru_maxrss``) and the page's size, and ``verify``'s wall time on the same file as the
baseline. Targets: peak RSS flat in the stream's size (the big one's at most 1.5x the small one's),
the page at most ``Caps.page``. Prints numbers; asserts nothing.

    python bench/bench_report.py            # 1G (and 128M)
    python bench/bench_report.py 256M
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHILD = """
import sys, time, resource
from pathlib import Path
from observe.report.write import write_report
t = time.perf_counter()
facts = write_report(Path(sys.argv[1]), Path(sys.argv[2]))
wall = time.perf_counter() - t
print(wall, facts.page_bytes, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, facts.integrity)
"""

VERIFY = """
import sys, time
from aos.verify import verify_stream
t = time.perf_counter()
verify_stream(sys.argv[1])
print(time.perf_counter() - t)
"""


def size_arg(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def _anon_kib(pid: int) -> int:
    """The process's resident anonymous memory (RssAnon, KiB): its own allocations, not mapped file pages."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(stream: Path, work: Path) -> tuple[float, int, int, int, float]:
    """(report wall s, page bytes, peak RSS KiB, peak anonymous RSS KiB, verify wall s), each in a fresh child.

    ``ru_maxrss`` counts the pages of the stream file that the reader and the verifier map (``mmap``) and
    touch: page cache, which the kernel can drop at any time. ``RssAnon``, polled every 10 ms, is what the
    report itself allocates.
    """
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(stream), str(work / (stream.stem + ".html"))],
        stdout=subprocess.PIPE,
        text=True,
    )
    anon = 0
    while child.poll() is None:
        anon = max(anon, _anon_kib(child.pid))
        time.sleep(0.01)
    assert child.stdout is not None
    out = child.stdout.read().split()
    assert 0 == child.returncode, out
    verify = subprocess.run([sys.executable, "-c", VERIFY, str(stream)], capture_output=True, text=True, check=True)
    return float(out[0]), int(out[1]), int(out[2]), anon, float(verify.stdout)


def main() -> None:
    from observe.report.write import CAPS
    from tests.helpers.report import synthetic_stream

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", nargs="?", default=os.environ.get("AOS_BENCH_REPORT_SIZE", "1G"), type=size_arg)
    args = parser.parse_args()
    big = args.size
    small = max(big // 8, 1 << 20)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        work = Path(tmp)
        results = {}
        for label, size in (("small", small), ("big", big)):
            t = time.perf_counter()
            stream = synthetic_stream(work / f"{label}.aos", size, steps=8)
            built = time.perf_counter() - t
            wall, page, rss_kib, anon_kib, verify = measure(stream, work)
            on_disk = stream.stat().st_size
            results[label] = (on_disk, wall, page, rss_kib, anon_kib, verify)
            print(
                f"{label}: stream {on_disk / 2**20:.0f} MiB (built in {built:.1f} s); report {wall:.1f} s "
                f"(verify alone {verify:.1f} s), page {page / 2**10:.0f} KiB, peak RSS {rss_kib / 1024:.0f} MiB "
                f"(anonymous {anon_kib / 1024:.0f} MiB)"
            )
            stream.unlink()
    s_disk, _, _, s_rss, s_anon, _ = results["small"]
    b_disk, b_wall, b_page, b_rss, b_anon, b_verify = results["big"]
    gb = f"{b_disk / 2**30:.2f} GiB"
    small_mb = f"{s_disk / 2**20:.0f} MiB"
    anon_ratio = b_anon / max(s_anon, 1)
    rss_ratio = b_rss / s_rss
    ratio = b_wall / b_verify
    rows = [
        (f"report {gb}, peak anonymous RSS", f"{b_anon / 1024:.0f} MiB", "<= 256 MiB", b_anon <= 256 * 1024),
        (
            f"report {gb} / {small_mb}, peak anonymous RSS ratio",
            f"{anon_ratio:.2f}x",
            "<= 1.5x (flat)",
            anon_ratio <= 1.5,
        ),
        (
            f"report {gb} / {small_mb}, peak RSS (ru_maxrss) ratio",
            f"{rss_ratio:.2f}x",
            "<= 1.5x (flat)",
            rss_ratio <= 1.5,
        ),
        (
            f"report {gb}, page size",
            f"{b_page / 2**10:.0f} KiB",
            f"<= {CAPS.page / 2**20:.0f} MiB",
            b_page <= CAPS.page,
        ),
        (f"report {gb}, wall / verify wall", f"{ratio:.2f}x", "<= 3x", ratio <= 3),
    ]
    for what, value, target, met in rows:
        print(f"ROW\t{what}\t{value}\t{target}\t{'met' if met else 'missed'}")


if __name__ == "__main__":
    main()
