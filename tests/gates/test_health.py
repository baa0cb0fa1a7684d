"""devices-observed judges a bound GPU's health as the recorder saw it (gates/health.py).

Each test starts from ``gates.testing.device_lane`` (a right lane that passes
physical), gives its observations the health NVML reports, injects one fault and
checks that the physical part turns inconclusive naming the GPU, the fact and the
seq; the same fault on a GPU no role is bound to is shown, never judged; and a
receipt claiming health facts counts for nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from gates.testing import SyntheticStream, device_lane, observed_gpu
from observe.devices.health import FACTS
from tests.gates.test_mutants import reason_of, sample, status_of

ALPHA_GPU, BETA_GPU, SPARE_GPU = "GPU-0000-alpha", "GPU-0001-beta", "GPU-0002-spare"


def _health(**facts: Any) -> dict[str, Any]:
    """A healthy H200's health as NVML reports it (retired pages unsupported: row remapping instead)."""
    value: dict[str, Any] = dict.fromkeys(FACTS)
    value.update(
        serial="1654123456789",
        vbios="96.00.AF.00.01",
        pcie_gen=5,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
        persistence="enabled",
        mig_mode="disabled",
        ecc_mode="enabled",
        ecc_volatile_corrected=0,
        ecc_volatile_uncorrected=0,
        ecc_aggregate_corrected=0,
        ecc_aggregate_uncorrected=0,
        remapped_correctable=0,
        remapped_uncorrectable=0,
        remap_pending=False,
        remap_failure=False,
        clocks_event_reasons=[],
        power_draw=120000,
        power_limit=700000,
        temperature=30,
        sm_clock=1980,
        memory_clock=3201,
        events=["xid", "double_bit_ecc", "single_bit_ecc"],
    )
    value["unsupported"] = {
        "board_part_number": 3,
        "retired_pages_single": 3,
        "retired_pages_double": 3,
        "retired_pages_pending": 3,
    }
    value.update(facts)
    return value


def _lane(spare: bool = False) -> SyntheticStream:
    """The right lane, every GPU healthy in every observation (and an unbound third GPU with ``spare``)."""
    lane = device_lane()
    for o in lane.find("device.observed"):
        o["attrs"]["gpu_events"] = []
        if spare:
            o["attrs"]["gpus"].append(observed_gpu(2, SPARE_GPU) | {"listed_memory": 0, "unexplained_memory": 0})
        for g in o["attrs"]["gpus"]:
            g["health"] = _health()
    return lane


def _seq_of_sample(lane: SyntheticStream) -> int:
    return next(e.seq for e in lane.events() if e.kind == "device.observed" and e.attrs["phase"] == "sample")


def _gpu(o: dict[str, Any], uuid: str) -> dict[str, Any]:
    found: dict[str, Any] = next(g for g in o["attrs"]["gpus"] if g["uuid"] == uuid)
    return found


def test_healthy_lane_passes_physical() -> None:
    v = _lane(spare=True).evaluate()
    assert ("pass", "physical") == (v.verdict, v.scope)


FAULTS: dict[str, tuple[Any, str]] = {
    "xid 79": (
        {"gpu_events": [{"gpu": "@", "type": "xid", "xid": 79, "data": 79}]},
        "NVML delivered XID 79 (an XID critical error)",
    ),
    "double-bit ecc": (
        {"gpu_events": [{"gpu": "@", "type": "double_bit_ecc", "xid": None, "data": 0}]},
        "NVML delivered a double-bit ECC error",
    ),
    "ecc uncorrected +1": (
        {"health": {"ecc_volatile_uncorrected": 1}},
        "uncorrected ECC errors (volatile, ecc_volatile_uncorrected) grew from 0 to 1",
    ),
    "aggregate ecc +2": (
        {"health": {"ecc_aggregate_uncorrected": 2}},
        "uncorrected ECC errors (aggregate, ecc_aggregate_uncorrected) grew from 0 to 2",
    ),
    "remap pending": ({"health": {"remap_pending": True}}, "a row remap is pending (remap_pending)"),
    "remap failure": ({"health": {"remap_failure": True}}, "a row remap failed (remap_failure)"),
    "retired page pending": (
        {"health": {"retired_pages_pending": True}},
        "a retired page is pending (retired_pages_pending)",
    ),
}


