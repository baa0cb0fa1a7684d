"""``alpha observe query --store`` over an evidence index of 1k and 10k streams, against the old query path.

For each size N: N small streams (bench_query's: 3 steps, 2 receipts, a verdict
of 3 checks, spread over 14 days) are verified and stored in a folder store as
``push`` stores them, each row appended to the index as ``push`` appends it
(one file per stream, days compacted past ``COMPACT_AT`` files): the files a
reader meets after N pushes.
Then, each in a fresh ``alpha`` process (so imports count, as a user sees it):

- ``query --store``: the streams table from the index, on the machine that
  pushed (its memo of checked rows, as push leaves it: issue 36, under 2 s at
  10k and no stream re-verified), and with no memo (every row checked against
  its stream's tail, as on another machine);
- ``query --store`` over ``events``: every stored file read and hashed, none
  verified;
- the old path, ``query SQL STORE/``: every stream verified on every query.

The ROW lines give each time and the index query's ratio to the old path,
measured in the same run.

    python bench/bench_index.py                  # 1,000 and 10,000
    python bench/bench_index.py --sizes 500      # quick
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_query import write_small

from aos.verify import verify_stream
from observe.store import open_store
from observe.store_index import describe, remember, write_entries

STREAMS_SQL = "SELECT verdict, count(*) FROM streams GROUP BY verdict ORDER BY verdict"
EVENTS_SQL = "SELECT count(*) FROM events WHERE kind = 'step.end'"
ALPHA = shutil.which("alpha", path=str(Path(sys.executable).parent)) or shutil.which("alpha") or "alpha"


def build(store: Path, n: int, rng: random.Random) -> None:
    staging = store.parent / "staging"
    staging.mkdir()
    now = time.time_ns()
    s = open_store(store)
    store.mkdir()
    verified = []
    for i in range(n):
        path = staging / f"{i}.aos"
        write_small(path, rng, now)
        v = verify_stream(path)
        final = store / f"{v.file_blake3}.aos"
        os.replace(path, final)
        entry = describe(final, v, url=final.as_uri(), entered_by="push")
        write_entries(s, [entry])
        verified.append((entry, v))
    remember(s, verified)  # as push does, all at once: the pusher's own memo (observe.query.checked)
    shutil.rmtree(staging)


def timed(*args: str, memo: str | None = None) -> tuple[float, dict[str, object]]:
    env = dict(os.environ, ALPHA_CACHE=memo) if memo is not None else None
    start = time.perf_counter()
    done = subprocess.run(
        [ALPHA, "observe", "query", *args, "--json"], capture_output=True, text=True, check=False, env=env
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"alpha observe query {' '.join(args)}: {done.stderr}")
    doc: dict[str, object] = json.loads(done.stdout)
    return took, doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated stream counts")
    args = parser.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    for n in (int(x) for x in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
            store = Path(tmp) / "store"
            memo = Path(tmp) / "memo"  # the pusher's memo of checked rows (observe.query.checked)
            os.environ["ALPHA_CACHE"] = str(memo)
            start = time.perf_counter()
            build(store, n, random.Random(n))
            files = sum(1 for _ in (store / "index").rglob("*.parquet"))
            print(f"{n} streams stored and indexed in {time.perf_counter() - start:.1f} s ({files} index files)")
            index_s, doc = timed(STREAMS_SQL, "--store", str(store), memo=str(memo))
            reverified = len(doc["reverified"])  # type: ignore[arg-type]
            cold_s, cold = timed(STREAMS_SQL, "--store", str(store), memo=str(Path(tmp) / "no-memo"))
            assert cold["rows"] == doc["rows"], cold
            assert not cold["reverified"], cold
            events_s, _ = timed(EVENTS_SQL, "--store", str(store))
            old_s, old = timed(STREAMS_SQL, str(store))
            assert old["rows"] == doc["rows"], (old["rows"], doc["rows"])
            k = f"{n // 1000}k" if n >= 1000 else str(n)
            met = "met" if (n < 10_000 or index_s < 2) and reverified == 0 else "missed"
            rows.append((f"query --store, streams, {k} indexed streams (s)", f"{index_s:.2f}", "< 2 s at 10k", met))
            rows.append(
                (f"  re-verified by that query, {k}", str(reverified), "0", "met" if reverified == 0 else "missed")
            )
            rows.append((f"query --store, streams, {k}, no memo: every tail read (s)", f"{cold_s:.2f}", "-", "met"))
            rows.append((f"query --store, events, {k} (s)", f"{events_s:.2f}", "-", "met"))
            rows.append((f"old path (every stream verified), {k} (s)", f"{old_s:.2f}", "-", "met"))
            rows.append((f"index query / old path, {k}", f"{index_s / old_s:.3f}", "-", "met"))
    for row in rows:
        print("ROW\t" + "\t".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
