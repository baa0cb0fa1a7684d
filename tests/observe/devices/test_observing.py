"""One rule for "this observation changed", the recorder's sampler's and the node observer's.

The node observer once ignored a GPU's activity that its listed processes do not explain (a tenant NVML
does not list): a node's GPU could turn busy and idle again with no ``sample`` recorded, where the
recorder's own machine records one. Both now take an observation and judge a change with
observe.devices.observing.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from observe.devices.observers import BUSY_MEMORY, TELEMETRY_HEARTBEAT, telemetry_moved
from observe.devices.observing import change_key

ROOT = Path(__file__).resolve().parents[3]
GPU = "GPU-00000000-0000-0000-0000-000000000000"


def _attrs(**over: Any) -> dict[str, Any]:
    gpu = {"uuid": GPU, "compute_mode": "default", "unexplained_memory": 0, "unexplained_utilization": 0}
    gpu.update(over.pop("gpu", {}))
    proc = {"pid": 7, "gpu": GPU, "in_tree": True, "steps": ["run"], "exe": {"sha256": "a"}, "script": None}
    proc.update(over.pop("process", {}))
    attrs = {"gpus": [gpu], "processes": [proc], "attribution": "pids", "error": None}
    attrs.update(over)
    return attrs


@pytest.mark.parametrize(
    "changed",
    [
        {"gpu": {"unexplained_utilization": 40}},
        {"gpu": {"unexplained_memory": BUSY_MEMORY}},
        {"gpu": {"compute_mode": "exclusive_process"}},
        {"gpu": {"uuid": "GPU-1"}},
        {"process": {"pid": 8}},
        {"process": {"in_tree": False}},
        {"process": {"steps": []}},
        {"process": {"exe": {"sha256": "b"}}},
        {"process": {"script": {"sha256": "c"}}},
        {"attribution": "unavailable"},
        {"error": "NVML went away"},
    ],
    ids=json.dumps,
)
def test_each_part_of_an_observation_is_a_change(changed: dict[str, Any]) -> None:
    assert change_key(_attrs()) != change_key(_attrs(**changed))


def test_what_is_not_a_change() -> None:
    # memory within one step of BUSY_MEMORY, the amount of unexplained activity, a process's memory and argv
    same = _attrs(gpu={"unexplained_memory": BUSY_MEMORY - 1, "unexplained_utilization": 5})
    other = _attrs(gpu={"unexplained_memory": 1, "unexplained_utilization": 90}, process={"used_memory": 9})
    assert change_key(same) == change_key(other)
    assert change_key(_attrs(), [("run", 7)]) != change_key(_attrs(), [])  # the open steps are


class _Node:
    """The node observer run as the bundle's bootstrap runs it (``main``), over pipes, on this machine."""

    def __init__(self, tmp_path: Path, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        setup = {
            "interval": 0.05,
            "simulated": {"path": str(tmp_path / "gpus.json"), "data_b64": base64.b64encode(data).decode()},
        }
        code = "import sys; from observe.devices.node_observer import main; sys.exit(main(sys.argv[1]))"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, "0" * 64], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.stdin.write(json.dumps(setup).encode() + b"\n")
        self.stdin.flush()
        # However the test goes, the observer ends: "end" after 60 s at the latest.
        self.timer = threading.Timer(60, self.end)
        self.timer.start()
        self.seen: list[dict[str, Any]] = []

    def lines(self) -> Iterator[dict[str, Any]]:
        for line in self.stdout:
            self.seen.append(json.loads(line))
            yield self.seen[-1]

    def end(self) -> None:
        try:
            self.stdin.write(b"end\n")
            self.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def close(self) -> None:
        self.timer.cancel()
        self.end()
        self.proc.wait(30)


