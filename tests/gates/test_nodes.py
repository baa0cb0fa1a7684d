"""devices-observed over remote nodes: a lane whose config names pods over SSH is judged by each node's observations."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gates.testing import DEVICE_CONFIG_VARS, SyntheticStream, device_lane, sha256

KEY = {"type": "ssh-ed25519", "sha256": "SHA256:" + "k" * 43}


def _node(host: str, port: int) -> dict[str, Any]:
    return {
        "host": host,
        "address": host.split("@")[-1],
        "port": port,
        "user": "root",
        "host_key": dict(KEY, sha256=KEY["sha256"][:-1] + host[-1]),
        "host_key_verified": True,
        "observer_sha256": "b" * 64,
        "kernel": {"sysname": "Linux", "release": "6.8.0", "version": "#1", "machine": "x86_64"},
        "python": "3.12.3",
        "pid_namespace": "initial",
        # two accounts (docs/TRUST.md): root observes, the lane's own unprivileged account runs the roles
        "lane_user": host.split("@")[0],
        "observer_uid": 0,
        "lane_uid": 1000,
        "key": "env",
        "observer_python": "/usr/bin/python3",
        "executable": "/usr/bin/python3.12",
        "executable_sha256": "e" * 64,
        "isolated": True,
        "sessions": [{"user": "lane", "uid": 1000, "pid": 4242}],
    }


def remote(gate: str, hosts: tuple[str, ...] = ("lane@pod-a",)) -> SyntheticStream:
    """The right lane of ``gate``, its config naming ``hosts`` (one: loopback; two: ssh-tunnel, one per role), its
    observations the nodes' (no process of the recorded tree; each role's on its own node)."""
    s = device_lane(gate)
    s.ops[0]["attrs"]["observes_nodes"] = True  # a recorder that observes remote nodes
    tunnel = len(hosts) > 1
    cfg: dict[str, Any] = {"owner": "ci", "minors": [0, 1], "remote_root": "/srv/lane"}
    if tunnel:
        cfg |= {"transport": "ssh-tunnel", "nodes": [{"host": h, "port": 2222, "minors": [0]} for h in hosts]}
    else:
        cfg |= {"host": hosts[0], "port": 2222, "transport": "loopback"}
    data = json.dumps(cfg).encode()
    ops = []
    for i, op in enumerate(s.ops):
        a = op["attrs"]
        if op["kind"] == "artifact" and a.get("origin") == "recorder":
            a.update(size=len(data), sha256=sha256(data))
            s.ops[i + 1]["data"] = data
        if op["kind"] != "device.observed":
            ops.append(op)
            continue
        for n, host in enumerate(hosts):
            mine = copy.deepcopy(op)
            m = mine["attrs"]
            m["node"] = _node(host, 2222)
            if tunnel:  # each node has the GPU of its own role
                m["gpus"] = [g for g in m["gpus"] if g["index"] == n]
            uuids = {g["uuid"] for g in m["gpus"]}
            # a process of one node is never listed on another's GPU (the lane's CUDA context on the first card)
            m["processes"] = [
                dict(p, in_tree=False, steps=[], argv=None)
                for p in m["processes"]
                if p["gpu"] in uuids and (not tunnel or p["gpu"].endswith("-" + p["exe"]["path"].rsplit("/")[-1]))
            ]
            ops.append(mine)
    s.ops = ops
    return s


def devices(s: SyntheticStream, gate: str) -> dict[str, Any]:
    """The devices-observed check of ``gate`` over ``s``: its status and reason."""
    c = next(c for c in s.evaluate(gate).checks if c.name == "devices-observed")
    return {"status": c.status, "reason": c.reason}


@pytest.mark.parametrize("gate", sorted(DEVICE_CONFIG_VARS))
def test_right_lane_on_one_pod_passes_naming_the_node(gate: str) -> None:
    """A loopback pod over SSH: each role's executable, by digest, on its bound GPU of the node: physical pass."""
    v = remote(gate).evaluate(gate)
    check = devices(remote(gate), gate)
    assert ("pass", "physical") == (v.verdict, v.scope), [c.reason for c in v.checks if c.status != "pass"]
    assert "node lane@pod-a:2222 (host key SHA256:" in check["reason"]


def test_two_hosts_over_ssh_tunnel_pass() -> None:
    """ssh-tunnel: one node per role, each role's process seen on its own node's GPU."""
    check = devices(remote("distributed-device", ("lane@pod-a", "lane@pod-b")), "distributed-device")
    assert "pass" == check["status"], check["reason"]
    assert "of node lane@pod-b:2222" in check["reason"]


