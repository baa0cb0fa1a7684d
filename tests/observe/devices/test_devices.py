"""Devices observed by the recorder (docs/TRUST.md): observations, telemetry, step pids, configs."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aos.event import Event
from observe.devices.health import FACTS
from observe.devices.observers import (
    BUSY_MEMORY,
    DeviceReading,
    GpuReading,
    NoObserver,
    Tree,
    lane_configs,
    observation,
)
from observe.devices.simulated import SimulatedObserver
from tests.helpers.recorder import events, index, kinds, one, output, record
from tests.helpers.run import child_env

FAST = ("--sample-interval", "0.05")
GIB = 1 << 30

GPUS: dict[str, Any] = {
    "driver": "580.159.04",
    "cuda_driver": 13000,
    "gpus": [
        {"index": 0, "minor": 0, "uuid": "GPU-0000", "name": "NVIDIA H200", "memory": 141 * GIB},
        {"index": 1, "minor": 1, "uuid": "GPU-1111", "name": "NVIDIA H200", "memory": 141 * GIB},
    ],
}

#: The worker of step "train": it lives until a ``telemetry`` event of its own recording (AOS_STREAM, read while
#: it is written) has counted it (python -> step client -> worker), and at least 0.8 s, so a loaded machine never
#: makes a sample miss it; it gives up after 60 s.
WORKER = """
import os, time
from aos.reader import read_stream
born = time.monotonic()
def seen():
    events = read_stream(os.environ["AOS_STREAM"]).events
    return any(e.kind == "telemetry" and e.attrs["tree"]["processes"] >= 3 for e in events)
while time.monotonic() - born < 60 and not (time.monotonic() - born >= 0.8 and seen()):
    time.sleep(0.05)
