"""The device gates judge N roles over M nodes (DESIGN "Any number of GPUs"): each role's executable on its own
bound GPU of its own node and no other, reasons naming the role and the node, the oracle's bytes for N roles.

The lanes are synthetic streams (gates.testing.device_lane) made remote as tests/gates/test_nodes.py does, with a
config whose ``ssh-tunnel`` nodes each carry several roles (``"minors": [0, 1]``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sys
from typing import Any

import pytest

from gates.testing import SyntheticStream, device_lane, sha256
from tests.gates.test_nodes import _node
from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "samples" / "lane"))
import oracle
from lanekit import checkpoint
from lanekit.role import trajectory_bytes
from lanekit.spec import default_spec, owners_of

GATE = "coordinate-device"
LANE = "coordinates"


def _oracle_bytes(count: int) -> tuple[bytes, bytes]:
    """The oracle's checkpoint and trajectory bytes of the coordinates lane at ``count`` roles."""
    spec = default_spec(LANE, count)
    data = checkpoint.encode(LANE, spec.learner_id, 5, oracle.trajectory(LANE, 5, count)[-1])
    return data, trajectory_bytes(spec, oracle.hex_rows(LANE, 5, count))


def _publish_oracle(s: SyntheticStream, count: int) -> None:
    """Put the oracle's bytes for ``count`` roles where the synthetic lane captured the two-role ones."""
    cp, tr = _oracle_bytes(count)
    for path in ("out/uninterrupted/checkpoint.bin", "out/split/checkpoint.bin", "out/shadow/checkpoint.bin"):
        s.set_artifact(path, cp)
    for path in ("out/uninterrupted/trajectory.json", "out/shadow/trajectory.json"):
        s.set_artifact(path, tr)
    for op in s.ops:
        f = op["attrs"].get("fields") if op["kind"] == "receipt" else None
        for key in list(f or {}):
            if key.endswith("checkpoint_sha256"):
                f[key] = sha256(cp)  # type: ignore[index]
            elif key.endswith("trajectory_sha256"):
                f[key] = sha256(tr)  # type: ignore[index]
    _requalify(s)


def _requalify(s: SyntheticStream) -> None:
    """qualification.json names the files as they are now captured."""
    arts = {op["attrs"]["path"]: op for op in s.ops if op["kind"] == "artifact" and op["step"] != "qualification"}
    files = []
    for path, op in sorted(arts.items()):
        if path.startswith("out/") and path != "out/lane-config.json":
            i = s.ops.index(op)
            files.append(
                {"path": path[len("out/") :], "sha256": op["attrs"].get("sha256") or sha256(s.ops[i + 1]["data"])}
            )
    record = json.dumps({"lane": GATE, "files": files}, indent=1).encode()
    s.set_artifact("out/qualification.json", record)
    s.one("receipt", "qualification")["attrs"]["fields"]["sha256"] = sha256(record)


