"""Remote nodes: the recorder observes each node a lane config names over its own SSH connection (real sshd servers)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aos.event import Event
from tests.helpers.recorder import events, index, kinds, output, wait_for
from tests.helpers.recorder import record as record_plain
from tests.helpers.run import ALPHA, child_env
from tests.helpers.sshd import (
    SSH_KEYGEN,
    SshNode,
    observer_args,
    observer_env,
    running_node,
    sshd_available,
)

VAR = "ALPHA_PARTITIONED_DEVICE_CONFIG"
UUID = "GPU-11111111-2222-3333-4444-555555555555"


def fingerprint(pub: str, folder: Path) -> str:
    """``ssh-keygen -lf``'s SHA-256 fingerprint of a public key line."""
    f = folder / "key.pub"
    f.write_text(pub + "\n")
    return subprocess.run([SSH_KEYGEN, "-lf", str(f)], capture_output=True, text=True, check=True).stdout.split()[1]


def record(tmp_path: Path, argv: list[str], *opts: str, **kw: Any) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    """``alpha observe record`` logging into the nodes' observer accounts with the observer key (from the
    environment, as ``lane`` sets it)."""
    return record_plain(tmp_path, argv, *observer_args(), *opts, **kw)


def lane(tmp_path: Path, node: SshNode, **extra: Any) -> dict[str, str]:
    """The recorder's environment: a lane config naming ``node``, simulated GPUs (one process on the node whose
    argv holds ``node-side``) and the observer key."""
    cfg = tmp_path / "lane.json"
    cfg.write_text(json.dumps(node.config(minors=[0], transport="loopback", **extra)))
    sim = tmp_path / "gpus.json"
    gpu = {"index": 0, "minor": 0, "uuid": UUID, "name": "NVIDIA H200", "memory": 141 << 30}
    procs = [{"gpu": UUID, "pid": "tree", "argv_contains": "node-side", "used_memory": 1 << 30}]
    sim.write_text(json.dumps({"driver": "580.159.04", "gpus": [gpu], "processes": procs}))
    return {VAR: str(cfg), "ALPHA_OBSERVE_SIMULATED_GPUS": str(sim), **observer_env()}


def on_node(node: SshNode, script: str) -> list[str]:
    """The command: run ``sh SCRIPT node-side`` on the node over the lane's own ssh (the client's argv names
    ``$M-side``, so only the node's process holds ``node-side``)."""
    return node.ssh_argv(f'M=node; exec sh {script} "$M-side"')


def of_node(evs: list[Event], node: SshNode, kind: str = "device.observed") -> list[Event]:
    return [e for e in evs if e.kind == kind and (e.attrs.get("node") or {}).get("port") == node.port]


def test_each_node_is_observed_over_the_recorders_own_connection(ssh_node: SshNode, tmp_path: Path) -> None:
    """device.observed of the node from start (before process.start) to end, with the host key the recorder verified
    (ssh-keygen's fingerprint), the observer's digest, the node's kernel, and the node's process by its digest."""
    from observe.devices.bundle import build_bundle

    role = ssh_node.root / "role.sh"
    role.write_bytes(b"sleep 1.2\n")
    env = lane(tmp_path, ssh_node)
    proc, path = record(tmp_path, on_node(ssh_node, str(role)), "--sample-interval", "0.2", env=env)
    assert 0 == proc.returncode, proc.stderr.decode()
    evs = events(path)
    mine = of_node(evs, ssh_node)
    assert ["start", "end"] == [mine[0].attrs["phase"], mine[-1].attrs["phase"]]
    assert mine[0].seq < index(evs, "process.start") < index(evs, "process.exit") < mine[-1].seq
    node = mine[0].attrs["node"]
    expected = {
        "host": ssh_node.host,
        "port": ssh_node.port,
        "host_key": {"type": "ssh-ed25519", "sha256": fingerprint(ssh_node.host_key_pub, tmp_path)},
        "host_key_verified": True,
        "observer_sha256": build_bundle().sha256,
        "kernel_release": os.uname().release,
    }
    actual = {k: node.get(k) for k in expected if k != "kernel_release"} | {"kernel_release": node["kernel"]["release"]}
    assert expected == actual
    assert {"simulated"} == {e.attrs["observer"] for e in mine}
    assert [UUID] == [g["uuid"] for g in mine[0].attrs["gpus"]]
    seen = [p for e in mine for p in e.attrs["processes"]]
    digest = hashlib.sha256(role.read_bytes()).hexdigest()
    ours = [p for p in seen if (p["script"] or {}).get("sha256") == digest]
    assert ours, seen
    assert (False, [], os.path.basename(ours[0]["exe"]["path"])) == (ours[0]["in_tree"], ours[0]["steps"], "dash")
    assert of_node(evs, ssh_node, "telemetry")
    assert "node.lost" not in kinds(evs)


def test_an_unknown_host_key_is_refused_and_recorded(ssh_node: SshNode, tmp_path: Path) -> None:
    """A known_hosts that lists no key for the node: refused (host-key-unknown), the offered key recorded, the file
    untouched, nothing observed there."""
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    proc, path = record(tmp_path, ["true"], env=lane(tmp_path, ssh_node, known_hosts=str(empty)))
    assert 0 == proc.returncode, proc.stderr.decode()
    mine = of_node(events(path), ssh_node)
    assert 1 == len(mine)
    a = mine[0].attrs
    node = a["node"]
    assert ("none", "host-key-unknown", False) == (a["observer"], node["refused"], node["host_key_verified"])
    assert fingerprint(ssh_node.host_key_pub, tmp_path) == node["host_key"]["sha256"]
    assert "refused (host-key-unknown)" in a["error"]
    assert "" == empty.read_text()


