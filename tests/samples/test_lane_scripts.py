"""The device lane scripts (scripts/ci/*-device.sh) under the recorder and their gates.

The physical path is exercised on CPU with the test doubles in
samples/lane/testing (a fake nvidia-smi and a fake torch that models float64
CUDA tensors as floats); the real GPU path runs through samples/lane/physical_smoke.sh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aos.reader import read_stream
from tests.helpers.paths import ROOT
from tests.helpers.run import child_env

TESTING = ROOT / "samples" / "lane" / "testing"
LANES = {
    "distributed-device": "ALPHA_PARTITIONED_DEVICE_CONFIG",
    "coordinate-device": "ALPHA_COORDINATE_DEVICE_CONFIG",
    "independent-device": "ALPHA_INDEPENDENT_DEVICE_CONFIG",
}

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]  # the lanes run for real under their gates


def _env(**extra: str) -> dict[str, str]:
    env = child_env()
    env.update(extra)
    return env


def _fake_gpu_env(tmp_path: Path, gate: str, minors: list[int]) -> dict[str, str]:
    config = {
        "owner": "test",
        "pod_ids": ["none"],
        "host": "local",
        "minors": minors,
        "remote_root": str(tmp_path / "remote"),
        "transport": "loopback",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    return _env(
        PATH=f"{TESTING / 'bin'}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=os.pathsep.join(p for p in (str(TESTING), os.environ.get("PYTHONPATH")) if p),
        **{LANES[gate]: str(tmp_path / "config.json")},
    )


def _gate(gate: str, tmp_path: Path, env: dict[str, str]) -> tuple[int, dict[str, object], list[dict[str, object]]]:
    stream = tmp_path / f"{gate}.aos"
    done = subprocess.run(
        [
            "alpha",
            "observe",
            "gate",
            gate,
            "--out",
            str(stream),
            "--quiet",
            "--",
            "bash",
            str(ROOT / "scripts" / "ci" / f"{gate}.sh"),
            "out",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    verdict = subprocess.run(
        ["alpha", "observe", "verdict", str(stream), "--json"], capture_output=True, text=True, check=False
    )
    events = subprocess.run(
        ["alpha", "observe", "read", str(stream), "--json", "--kind", "receipt"],
        capture_output=True,
        text=True,
        check=True,
    )
    receipts = [json.loads(line)["attrs"] for line in events.stdout.splitlines()]
    return done.returncode, json.loads(verdict.stdout), receipts


class TestStaticHalf:
    @pytest.mark.parametrize("gate", sorted(LANES))
    def test_static_gate_passes(self, gate: str, tmp_path: Path) -> None:
        """With no lane config, the lane builds and checks every role and its gate passes with scope static."""
        code, verdict, receipts = _gate(gate, tmp_path, _env())
        assert (0, "pass", "static") == (code, verdict["verdict"], verdict["scope"]), verdict
        names = sorted({r["name"] for r in receipts})
        assert ["static-build", "static-check"] == names
        roles = sorted(r["fields"]["role"] for r in receipts if r["name"] == "static-build")
        assert ["owner-0", "owner-1"] == roles
        checks = sorted((r["fields"]["role"], r["fields"]["check"]) for r in receipts if r["name"] == "static-check")
        assert [(role, c) for role in roles for c in ("integrity", "manifest", "self-test")] == checks
        assert all("pass" == r["status"] for r in receipts)
        out = subprocess.run(
            ["alpha", "observe", "read", str(tmp_path / f"{gate}.aos"), "--stdout"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "the physical lane did not run" in out


def _observed(stream: Path) -> tuple[list[dict[str, Any]], bool]:
    """The stream's device observations, and whether the recorder itself captured the lane config."""
    events = read_stream(stream).events
    observed = [e.attrs for e in events if e.kind == "device.observed"]
    captured = any(e.kind == "artifact" and e.attrs.get("origin") == "recorder" for e in events)
    return observed, captured


def _open_checks(verdict: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in verdict["checks"] if c["status"] != "pass"}


