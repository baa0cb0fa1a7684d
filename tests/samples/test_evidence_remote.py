"""The H200 evidence of a pod over SSH (issue 31, two accounts; issue 22's recording kept before that rule) and of
a PID namespace (issue 21): the committed streams say what their READMEs claim, and a fresh evaluation of their
sealed events gives what the READMEs say today's gates give."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

from aos.event import Event
from aos.reader import read_stream
from aos.verify import require_verdict, verify_stream
from gates.engine import evaluate
from gates.registry import resolve_gate
from observe.readback.events import artifact_bytes
from tests.helpers.paths import ROOT

SSH = ROOT / "samples" / "evidence" / "one-gpu-h200-ssh"
BEFORE = SSH / "before-two-accounts"
CONTAINER = ROOT / "samples" / "evidence" / "one-gpu-h200-container"
#: The GPU of the two-account call, and of the call before it (another lent machine).
UUID = "GPU-e0f80877-6d1a-fb6e-07eb-8cb29005652b"
UUID_BEFORE = "GPU-97d5e0a1-7eac-5abe-547c-4f40fc95fb6b"
#: The node's host key in each call, as ``ssh-keygen -lf`` printed it on the machine (device.log).
HOST_KEY = "SHA256:ReTMOI77WDP4fExW3l7yJSD4WP7h71fE94yPPiq/hIM"
HOST_KEY_BEFORE = "SHA256:nbdkarMaTY48i4uEeWPb9w4QKNM0qgGVoit62+ja17M"


def _events(path: Path) -> list[Event]:
    assert verify_stream(path).verdict is not None
    return read_stream(path).events


def _fresh(events: list[Event], gate: str, files: list[Path]) -> dict[str, Any]:
    at = next(e.seq for e in events if e.kind == "verdict")
    return evaluate(resolve_gate(gate, files), events[:at]).to_attrs()


def _nodes(events: list[Event]) -> list[dict[str, Any]]:
    return [e.attrs for e in events if e.kind == "device.observed" and e.attrs.get("node")]


def _open(verdict: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["reason"] for c in verdict["checks"] if c["status"] != "pass"}


# -- the pod with two accounts ------------------------------------------------------------------------------


def test_the_pod_was_observed_as_root_while_the_lane_logged_in_as_its_own_account() -> None:
    """Every node observation: NVML over the recorder's own connection to the observer account root (uid 0), with
    the key from the environment and the isolated /usr/bin/python3; the lane's account alpha-lane (not root); the
    verified host key ssh-keygen printed; no session of root but the observer's own; the H200."""
    node = _nodes(_events(SSH / "pod.aos"))
    assert ["start", "end"] == [node[0]["phase"], node[-1]["phase"]]
    assert {"nvml"} == {o["observer"] for o in node}
    facts = [o["node"] for o in node]
    assert {("root", 0, "env", True, "/usr/bin/python3")} == {
        (n["user"], n["observer_uid"], n["key"], n["isolated"], n["observer_python"]) for n in facts
    }
    assert {("alpha-lane", "alpha-lane@127.0.0.1")} == {(n["lane_user"], n["host"]) for n in facts}
    assert all(isinstance(n["lane_uid"], int) and n["lane_uid"] != 0 for n in facts)
    assert {(HOST_KEY, True)} == {(n["host_key"]["sha256"], n["host_key_verified"]) for n in facts}
    assert {"alpha-lane"} >= {s["user"] for n in facts for s in n["sessions"]}
    assert {64} == {len(n["executable_sha256"]) for n in facts}
    assert {(UUID, "NVIDIA H200")} == {(g["uuid"], g["name"]) for o in node for g in o["gpus"]}
    assert {"580.159.04"} == {o["driver"] for o in node}
    assert {64} == {len(o["library"]["sha256"]) for o in node}
    log = (SSH / "device.log").read_text()
    assert f"(host key {HOST_KEY}); accounts root (observer) and alpha-lane (lane)" in log
    assert "gate observed-worker: PASS (scope observed)" in log


def test_the_worker_is_attributed_by_its_digest_inside_its_step() -> None:
    """The worker's process on the node holds the captured worker.py (by SHA-256) during uninterrupted-run."""
    events = _events(SSH / "pod.aos")
    path = next(e.attrs["path"] for e in events if e.kind == "artifact" and e.attrs["path"].endswith("/worker.py"))
    buf = io.BytesIO()
    artifact_bytes(events, path, buf)
    captured = hashlib.sha256(buf.getvalue()).hexdigest()
    assert (SSH / "worker.py").read_bytes() == buf.getvalue()
    start = next(e.seq for e in events if e.kind == "step.start" and e.attrs["name"] == "uninterrupted-run")
    end = next(e.seq for e in events if e.kind == "step.end" and e.attrs["name"] == "uninterrupted-run")
    ours = [
        (e.seq, p)
        for e in events
        if e.kind == "device.observed" and e.attrs.get("node")
        for p in e.attrs["processes"]
        if (p["script"] or {}).get("sha256") == captured
    ]
    assert ours
    seq, proc = ours[0]
    assert start < seq < end
    assert (UUID, False, "worker.py") == (proc["gpu"], proc["in_tree"], proc["script"]["path"].rsplit("/")[-1])