def _inject(lane: SyntheticStream, uuid: str, fault: dict[str, Any]) -> None:
    o = sample(lane)
    for e in fault.get("gpu_events", []):
        o["attrs"]["gpu_events"].append({**e, "gpu": uuid})  # type: ignore[index]
    if "health" in fault:
        health = _gpu(o, uuid)["health"]
        health.update(fault["health"])
        for fact in fault["health"]:
            health["unsupported"].pop(fact, None)


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_fault_on_a_bound_gpu_is_inconclusive_naming_it(name: str) -> None:
    fault, said = FAULTS[name]
    lane = _lane()
    _inject(lane, BETA_GPU, fault)
    v = lane.evaluate()
    assert ("inconclusive", "inconclusive") == (v.verdict, status_of(v, "devices-observed"))
    seq = _seq_of_sample(lane)
    assert f"bound GPU {BETA_GPU}: {said} (seq {seq})" in reason_of(v, "devices-observed")


@pytest.mark.parametrize("name", list(FAULTS))
def test_the_same_fault_on_an_unbound_gpu_is_shown_not_judged(name: str) -> None:
    fault, _said = FAULTS[name]
    lane = _lane(spare=True)
    _inject(lane, SPARE_GPU, fault)
    v = lane.evaluate()
    assert ("pass", "physical") == (v.verdict, v.scope)


def test_unsupported_facts_and_corrected_errors_are_not_judged() -> None:
    """Facts NVML does not offer (with its code), corrected ECC errors, single-bit events, throttling: shown."""
    lane = _lane()
    codes = {f: 3 for f in FACTS if f.startswith(("ecc_", "remap", "retired"))}
    for o in lane.find("device.observed"):
        for g in o["attrs"]["gpus"]:
            g["health"] = {**_health(**dict.fromkeys(codes)), "unsupported": codes}
    o = sample(lane)
    o["attrs"]["gpu_events"].append({"gpu": ALPHA_GPU, "type": "single_bit_ecc", "xid": None, "data": 0})  # type: ignore[index]
    _gpu(o, ALPHA_GPU)["health"]["clocks_event_reasons"] = ["hw_thermal_slowdown"]
    v = lane.evaluate()
    assert ("pass", "physical") == (v.verdict, v.scope)


def test_counts_already_there_at_the_start_are_not_a_growth() -> None:
    lane = _lane()
    for o in lane.find("device.observed"):
        _gpu(o, ALPHA_GPU)["health"]["ecc_aggregate_uncorrected"] = 4
    assert ("pass", "physical") == (lambda v: (v.verdict, v.scope))(lane.evaluate())


def test_one_finding_per_gpu_and_fact() -> None:
    lane = _lane()
    for o in lane.find("device.observed"):
        if o["attrs"]["phase"] != "start":
            _gpu(o, ALPHA_GPU)["health"]["remap_pending"] = True
    reason = reason_of(lane.evaluate(), "devices-observed")
    assert 1 == reason.count(f"bound GPU {ALPHA_GPU}: a row remap is pending")


def _claim(lane: SyntheticStream, name: str, **fields: Any) -> None:
    """A receipt the lane sends during its uninterrupted run."""
    at = lane.ops.index(sample(lane)) + 1
    lane.add("receipt", {"name": name, "status": "pass", "fields": fields}, step="uninterrupted-run", at=at)


class TestForgery:
    """A receipt is the lane's claim: health facts in one never count, either way."""

    def test_a_receipt_claiming_an_xid_changes_nothing(self) -> None:
        lane = _lane()
        _claim(lane, "gpu-health", gpu_events=[{"gpu": ALPHA_GPU, "type": "xid", "xid": 79, "data": 79}])
        _claim(lane, "preflight-health", gpus=[{"uuid": ALPHA_GPU, "health": _health(remap_pending=True)}])
        v = lane.evaluate()
        assert ("pass", "physical") == (v.verdict, v.scope)

    def test_a_receipt_claiming_clean_health_hides_no_observed_xid(self) -> None:
        lane = _lane()
        _inject(lane, ALPHA_GPU, FAULTS["xid 79"][0])
        _claim(lane, "gpu-health", gpus=[{"uuid": ALPHA_GPU, "health": _health(), "xid": []}])
        v = lane.evaluate()
        assert "inconclusive" == status_of(v, "devices-observed")
        assert f"bound GPU {ALPHA_GPU}: NVML delivered XID 79" in reason_of(v, "devices-observed")

    def test_a_lane_printing_an_observation_changes_nothing(self) -> None:
        """Output that looks like a device.observed event is output, not an observation."""
        lane = _lane()
        fake = '{"kind": "device.observed", "attrs": {"gpu_events": [{"gpu": "%s", "type": "xid", "xid": 79}]}}\n'
        lane.add("stdout", {}, (fake % ALPHA_GPU).encode(), "uninterrupted-run", at=lane.ops.index(sample(lane)) + 1)
        v = lane.evaluate()
        assert ("pass", "physical") == (v.verdict, v.scope)


