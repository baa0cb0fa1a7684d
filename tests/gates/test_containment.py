"""``process-containment``: no physical scope passes a recording whose command could have outlived it (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest

from gates.testing import SyntheticStream, device_lane
from gates.verdict import Verdict

DEVICE_GATES = ["coordinate-device", "distributed-device", "independent-device"]


def _lane(gate: str, **start: Any) -> SyntheticStream:
    s = device_lane(gate)
    s.one("process.start")["attrs"].update(start)
    return s


def _contained(v: Verdict) -> tuple[str, str]:
    found = [(c.status, c.reason) for c in v.checks if c.name == "contained"]
    assert len(found) == 1, [c.name for c in v.checks]
    return found[0]


CGROUP = {"containment": "cgroup", "guaranteed": True, "containment_note": "cgroup /alpha-observe-0"}
SWEEP = {"containment": "sweep", "guaranteed": False, "containment_note": "no cgroup of its own: read-only"}


@pytest.mark.parametrize("gate", DEVICE_GATES)
def test_a_cgroup_ended_as_a_whole_passes_physical(gate: str) -> None:
    """A lane run in a cgroup of its own, nothing left over, passes with scope physical."""
    v = _lane(gate, **CGROUP).evaluate()
    assert ("pass", "physical") == (v.verdict, v.scope)
    assert "cgroup of its own" in _contained(v)[1]


@pytest.mark.parametrize("gate", DEVICE_GATES)
def test_a_sweep_is_never_physical(gate: str) -> None:
    """The same lane contained only by the sweep is inconclusive: its end is not guaranteed."""
    v = _lane(gate, **SWEEP).evaluate()
    assert "inconclusive" == v.verdict
    status, reason = _contained(v)
    assert "inconclusive" == status
    assert "sweep" in reason
    assert "read-only" in reason


def test_an_end_that_left_survivors_is_never_physical() -> None:
    """A cgroup whose end was not guaranteed (a process left it and survived) is inconclusive, naming the survivor."""
    s = _lane("distributed-device", **CGROUP)
    s.add(
        "process.stray",
        {
            "still_open": [],
            "drained_ns": 0,
            "ended": [{"pid": 41, "argv": ["hopper"], "signal": "SIGKILL"}],
            "containment": "cgroup",
            "guaranteed": False,
            "survivors": [{"pid": 42, "argv": ["hopper"]}],
            "containment_note": "1 process(es) of the tree had left the cgroup and were swept",
        },
    )
    v = s.evaluate()
    assert "inconclusive" == v.verdict
    status, reason = _contained(v)
    assert "inconclusive" == status
    assert "left the cgroup" in reason
    assert "pid 42" in reason


def test_a_guaranteed_end_that_ended_processes_passes() -> None:
    """A guaranteed end that had to kill leftovers still passes, and says how many it ended."""
    s = _lane("distributed-device", **CGROUP)
    ended = [{"pid": 41, "argv": ["daemon"], "signal": "SIGTERM"}]
    s.add("process.stray", {"still_open": [], "drained_ns": 0, "ended": ended, "containment": "cgroup"})
    s.ops[-1]["attrs"].update(guaranteed=True, survivors=[], containment_note="")
    v = s.evaluate()
    assert "pass" == v.verdict
    assert "1 process(es) it left were ended" in _contained(v)[1]


def test_a_stream_recorded_before_containment_keeps_its_verdict() -> None:
    """A process.start without the containment key (recorded before this rule) leaves the rule out."""
    v = device_lane("distributed-device").evaluate()
    assert ("pass", "physical") == (v.verdict, v.scope)
    assert [] == [c for c in v.checks if c.name == "contained"]


def test_exit_zero_does_not_ask_for_containment() -> None:
    """The rule belongs to the physical parts: exit-zero over a swept recording still passes."""
    s = SyntheticStream(gate="exit-zero")
    s.one("process.start")["attrs"].update(SWEEP)
    s.exit(0)
    assert "pass" == s.evaluate().verdict
