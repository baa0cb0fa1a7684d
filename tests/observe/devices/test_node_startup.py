"""The recorder's start-up at several nodes (real sshd servers): the nodes are connected side by side, at most
``CONNECT_CONCURRENCY`` logins under way at once, and a node whose start comes after the command started is still
recorded, marked late.

Each node here is a TCP front of its own for one test sshd that holds every connection it accepts for ``delay``
seconds before relaying it (a node slow to answer), or holds what the recorder sends past its login (the
observer's bundle) for ``hold`` seconds: a node whose observer starts late. What is counted is which connections
were waiting at the same time, and the start-up against the sum of the nodes' delays measured in the same test,
never a fixed time.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.recorder import events, record
from tests.helpers.relay import TcpFront
from tests.helpers.sshd import SshNode, end_links, observer_args, observer_env, observer_key

VAR = "ALPHA_PARTITIONED_DEVICE_CONFIG"
GPU = {"index": 0, "minor": 0, "uuid": "GPU-startup-0", "name": "NVIDIA H200", "memory": 141 << 30}


def _lane(tmp_path: Path, node: SshNode, fronts: list[TcpFront]) -> dict[str, str]:
    """The recorder's environment: an ssh-tunnel config naming each front as a node of one role, simulated GPUs."""
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"[127.0.0.1]:{f.port} {node.host_key_pub}\n" for f in fronts))
    entries = [node.config(minors=[0], port=f.port, known_hosts=str(known)) for f in fronts]
    cfg = tmp_path / "lane.json"
    cfg.write_text(json.dumps({"owner": "startup", "transport": "ssh-tunnel", "nodes": entries}))
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"driver": "580.1", "gpus": [GPU], "processes": []}))
    return {VAR: str(cfg), "ALPHA_OBSERVE_SIMULATED_GPUS": str(sim), **observer_env()}


def _starts(evs: list[Any]) -> dict[int, Any]:
    """Each node's start observation, by port."""
    return {
        e.attrs["node"]["port"]: e
        for e in evs
        if e.kind == "device.observed" and e.attrs.get("phase") == "start" and e.attrs.get("node")
    }


def _record_through(
    tmp_path: Path, node: SshNode, fronts: list[TcpFront], argv: list[str]
) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    """Record ``argv`` with each front as a node of the lane (``_lane``); the fronts closed after."""
    try:
        return record(tmp_path, argv, *observer_args(), env=_lane(tmp_path, node, fronts), timeout=120)
    finally:
        for f in fronts:
            f.close()


def test_the_nodes_are_connected_side_by_side(ssh_node: SshNode, tmp_path: Path) -> None:
    """Four nodes, each slow to answer: every connection is made while the others still wait, every node's start
    comes before the command's, and the start-up is well under the sum of the nodes' delays (a recorder that
    connects one node after another waits that sum and more, and the fronts see one connection at a time)."""
    fronts = [TcpFront(ssh_node.port, delay=3.0) for _ in range(4)]
    proc, out = _record_through(tmp_path, ssh_node, fronts, ["true"])
    assert 0 == proc.returncode, proc.stderr
    evs = events(out)
    started = next(e for e in evs if e.kind == "process.start")
    starts = _starts(evs)
    assert {f.port for f in fronts} == set(starts)
    for f in fronts:
        start = starts[f.port]
        assert "simulated" == start.attrs["observer"], start.attrs.get("error")
        assert start.seq < started.seq
        assert "late" not in start.attrs
        assert 1 == len(f.accepted) == len(f.relayed)
    # every node's connection was accepted before the first one was let through: all four waited at once
    first_relayed = min(f.relayed[0] for f in fronts)
    assert 4 == sum(1 for f in fronts if f.accepted[0] < first_relayed)
    serial = sum(f.relayed[0] - f.accepted[0] for f in fronts)  # what one node after another would wait at least
    opened = next(e for e in evs if e.kind == "stream.open")
    startup = (started.mono_ns - opened.mono_ns) / 1e9
    # the nodes' own start (their sshd, shell and observer, on this machine's cores) comes on top of the delays
    assert startup < serial * 0.75, (startup, serial)


def test_at_most_connect_concurrency_logins_are_under_way_at_once(ssh_node: SshNode, tmp_path: Path) -> None:
    """With CONNECT_CONCURRENCY 2, four slow nodes are connected two at a time: the third connection is made only
    once one of the first two has logged in, and all four are observed, each over a connection that sends its
    messages at once (``TCP_NODELAY``)."""
    from observe.devices import remote

    fronts = [TcpFront(ssh_node.port, delay=1.0) for _ in range(4)]
    found: list[tuple[str, dict[str, Any]]] = []
    env = _lane(tmp_path, ssh_node, fronts)
    key = remote.ObserverKey("env", "$KEY", observer_key().read_text())
    was, remote.CONNECT_CONCURRENCY = remote.CONNECT_CONCURRENCY, 2
    try:
        links, problems = remote.open_links(
            env, str(tmp_path), interval=0.5, append=lambda kind, attrs: found.append((kind, attrs)), key=key
        )
        starts = [s for link in links for s in link.take_start(60)]
        # each login's small messages sent at once, never held for a delayed acknowledgement (Nagle)
        nodelay = [link.transport.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for link in links]
        end_links(links)
    finally:
        remote.CONNECT_CONCURRENCY = was
        for f in fronts:
            f.close()
    assert [] == problems
    assert [1, 1, 1, 1] == [int(bool(n)) for n in nodelay]
    observed = [a for kind, a in starts if kind == "device.observed"]
    assert ["simulated"] * 4 == [a["observer"] for a in observed], [a.get("error") for a in observed]
    accepted = sorted(f.accepted[0] for f in fronts)
    relayed = sorted(f.relayed[0] for f in fronts)
    # two waited at once, never three: the third and fourth came only after the first two were let through
    assert accepted[1] < relayed[0]
    assert accepted[2] > relayed[0]
    assert accepted[3] > relayed[1]


def test_a_node_that_answers_after_the_command_started_is_recorded_late(ssh_node: SshNode, tmp_path: Path) -> None:
    """One node answers only after the recorder's start wait (NODE_START_WAIT): the command starts without it, the
    other node's start before the command's; the slow node's start still comes, after ``process.start``, marked
    late, and its end follows: observed, never dropped and never passed off as on time."""
    from observe.recorder.sampler import NODE_START_WAIT

    fronts = [TcpFront(ssh_node.port), TcpFront(ssh_node.port, hold=NODE_START_WAIT + 2.0)]
    proc, out = _record_through(tmp_path, ssh_node, fronts, ["sleep", "8"])
    assert 0 == proc.returncode, proc.stderr
    evs = events(out)
    opened = next(e for e in evs if e.kind == "stream.open")
    started = next(e for e in evs if e.kind == "process.start")
    assert (started.mono_ns - opened.mono_ns) / 1e9 < NODE_START_WAIT + 2.0  # the command did not wait for it
    starts = _starts(evs)
    quick, slow = starts[fronts[0].port], starts[fronts[1].port]
    assert quick.seq < started.seq
    assert "late" not in quick.attrs
    assert slow.seq > started.seq
    assert slow.attrs.get("late") is True
    assert "simulated" == slow.attrs["observer"], slow.attrs.get("error")
    ends = [
        e
        for e in evs
        if e.kind == "device.observed"
        and e.attrs.get("phase") == "end"
        and (e.attrs.get("node") or {}).get("port") == fronts[1].port
    ]
    assert 1 == len(ends)
    assert not [e for e in evs if e.kind == "node.lost"]
