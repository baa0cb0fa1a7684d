"""A GPU's health recorded by the recorder's own observer (observe.devices.health), and judged from the stream.

The simulated observer grows the same facts as NVML's (each fact or its unsupported
code) and injects faults while a marked process of the recorded tree runs: an
XID 79, an uncorrected ECC error, a pending row remap. Recorded for real, then
judged by the gate's own sub-check; the same faults on a GPU the preflight does
not bind are recorded and not judged, and a receipt claiming health counts for nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from aos.event import Event
from gates.devices import devices_observed
from gates.evidence import Evidence
from gates.health import health_findings
from gates.typing import Findings
from observe.devices.health import FACTS, HealthReader, health_key, health_problem
from observe.devices.observers import schema_problem
from observe.devices.observing import change_key
from tests.helpers.recorder import events, record
from tests.helpers.run import ALPHA

FAST = ("--sample-interval", "0.05")
BOUND, SPARE = "GPU-0000", "GPU-1111"

HEALTH = {
    "serial": "1654123456789",
    "vbios": "96.00.AF.00.01",
    "pcie_gen": 5,
    "pcie_gen_max": 5,
    "pcie_width": 16,
    "pcie_width_max": 16,
    "persistence": "enabled",
    "mig_mode": "disabled",
    "ecc_mode": "enabled",
    "ecc_volatile_corrected": 0,
    "ecc_volatile_uncorrected": 0,
    "ecc_aggregate_corrected": 0,
    "ecc_aggregate_uncorrected": 0,
    "remapped_correctable": 0,
    "remapped_uncorrectable": 0,
    "remap_pending": False,
    "remap_failure": False,
    "clocks_event_reasons": [],
    "power_draw": 120000,
    "power_limit": 700000,
    "temperature": 31,
    "sm_clock": 1980,
    "memory_clock": 3201,
    "events": ["xid", "double_bit_ecc", "single_bit_ecc"],
    "unsupported": {"board_part_number": 4},
}


def _doc(faulty: str) -> dict[str, Any]:
    gpus = [
        {"index": i, "minor": i, "uuid": u, "name": "NVIDIA H200", "memory": 141 << 30, "health": HEALTH}
        for i, u in enumerate((BOUND, SPARE))
    ]
    faults = [
        {"gpu": faulty, "argv_contains": "inject-xid", "xid": 79},
        {"gpu": faulty, "argv_contains": "inject-ecc", "health": {"ecc_volatile_uncorrected": 1}},
        {"gpu": faulty, "argv_contains": "inject-remap", "health": {"remap_pending": True}},
    ]
    return {"driver": "580.159.04", "gpus": gpus, "faults": faults}


#: The lane: a preflight binding GPU-0000 (a receipt: its claim), then one marked process per fault, in turn.
LANE = (
    "import json, subprocess, sys\n"
    "alpha = sys.argv[1]\n"
    "gpus = [{'uuid': 'GPU-0000', 'product': 'NVIDIA H200', 'driver': '580.159.04'}]\n"
    "subprocess.run([alpha, 'observe', 'receipt', 'preflight', '--json', json.dumps({'gpus': gpus})], check=True)\n"
    "claim = {'gpus': [{'uuid': 'GPU-0000', 'xid': [], 'ecc_volatile_uncorrected': 0, 'remap_pending': False}]}\n"
    "subprocess.run([alpha, 'observe', 'receipt', 'gpu-health', '--json', json.dumps(claim)], check=True)\n"
    "for marker in sys.argv[2:]:\n"
    "    subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.5)', marker], check=True)\n"
)


def _record(tmp_path: Path, faulty: str, *markers: str) -> list[Event]:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(_doc(faulty)))
    env = {"ALPHA_OBSERVE_SIMULATED_GPUS": str(path)}
    proc, out = record(tmp_path, [sys.executable, "-c", LANE, ALPHA, *markers], "--quiet", *FAST, env=env)
    assert 0 == proc.returncode, proc.stderr
    return events(out)


def _observed(evs: list[Event]) -> list[Event]:
    return [e for e in evs if e.kind == "device.observed"]


def _judged(evs: list[Event], bound: set[str]) -> list[str]:
    f = Findings()
    health_findings(_observed(evs), bound, f)
    return f.missing


def test_each_fact_or_its_code_is_recorded(tmp_path: Path) -> None:
    evs = _record(tmp_path, SPARE)
    start = _observed(evs)[0].attrs
    assert "start" == start["phase"]
    assert [] == start["gpu_events"]
    health = start["gpus"][0]["health"]
    assert set(health) == {*FACTS, "unsupported"}
    assert None is health_problem(health)
    # given facts as given; the one the file says NVML refused, with its code; every other one NotSupported (3)
    assert ("1654123456789", 16, "enabled", 0) == (
        health["serial"],
        health["pcie_width_max"],
        health["ecc_mode"],
        health["ecc_aggregate_uncorrected"],
    )
    assert {
        "board_part_number": 4,
        "retired_pages_single": 3,
        "retired_pages_double": 3,
        "retired_pages_pending": 3,
    } == (health["unsupported"])
    assert all(health[f] is None for f in health["unsupported"])
    assert None is schema_problem("device.observed", start)


def test_each_injected_fault_on_a_bound_gpu_is_named_with_its_seq(tmp_path: Path) -> None:
    evs = _record(tmp_path, BOUND, "inject-xid", "inject-ecc", "inject-remap")
    obs = _observed(evs)
    xid = [o for o in obs if o.attrs["gpu_events"]]
    assert 1 == len(xid), "the XID is delivered once, in one recorded observation"
    assert [{"gpu": BOUND, "type": "xid", "xid": 79, "data": 79}] == xid[0].attrs["gpu_events"]
    ecc = next(o for o in obs if o.attrs["gpus"][0]["health"]["ecc_volatile_uncorrected"] == 1)
    remap = next(o for o in obs if o.attrs["gpus"][0]["health"]["remap_pending"] is True)
    assert [
        f"bound GPU {BOUND}: NVML delivered XID 79 (an XID critical error) (seq {xid[0].seq})"
        ": its health during the run is in doubt",
        f"bound GPU {BOUND}: uncorrected ECC errors (volatile, ecc_volatile_uncorrected) grew from 0 to 1"
        f" (seq {ecc.seq}): its health during the run is in doubt",
        f"bound GPU {BOUND}: a row remap is pending (remap_pending) (seq {remap.seq})"
        ": its health during the run is in doubt",
    ] == _judged(evs, {BOUND})
    # the check itself: inconclusive, the fault named first (before "simulated", which it also is)
    outcome = devices_observed(Evidence(evs), {})
    assert "inconclusive" == outcome.status
    assert outcome.reason.startswith(f"bound GPU {BOUND}: NVML delivered XID 79")


def test_the_same_faults_on_an_unbound_gpu_are_recorded_not_judged(tmp_path: Path) -> None:
    evs = _record(tmp_path, SPARE, "inject-xid", "inject-ecc", "inject-remap")
    obs = _observed(evs)
    assert any(e["gpu"] == SPARE and e["xid"] == 79 for o in obs for e in o.attrs["gpu_events"])
    assert any(o.attrs["gpus"][1]["health"]["remap_pending"] for o in obs)
    assert [] == _judged(evs, {BOUND})
    outcome = devices_observed(Evidence(evs), {})
    assert "bound GPU" not in outcome.reason
    assert "simulated" in outcome.reason  # still no physical part: a simulation never is


def test_a_receipt_claiming_health_is_not_an_observation(tmp_path: Path) -> None:
    """The lane's own gpu-health receipt claims a clean card; the recorder's XID stands."""
    evs = _record(tmp_path, BOUND, "inject-xid")
    assert any(e.kind == "receipt" and e.attrs["name"] == "gpu-health" for e in evs)
    assert any("XID 79" in r for r in _judged(evs, {BOUND}))


class _Nvml:
    """Just enough of pynvml's shape for HealthReader: each call raises NVML's own code, as a card that
    offers nothing would (the codes are NVML's: 3 NotSupported, 13 FunctionNotFound)."""

    NVML_ERROR_NO_PERMISSION = 4

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*_args: Any) -> Any:
            self.calls += 1
            raise self.NVMLError(3)

        return call