def _after_utilisation(lines: Iterator[dict[str, Any]], level: int) -> dict[str, Any]:
    """The line after the first telemetry that shows the GPU at ``level`` per cent."""
    for line in lines:
        if line["type"] == "telemetry" and line["attrs"]["gpus"][0]["utilization"] == level:
            return next(lines)
    raise AssertionError(f"the observer ended before its GPU was at {level}%")


def test_a_node_records_a_sample_when_unexplained_activity_starts_and_stops(tmp_path: Path) -> None:
    """A tenant NVML does not list (``listed: false``) makes the node's GPU busy, then idle: each is a sample,
    as on the recorder's own machine (on the old rule the node recorded neither)."""
    marker = f"tenant-{uuid.uuid4().hex}"
    doc = {
        "driver": "580.65.06",
        "gpus": [{"index": 0, "minor": 0, "uuid": GPU, "name": "NVIDIA H200", "memory": 150 << 30}],
        "processes": [{"gpu": GPU, "pid": "tree", "argv_contains": marker, "utilization": 40, "listed": False}],
    }
    node = _Node(tmp_path, doc)
    tenant = None
    try:
        lines = node.lines()
        start = next(line for line in lines if line["type"] == "device.observed")
        assert start["attrs"]["phase"] == "start"
        assert start["attrs"]["gpus"][0]["unexplained_utilization"] == 0
        tenant = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", marker], stdin=subprocess.PIPE)
        busy = _after_utilisation(lines, 40)
        assert busy["type"] == "device.observed", busy
        assert (busy["attrs"]["phase"], busy["attrs"]["gpus"][0]["unexplained_utilization"]) == ("sample", 40)
        tenant.communicate(b"")
        idle = _after_utilisation(lines, 0)
        assert idle["type"] == "device.observed", idle
        assert (idle["attrs"]["phase"], idle["attrs"]["gpus"][0]["unexplained_utilization"]) == ("sample", 0)
        node.end()
        assert [line["type"] for line in lines][-2:] == ["device.observed", "bye"]
    finally:
        if tenant is not None and tenant.poll() is None:
            tenant.kill()
            tenant.wait()
        node.close()


def _tele(utilization: int | None = 10, memory_used: int | None = 1 << 30, temperature: int | None = 40) -> Any:
    return [{"uuid": GPU, "utilization": utilization, "memory_used": memory_used, "temperature": temperature}]


@pytest.mark.parametrize(
    "now",
    [
        _tele(utilization=15),
        _tele(utilization=5),
        _tele(memory_used=(1 << 30) + (256 << 20)),
        _tele(temperature=42),
        _tele(temperature=None),
        [{**_tele()[0], "uuid": "GPU-1"}],
        _tele() * 2,
    ],
    ids=json.dumps,
)
def test_a_node_sends_telemetry_that_moved(now: Any) -> None:
    assert telemetry_moved(_tele(), now)
    assert telemetry_moved(None, _tele())  # the first is always sent


def test_a_node_keeps_telemetry_that_did_not_move() -> None:
    assert not telemetry_moved(_tele(), _tele(utilization=14, memory_used=(1 << 30) + 1, temperature=41))


def test_an_idle_node_sends_one_telemetry_sample_not_one_per_interval(tmp_path: Path) -> None:
    """A node whose GPU readings do not move sends its first telemetry and then none within the heartbeat (each
    interval's sample with its node facts was most of a node's stream)."""
    doc = {
        "driver": "580.65.06",
        "gpus": [{"index": 0, "minor": 0, "uuid": GPU, "name": "NVIDIA H200", "memory": 150 << 30}],
        "processes": [],
    }
    node = _Node(tmp_path, doc)
    timer = threading.Timer(1.5, node.end)  # 30 intervals of 0.05 s
    timer.start()
    try:
        seen = [line["type"] for line in node.lines()]
    finally:
        timer.cancel()
        node.close()
    assert seen[-2:] == ["device.observed", "bye"]
    assert seen.count("telemetry") == 1, seen
    assert TELEMETRY_HEARTBEAT > 1.5