def test_a_stream_of_a_recorder_before_remote_nodes_is_judged_as_sealed() -> None:
    """No observes_nodes in stream.open (a "localhost" host was this machine then): the local rules, as sealed."""
    s = remote("distributed-device")
    s.ops = [op for op in s.ops if op["kind"] != "device.observed"]
    s.ops += [op for op in device_lane("distributed-device").ops if op["kind"] == "device.observed"]
    del s.ops[0]["attrs"]["observes_nodes"]
    assert "pass" == devices(s, "distributed-device")["status"]


def test_the_local_observations_do_not_stand_for_a_pod() -> None:
    """A config naming a pod with only the recorder's own observations (no node): inconclusive naming the node."""
    s = remote("distributed-device")
    s.ops = [op for op in s.ops if op["kind"] != "device.observed"]
    lane = device_lane("distributed-device")
    s.ops += [op for op in lane.ops if op["kind"] == "device.observed"]
    check = devices(s, "distributed-device")
    assert "inconclusive" == check["status"]
    assert "node lane@pod-a:2222: the recorder recorded no observation of it" in check["reason"]


def _procs(s: SyntheticStream) -> list[dict[str, Any]]:
    return [p for op in s.ops if op["kind"] == "device.observed" for p in op["attrs"]["processes"]]


def test_a_node_process_whose_digest_is_no_roles_is_inconclusive() -> None:
    """A process on a bound GPU of the node during a run step, running no role's executable: unattributable."""
    s = remote("distributed-device")
    run = next(op for op in s.ops if op["kind"] == "device.observed" and op["attrs"]["processes"])
    run["attrs"]["processes"].append(
        dict(run["attrs"]["processes"][0], pid=999, exe={"path": "/usr/bin/other", "sha256": "c" * 64})
    )
    check = devices(s, "distributed-device")
    assert "inconclusive" == check["status"]
    assert "node lane@pod-a:2222: pid 999 (other: exe sha256 cccccccccccc) ran on bound GPU" in check["reason"]
    assert "no role's captured executable: unattributable" in check["reason"]


def test_a_role_on_the_other_nodes_gpu_fails() -> None:
    """ssh-tunnel: beta's executable working on a GPU of alpha's node fails."""
    s = remote("distributed-device", ("lane@pod-a", "lane@pod-b"))
    for op in s.ops:
        a = op["attrs"]
        if op["kind"] == "device.observed" and a["node"]["host"] == "lane@pod-a":
            for p in a["processes"]:
                p["exe"] = next(q["exe"] for q in _procs(s) if "beta" in q["exe"]["path"])
    check = devices(s, "distributed-device")
    assert "fail" == check["status"]
    assert "node lane@pod-a:2222: beta's pid" in check["reason"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("refused", "node lane@pod-a:2222: observer none"),
        ("simulated", "node lane@pod-a:2222: the devices were simulated"),
        ("lost", "node lane@pod-a:2222 was lost during the recording"),
        ("no-end", "node lane@pod-a:2222: no end observation"),
        ("key", "node lane@pod-a:2222: the verified host key changed during the recording"),
    ],
)
def test_a_node_not_observed_throughout_is_not_physical(change: str, expected: str) -> None:
    """Refused, simulated, lost mid-run, without its end or with a changed host key: never a physical pass."""
    s = remote("distributed-device")
    obs = [op for op in s.ops if op["kind"] == "device.observed"]
    if change == "refused":
        a = obs[0]["attrs"]
        a.update(observer="none", gpus=[], processes=[], error="node lane@pod-a port 2222: refused (host-key-changed)")
        a["node"].update(host_key_verified=False, refused="host-key-changed")
    elif change == "simulated":
        for op in obs:
            op["attrs"].update(observer="simulated", library=None, simulated_from={"path": "/s.json", "sha256": "0"})
    elif change == "lost":
        i = s.ops.index(obs[1])
        s.add("node.lost", {"node": obs[0]["attrs"]["node"], "reason": "the connection ended"}, at=i + 1)
    elif change == "no-end":
        s.ops.remove(obs[-1])
    else:
        obs[-1]["attrs"]["node"] = dict(obs[-1]["attrs"]["node"], host_key={"type": "ssh-ed25519", "sha256": "X"})
    check = devices(s, "distributed-device")
    assert check["status"] in ("inconclusive", "fail")
    assert expected in check["reason"]
    assert "pass" != s.evaluate("distributed-device").verdict