# Checks that rest on the recorder's own capture of the lane config: open when the
# recorder made none (a recorder that does not capture it), passing once it does.
_NEEDS_RECORDER_CONFIG = {"lane-config": "inconclusive", "preflight-rules": "inconclusive"}
# These lanes run in a temporary folder, which no git repository holds: nothing to rebuild from
# (tests/observe/recorder/test_source_rebuild.py runs the lane in a committed copy, where the rebuild passes).
_NO_REPOSITORY = {"rebuild": "inconclusive"}


def _simulated(tmp_path: Path) -> str:
    """The fake cards as a simulated-observer file, forged to claim it is NVML (testing/gpus.py)."""
    path = tmp_path / "simulated-gpus.json"
    doc = subprocess.check_output([sys.executable, str(TESTING / "gpus.py"), "--simulated", "--claim-nvml"])
    path.write_bytes(doc)
    assert "nvml" == json.loads(doc)["observer"]
    return str(path)


class TestPhysicalOnTestDoubles:
    """Issue 10, finding 2: the CPU test doubles once gave pass, scope physical, with no GPU at all.

    Every physical step still runs on them, but nothing the recorder observed shows a GPU:
    the physical part is inconclusive, naming devices-observed (fail on a machine whose
    real GPUs NVML lists, since the fake cards are not among them).
    """

    def test_two_fake_gpus_are_not_physical(self, tmp_path: Path) -> None:
        """The fake nvidia-smi and torch with a config: every lane step runs, but the verdict is not a physical pass."""
        env = _fake_gpu_env(tmp_path, "coordinate-device", [0, 1])
        env["ALPHA_OBSERVE_SIMULATED_GPUS"] = _simulated(tmp_path)
        code, verdict, receipts = _gate("coordinate-device", tmp_path, env)
        observed, captured = _observed(tmp_path / "coordinate-device.aos")
        on_nvml = any(o.get("observer") == "nvml" and not o.get("simulated_from") for o in observed)
        expected = {"devices-observed": "fail" if on_nvml else "inconclusive", **_NO_REPOSITORY}
        if not captured:
            expected.update(_NEEDS_RECORDER_CONFIG)
        assert ("physical", expected) == (verdict["scope"], _open_checks(verdict)), verdict["summary"]
        assert ((1, "fail") if on_nvml else (3, "inconclusive")) == (code, verdict["verdict"])
        reason = next(c["reason"] for c in verdict["checks"] if c["name"] == "devices-observed")
        assert any(w in reason for w in ("no device observation", "simulated", "observer none", "never observed"))
        # The lane itself did all its work: it is the evidence of a GPU that is missing.
        by_name = {r["name"]: r for r in receipts}
        assert "gpu" == by_name["fresh-evaluation"]["fields"]["device"]
        assert (
            by_name["uninterrupted-run"]["fields"]["checkpoint_sha256"]
            == by_name["split-run"]["fields"]["resumed_checkpoint_sha256"]
        )
        qualification = json.loads((tmp_path / "out" / "qualification.json").read_text())
        assert "coordinates" == qualification["lane"]

    def test_two_minors_of_one_uuid_fail_the_preflight_rules(self, tmp_path: Path) -> None:
        """Two roles on two minors that report one UUID (one card under two minors): the preflight rules fail it,
        a contradiction of the host's own listing. (One minor bound to two roles is refused before any device is
        asked: tests/gates/test_interrupt.py.)"""
        env = _fake_gpu_env(tmp_path, "distributed-device", [0, 1])
        card = {"uuid": "GPU-fa4e0000-0000-4000-8000-000000000000", "product": "NVIDIA GeForce RTX 3090"}
        env["FAKE_GPUS"] = json.dumps([{"minor": m, "driver": "580.65.06", **card} for m in (0, 1)])
        code, verdict, _ = _gate("distributed-device", tmp_path, env)
        assert (1, "fail") == (code, verdict["verdict"]), verdict["summary"]
        rules = next(c for c in verdict["checks"] if c["name"] == "preflight-rules")
        assert "fail" == rules["status"]
        assert rules["reason"].startswith("minors and UUIDs do not pair one to one")