class TestDeviceRequirements:
    """``[[device]]`` in a gate file: health facts the recorder must have observed on the GPUs."""

    HEAD = '[gate]\nname = "healthy"\nscope = "observed"\n\n[[device]]\n'

    def _verdict(self, lane: SyntheticStream, table: str) -> tuple[str, str]:
        from gates.engine import evaluate
        from gates.language import parse_gate_text

        v = evaluate(parse_gate_text(self.HEAD + table, "<test>"), lane.events())
        check = next(c for c in v.checks if c.name.startswith("device"))
        return check.status, check.reason

    def test_requirements_met_on_the_bound_gpus(self) -> None:
        status, reason = self._verdict(_lane(), 'ecc = "enabled"\npersistence = "enabled"\npcie_width_min = 16\n')
        assert "pass" == status, reason
        assert f"held on GPU {ALPHA_GPU} (3 observations), GPU {BETA_GPU} (3 observations)" in reason

    def test_a_value_that_breaks_one_fails_naming_it(self) -> None:
        lane = _lane()
        _gpu(sample(lane), BETA_GPU)["health"]["pcie_width"] = 8
        status, reason = self._verdict(lane, 'pcie_width_min = 16\nreason = "x16 or the run is not comparable"\n')
        seq = _seq_of_sample(lane)
        assert ("fail", f"GPU {BETA_GPU}: pcie_width was 8 (seq {seq}); the gate requires pcie_width_min = 16") == (
            status,
            reason.split(" (x16")[0],
        )
        assert "(x16 or the run is not comparable)" in reason

    def test_a_fact_not_offered_is_inconclusive_with_its_code(self) -> None:
        lane = _lane()
        for o in lane.find("device.observed"):
            for g in o["attrs"]["gpus"]:
                g["health"]["persistence"] = None
                g["health"]["unsupported"]["persistence"] = 4
        status, reason = self._verdict(lane, 'persistence = "enabled"\n')
        assert "inconclusive" == status
        assert f"GPU {ALPHA_GPU}: persistence is not offered (NVML code 4)" in reason

    def test_an_unbound_gpu_counts_only_with_gpus_all(self) -> None:
        lane = _lane(spare=True)
        for o in lane.find("device.observed"):
            _gpu(o, SPARE_GPU)["health"]["ecc_mode"] = "disabled"
        assert "pass" == self._verdict(lane, 'ecc = "enabled"\n')[0]
        status, reason = self._verdict(lane, 'gpus = "all"\necc = "enabled"\n')
        assert "fail" == status
        assert f"GPU {SPARE_GPU}: ecc_mode was 'disabled'" in reason

    def test_no_health_observed_is_inconclusive(self) -> None:
        status, reason = self._verdict(device_lane(), 'ecc = "enabled"\n')
        assert "inconclusive" == status
        assert f"GPU {ALPHA_GPU}: no observation carries its health" in reason

    @pytest.mark.parametrize(
        ("table", "said"),
        [
            ('ecc = "on"\n', '\'ecc\' must be "enabled" or "disabled"'),
            ("pcie_width_min = 0\n", "'pcie_width_min' must be a positive integer"),
            ("pcie_width_min = true\n", "'pcie_width_min' must be an integer"),
            ('gpus = "some"\necc = "enabled"\n', '\'gpus\' must be "bound" or "all"'),
            ('ecc = "enabled"\npcie_gen_min = 4\n', "unknown key(s) 'pcie_gen_min'"),
            ('reason = "nothing"\n', "requires nothing"),
        ],
    )
    def test_a_bad_table_is_refused_by_name(self, table: str, said: str) -> None:
        from gates.language import GateFileError, parse_gate_text

        with pytest.raises(GateFileError) as info:
            parse_gate_text(self.HEAD + table, "<test>")
        assert said in str(info.value)