@pytest.fixture
def own_node(tmp_path: Path) -> Any:
    """A test sshd of this test's own (it is changed or stopped)."""
    why = sshd_available()
    if why is not None:
        pytest.skip(why)
    with running_node(tmp_path / "own-node", "own") as node:
        yield node


def test_a_changed_host_key_is_refused_and_recorded(own_node: SshNode, tmp_path: Path) -> None:
    """The node comes back with another host key than known_hosts lists: refused (host-key-changed), never accepted."""
    before = own_node.known_hosts.read_text()
    new = own_node.new_host_key()
    proc, path = record(tmp_path, ["true"], env=lane(tmp_path, own_node))
    assert 0 == proc.returncode, proc.stderr.decode()
    (start,) = of_node(events(path), own_node)
    node = start.attrs["node"]
    assert ("none", "host-key-changed") == (start.attrs["observer"], node["refused"])
    assert fingerprint(new, tmp_path) == node["host_key"]["sha256"]
    assert before == own_node.known_hosts.read_text()


def lose(node: SshNode) -> None:
    """The node goes away: its sshd stops, and with it the sessions it started (each sshd child is a session leader
    of its own, so stopping the listener's group alone would leave them running)."""
    assert node.process is not None
    listener = node.process.pid
    sessions = []
    for pid in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            continue
        if pid.isdigit() and int(stat[stat.rindex(")") + 2 :].split()[1]) == listener:
            sessions.append(int(pid))
    node.stop()
    for pid in sessions:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_node_lost_mid_run_is_recorded_and_the_recording_goes_on(own_node: SshNode, tmp_path: Path) -> None:
    """The node's sshd ends during the recording: node.lost names it, the command's own exit and output are kept."""
    ready = tmp_path / "ready"
    out = tmp_path / "lost.aos"
    script = f"touch {ready}; sleep 2.5; echo done"
    options = [*observer_args(), "--sample-interval", "0.2", "--out", str(out)]
    rec = subprocess.Popen(
        [ALPHA, "observe", "record", *options, "--", "sh", "-c", script],
        env=child_env(lane(tmp_path, own_node)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(ready.exists)
    time.sleep(0.5)
    lose(own_node)
    _, err = rec.communicate(timeout=60)
    assert 0 == rec.returncode, err.decode()
    evs = events(out)
    (lost,) = of_node(evs, own_node, "node.lost")
    assert own_node.host == lost.attrs["node"]["host"]
    assert "before the end observation" in lost.attrs["reason"]
    assert b"done\n" == output(evs)
    assert 0 == next(e for e in evs if e.kind == "process.exit").attrs["exit_code"]
    assert "end" not in [e.attrs["phase"] for e in of_node(evs, own_node)]


def test_a_node_without_the_observers_python_is_observer_none_with_the_reason(
    ssh_node: SshNode, tmp_path: Path
) -> None:
    """The node has no interpreter at the config's observer.python: observer none, and the error says so."""
    env = lane(tmp_path, ssh_node, observer={"python": "/nonexistent/python3"})
    proc, path = record(tmp_path, ["true"], env=env)
    assert 0 == proc.returncode, proc.stderr.decode()
    (start,) = of_node(events(path), ssh_node)
    assert ("none", "no-python3") == (start.attrs["observer"], start.attrs["node"]["refused"])
    assert "the node has no interpreter at /nonexistent/python3" in start.attrs["error"]


#: The command hunts for the recorder's connection: a socket it inherited to the node's port, an ssh client (or
#: its control socket) beside it, and the recorder's descriptors and memory (readable to root alone).
HUNT = """
import os, sys
port = int(sys.argv[1])
mine = set()
for fd in os.listdir('/proc/self/fd'):
    try:
        link = os.readlink(f'/proc/self/fd/{fd}')
    except OSError:
        continue
    if link.startswith('socket:['):
        mine.add(link[8:-1])
to_node = []
for table in ('/proc/net/tcp', '/proc/net/tcp6'):
    for line in open(table).read().splitlines()[1:]:
        f = line.split()
        if int(f[2].rsplit(':', 1)[1], 16) == port and f[9] in mine:
            to_node.append(f[9])
rec = int(os.environ['AOS_RECORDER_PID'])
clients = []
for pid in os.listdir('/proc'):
    if not pid.isdigit():
        continue
    try:
        exe = os.readlink(f'/proc/{pid}/exe')
        stat = open(f'/proc/{pid}/stat').read()
    except OSError:
        continue
    if int(stat[stat.rindex(')') + 2:].split()[1]) == rec and os.path.basename(exe) == 'ssh':
        clients.append(pid)
print('inherited', to_node)
print('ssh-clients', clients)
"""


def test_the_command_cannot_reach_the_recorders_connection(ssh_node: SshNode, tmp_path: Path) -> None:
    """The recorder observed the node over a connection the command neither inherited nor can find: no socket to
    the node among its descriptors, no ssh client (control socket, agent) beside the recorder."""
    probe = tmp_path / "hunt.py"
    probe.write_text(HUNT)
    argv = ["sh", "-c", f"AOS_RECORDER_PID=$PPID exec {sys.executable} {probe} {ssh_node.port}"]
    proc, path = record(tmp_path, argv, env=lane(tmp_path, ssh_node))
    assert 0 == proc.returncode, proc.stderr.decode()
    evs = events(path)
    assert b"inherited []\nssh-clients []\n" == output(evs)
    assert {"start", "end"} <= {e.attrs["phase"] for e in of_node(evs, ssh_node)}
    assert all(e.attrs["node"]["host_key_verified"] for e in of_node(evs, ssh_node))
