"""The H200 evidence of issue 22 (a pod over SSH) and issue 21 (a PID namespace): the committed streams say what
their READMEs claim, and a fresh evaluation of their sealed events gives the sealed verdict."""

from __future__ import annotations

import hashlib
import io
from typing import Any

from aos.event import Event
from aos.reader import read_stream
from aos.verify import require_verdict, verify_stream
from gates.engine import evaluate
from gates.registry import resolve_gate
from observe.readback.events import artifact_bytes
from tests.helpers.paths import ROOT

SSH = ROOT / "samples" / "evidence" / "one-gpu-h200-ssh"
CONTAINER = ROOT / "samples" / "evidence" / "one-gpu-h200-container"
UUID = "GPU-97d5e0a1-7eac-5abe-547c-4f40fc95fb6b"
#: The node's host key, as ``ssh-keygen -lf`` printed it on the machine (device.log).
HOST_KEY = "SHA256:nbdkarMaTY48i4uEeWPb9w4QKNM0qgGVoit62+ja17M"


def _events(name: str) -> list[Event]:
    path = (SSH if name == "pod" else CONTAINER) / f"{name}.aos"
    assert verify_stream(path).verdict is not None
    return read_stream(path).events


def _fresh(events: list[Event]) -> dict[str, Any]:
    at = next(e.seq for e in events if e.kind == "verdict")
    gate = resolve_gate("observed-worker", [SSH / "gate.toml"])
    return evaluate(gate, events[:at]).to_attrs()


def test_the_pod_was_observed_by_nvml_over_the_recorders_own_connection() -> None:
    """Every node observation: observer nvml, the verified host key ssh-keygen printed, the H200's UUID, the driver
    and the NVML library's digest; the observer's digest as the node computed it."""
    events = _events("pod")
    node = [e for e in events if e.kind == "device.observed" and e.attrs.get("node")]
    assert ["start", "end"] == [node[0].attrs["phase"], node[-1].attrs["phase"]]
    assert {"nvml"} == {e.attrs["observer"] for e in node}
    assert {(HOST_KEY, True)} == {
        (e.attrs["node"]["host_key"]["sha256"], e.attrs["node"]["host_key_verified"]) for e in node
    }
    assert {"root@127.0.0.1"} == {e.attrs["node"]["host"] for e in node}
    assert {(UUID, "NVIDIA H200")} == {(g["uuid"], g["name"]) for e in node for g in e.attrs["gpus"]}
    assert {"580.159.04"} == {e.attrs["driver"] for e in node}
    assert {64} == {len(e.attrs["library"]["sha256"]) for e in node}
    assert HOST_KEY in (SSH / "device.log").read_text()
    assert "PASS" in (SSH / "device.log").read_text()


def test_the_worker_is_attributed_by_its_digest_inside_its_step() -> None:
    """The worker's process on the node holds the captured out/worker.py (by SHA-256) during uninterrupted-run."""
    events = _events("pod")
    buf = io.BytesIO()
    artifact_bytes(events, "out/worker.py", buf)
    captured = hashlib.sha256(buf.getvalue()).hexdigest()
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


def test_the_pod_verdict_passed_as_sealed_and_is_re_judged_as_recorded_before_the_two_account_rule() -> None:
    """The sealed verdict (devices-observed over the node) passed; today's gate finds the node observed through the
    lane's own account (before the two-account rule: docs/TRUST.md) and says inconclusive, naming that."""
    events = _events("pod")
    sealed = require_verdict(verify_stream(SSH / "pod.aos"))
    fresh = _fresh(events)
    assert ("pass", "observed") == (sealed["verdict"], sealed["scope"])
    assert "node root@127.0.0.1" in sealed["checks"][0]["reason"]
    assert "inconclusive" == fresh["verdict"]
    assert "observed before the two-account rule" in fresh["checks"][0]["reason"]


def test_the_namespace_hides_the_tenant_and_the_gpu_is_shared() -> None:
    """Inside the PID namespace: namespace other, 6 GiB and more that no listed process explains, and the gate is
    inconclusive for a shared GPU (a fresh evaluation agrees)."""
    events = _events("container")
    obs = [e for e in events if e.kind == "device.observed"]
    assert {("nvml", "other")} == {(e.attrs["observer"], e.attrs["namespace"]["pid"]) for e in obs}
    assert all(g["unexplained_memory"] > 6 << 30 for e in obs for g in e.attrs["gpus"])
    sealed = require_verdict(verify_stream(CONTAINER / "container.aos"))
    assert "inconclusive" == sealed["verdict"]
    assert f"bound GPU {UUID} was shared" in sealed["checks"][0]["reason"]
    assert sealed["checks"][0]["reason"] == _fresh(events)["checks"][0]["reason"]