def test_a_fact_not_offered_is_not_asked_again() -> None:
    nv = _Nvml()
    reader = HealthReader(nv)
    reader.describe(object(), "GPU-x")
    first = reader.read(object(), "GPU-x")
    asked = nv.calls
    again = reader.read(object(), "GPU-x")
    assert first == again
    assert asked == nv.calls, "NotSupported is kept: the card will not grow the fact mid-recording"
    assert {**dict.fromkeys(FACTS, 3)} == first["unsupported"]
    assert [] == reader.errors


@pytest.mark.parametrize(
    ("fact", "value", "changed"),
    [
        ("ecc_volatile_uncorrected", 1, True),
        ("remap_pending", True, True),
        ("pcie_width", 8, True),
        ("clocks_event_reasons", ["hw_thermal_slowdown"], True),
        ("clocks_event_reasons", ["gpu_idle"], False),
        ("power_draw", 450000, False),
        ("temperature", 70, False),
        ("sm_clock", 345, False),
        ("pcie_gen", 1, False),
    ],
)
def test_which_health_change_records_a_sample(fact: str, value: Any, changed: bool) -> None:
    before = dict(HEALTH, **{"retired_pages_single": None})
    assert (health_key(before) != health_key({**before, fact: value})) is changed


def test_an_event_always_records_a_sample() -> None:
    attrs: dict[str, Any] = {"gpus": [], "processes": [], "attribution": "pids", "error": None, "gpu_events": []}
    event = {"gpu": BOUND, "type": "xid", "xid": 79, "data": 79}
    assert change_key(attrs) == change_key(dict(attrs))
    assert change_key({**attrs, "gpu_events": [event]}) != change_key({**attrs, "gpu_events": [event]})


