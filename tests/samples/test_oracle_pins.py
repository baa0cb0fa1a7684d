"""The digests the device gates pin, and the bytes gates.testing publishes, are the reference lane's oracle's."""

from __future__ import annotations

import hashlib
import sys
import tomllib

import pytest

from gates.oracle_results import ORACLE_CHECKPOINT, ORACLE_TRAJECTORY
from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "samples" / "lane"))
import oracle
from lanekit import checkpoint
from lanekit.role import trajectory_bytes
from lanekit.spec import default_spec

LANES = {"distributed-device": "partitioned", "coordinate-device": "coordinates", "independent-device": "independent"}


def _oracle(lane: str, owners: int = 2) -> tuple[bytes, bytes]:
    spec = default_spec(lane, owners)
    data = checkpoint.encode(lane, spec.learner_id, 5, oracle.trajectory(lane, 5, owners)[-1])
    return data, trajectory_bytes(spec, oracle.hex_rows(lane, 5, owners))


def _pins(gate: str, owners: int = 2) -> dict[str, str]:
    doc = tomllib.loads((ROOT / "gates" / "builtin" / f"{gate}.toml").read_text())
    checks = [c for part in doc["part"] for c in part.get("check", []) if c.get("uses") == "same-bytes"]
    if owners == 2:
        return {c["name"]: c["args"]["sha256"] for c in checks}
    return {c["name"]: c["args"]["sha256_by_roles"][str(owners)] for c in checks}


@pytest.mark.parametrize("owners", [2, 3, 4, 8])
@pytest.mark.parametrize("gate", sorted(LANES))
def test_gate_pins_the_oracles_digests(gate: str, owners: int) -> None:
    """checkpoints-captured pins the oracle's checkpoint, trajectories-captured its trajectory, byte for byte, for
    runs of 2 roles and (``sha256_by_roles``) of 3, 4 and 8."""
    cp, tr = _oracle(LANES[gate], owners)
    expected = {
        "checkpoints-captured": hashlib.sha256(cp).hexdigest(),
        "trajectories-captured": hashlib.sha256(tr).hexdigest(),
    }
    assert expected == _pins(gate, owners)


@pytest.mark.parametrize("gate", sorted(LANES))
def test_synthetic_lane_publishes_the_oracles_bytes(gate: str) -> None:
    """gates.oracle_results (what gates.testing.device_lane captures) holds the oracle's checkpoint and trajectory."""
    assert _oracle(LANES[gate]) == (ORACLE_CHECKPOINT[gate], ORACLE_TRAJECTORY[gate])