"""

#: A command whose process runs as step "train", marked so the simulated file can find it.
TRAIN = [
    sys.executable,
    "-c",
    "import subprocess, sys; subprocess.run([sys.argv[1], 'observe', 'step', 'train', '--', sys.executable, '-c',"
    f" {WORKER!r}, 'gpu-worker-marker'], check=True)",
]


def _nvml_here() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def _simulated(tmp_path: Path, doc: dict[str, Any]) -> dict[str, str]:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(doc))
    return {"ALPHA_OBSERVE_SIMULATED_GPUS": str(path)}


def _observed(evs: list[Event]) -> list[dict[str, Any]]:
    return [e.attrs for e in evs if e.kind == "device.observed"]


def _train(tmp_path: Path, doc: dict[str, Any], *opts: str) -> list[Event]:
    from tests.helpers.run import ALPHA

    proc, path = record(tmp_path, [*TRAIN, ALPHA], "--quiet", *FAST, *opts, env=_simulated(tmp_path, doc))
    assert 0 == proc.returncode, proc.stderr
    return events(path)


class TestSimulatedObserver:
    def test_start_samples_end_around_the_command(self, tmp_path: Path) -> None:
        """device.observed comes at start (before process.start), as samples, and at end (after process.exit)."""
        doc = dict(GPUS, processes=[{"gpu": "GPU-1111", "pid": "tree", "argv_contains": "gpu-worker-marker"}])
        evs = _train(tmp_path, doc)
        observed = [(i, e.attrs["phase"]) for i, e in enumerate(evs) if e.kind == "device.observed"]
        assert "start" == observed[0][1]
        assert observed[0][0] < index(evs, "process.start")
        assert "end" == observed[-1][1]
        assert observed[-1][0] > index(evs, "process.exit")
        assert observed[-1][0] < index(evs, "seal")
        assert {"sample"} == {phase for _, phase in observed[1:-1]}
        assert observed[1:-1], "no sample while the step ran"

    def test_gpus_are_the_files_and_the_observer_is_simulated(self, tmp_path: Path) -> None:
        """The GPUs are the file's; a file that claims to be NVML is still recorded as simulated."""
        doc = dict(GPUS, observer="nvml", library={"path": "/usr/lib/libnvidia-ml.so.1", "sha256": "0" * 64})
        evs = _train(tmp_path, doc)
        data = (tmp_path / "gpus.json").read_bytes()
        for attrs in _observed(evs):
            assert "simulated" == attrs["observer"]
            assert attrs["library"] is None
            assert "580.159.04" == attrs["driver"]
            assert 13000 == attrs["cuda_driver"]
            assert ["GPU-0000", "GPU-1111"] == [g["uuid"] for g in attrs["gpus"]]
            assert {"index": 1, "minor": 1, "name": "NVIDIA H200", "memory": 141 * GIB} == {
                k: attrs["gpus"][1][k] for k in ("index", "minor", "name", "memory")
            }
            assert {"path": str(tmp_path / "gpus.json"), "sha256": hashlib.sha256(data).hexdigest()} == attrs[
                "simulated_from"
            ]
            assert attrs["error"] is None

    def test_a_tree_process_is_attributed_to_its_step(self, tmp_path: Path) -> None:
        """A simulated GPU process of the recorded tree is in_tree, inside step train, with its argv."""
        doc = dict(
            GPUS,
            processes=[
                {"gpu": "GPU-1111", "pid": "tree", "argv_contains": "gpu-worker-marker", "used_memory": GIB},
                {"gpu": "GPU-0000", "pid": os.getpid(), "used_memory": 5},  # this test's own process: not the tree
            ],
        )
        evs = _train(tmp_path, doc)
        seen = [p for attrs in _observed(evs) for p in attrs["processes"] if p["gpu"] == "GPU-1111"]
        assert seen, "the tree process was never observed"
        inner = [p for p in seen if p["steps"] == ["train"]]
        assert inner, seen
        assert all(p["in_tree"] for p in inner)
        assert "gpu-worker-marker" in inner[0]["argv"]
        assert GIB == inner[0]["used_memory"]
        step_pids = {e.attrs["pid"] for e in evs if e.kind == "step.start"}
        assert inner[0]["pid"] not in step_pids  # the worker itself, a child of the step client
        foreign = [p for attrs in _observed(evs) for p in attrs["processes"] if p["gpu"] == "GPU-0000"]
        assert foreign
        assert all(not p["in_tree"] and p["argv"] is None and p["steps"] == [] for p in foreign)
        assert {"pids"} == {attrs["attribution"] for attrs in _observed(evs)}

    def test_telemetry_shows_the_tree_and_the_gpus(self, tmp_path: Path) -> None:
        """telemetry counts the live tree (recorder's descendants), its CPU and RSS, and each GPU's readings."""
        doc = dict(
            GPUS,
            processes=[{"gpu": "GPU-1111", "pid": "tree", "argv_contains": "gpu-worker-marker", "utilization": 40}],
        )
        evs = _train(tmp_path, doc)
        tele = [e.attrs for e in evs if e.kind == "telemetry"]
        assert tele
        assert all(index(evs, "process.start") < i for i, e in enumerate(evs) if e.kind == "telemetry")
        counts = [t["tree"]["processes"] for t in tele]
        # python -> step client -> worker: three processes while the step runs, never more than that.
        # A sample taken after the command ended (before the recorder appended process.exit: a loaded
        # machine) honestly counts 0; once the tree is empty it stays empty.
        assert 3 == max(counts), counts
        assert all(0 <= c <= 3 for c in counts), counts
        if 0 in counts:
            assert all(0 == c for c in counts[counts.index(0) :]), counts
        # A zombie (exited, not yet reaped) is live but holds no memory.
        assert all(t["tree"]["rss"] > 0 for t in tele if t["tree"]["processes"] > 1)
        assert all(t["tree"]["rss"] >= 0 for t in tele)
        assert max(t["tree"]["cpu_ns"] for t in tele) > 0
        assert all(isinstance(t["tree"]["cpu_ns"], int) for t in tele)
        # 40 per matching process: the step client's argv holds the marker as well as the step the recorder runs,
        # so a sample counts one or both of them (under load, every sample counted both), none once they ended.
        busy = [t["gpus"][1]["utilization"] for t in tele]
        assert max(busy) in (40, 80), busy
        assert all(b in (0, 40, 80) for b in busy), busy
        assert all(t["gpus"][0]["utilization"] == 0 for t in tele)
        assert ["GPU-0000", "GPU-1111"] == [g["uuid"] for g in tele[0]["gpus"]]

    def test_samples_only_on_change(self, tmp_path: Path) -> None:
        """With nothing changing (no GPU process, no step), no sample is appended between start and end."""
        proc, path = record(tmp_path, ["sleep", "0.5"], "--quiet", *FAST, env=_simulated(tmp_path, GPUS))
        assert 0 == proc.returncode
        evs = events(path)
        assert ["start", "end"] == [a["phase"] for a in _observed(evs)]
        assert len([e for e in evs if e.kind == "telemetry"]) >= 3

    def test_unavailable_attribution(self, tmp_path: Path) -> None:
        """A file saying NVML cannot list processes gives attribution unavailable and no processes."""
        doc = dict(
            GPUS,
            attribution="unavailable",
            processes=[{"gpu": "GPU-1111", "pid": "tree", "argv_contains": "gpu-worker-marker", "used_memory": GIB}],
        )
        evs = _train(tmp_path, doc)
        assert {"unavailable"} == {a["attribution"] for a in _observed(evs)}
        assert all(a["processes"] == [] for a in _observed(evs))
        used = [e.attrs["gpus"][1]["memory_used"] for e in evs if e.kind == "telemetry"]
        # The activity is still seen. GIB per matching process: the step client's argv holds the marker as
        # well as the step the recorder runs, so a sample may count one or both, never none while it runs.
        assert max(used) in (GIB, 2 * GIB)

    @pytest.mark.parametrize(
        ("content", "error"),
        [
            (b"{not json", "Expecting property name"),
            (b"[]", "not a JSON object"),
            (json.dumps({"gpus": []}).encode(), "'driver' must be a string"),
            (json.dumps({"driver": "1", "gpus": [{"index": "0"}]}).encode(), "gpus[0]: 'index' must be an integer"),
        ],
    )
    def test_a_bad_file_is_recorded_not_fatal(self, tmp_path: Path, content: bytes, error: str) -> None:
        """A malformed simulated file is recorded as simulated with no GPUs and the error; the command still runs."""
        path = tmp_path / "gpus.json"
        path.write_bytes(content)
        proc, out = record(tmp_path, ["true"], "--quiet", env={"ALPHA_OBSERVE_SIMULATED_GPUS": str(path)})
        assert 0 == proc.returncode
        observed = _observed(events(out))
        assert ["start", "end"] == [a["phase"] for a in observed]
        assert all(a["observer"] == "simulated" and a["gpus"] == [] for a in observed)
        assert error in str(observed[0]["error"])

    def test_a_missing_file(self, tmp_path: Path) -> None:
        """A simulated file that cannot be read: recorded with the error, no simulated_from."""
        missing = str(tmp_path / "nope.json")
        proc, out = record(tmp_path, ["true"], "--quiet", env={"ALPHA_OBSERVE_SIMULATED_GPUS": missing})
        assert 0 == proc.returncode
        start = _observed(events(out))[0]
        assert start["simulated_from"] is None
        assert "cannot read" in start["error"]