def test_a_preflight_gpu_the_node_never_showed_fails() -> None:
    """The preflight names a GPU the pod's observer never listed: fail."""
    s = remote("distributed-device")
    for op in s.ops:
        if op["kind"] == "device.observed":
            op["attrs"]["gpus"] = [g for g in op["attrs"]["gpus"] if g["index"] == 0]
            op["attrs"]["processes"] = [p for p in op["attrs"]["processes"] if p["gpu"].endswith("alpha")]
    check = devices(s, "distributed-device")
    assert "fail" == check["status"]
    assert "which the recorder never observed on node lane@pod-a:2222" in check["reason"]


def _exiting(s: SyntheticStream, exe: dict[str, Any] | None, script: dict[str, Any] | None) -> None:
    """After the run sample, the same pids listed again while exiting: read as ``exe`` and ``script``."""
    run = next(op for op in s.ops if op["kind"] == "device.observed" and op["attrs"]["processes"])
    late = copy.deepcopy(run)
    for p in late["attrs"]["processes"]:
        p.update(exe=exe, script=script)
    s.ops.insert(s.ops.index(run) + 1, late)


def test_a_role_process_seen_exiting_keeps_its_identity() -> None:
    """A role's process listed again once its /proc entry is gone (no digest) keeps the role it was read with."""
    s = remote("distributed-device")
    _exiting(s, {"path": None, "sha256": None, "error": "No such file or directory"}, None)
    check = devices(s, "distributed-device")
    assert "pass" == check["status"], check["reason"]


def test_another_program_under_a_reused_pid_is_judged_as_it_is() -> None:
    """A later reading of the pid with another exe digest inherits nothing: unattributable on the bound GPU."""
    s = remote("distributed-device")
    _exiting(s, {"path": "/usr/bin/other", "sha256": "d" * 64}, None)
    check = devices(s, "distributed-device")
    assert "inconclusive" == check["status"]
    assert "(other: exe sha256 dddddddddddd) ran on bound GPU" in check["reason"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("before", "node lane@pod-a:2222: observed before the two-account rule"),
        ("shared", "node lane@pod-a:2222: the observer and the lane share the account lane"),
        ("same-uid", "node lane@pod-a:2222: the observer and the lane share the account lane (uid 0)"),
        ("lane-root", "node lane@pod-a:2222: the lane's account lane is root (uid 0) on the node"),
        ("no-lane", "node lane@pod-a:2222: the observer found no account lane (the lane's) on the node"),
        ("key-file", "node lane@pod-a:2222: the observer's key came from file (--observer-key FILE"),
        ("not-isolated", "node lane@pod-a:2222: the observer's interpreter did not run isolated (-I -S)"),
        (
            "root-session",
            "other SSH sessions of root or of the observer's account were open during the recording: root (pid 77)",
        ),
        (
            "uid0-session",
            "sessions of root or of the observer's account were open during the recording: admin (pid 78)",
        ),
    ],
)
def test_a_node_the_lane_could_speak_for_is_never_physical(change: str, expected: str) -> None:
    """Each of the two-account conditions broken alone (in the end observation's facts where it is a session seen
    late): devices-observed inconclusive, naming the node, the reason and the fix."""
    s = remote("distributed-device")
    obs = [op for op in s.ops if op["kind"] == "device.observed"]
    for op in obs:
        node = op["attrs"]["node"]
        if change == "before":
            for key in ("lane_user", "lane_uid", "observer_uid", "key", "sessions", "isolated"):
                node.pop(key)
        elif change == "shared":
            node.update(user="lane")
        elif change == "same-uid":
            node.update(lane_uid=0)
        elif change == "lane-root":
            node.update(lane_uid=0, observer_uid=1)
        elif change == "no-lane":
            node.update(lane_uid=None)
        elif change == "key-file":
            node.update(key="file")
        elif change == "not-isolated":
            node.update(isolated=False)
    last = obs[-1]["attrs"]["node"]
    if change == "root-session":
        last["sessions"] = [*last["sessions"], {"user": "root", "uid": 0, "pid": 77}]
    elif change == "uid0-session":
        last["sessions"] = [*last["sessions"], {"user": "admin", "uid": 0, "pid": 78}]
    check = devices(s, "distributed-device")
    assert "inconclusive" == check["status"], check["reason"]
    assert expected in check["reason"]
    assert "pass" != s.evaluate("distributed-device").verdict


def test_the_lanes_own_sessions_do_not_stop_a_pass() -> None:
    """Sessions of the lane's account (its ssh, its forwards) are expected: the right lane still passes."""
    s = remote("distributed-device")
    obs = [op for op in s.ops if op["kind"] == "device.observed"]
    last = obs[-1]["attrs"]["node"]
    last["sessions"] = [*last["sessions"], {"user": "lane", "uid": 1000, "pid": 4343}]
    assert "pass" == devices(s, "distributed-device")["status"]