def lane(count: int, per_node: int | None) -> SyntheticStream:
    """The right coordinate lane of ``count`` roles, on one pod (``per_node`` None: loopback) or over
    ``count // per_node`` ssh-tunnel nodes carrying ``per_node`` roles each, observed by each node's observer."""
    roles = owners_of(count)
    s = device_lane(GATE, roles=roles)
    s.ops[0]["attrs"]["observes_nodes"] = True
    hosts = [f"lane@pod-{chr(97 + k)}" for k in range(1 if per_node is None else count // per_node)]
    cfg: dict[str, Any] = {"owner": "ci", "remote_root": "/srv/lane"}
    if per_node is None:
        cfg |= {"host": hosts[0], "port": 2222, "transport": "loopback", "minors": list(range(count))}
    else:
        nodes = [{"host": h, "port": 2222, "minors": list(range(per_node))} for h in hosts]
        cfg |= {"transport": "ssh-tunnel", "nodes": nodes}
    data = json.dumps(cfg).encode()
    home = {r: (0 if per_node is None else i // per_node) for i, r in enumerate(roles)}
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
            m["gpus"] = [g for g in m["gpus"] if home[roles[g["index"]]] == n]
            uuids = {g["uuid"] for g in m["gpus"]}
            # a process of one node is never listed on another's GPU; a role's small context on the first card of
            # the pod stays where that card is its node's
            m["processes"] = [
                dict(p, in_tree=False, steps=[], argv=None)
                for p in m["processes"]
                if p["gpu"] in uuids and home[p["exe"]["path"].rsplit("/")[-1]] == n
            ]
            ops.append(mine)
    s.ops = ops
    _publish_oracle(s, count)
    return s


def checks(s: SyntheticStream) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.reason) for c in s.evaluate(GATE).checks}


@pytest.mark.parametrize(("count", "per_node"), [(3, None), (4, None), (4, 2), (8, None), (8, 2)])
def test_right_lane_of_n_roles_passes(count: int, per_node: int | None) -> None:
    """N roles on one pod or over nodes of several roles each: every role's own process seen on its GPU of its
    node, the oracle's bytes for N roles: a physical pass."""
    s = lane(count, per_node)
    v = s.evaluate(GATE)
    assert ("pass", "physical") == (v.verdict, v.scope), [c.reason for c in v.checks if c.status != "pass"]
    reason = checks(s)["devices-observed"][1]
    last = f"owner-{count - 1}"
    where = "lane@pod-a" if per_node is None else f"lane@pod-{chr(97 + (count - 1) // per_node)}"
    assert f"{last}'s pid {200 + count - 1}" in reason
    assert f"on GPU GPU-{count - 1:04d}-{last} of node {where}:2222 during uninterrupted-run" in reason


def test_two_role_oracle_bytes_do_not_pass_for_four_roles() -> None:
    """A four-role run publishing the two-role oracle's checkpoint fails its pinned digest (the pin follows N)."""
    s = lane(4, 2)
    cp, _tr = _oracle_bytes(2)
    s.set_artifact("out/uninterrupted/checkpoint.bin", cp)
    status, reason = checks(s)["checkpoints-captured"]
    assert "fail" == status
    assert f"not the pinned {hashlib.sha256(_oracle_bytes(4)[0]).hexdigest()}" in reason


def test_a_role_count_without_a_pin_is_inconclusive() -> None:
    """Five roles: the gate pins the oracle for 2, 3, 4 and 8, so the checkpoint's bytes stay unjudged, not passed."""
    status, reason = checks(lane(5, None))["checkpoints-captured"]
    assert "inconclusive" == status
    assert "the lane config binds 5 roles, and the gate pins the oracle's digest only for 2, 3, 4, 8 roles" in reason


def test_one_role_on_another_roles_gpu_fails_naming_role_and_node() -> None:
    """Four roles over two nodes: owner-3's executable working on owner-2's GPU of their node fails, naming both
    the role and the node."""
    s = lane(4, 2)
    for op in s.ops:
        if op["kind"] == "device.observed" and op["attrs"]["node"]["host"] == "lane@pod-b":
            for p in op["attrs"]["processes"]:
                if p["gpu"] == "GPU-0002-owner-2":
                    p["exe"] = {"path": "/srv/lane/remote/owner-3", "sha256": sha256(b"device binary owner-3\n")}
    status, reason = checks(s)["devices-observed"]
    assert "fail" == status
    assert "node lane@pod-b:2222: owner-3's pid 202 (owner-3: exe sha256 " in reason
    assert (
        "worked on GPU GPU-0002-owner-2, but owner-3 is bound to GPU GPU-0003-owner-3 of node lane@pod-b:2222" in reason
    )


def test_an_extra_process_on_one_of_eight_cards_is_not_a_pass() -> None:
    """Eight roles on one pod: a process running no role's executable on card 5 during a run step leaves the
    physical part open, naming the node and the card."""
    s = lane(8, None)
    run = next(op for op in s.ops if op["kind"] == "device.observed" and op["attrs"]["processes"])
    run["attrs"]["processes"].append(
        {
            "pid": 999,
            "gpu": "GPU-0005-owner-5",
            "used_memory": 1 << 20,
            "in_tree": False,
            "steps": [],
            "exe": {"path": "/usr/bin/miner", "sha256": "c" * 64},
            "script": None,
            "argv": None,
        }
    )
    found = checks(s)
    assert {"devices-observed": "inconclusive"} == {n: st for n, (st, _r) in found.items() if st != "pass"}
    reason = found["devices-observed"][1]
    assert "node lane@pod-a:2222: pid 999 (miner: exe sha256 cccccccccccc) ran on bound GPU GPU-0005-owner-5" in reason


def test_one_node_of_four_lost_mid_run_is_not_a_pass() -> None:
    """Eight roles over four nodes: the third node lost during the run leaves the physical part open, naming it."""
    s = lane(8, 2)
    obs = [op for op in s.ops if op["kind"] == "device.observed" and op["attrs"]["node"]["host"] == "lane@pod-c"]
    s.add("node.lost", {"node": obs[0]["attrs"]["node"], "reason": "the connection ended"}, at=s.ops.index(obs[1]) + 1)
    s.ops.remove(obs[-1])  # nothing came from it after
    found = checks(s)
    assert {"devices-observed": "inconclusive"} == {n: st for n, (st, _r) in found.items() if st != "pass"}
    reason = found["devices-observed"][1]
    assert "node lane@pod-c:2222 was lost during the recording" in reason
    assert "node lane@pod-c:2222: no end observation" in reason


def test_the_report_shows_a_gpu_table_per_node_with_each_role(tmp_path: Any) -> None:
    """Eight roles over four nodes: ``alpha observe report`` shows one GPU table per node, each GPU with its role,
    instead of one table growing with N."""
    from tests.helpers.run import alpha

    s = lane(8, 2)
    s.write(tmp_path / "lane.aos")
    done = alpha("observe", "report", str(tmp_path / "lane.aos"), "-o", str(tmp_path / "r.html"), text=True)
    assert 0 == done.returncode, done.stderr
    page = (tmp_path / "r.html").read_text()
    tables = re.findall(r'<h3 class="gpu-node">GPUs of node <span class="mono">([^<]+)</span> \((\d+)\)</h3>', page)
    assert [(f"lane@pod-{c}:2222", "2") for c in "abcd"] == tables
    body = page[page.index('GPUs of node <span class="mono">lane@pod-d:2222') :]
    body = body[: body.index("</table>")]
    assert ["owner-6", "owner-7"] == re.findall(r'<td class="gpu-role">([^<]*)</td>', body)