class TestModes:
    def test_off_records_no_observation_and_no_telemetry(self, tmp_path: Path) -> None:
        """--observe-devices off: no device.observed and no telemetry, even with a simulated file."""
        proc, path = record(
            tmp_path, ["sleep", "0.3"], "--observe-devices", "off", *FAST, env=_simulated(tmp_path, GPUS)
        )
        assert 0 == proc.returncode
        evs = events(path)
        assert not {"device.observed", "telemetry"} & set(kinds(evs))
        assert "off" == one(evs, "stream.open").attrs["observe_devices"]

    @pytest.mark.skipif(_nvml_here(), reason="this machine has NVML")
    def test_auto_without_nvml_is_none(self, tmp_path: Path) -> None:
        """auto on a machine without NVML: observer none, no error, and the command runs."""
        proc, path = record(tmp_path, ["echo", "hi"], "--quiet")
        assert 0 == proc.returncode
        evs = events(path)
        observed = _observed(evs)
        assert ["start", "end"] == [a["phase"] for a in observed]
        for attrs in observed:
            assert {"observer": "none", "gpus": [], "processes": [], "library": None, "driver": None} == {
                k: attrs[k] for k in ("observer", "gpus", "processes", "library", "driver")
            }
            assert attrs["error"] is None
        assert b"hi\n" == output(evs)

    @pytest.mark.skipif(_nvml_here(), reason="this machine has NVML")
    def test_nvml_without_nvml_records_why(self, tmp_path: Path) -> None:
        """--observe-devices nvml on a machine without NVML: observer none with pynvml's error; not fatal."""
        proc, path = record(tmp_path, ["true"], "--observe-devices", "nvml")
        assert 0 == proc.returncode
        for attrs in _observed(events(path)):
            assert "none" == attrs["observer"]
            assert "nvmlInit failed: NVMLError_LibraryNotFound: NVML Shared Library Not Found" == attrs["error"]

    def _record_patched(self, tmp_path: Path, patch: str, *args: str) -> tuple[int, list[Event]]:
        """Record ``args`` with the recorder's own pynvml patched by ``patch`` (in the recorder's process only:
        recording in this test process would change pyarrow's memory pool for the tests after it)."""
        out = tmp_path / "patched.aos"
        driver = tmp_path / "patched_recorder.py"
        driver.write_text(
            "import sys\n"
            "import pynvml\n"
            "from observe.devices import observers as devices\n"
            f"{patch}\n"
            "from observe.cli.root import main\n"
            "sys.argv = ['alpha', 'observe', 'record', *sys.argv[1:]]\n"
            "main()\n"
        )
        env = child_env()
        proc = subprocess.run(
            [sys.executable, str(driver), "--quiet", "--out", str(out), *args],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        return proc.returncode, events(out)

    def test_an_nvml_error_is_recorded_not_fatal(self, tmp_path: Path) -> None:
        """NVML starting but failing on a query: observer nvml with the error; the command's exit code stands."""
        patch = (
            "def lost(*_args):\n"
            "    raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)\n"
            "pynvml.nvmlInit = lambda: None\n"
            "pynvml.nvmlShutdown = lost\n"
            "pynvml.nvmlSystemGetDriverVersion = lost\n"
        )
        code, evs = self._record_patched(
            tmp_path, patch, "--observe-devices", "nvml", *FAST, "--", sys.executable, "-c", "raise SystemExit(3)"
        )
        assert 3 == code
        observed = _observed(evs)
        assert ["start", "end"] == [a["phase"] for a in observed]
        assert all(a["observer"] == "nvml" and a["gpus"] == [] for a in observed)
        assert "NVMLError_GpuIsLost: GPU is lost" in observed[0]["error"]

    def test_a_gpu_lost_while_sampling_is_recorded_not_fatal(self, tmp_path: Path) -> None:
        """A GPU that NVML described at start and then loses: each observation keeps it, with null readings,
        the error and attribution unavailable; the recording completes."""
        patch = (
            "class Mem:\n"
            "    total, used = 100, 5\n"
            "class Pci:\n"
            "    busId = b'00000000:19:00.0'\n"
            "def lost(*_args):\n"
            "    raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)\n"
            "described = []\n"
            "def memory(_handle):\n"
            "    if described:\n"
            "        lost()\n"
            "    described.append(1)\n"
            "    return Mem\n"
            "pynvml.nvmlInit = lambda: None\n"
            "pynvml.nvmlShutdown = lambda: None\n"
            "pynvml.nvmlSystemGetDriverVersion = lambda: b'580.159.04'\n"
            "pynvml.nvmlSystemGetCudaDriverVersion = lambda: 13000\n"
            "pynvml.nvmlDeviceGetCount = lambda: 1\n"
            "pynvml.nvmlDeviceGetHandleByIndex = lambda index: object()\n"
            "pynvml.nvmlDeviceGetMinorNumber = lambda handle: 0\n"
            "pynvml.nvmlDeviceGetUUID = lambda handle: b'GPU-lost'\n"
            "pynvml.nvmlDeviceGetName = lambda handle: 'NVIDIA H200'\n"
            "pynvml.nvmlDeviceGetPciInfo = lambda handle: Pci\n"
            "pynvml.nvmlDeviceGetMemoryInfo = memory\n"
            "pynvml.nvmlDeviceGetComputeRunningProcesses = lost\n"
            "pynvml._nvmlGetFunctionPointer = lambda name: lost()  # every other NVML call: the health facts\n"
        )
        code, evs = self._record_patched(tmp_path, patch, "--observe-devices", "nvml", *FAST, "--", "sleep", "0.3")
        assert 0 == code
        observed = _observed(evs)
        assert ["start", "end"] == [a["phase"] for a in observed]
        for attrs in observed:
            assert ("nvml", "580.159.04", 13000, "unavailable", []) == (
                attrs["observer"],
                attrs["driver"],
                attrs["cuda_driver"],
                attrs["attribution"],
                attrs["processes"],
            )
            assert [
                {
                    "index": 0,
                    "minor": 0,
                    "uuid": "GPU-lost",
                    "name": "NVIDIA H200",
                    "memory": 100,
                    "memory_used": None,
                    "utilization": None,
                    "pci_bus_id": "00000000:19:00.0",
                    "compute_mode": None,
                    "listed_memory": None,
                    "unexplained_memory": None,
                    "unexplained_utilization": None,
                    "health": {**dict.fromkeys(FACTS), "unsupported": dict.fromkeys(FACTS, 15)},
                }
            ] == attrs["gpus"]
            assert "GPU 0: NVMLError_GpuIsLost: GPU is lost" in attrs["error"]
            assert "GPU GPU-lost health: NVML errors serial 15, board_part_number 15" in attrs["error"]
            assert "GPU 0 processes: NVMLError_GpuIsLost: GPU is lost" in attrs["error"]
        tele = [e.attrs for e in evs if e.kind == "telemetry"]
        assert tele
        assert all(
            t["gpus"] == [{"uuid": "GPU-lost", "utilization": None, "memory_used": None, "temperature": None}]
            for t in tele
        )

    def test_an_init_error_is_recorded_not_fatal(self, tmp_path: Path) -> None:
        """nvmlInit failing for a reason other than a missing library: observer none with the error, even in auto."""
        patch = (
            "def fail():\n"
            "    raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)\n"
            "pynvml.nvmlInit = fail\n"
            "devices.NVML_LIBRARY = 'libc.so.6'  # loads here, so auto goes on to nvmlInit\n"
        )
        code, evs = self._record_patched(tmp_path, patch, "--", "true")
        assert 0 == code
        start = _observed(evs)[0]
        assert "none" == start["observer"]
        assert "nvmlInit failed: NVMLError_NoPermission: Insufficient Permissions" == start["error"]


class TestAttribution:
    """observation(): the attribution rules, over readings built here (no NVML needed)."""

    TREE = Tree(parents={100: 1, 101: 100, 102: 101}, argv=lambda pid: ["worker", str(pid)])
    GPU = GpuReading(index=0, minor=0, uuid="GPU-0", name="H200", memory=GIB, memory_used=0)

    def _observe(self, reading: DeviceReading, steps: list[tuple[str, int | None]] | None = None) -> dict[str, Any]:
        return observation(
            "sample",
            NoObserver(),
            reading,
            self.TREE,
            steps or [],
            baseline={"GPU-0": 0},
            mask=lambda s: s.replace("secret", "[MASKED]"),
        )

    def test_steps_are_the_open_steps_of_ancestors_innermost_last(self) -> None:
        """A tree process gets the open steps whose client is itself or an ancestor, outermost first."""
        reading = DeviceReading(gpus=[self.GPU], processes=[(102, "GPU-0", 7)])
        attrs = self._observe(reading, [("outer", 100), ("elsewhere", 999), ("inner", 101)])
        assert [
            {
                "pid": 102,
                "gpu": "GPU-0",
                "used_memory": 7,
                "in_tree": True,
                "steps": ["outer", "inner"],
                "exe": None,
                "script": None,
                "argv": ["worker", "102"],
            }
        ] == attrs["processes"]
        assert "pids" == attrs["attribution"]

    def test_argv_is_masked(self) -> None:
        """The argv of a tree process is masked like everything else recorded."""
        tree = Tree(parents={5: 1}, argv=lambda _pid: ["run", "--token=secret"])
        attrs = observation(
            "sample",
            NoObserver(),
            DeviceReading(processes=[(5, "GPU-0", None)]),
            tree,
            [],
            baseline={},
            mask=lambda s: s.replace("secret", "[MASKED]"),
        )
        assert ["run", "--token=[MASKED]"] == attrs["processes"][0]["argv"]

    def test_a_pid_of_another_namespace_makes_attribution_unavailable(self) -> None:
        """A listed pid that does not exist here (another pid namespace) cannot be matched: unavailable."""
        reading = DeviceReading(gpus=[self.GPU], processes=[(2**22 + 12345, "GPU-0", None)])
        assert "unavailable" == self._observe(reading)["attribution"]

    def test_busy_memory_with_no_process_listed_is_unavailable(self) -> None:
        """A GPU whose memory in use rose well above the start's while NVML lists nothing hides its processes."""
        busy = GpuReading(**{**vars(self.GPU), "memory_used": BUSY_MEMORY})
        assert "unavailable" == self._observe(DeviceReading(gpus=[busy]))["attribution"]
        idle = GpuReading(**{**vars(self.GPU), "memory_used": BUSY_MEMORY - 1})
        assert "pids" == self._observe(DeviceReading(gpus=[idle]))["attribution"]

    def test_processes_not_listed(self) -> None:
        """NVML unable to list processes: unavailable, and no processes."""
        attrs = self._observe(DeviceReading(gpus=[self.GPU], processes_listed=False))
        assert ("unavailable", []) == (attrs["attribution"], attrs["processes"])

    def test_simulated_tree_match_is_innermost(self, tmp_path: Path) -> None:
        """A simulated 'tree' process is the innermost match: a parent whose argv also contains it is not."""
        path = tmp_path / "g.json"
        path.write_text(json.dumps(dict(GPUS, processes=[{"gpu": "GPU-0000", "pid": "tree", "argv_contains": "x"}])))
        tree = Tree(parents={10: 1, 11: 10, 12: 11}, argv=lambda pid: {10: ["sh", "x"], 11: ["x"], 12: ["y"]}[pid])
        assert [11] == [p[0] for p in SimulatedObserver(str(path)).read(tree).processes]


class TestLaneConfig:
    def test_names(self) -> None:
        """Each non-empty ALPHA_*_DEVICE_CONFIG is a lane config, by name."""
        env = {
            "ALPHA_PARTITIONED_DEVICE_CONFIG": "p.toml",
            "ALPHA_COORDINATE_DEVICE_CONFIG": "",
            "ALPHA_INDEPENDENT_DEVICE_CONFIG": "/abs/i.toml",
            "ALPHA_DEVICE_CONFIG_X": "no",
            "PATH": "/bin",
        }
        assert [
            ("ALPHA_INDEPENDENT_DEVICE_CONFIG", "/abs/i.toml"),
            ("ALPHA_PARTITIONED_DEVICE_CONFIG", "p.toml"),
        ] == lane_configs(env)

    def test_captured_by_the_recorder_before_the_command(self, tmp_path: Path) -> None:
        """The config file is captured, origin recorder, before process.start; the command's rewrite is not it."""
        conf = tmp_path / "lane.toml"
        conf.write_bytes(b"[gpus]\nbound = [0, 1]\n")
        script = "echo 'bound = [9]' > lane.toml && alpha observe artifact lane.toml"
        proc, path = record(
            tmp_path,
            ["sh", "-c", script],
            "--quiet",
            env={"ALPHA_PARTITIONED_DEVICE_CONFIG": "lane.toml"},
            cwd=tmp_path,
        )
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        arts = [(i, e.attrs) for i, e in enumerate(evs) if e.kind == "artifact"]
        ours = [(i, a) for i, a in arts if a.get("origin") == "recorder"]
        assert 1 == len(ours)
        at, attrs = ours[0]
        assert at < index(evs, "process.start")
        assert "ALPHA_PARTITIONED_DEVICE_CONFIG" == attrs["env"]
        assert hashlib.sha256(b"[gpus]\nbound = [0, 1]\n").hexdigest() == attrs["sha256"]
        chunk = next(e for e in evs if e.kind == "artifact.chunk" and e.attrs["path"] == attrs["path"])
        assert b"[gpus]\nbound = [0, 1]\n" == chunk.data
        theirs = [a for _, a in arts if a.get("origin") != "recorder"]
        assert 1 == len(theirs)
        assert not {"origin", "env"} & set(theirs[0])

    def test_missing_config_is_recorded(self, tmp_path: Path) -> None:
        """A config variable naming no file is recorded (unreadable, origin recorder), not skipped."""
        proc, path = record(
            tmp_path, ["true"], "--quiet", env={"ALPHA_COORDINATE_DEVICE_CONFIG": str(tmp_path / "none.toml")}
        )
        assert 0 == proc.returncode
        attrs = one(events(path), "artifact").attrs
        assert ("unreadable", "recorder", "ALPHA_COORDINATE_DEVICE_CONFIG") == (
            attrs["kind"],
            attrs["origin"],
            attrs["env"],
        )

    def test_a_client_cannot_send_origin(self, tmp_path: Path) -> None:
        """An artifact request carrying origin/env is refused (recorder.error): no forged recorder capture."""
        (tmp_path / "lane.toml").write_text("bound = [0]\n")
        forger = tmp_path / "forge.py"
        forger.write_text(
            "import json, os, socket\n"
            "from observe.channel.protocol import encode_json\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(os.environ['AOS_CONTROL'])\n"
            "s.sendall(encode_json({'op': 'artifact', 'paths': ['lane.toml'], 'cwd': os.getcwd(), 'step': None,\n"
            "  'origin': 'recorder', 'env': 'ALPHA_PARTITIONED_DEVICE_CONFIG'}))\n"
            "s.settimeout(10); print(s.recv(100) == b'')\n"
        )
        proc, path = record(
            tmp_path, [sys.executable, str(forger)], "--quiet", "--observe-devices", "off", cwd=tmp_path
        )
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        assert not [e for e in evs if e.kind == "artifact"]
        assert "may not set 'origin'" in one(evs, "recorder.error").attrs["error"]


class TestStepPid:
    def test_step_start_pid_is_the_client(self, tmp_path: Path) -> None:
        """step.start's pid is the step client's; its process is the step's command, the recorder's own child."""
        script = (
            "alpha observe step s -- python3 -c 'import os; print(os.getpid(), os.getppid())' & echo $! > client; wait"
        )
        proc, path = record(tmp_path, ["sh", "-c", script], "--quiet", "--observe-devices", "off", cwd=tmp_path)
        assert 0 == proc.returncode
        evs = events(path)
        start = one(evs, "step.start")
        pid, ppid = (int(x) for x in output(evs, step=start.step).split())
        assert (pid, ppid) == (start.attrs["process"], one(evs, "stream.open").attrs["pid"])
        assert int((tmp_path / "client").read_text()) == start.attrs["pid"]
        assert start.attrs["pid"] == one(evs, "step.end").attrs["pid"]

    def test_a_client_lying_about_its_pid_is_ignored(self, tmp_path: Path) -> None:
        """A client that says it is pid 1 is recorded with its real pid, from the socket."""
        liar = tmp_path / "liar.py"
        liar.write_text(
            "import os, socket\n"
            "from observe.channel.protocol import encode_json\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(os.environ['AOS_CONTROL'])\n"
            "s.sendall(encode_json({'op': 'step.start', 'span': 'abcd', 'name': 'liar', 'argv': [], 'parent': None,"
            " 'pid': 1}))\n"
            "s.settimeout(10); s.recv(4096)\n"
            "s.sendall(encode_json({'op': 'step.end', 'exit_code': 0, 'pid': 1})); s.recv(4096)\n"
            "print(os.getpid())\n"
        )
        proc, path = record(tmp_path, [sys.executable, str(liar)], "--quiet", "--observe-devices", "off")
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        real = int(output(evs))
        assert real == one(evs, "step.start").attrs["pid"]
        assert real == one(evs, "step.end").attrs["pid"]


class TestProcessTree:
    """ProcessTree: every descendant of the root, by the kernel's children files or by psutil."""

    @pytest.mark.parametrize("children_files", [True, False])
    def test_grandchildren_are_in_the_tree(self, children_files: bool) -> None:
        """A child and its two children are found, each with its parent, and counted by usage()."""
        import signal
        import time

        from observe.recorder.sampler import ProcessTree

        tree = ProcessTree()
        tree.use_children_files = children_files and tree.use_children_files
        before = tree.usage(tree.snapshot())["processes"]  # the session's servers, started by other tests
        proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
        kids: list[int] = []
        try:
            deadline = time.monotonic() + 20
            while True:
                snap = tree.snapshot()
                kids = sorted(pid for pid, parent in snap.parents.items() if parent == proc.pid)
                # both forked and exec'd: a child forked by sh still shows sh's argv until its exec
                execd = len(kids) == 2 and all(snap.argv(k) == ["sleep", "30"] for k in kids)
                if execd or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert os.getpid() == snap.parents[proc.pid]
            assert 2 == len(kids)
            assert ["sleep", "30"] == snap.argv(kids[0])
            assert [kids[0], proc.pid] == snap.ancestry(kids[0])
            usage = tree.usage(snap)
            assert 3 == usage["processes"] - before
            assert usage["rss"] > 0
        finally:
            for pid in kids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()

    def test_a_walk_that_misses_the_command_falls_back_to_psutil(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Where the children files do not list the command (a kernel without them), psutil finds the tree."""

        from observe.recorder import sampler

        proc = subprocess.Popen(["sleep", "30"])
        try:
            monkeypatch.setattr(sampler, "_children_files", lambda _pid: [])
            tree = sampler.ProcessTree()
            tree.expected = proc.pid
            assert os.getpid() == tree.snapshot().parents[proc.pid]
            assert not tree.use_children_files
        finally:
            proc.kill()
            proc.wait()


class TestShow:
    def test_show_names_the_observation(self, tmp_path: Path) -> None:
        """alpha observe show says which observer saw which GPUs and how many tree processes ran on them."""
        from tests.helpers.run import alpha

        doc = dict(GPUS, processes=[{"gpu": "GPU-1111", "pid": "tree", "argv_contains": "gpu-worker-marker"}])
        _train(tmp_path, doc)
        path = max(tmp_path.glob("run-*.aos"))
        shown = alpha("observe", "show", str(path)).stdout.decode()
        line = next(x for x in shown.splitlines() if x.startswith("devices "))
        assert line.startswith("devices    observer simulated, driver 580.159.04: 2 GPUs (NVIDIA H200); ")
        assert line.endswith("of the recorded tree seen on a GPU")
        assert "; 0 processes" not in line
        _proc, off = record(tmp_path, ["true"], "--observe-devices", "off")
        assert "devices    not observed" in alpha("observe", "show", str(off)).stdout.decode()


class TestOddArgv:
    def test_an_exec_is_seen_at_the_next_sample(self) -> None:
        """A process that exec()s keeps its pid: the next sample reads its new argv, not the old one."""
        import time

        from observe.recorder.sampler import ProcessTree

        code = "import os, time; time.sleep(2); os.execv('/bin/sleep', ['sleep', '30'])"
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            tree = ProcessTree()
            before = None
            deadline = time.monotonic() + 1.5
            while before is None and time.monotonic() < deadline:  # a process still starting shows no argv
                before = tree.snapshot().argv(child.pid)
                time.sleep(0.01)
            assert before is not None
            assert sys.executable == before[0]
            deadline = time.monotonic() + 30
            after = before
            while after == before and time.monotonic() < deadline:
                time.sleep(0.1)
                after = tree.snapshot().argv(child.pid)
            assert ["sleep", "30"] == after
        finally:
            child.kill()
            child.wait()

    def test_a_non_utf8_argv_in_the_tree_is_recorded(self, tmp_path: Path) -> None:
        """A tree process on a GPU whose argv is not UTF-8 is recorded (escaped), never a failed recording."""
        doc = dict(GPUS, processes=[{"gpu": "GPU-0000", "pid": "tree", "argv_contains": "odd-marker"}])
        script = "import os; os.execv('/bin/sh', [b'sh', b'-c', b'sleep 2; true', b'odd-marker\\xff'])"
        proc, path = record(tmp_path, [sys.executable, "-c", script], "--quiet", *FAST, env=_simulated(tmp_path, doc))
        assert 0 == proc.returncode, proc.stderr
        argvs = [p["argv"] for a in _observed(events(path)) for p in a["processes"]]
        assert ["sh", "-c", "sleep 2; true", "odd-marker\\xff"] in argvs