def test_the_pod_verdict_passes_and_so_does_a_fresh_evaluation() -> None:
    """The sealed verdict (devices-observed over the node) passes, and today's gate passes it too."""
    sealed = require_verdict(verify_stream(SSH / "pod.aos"))
    fresh = _fresh(_events(SSH / "pod.aos"), "observed-worker", [SSH / "gate.toml"])
    assert ("pass", "observed") == (sealed["verdict"], sealed["scope"])
    assert ("pass", "observed") == (fresh["verdict"], fresh["scope"])
    assert "on node alpha-lane@127.0.0.1" in sealed["checks"][0]["reason"]


# -- the plant, on the same node ----------------------------------------------------------------------------


def test_the_plant_is_not_a_pass_and_never_ran_in_the_observer() -> None:
    """The lane account's usercustomize.py (relabelling simulated cards as NVML) loaded in the lane's own Python
    processes on the node, never in the observer: the node's observations stay simulated and the verdict is not a
    pass, sealed and fresh."""
    events = _events(SSH / "plant.aos")
    node = _nodes(events)
    assert {"simulated"} == {o["observer"] for o in node}
    assert all(o["simulated_from"] for o in node)
    assert {("root", "env", True)} == {(o["node"]["user"], o["node"]["key"], o["node"]["isolated"]) for o in node}
    sealed = require_verdict(verify_stream(SSH / "plant.aos"))
    fresh = _fresh(events, "coordinate-device", [])
    assert "inconclusive" == sealed["verdict"] == fresh["verdict"]
    assert "the devices were simulated" in _open(sealed)["devices-observed"]
    assert _open(sealed) == _open(fresh)
    loads = (SSH / "plant.log").read_text().splitlines()
    assert {"1001"} == {line.split()[1] for line in loads}
    assert any("owner-0.pyz" in line for line in loads)
    assert (
        "planted /home/alpha-lane/.local/lib/python3.12/site-packages/usercustomize.py"
        in (SSH / "device.log").read_text()
    )


# -- coordinate-device over SSH on the one GPU --------------------------------------------------------------


def test_the_lane_on_one_gpu_is_inconclusive_for_what_one_gpu_cannot_show() -> None:
    """Every step ran on the H200 as alpha-lane and its checkpoints are the pinned ones; open are the shared UUID
    (preflight), devices-observed and the rebuild (an untracked copy of the tree), sealed and fresh alike."""
    events = _events(SSH / "lane.aos")
    assert {("nvml", UUID)} == {(o["observer"], g["uuid"]) for o in _nodes(events) for g in o["gpus"]}
    sealed = require_verdict(verify_stream(SSH / "lane.aos"))
    assert ("inconclusive", "physical") == (sealed["verdict"], sealed["scope"])
    assert {"receipt:preflight", "preflight-rules", "devices-observed", "rebuild"} == set(_open(sealed))
    assert "the roles share a GPU" in _open(sealed)["preflight-rules"]
    passed = {c["name"] for c in sealed["checks"] if c["status"] == "pass"}
    assert {"checkpoints-equal", "checkpoints-captured", "step:uninterrupted-run", "step:split-run"} <= passed
    assert _open(sealed) == _open(_fresh(events, "coordinate-device", []))


# -- the recording before the two-account rule --------------------------------------------------------------


def test_the_recording_before_the_two_account_rule_is_kept_and_no_longer_passes() -> None:
    """Issue 22's call: the recorder logged in as the lane's own account (root) and sealed a pass; today's gate
    says it was observed before the two-account rule: inconclusive."""
    events = _events(BEFORE / "pod.aos")
    node = _nodes(events)
    assert {("nvml", "root@127.0.0.1")} == {(o["observer"], o["node"]["host"]) for o in node}
    assert {(HOST_KEY_BEFORE, True)} == {
        (o["node"]["host_key"]["sha256"], o["node"]["host_key_verified"]) for o in node
    }
    assert {UUID_BEFORE} == {g["uuid"] for o in node for g in o["gpus"]}
    assert HOST_KEY_BEFORE in (BEFORE / "device.log").read_text()
    sealed = require_verdict(verify_stream(BEFORE / "pod.aos"))
    assert ("pass", "observed") == (sealed["verdict"], sealed["scope"])
    fresh = _fresh(events, "observed-worker", [BEFORE / "gate.toml"])
    assert "inconclusive" == fresh["verdict"]
    assert "observed before the two-account rule" in _open(fresh)["devices-observed"]


# -- the PID namespace ---------------------------------------------------------------------------------------


def test_the_namespace_hides_the_tenant_and_the_gpu_is_shared() -> None:
    """Inside the PID namespace: namespace other, 6 GiB and more that no listed process explains, and the gate is
    inconclusive for a shared GPU (a fresh evaluation agrees)."""
    events = _events(CONTAINER / "container.aos")
    obs = [e for e in events if e.kind == "device.observed"]
    assert {("nvml", "other")} == {(e.attrs["observer"], e.attrs["namespace"]["pid"]) for e in obs}
    assert all(g["unexplained_memory"] > 6 << 30 for e in obs for g in e.attrs["gpus"])
    sealed = require_verdict(verify_stream(CONTAINER / "container.aos"))
    assert "inconclusive" == sealed["verdict"]
    assert f"bound GPU {UUID_BEFORE} was shared" in sealed["checks"][0]["reason"]
    fresh = _fresh(events, "observed-worker", [BEFORE / "gate.toml"])
    assert sealed["checks"][0]["reason"] == fresh["checks"][0]["reason"]
