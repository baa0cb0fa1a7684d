"""Benchmark the recorder at M remote nodes: each node its own sshd on 127.0.0.1 (issue 34).

    python bench/bench_nodes.py [M ...]           # default: 1 4 16 64 (run as root: the nodes' accounts)

For each M, one lane config names M nodes (``ssh-tunnel``, one role each; one node: ``loopback`` with two
roles), the recorder observes them with the simulated observer through their observer account, and
``alpha observe record -- sleep SECONDS`` (``ALPHA_BENCH_NODE_SECONDS``, default 10; sample interval 1 s)
gives, each also as a ratio to one node's:

- start-up: from ``stream.open`` to ``process.start`` (the time added before the command starts, the nodes
  connected side by side);
- how many nodes were observed from start to end (a start and an end observation each);
- the recorder's CPU per node per sample interval (its user+system time, ``sleep`` being nothing), and steady
  (the recorder's own CPU over the run's second half, less that of a recording without nodes);
- stream bytes per node per minute (the stream's size, less a recording without nodes, over the run: a short
  run counts each node's facts, written once, many times over), and steady (the stream's growth from halfway
  through the run to 90% of it, less that of a recording without nodes: what a long run adds per node);
- the recorder's threads and open descriptors halfway through.

It asserts nothing. It needs the test suite's sshd helpers (tests/helpers/sshd.py: OpenSSH's ``sshd``, root).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aos.reader import read_stream  # noqa: E402 - after the checkout is on the path
from tests.helpers.run import ALPHA, child_env  # noqa: E402
from tests.helpers.sshd import observer_args, observer_env, running_node  # noqa: E402

SECONDS = float(os.environ.get("ALPHA_BENCH_NODE_SECONDS", "10"))
GPU = {"index": 0, "minor": 0, "uuid": "GPU-bench-0000", "name": "NVIDIA H200", "memory": 141 << 30}


def config(nodes: list[Any], folder: Path) -> Path:
    """A lane config naming ``nodes`` (two roles on one node; one role on each of several)."""
    if len(nodes) == 1:
        doc: dict[str, Any] = {"owner": "bench", "transport": "loopback", **nodes[0].config(minors=[0, 1])}
    else:
        entries = [n.config(minors=[0]) for n in nodes]
        doc = {"owner": "bench", "transport": "ssh-tunnel", "nodes": entries}
    path = folder / "lane.json"
    path.write_text(json.dumps(doc))
    return path


def _proc_facts(pid: int) -> tuple[int, int]:
    """Threads and open descriptors of process ``pid`` (0, 0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
        return threads, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return 0, 0


def _cpu(pid: int) -> float:
    """The user+system CPU seconds of process ``pid`` so far (its own, all its threads; 0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _size(path: Path) -> int:
    with contextlib.suppress(OSError):
        return path.stat().st_size
    return 0


def record(folder: Path, cfg: Path | None) -> dict[str, Any]:
    """One recording of ``sleep SECONDS``; what the module's docstring lists."""
    sim = folder / "gpus.json"
    sim.write_text(json.dumps({"driver": "580.1", "gpus": [GPU], "processes": []}))
    stream = folder / "run.aos"
    env = {"ALPHA_OBSERVE_SIMULATED_GPUS": str(sim), **observer_env()}
    if cfg is not None:
        env["ALPHA_PARTITIONED_DEVICE_CONFIG"] = str(cfg)
    argv = [ALPHA, "observe", "record", "--out", str(stream), "--quiet", "--sample-interval", "1", *observer_args()]
    before = os.times()
    began = time.monotonic()
    proc = subprocess.Popen([*argv, "--", "sleep", str(SECONDS)], env=child_env(env), cwd=folder)
    time.sleep(SECONDS / 2 + 2)
    threads, fds = _proc_facts(proc.pid)
    mid = _size(stream), time.monotonic(), _cpu(proc.pid)  # the steady rates: the stream's growth from here ...
    time.sleep(max(SECONDS * 0.9 + 2 - (time.monotonic() - began), 0.0))
    late = _size(stream), time.monotonic(), _cpu(proc.pid)  # ... to here, both after the nodes' start-up
    proc.wait(timeout=SECONDS + 120)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    evs = read_stream(stream).events
    opened = next(e.mono_ns for e in evs if e.kind == "stream.open")
    started = next(e.mono_ns for e in evs if e.kind == "process.start")
    phases: dict[int, set[str]] = {}
    for e in evs:
        node = e.attrs.get("node") if e.kind == "device.observed" else None
        if isinstance(node, dict) and e.attrs.get("observer") != "none":
            phases.setdefault(int(node["port"]), set()).add(str(e.attrs.get("phase")))
    return {
        "startup": (started - opened) / 1e9,
        "observed": sum(1 for p in phases.values() if {"start", "end"} <= p),
        "cpu": cpu,
        "bytes": stream.stat().st_size,
        "steady_cpu": (late[2] - mid[2]) / max(late[1] - mid[1], 1e-9) if late[2] >= mid[2] > 0 else 0.0,
        "steady": (late[0] - mid[0]) / max(late[1] - mid[1], 1e-9) * 60 if late[0] >= mid[0] > 0 else 0.0,
        "threads": threads,
        "fds": fds,
        "late": sum(1 for e in evs if e.kind == "device.observed" and e.attrs.get("late")),
        "lost": sum(1 for e in evs if e.kind == "node.lost"),
    }


def main(counts: list[int]) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-nodes-") as tmp:
        base = record(Path(tmp), None)
        print(f"no nodes: start-up {base['startup']:.2f} s, {base['bytes']} bytes, recorder CPU {base['cpu']:.2f} s")
        for m in counts:
            folder = Path(tmp) / f"m{m}"
            folder.mkdir()
            began = time.monotonic()
            with contextlib.ExitStack() as stack:
                nodes = [stack.enter_context(running_node(folder / f"n{i}", f"n{i}")) for i in range(m)]
                made = time.monotonic() - began
                got = record(folder, config(nodes, folder))
            intervals = SECONDS / 1.0
            got["m"] = m
            got["cpu_node_interval_ms"] = max(got["cpu"] - base["cpu"], 0.0) / intervals / m * 1000
            got["bytes_node_minute"] = max(got["bytes"] - base["bytes"], 0) / m * 60 / SECONDS
            got["steady_cpu_ms"] = max(got["steady_cpu"] - base["steady_cpu"], 0.0) * 1000 / m  # per 1 s interval
            got["steady_node_minute"] = max(got["steady"] - base["steady"], 0.0) / m
            rows.append(got)
            print(
                f"M={m}: {m} sshds up in {made:.1f} s; start-up {got['startup']:.2f} s, "
                f"observed {got['observed']}/{m}, late {got['late']}, lost {got['lost']}; "
                f"CPU {got['cpu_node_interval_ms']:.2f} ms/node/interval (steady {got['steady_cpu_ms']:.3f}), "
                f"{got['bytes_node_minute'] / 1024:.1f} KB/node/min "
                f"(steady {got['steady_node_minute'] / 1024:.2f}), {got['threads']} threads, {got['fds']} fds",
                flush=True,
            )
    one = rows[0]
    print()
    print(
        "nodes  start-up s (x1)   observed  CPU ms/node/interval (x1, steady)  KB/node/min (x1)  steady KB/node/min  "
        "threads  fds"
    )
    for r in rows:

        def ratio(key: str, r: dict[str, Any] = r) -> str:
            return f"{r[key] / one[key]:.2f}" if one[key] else "-"

        print(
            f"{r['m']:>5}  {r['startup']:>6.2f} ({ratio('startup'):>5})   {r['observed']:>3}/{r['m']:<4} "
            f"{r['cpu_node_interval_ms']:>8.2f} ({ratio('cpu_node_interval_ms'):>5}) "
            f"steady {r['steady_cpu_ms']:>6.3f}  "
            f"{r['bytes_node_minute'] / 1024:>7.1f} ({ratio('bytes_node_minute'):>5})  "
            f"{r['steady_node_minute'] / 1024:>18.2f}  {r['threads']:>6}  {r['fds']:>4}"
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1, 4, 16, 64])
