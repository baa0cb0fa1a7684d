"""Benchmark the recorder at M remote nodes: each node its own sshd on 127.0.0.1 (issue 34).

    python bench/bench_nodes.py [M ...]           # default: 1 4 16 64 (run as root: the nodes' accounts)
    python bench/bench_nodes.py 1 64 256 --seconds 20    # the issue's rows on a 16-core machine
    python bench/bench_nodes.py --help

For each M, one lane config names M nodes (``ssh-tunnel``, one role each; one node: ``loopback`` with two
roles), the recorder observes them with the simulated observer through their observer account, and
``alpha observe record -- sleep SECONDS`` (``--seconds``, else ``ALPHA_BENCH_NODE_SECONDS``, default 10; sample
interval 1 s) gives, each also as a ratio to the first M's (give 1 first: the ratios are to one node's, measured in
the same run):

- start-up: from ``stream.open`` to ``process.start`` (the time added before the command starts, the nodes
  connected side by side, at most ``CONNECT_CONCURRENCY`` logins under way at once, every node's start observation
  taken before the command starts);
- how many nodes were observed from start to end (a start and an end observation each);
- the recorder's CPU per node per sample interval (the recorder process's own user+system time over the whole
  run, ``sleep`` being nothing, less that of a recording without nodes, divided by nodes x intervals), and steady
  (the recorder's own CPU over the run's second half, less that of a recording without nodes);
- stream bytes per node per minute (the stream's size, less a recording without nodes, over the run: a short
  run counts each node's facts, written once, many times over), and steady (the stream's growth from halfway
  through the run to 90% of it, less that of a recording without nodes: what a long run adds per node);
- the recorder's threads and open descriptors halfway through;
- the nodes' own CPU per node over the recording (each sshd's and what it ran: the SSH session, the observer
  account's login shell with its start-up files, the observer), what the nodes cost the machine they share here.

Then, for each M, where the start-up goes (``--phases``, on by default): the recorder's node links opened in this
process (observe.devices.remote.open_links, as the recorder opens them), each node's times from the first link's
start to its login, to its observer's hello, and to its start observation (first, median and last of the M), with
this process's CPU over it.

At the end, one ``ROW`` line per row of issue 34's done-when at the largest M (bench/table.py's format: row,
measurement, value, target, met or missed): start-up within 2x of one node's, every node observed from start to
end, recorder CPU per node per interval under 0.5 ms, stream under 3 KB per node per minute. It asserts nothing.
It needs the test suite's sshd helpers (tests/helpers/sshd.py: OpenSSH's ``sshd``, root).
"""

from __future__ import annotations

import argparse
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
from tests.helpers.sshd import end_links, observer_args, observer_env, observer_key, running_node  # noqa: E402

SECONDS = float(os.environ.get("ALPHA_BENCH_NODE_SECONDS", "10"))
PHASES = True  # --no-phases: no breakdown of the start-up
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