@pytest.mark.parametrize(
    "bad",
    [
        {"serial": "x"},  # facts missing
        {**dict.fromkeys(FACTS), "unsupported": {"serial": "3"}},  # a code that is not an integer
        {**dict.fromkeys(FACTS), "serial": "x", "unsupported": {"serial": 3}},  # a value beside its code
        {**dict.fromkeys(FACTS), "unsupported": {"guessed": 3}},  # no such fact
    ],
)
def test_a_node_sending_another_health_shape_is_refused(bad: dict[str, Any]) -> None:
    assert health_problem(bad) is not None


def test_show_says_each_gpus_health_and_events(tmp_path: Path) -> None:
    """``alpha observe show``: every fact of each GPU (or its code), what changed by the end, each GPU event."""
    from tests.helpers.run import alpha

    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(_doc(BOUND)))
    proc, out = record(
        tmp_path,
        [sys.executable, "-c", LANE, ALPHA, "inject-xid", "inject-ecc"],
        "--quiet",
        *FAST,
        env={"ALPHA_OBSERVE_SIMULATED_GPUS": str(path)},
    )
    assert 0 == proc.returncode, proc.stderr
    observed = _observed(events(out))
    xid = next(e for e in observed if e.attrs["gpu_events"])
    ecc = next(e for e in observed if e.attrs["gpus"][0]["health"]["ecc_volatile_uncorrected"] == 1)
    shown = alpha("observe", "show", str(out), text=True, check=True).stdout
    assert f"  GPU 0 {BOUND} health (seq " in shown
    assert "    serial: 1654123456789\n" in shown
    assert "    board part number: unsupported (NVML 4)\n" in shown
    assert "    remapped rows (correctable, uncorrectable, pending, failure): 0, 0, no, no\n" in shown
    assert f"  GPU event: XID 79 on {BOUND} (seq {xid.seq})\n" in shown
    assert f"changed over the run: ecc_volatile_uncorrected: 0 -> 1 (seq {ecc.seq}); " in shown
    doc_json = json.loads(alpha("observe", "show", "--json", str(out), text=True, check=True).stdout)
    assert [79] == [e["xid"] for e in doc_json["gpu_events"]]
    assert doc_json["health"][BOUND]["first"]["serial"] == "1654123456789"
    # the report: a health panel per GPU, its changes over the run, the GPU events
    page = tmp_path / "report.html"
    alpha("observe", "report", str(out), "--out", str(page), check=True)
    html = page.read_text()
    assert f'Health of GPU 0 <span class="mono">{BOUND}</span>' in html
    assert "<dt>serial</dt><dd>1654123456789</dd>" in html
    assert '<dt>board part number</dt><dd class="note">unsupported (NVML 4)</dd>' in html
    assert f"ecc_volatile_uncorrected: 0 -&gt; 1 (seq {ecc.seq})" in html
    assert f'<td class="alert">XID 79 on {BOUND}</td><td class="num">seq {xid.seq}</td>' in html
