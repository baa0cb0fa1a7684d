"""The H200 recording of issue 35 (samples/evidence/gpu-health-h200/): the card's health as the recorder read it.

The committed stream verifies and its sealed verdict is the one a fresh evaluation gives; its observations carry
every health fact or NVML's code for it, and agree with what ``nvidia-smi -q`` printed on the machine (an
independent reading, kept beside it); each fault the gate judges, injected into its real observations, turns the
pass inconclusive naming it; and ``[[device]]`` requirements are judged over its facts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aos.event import Event
from aos.reader import read_stream
from aos.verify import verify_stream
from gates.engine import evaluate
from gates.language import parse_gate_text
from gates.registry import resolve_gate
from observe.devices.health import FACTS
from tests.helpers.paths import ROOT
from tests.helpers.run import child_env

HERE = ROOT / "samples" / "evidence" / "gpu-health-h200"
GATE_FILE = ROOT / "samples" / "evidence" / "one-gpu-h200-ssh" / "gate.toml"
UUID = "GPU-c5e39284-e09f-9924-148e-f1889a6843f0"


def _events() -> list[Event]:
    assert verify_stream(HERE / "worker.aos").verdict is not None
    return read_stream(HERE / "worker.aos").events


def _before_verdict(events: list[Event]) -> list[Event]:
    return events[: next(e.seq for e in events if e.kind == "verdict")]


def _observed(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind == "device.observed"]


def _health(e: Event) -> dict[str, Any]:
    health: dict[str, Any] = e.attrs["gpus"][0]["health"]
    return health


def test_the_sealed_verdict_is_a_pass_and_todays_gate_agrees() -> None:
    events = _events()
    sealed = next(e.attrs for e in events if e.kind == "verdict")
    assert ("pass", "observed") == (sealed["verdict"], sealed["scope"])
    fresh = evaluate(resolve_gate("observed-worker", [GATE_FILE]), _before_verdict(events)).to_attrs()
    assert (sealed["verdict"], sealed["checks"]) == (fresh["verdict"], fresh["checks"])
    assert json.loads((HERE / "worker.verdict.json").read_text())["verdict"] == "pass"


def test_every_fact_or_its_code_from_the_card() -> None:
    """NVML on the H200 gave 25 of 28 facts; retired pages are NotSupported (3): the card remaps rows instead."""
    observed = _observed(_events())
    assert {"nvml"} == {o.attrs["observer"] for o in observed}
    assert ["start", "end"] == [observed[0].attrs["phase"], observed[-1].attrs["phase"]]
    for o in observed:
        health = _health(o)
        assert set(health) == {*FACTS, "unsupported"}
        assert {"retired_pages_single": 3, "retired_pages_double": 3, "retired_pages_pending": 3} == (
            health["unsupported"]
        )
        assert [] == o.attrs["gpu_events"]
    start = _health(observed[0])
    assert {
        "serial": "1653924043232",
        "board_part_number": "692-2G520-0282-000",
        "vbios": "96.00.A5.00.1A",
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "persistence": "enabled",
        "mig_mode": "disabled",
        "ecc_mode": "enabled",
        "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_uncorrected": 0,
        "remapped_uncorrectable": 0,
        "remap_pending": False,
        "remap_failure": False,
        "power_limit": 700000,
        "events": ["xid", "double_bit_ecc", "single_bit_ecc"],
    }.items() <= start.items()
    assert isinstance(start["clocks_event_reasons"], list)
    # the card at work: its SM clock up from idle in a sample during the run
    assert any(_health(o)["sm_clock"] > start["sm_clock"] for o in observed)


def test_the_facts_agree_with_nvidia_smi_on_the_machine() -> None:
    text = (HERE / "nvidia-smi-q.txt").read_text()

    def field(name: str) -> str:
        found = re.search(rf"^\s*{name}\s*:\s*(.+)$", text, re.M)
        assert found, name
        return found.group(1).strip()

    start = _health(_observed(_events())[0])
    assert (field("Serial Number"), field("VBIOS Version"), field("Board Part Number")) == (
        start["serial"],
        start["vbios"],
        start["board_part_number"],
    )
    assert field("Persistence Mode").lower() == start["persistence"]


def _inject(events: list[Event], edit: dict[str, Any]) -> list[Event]:
    """The real events, one sample during the run given ``edit`` (its GPU's health facts, or GPU events)."""
    out = []
    target = next(o.seq for o in _observed(events) if o.attrs["phase"] == "sample" and o.attrs["processes"])
    for e in events:
        if e.seq == target:
            attrs = json.loads(e.attrs_json)
            if "gpu_events" in edit:
                attrs["gpu_events"] = [dict(x, gpu=UUID) for x in edit["gpu_events"]]
            attrs["gpus"][0]["health"].update(edit.get("health", {}))
            e = dataclasses.replace(e, attrs_json=json.dumps(attrs), _attrs=None)
        out.append(e)
    return out


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({"gpu_events": [{"type": "xid", "xid": 79, "data": 79}]}, "NVML delivered XID 79 (an XID critical error)"),
        ({"health": {"ecc_volatile_uncorrected": 1}}, "uncorrected ECC errors (volatile, ecc_volatile_uncorrected)"),
        ({"health": {"remap_pending": True}}, "a row remap is pending (remap_pending)"),
        ({"health": {"remap_failure": True}}, "a row remap failed (remap_failure)"),
    ],
    ids=["xid-79", "ecc-uncorrected", "remap-pending", "remap-failure"],
)
def test_each_fault_injected_into_the_real_run_is_named(edit: dict[str, Any], said: str) -> None:
    events = _inject(_before_verdict(_events()), edit)
    v = evaluate(resolve_gate("observed-worker", [GATE_FILE]), events)
    assert "inconclusive" == v.verdict
    assert f"bound GPU {UUID}: {said}" in v.checks[0].reason


