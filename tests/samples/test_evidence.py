"""The committed physical evidence in samples/evidence/ verifies and says what it claims."""

from __future__ import annotations

import io
import json
import sys

import pytest

from aos.reader import read_stream
from aos.verify import require_verdict, verify_stream
from gates.engine import evaluate
from gates.registry import resolve_gate
from observe.readback.events import artifact_bytes
from tests.helpers.paths import ROOT

ONE_GPU = ROOT / "samples" / "evidence" / "one-gpu-h200"
LANES = {"distributed-device": "partitioned", "coordinate-device": "coordinates", "independent-device": "independent"}

sys.path.insert(0, str(ROOT / "samples" / "lane"))
import oracle  # noqa: E402
from lanekit import checkpoint  # noqa: E402


def _receipt(events: list, name: str) -> dict:  # type: ignore[type-arg]
    found = [e.attrs for e in events if e.kind == "receipt" and e.attrs.get("name") == name]
    assert len(found) == 1, name
    return found[0]["fields"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("gate", sorted(LANES))
class TestOneGpuEvidence:
    """One-GPU H200 runs: intact, inconclusive only for the shared GPU, and the oracle's bits."""

    def test_stream_is_intact_and_sealed(self, gate: str) -> None:
        """The committed stream verifies end to end."""
        v = verify_stream(ONE_GPU / f"{gate}.aos")
        assert v.verdict is not None
        assert gate == v.verdict["gate"]

    def test_verdict_is_inconclusive_only_for_the_shared_gpu(self, gate: str) -> None:
        """Every check passes but the two preflight checks that see both roles on one GPU."""
        verdict = require_verdict(verify_stream(ONE_GPU / f"{gate}.aos"))
        assert ("inconclusive", "physical") == (verdict["verdict"], verdict["scope"])
        open_checks = {c["name"] for c in verdict["checks"] if c["status"] != "pass"}
        assert {"receipt:preflight", "preflight-rules"} == open_checks
        on_machine = json.loads((ONE_GPU / f"{gate}.verdict.json").read_text())
        assert on_machine["verdict"] == verdict["verdict"]

    def test_todays_gate_finds_no_observation(self, gate: str) -> None:
        """Re-evaluated with today's gate, the same events are inconclusive: no device observation, no recorder config.

        These streams were recorded before the recorder observed devices (issue 10): nothing
        in them but the lane's own word shows the H200, and the lane config in them is the
        lane's copy. Their sealed verdicts stay as sealed; a fresh evaluation says what is missing.
        """
        events = read_stream(ONE_GPU / f"{gate}.aos").events
        at = next(e.seq for e in events if e.kind == "verdict")
        v = evaluate(resolve_gate(gate), events[:at])
        assert ("inconclusive", "physical") == (v.verdict, v.scope)
        open_checks = {c.name: c.status for c in v.checks if c.status != "pass"}
        expected = ("receipt:preflight", "preflight-rules", "lane-config", "devices-observed")
        assert dict.fromkeys(expected, "inconclusive") == open_checks
        reason = next(c.reason for c in v.checks if c.name == "devices-observed")
        assert reason.startswith("no device observation")

    def test_preflight_saw_one_h200_twice(self, gate: str) -> None:
        """The preflight receipt and the captured binding.json name the same single H200."""
        events = read_stream(ONE_GPU / f"{gate}.aos").events
        gpus = _receipt(events, "preflight")["gpus"]
        assert ["NVIDIA H200", "NVIDIA H200"] == [g["product"] for g in gpus]
        assert gpus[0]["uuid"] == gpus[1]["uuid"]
        binding = json.loads((ONE_GPU / f"{gate}.binding.json").read_text())
        assert gpus == binding["gpus"]

    def test_gpu_checkpoint_equals_the_oracle(self, gate: str) -> None:
        """The resumed checkpoint captured from the GPU run holds the oracle's state bit for bit."""
        events = read_stream(ONE_GPU / f"{gate}.aos").events
        split = _receipt(events, "split-run")
        buf = io.BytesIO()
        artifact_bytes(events, split["checkpoint"], buf)
        lane = LANES[gate]
        step, chunks = checkpoint.parse(buf.getvalue(), lane=lane)
        expected = oracle.trajectory(lane, 5)[-1]
        assert 5 == step
        for name, values in expected.items():
            assert [v.hex() for v in values] == [v.hex() for v in chunks[name]], name
        assert _receipt(events, "uninterrupted-run")["checkpoint_sha256"] == split["resumed_checkpoint_sha256"]
