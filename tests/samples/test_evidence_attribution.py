"""The committed two-H200 controls, re-evaluated with only what a hostile lane (or a container) could change.

Finding 2 of issue 21: with each role started as `exec -a worker` of a renamed copy and one helper
of the tree holding a context on the idle GPU, the argv-based attribution passed the visible-swap
control (sealed `fail`) with scope physical. Finding 4: the busy control (sealed `inconclusive`)
as a container would have seen it (the other tenant not listed, its memory held from the start)
passed too. Each stream below is the committed one, with its observations given the facts
today's recorder records (process identities, unexplained memory, namespace), as it would have
recorded them in that situation; today's gate must not pass either.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from aos.event import Event
from gates.evaluation import evaluate_events
from gates.registry import resolve_gate
from tests.samples.test_evidence_two_gpu import GPU0, GPU1, _events, _receipt, _role_of

GATE = "coordinate-device"
PYTHON = {"path": "/usr/bin/python3.11", "sha256": "7" * 64}
HELPER = {"path": "/tmp/ev/hold-gpu.py", "sha256": "8" * 64}
INITIAL = {"pid": "initial", "ns": "pid:[4026531836]", "pid1_ns": "pid:[4026531836]", "nspid": [1], "markers": []}
CONTAINER = {
    "pid": "other",
    "ns": "pid:[4026532601]",
    "pid1_ns": "pid:[4026532601]",
    "nspid": [1],
    "markers": ["/.dockerenv"],
}


def _edit(event: Event, attrs: dict[str, Any]) -> Event:
    return dataclasses.replace(event, attrs_json=json.dumps(attrs), _attrs=None)


def _builds(events: tuple[Event, ...]) -> dict[str, str]:
    """Each role's device build, by the digest of the bytes captured at its target."""
    arts = {e.attrs["path"]: e.attrs["sha256"] for e in events if e.kind == "artifact"}
    return {
        e.attrs["fields"]["role"]: arts[e.attrs["fields"]["target"]]
        for e in events
        if e.kind == "receipt" and e.attrs["name"] == "build"
    }


def _explain(gpus: list[dict[str, Any]], procs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for g in gpus:
        listed = sum(p["used_memory"] for p in procs if p["gpu"] == g["uuid"])
        out.append(
            dict(
                g,
                compute_mode="default",
                listed_memory=listed,
                unexplained_memory=g["memory_used"] - listed,
                unexplained_utilization=0 if listed or not g["utilization"] else g["utilization"],
            )
        )
    return out


def _verdict(events: list[Event]) -> dict[str, Any]:
    at = next(e.seq for e in events if e.kind == "verdict")
    return evaluate_events(resolve_gate(GATE), events[:at]).to_attrs()


def _check(v: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in v["checks"] if c["name"] == name)  # type: ignore[no-any-return]


def test_visible_swap_renamed_and_with_a_helper_on_the_idle_gpu_fails() -> None:
    """Roles as `exec -a worker` of renamed copies, a helper on the idle GPU: the renamed owner-0 is caught on GPU 1."""
    events = list(_events("control-visible-swap", GATE))
    builds = _builds(tuple(events))
    helper_added = False
    for i, e in enumerate(events):
        if e.kind != "device.observed":
            continue
        a = json.loads(e.attrs_json)
        procs = []
        for p in a["processes"]:
            role = _role_of(p["argv"])
            assert role is not None
            script = {"path": f"/tmp/w/worker-{role[-1]}", "sha256": builds[role], "fd": 3}
            procs.append(dict(p, argv=["worker", script["path"], "serve"], exe=PYTHON, script=script))
        if any("uninterrupted-run" in p["steps"] for p in procs) and not helper_added:
            helper_added = True
            procs.append(
                {
                    "pid": 99999,
                    "gpu": GPU0,
                    "used_memory": 518 << 20,
                    "in_tree": True,
                    "steps": ["uninterrupted-run"],
                    "exe": PYTHON,
                    "script": HELPER,
                    "argv": ["worker"],
                }
            )
        a.update(namespace=INITIAL, processes=procs, gpus=_explain(a["gpus"], procs))
        events[i] = _edit(e, a)
    assert helper_added
    v = _verdict(events)
    observed = _check(v, "devices-observed")
    assert ("fail", "fail") == (v["verdict"], observed["status"])
    assert "owner-0's pid" in observed["reason"]
    assert f"worked on GPU {GPU1}, but owner-0 is bound to GPU {GPU0}" in observed["reason"]


def test_busy_gpu_seen_from_a_container_is_inconclusive() -> None:
    """The other tenant unlisted (another PID namespace), its memory held from the start: shared, inconclusive."""
    events = list(_events("control-busy", GATE))
    builds = _builds(tuple(events))
    tenant = {p["pid"] for p in _receipt(tuple(events), "preflight")["fields"]["compute_processes"]}
    for i, e in enumerate(events):
        a = json.loads(e.attrs_json)
        if e.kind == "device.observed":
            procs = []
            for p in a["processes"]:
                if p["pid"] in tenant:
                    continue  # NVML in the container does not list it
                role = _role_of(p["argv"])
                assert role is not None
                script = {"path": p["argv"][1], "sha256": builds[role], "fd": 3}
                procs.append(dict(p, exe=PYTHON, script=script))
            a.update(namespace=CONTAINER, processes=procs, gpus=_explain(a["gpus"], procs))
            events[i] = _edit(e, a)
        elif e.kind == "receipt" and a["name"] == "preflight":
            # The lane's own preflight, in the container, would not have seen the tenant either.
            a["status"] = "pass"
            a["fields"]["compute_processes"] = []
            events[i] = _edit(e, a)
    v = _verdict(events)
    observed = _check(v, "devices-observed")
    assert ("inconclusive", "inconclusive") == (v["verdict"], observed["status"])
    assert [("devices-observed", "inconclusive")] == [
        (c["name"], c["status"]) for c in v["checks"] if c["status"] != "pass"
    ]
    for gpu in (GPU0, GPU1):
        assert f"bound GPU {gpu} was shared:" in observed["reason"]
    assert "PID namespace: other, container markers: /.dockerenv" in observed["reason"]