DEVICE_GATE = """
[gate]
name = "h200-health"
scope = "observed"

[[device]]
ecc = "enabled"
persistence = "enabled"
pcie_width_min = 16
reason = "a card fit for a physical run"
"""


def test_device_requirements_over_the_real_run() -> None:
    events = _before_verdict(_events())
    v = evaluate(parse_gate_text(DEVICE_GATE, "<test>"), events)
    assert "pass" == v.verdict, v.checks
    assert f"held on GPU {UUID} (6 observations)" in v.checks[-1].reason
    wants_mig = evaluate(parse_gate_text(DEVICE_GATE + 'mig = "enabled"\n', "<test>"), events)
    assert "fail" == wants_mig.verdict
    assert f"GPU {UUID}: mig_mode was 'disabled' (seq 3); the gate requires mig = 'enabled'" in (
        wants_mig.checks[-1].reason
    )


def test_the_device_call_rehearses_as_written(tmp_path: Path) -> None:
    """``DRY=1 bash device.sh OUT``, the rehearsal the README names: the simulated observer in place of the card,
    every step run, and a stream whose observations carry the simulated health."""
    out = tmp_path / "out"
    out.mkdir()
    env = child_env(
        {
            "DRY": "1",
            "WORK": str(tmp_path),
            "SAMPLES": "20",
            "SECONDS_RUN": "1",
            "PYTHONPATH": str(ROOT),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        }
    )
    proc = subprocess.run(
        ["bash", str(HERE / "device.sh"), str(out)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert 0 == proc.returncode, proc.stderr
    assert proc.stdout.rstrip().endswith("== done"), proc.stdout
    assert "gate exit 3" in proc.stdout  # simulated: never a pass
    observed = _observed(read_stream(out / "worker.aos").events)
    assert {"simulated"} == {o.attrs["observer"] for o in observed}
    assert {"dry"} == {_health(o)["serial"] for o in observed}