def _nodes_cpu(nodes: list[Any]) -> float:
    """The CPU seconds of the nodes' sshds and everything they ran and reaped so far (user+system, children too)."""
    total = 0.0
    for n in nodes:
        with contextlib.suppress(OSError, IndexError, ValueError, AttributeError):
            fields = Path(f"/proc/{n.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def phases(nodes: list[Any], folder: Path, cfg: Path) -> dict[str, Any]:
    """Where the start-up goes: each node's times to its login, its observer's hello and its start observation,
    from the start of open_links, as the recorder opens the links (timed by wrapping connect, the hello and the
    link's emit: when each arrived, not when it was taken)."""
    import paramiko  # noqa: F401 - imported before the clock starts: once per recorder, not per node

    from observe.devices import remote

    times: dict[int, dict[str, float]] = {}
    connect, hello, emit = remote.connect, remote.NodeLink._hello, remote.NodeLink._emit

    def timed_connect(node: Any, facts: dict[str, Any], key: Any) -> Any:
        transport = connect(node, facts, key)
        times.setdefault(node.port, {})["login"] = time.monotonic()
        return transport

    def timed_hello(link: Any, msg: dict[str, Any]) -> None:
        times.setdefault(link.node.port, {})["hello"] = time.monotonic()
        hello(link, msg)

    def timed_emit(link: Any, kind: str, attrs: dict[str, Any]) -> None:
        if kind == "device.observed" and attrs.get("phase") == "start":
            times.setdefault(link.node.port, {}).setdefault("start", time.monotonic())
        emit(link, kind, attrs)

    sim = folder / "gpus.json"
    sim.write_text(json.dumps({"driver": "580.1", "gpus": [GPU], "processes": []}))
    env = {"ALPHA_PARTITIONED_DEVICE_CONFIG": str(cfg), "ALPHA_OBSERVE_SIMULATED_GPUS": str(sim)}
    key = remote.ObserverKey("env", "$" + observer_args()[1], observer_key().read_text())
    remote.connect = timed_connect
    remote.NodeLink._hello, remote.NodeLink._emit = timed_hello, timed_emit  # type: ignore[method-assign,assignment]
    try:
        cpu, began = time.process_time(), time.monotonic()
        links, _problems = remote.open_links(env, str(folder), interval=1.0, append=lambda k, a: None, key=key)
        for link in links:
            link.take_start(max(began + 60 - time.monotonic(), 0.0))
        took, cpu = time.monotonic() - began, time.process_time() - cpu
        end_links(links)
    finally:
        remote.connect = connect
        remote.NodeLink._hello, remote.NodeLink._emit = hello, emit  # type: ignore[method-assign]
    got: dict[str, Any] = {"all": took, "cpu": cpu}
    for what in ("login", "hello", "start"):
        at = sorted(t[what] - began for t in times.values() if what in t)
        got[what] = (at[0], at[len(at) // 2], at[-1], len(at)) if at else None
    return got


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


def rows_of_issue(one: dict[str, Any], last: dict[str, Any]) -> None:
    """The done-when rows of issue 34 at the largest M (``last``), against the first M's (``one``: one node)."""
    m, base = last["m"], one["m"]
    ratio = last["startup"] / one["startup"] if one["startup"] else float("inf")
    rows = [
        (
            f"start-up at {m} nodes / {base}",
            f"{last['startup']:.2f} s / {one['startup']:.2f} s = {ratio:.2f}x",
            "within 2x",
            ratio <= 2.0,
        ),
        (
            f"nodes observed start to end at {m}",
            f"{last['observed']}/{m} (late {last['late']}, lost {last['lost']})",
            f"{m}/{m}",
            last["observed"] == m,
        ),
        (
            f"recorder CPU per node per interval at {m}",
            f"{last['cpu_node_interval_ms']:.2f} ms",
            "< 0.5 ms",
            last["cpu_node_interval_ms"] < 0.5,
        ),
        (
            f"stream per node per minute at {m}",
            f"{last['bytes_node_minute'] / 1024:.1f} KB",
            "< 3 KB",
            last["bytes_node_minute"] < 3 * 1024,
        ),
    ]
    print()
    for row, value, target, met in rows:
        print(f"ROW\t{row}\t{value}\t{target}\t{'met' if met else 'missed'}")


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
                cfg = config(nodes, folder)
                nodes_cpu = _nodes_cpu(nodes)
                got = record(folder, cfg)
                time.sleep(1.0)  # the sessions' ends reaped by their sshds
                got["nodes_cpu"] = (_nodes_cpu(nodes) - nodes_cpu) / m
                got["phases"] = phases(nodes, folder, cfg) if PHASES else None
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
                f"(steady {got['steady_node_minute'] / 1024:.2f}), {got['threads']} threads, {got['fds']} fds; "
                f"nodes' own CPU {got['nodes_cpu'] * 1000:.0f} ms/node over the recording",
                flush=True,
            )
    one = rows[0]
    rows_of_issue(one, rows[-1])
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
    if PHASES:
        print()
        print("where the start-up goes (s from open_links; first / median / last node), this process's CPU:")
        print("nodes   logged in             observer's hello      start observation     all     recorder CPU")
        for r in rows:
            ph = r["phases"]

            def span(what: str, ph: dict[str, Any] = ph) -> str:
                got = ph[what]
                return f"{got[0]:5.2f} {got[1]:5.2f} {got[2]:5.2f}  " if got else f"{'-':<20}  "

            per = ph["cpu"] / r["m"] * 1000
            print(
                f"{r['m']:>5}   {span('login')}  {span('hello')}  {span('start')}  {ph['all']:5.2f}   "
                f"{ph['cpu']:.3f} s ({per:.1f} ms/node)"
            )


def parse(argv: list[str]) -> list[int]:
    """The node counts to measure (``--seconds`` sets the recording's length)."""
    global SECONDS, PHASES
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="example: python bench/bench_nodes.py 1 64 256 --seconds 20 (as root; 256 nodes want 16 cores)",
    )
    parser.add_argument(
        "counts", nargs="*", type=int, metavar="M", help="node counts, the first the ratios' base (default 1 4 16 64)"
    )
    parser.add_argument(
        "--seconds", type=float, default=SECONDS, help=f"each recording's length (default {SECONDS:g}: 1 s samples)"
    )
    parser.add_argument(
        "--no-phases", action="store_true", help="skip the breakdown of each M's start-up (one more start-up each)"
    )
    args = parser.parse_args(argv)
    SECONDS, PHASES = args.seconds, not args.no_phases
    return args.counts or [1, 4, 16, 64]


if __name__ == "__main__":
    main(parse(sys.argv[1:]))
