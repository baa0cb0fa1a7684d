"""What a GPU process is, as the recorder reads it: the SHA-256 of what the kernel executed, never its argv."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from observe.devices.identity import Identities
from observe.devices.namespace import PROC_PID_INIT_INO, namespace_facts
from observe.devices.observers import DeviceReading, GpuReading, NoObserver, Tree, observation
from tests.helpers.recorder import events, record

GIB = 1 << 30
SLEEP = shutil.which("sleep") or "/bin/sleep"


def _sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _argv(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def _start(procs: list[subprocess.Popen[bytes]], argv: list[str], cwd: Path, wait: str | None = None) -> int:
    """Start ``argv`` in ``cwd``; return its pid once its argv[0] is ``wait`` (it has exec'd) or, without one,
    once it has touched ``cwd/ready`` (its first instruction: the interpreter has opened its script, and
    python has closed it again, having read it whole). Never a fixed sleep: under load a start takes any time."""
    p = subprocess.Popen(argv, cwd=cwd)
    procs.append(p)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (_argv(p.pid)[:1] == [wait]) if wait is not None else (cwd / "ready").exists():
            break
        time.sleep(0.02)
    return p.pid


class TestIdentities:
    def test_renamed_copy_started_with_exec_a_is_its_bytes(self, tmp_path: Path, started: list[Any]) -> None:
        """`exec -a owner-0` of a renamed copy: argv[0] says owner-0, exe is the copy's bytes, the original's digest."""
        copy = tmp_path / "worker"
        shutil.copy(SLEEP, copy)
        pid = _start(started, ["bash", "-c", f"exec -a owner-0 {copy} 30"], tmp_path, wait="owner-0")
        ident = Identities().read(pid, _argv(pid))
        assert "owner-0" == _argv(pid)[0]
        assert (str(copy), _sha(SLEEP), None) == (ident.exe["path"], ident.exe["sha256"], ident.script)

    def test_bash_script_is_the_file_it_holds(self, tmp_path: Path, started: list[Any]) -> None:
        """bash holds its script open: script is that file's digest, read through the descriptor."""
        script = tmp_path / "role.sh"
        script.write_text("touch ready\nsleep 30\n")
        pid = _start(started, ["bash", "role.sh"], tmp_path)
        ident = Identities().read(pid, _argv(pid))
        assert ident.script is not None
        assert (str(script), _sha(script), 255) == (ident.script["path"], ident.script["sha256"], ident.script["fd"])
        assert os.path.basename(ident.exe["path"]).startswith("bash")

    def test_python_that_closed_its_script_has_none(self, tmp_path: Path, started: list[Any]) -> None:
        """python closes its script once read: no script identity (so such a process is tied to no role)."""
        script = tmp_path / "helper.py"
        script.write_text("import pathlib, time\npathlib.Path('ready').touch()\ntime.sleep(30)\n")
        pid = _start(started, [sys.executable, "helper.py"], tmp_path)
        ident = Identities().read(pid, _argv(pid))
        assert ident.script is not None
        assert (None, "it holds no file that its argv names open") == (ident.script["sha256"], ident.script["error"])

    def test_python_holding_its_own_file(self, tmp_path: Path, started: list[Any]) -> None:
        """A python program that holds its own file (as the lane's role executables do) is known by it."""
        script = tmp_path / "role.py"
        script.write_text(
            "import pathlib, time\n_held = open(__file__, 'rb')\npathlib.Path('ready').touch()\ntime.sleep(30)\n"
        )
        pid = _start(started, [sys.executable, "role.py", "serve"], tmp_path)
        ident = Identities().read(pid, _argv(pid))
        assert ident.script is not None
        assert _sha(script) == ident.script["sha256"]

    def test_unreadable_process_is_recorded_not_raised(self) -> None:
        """A pid that does not exist: the error is recorded, no digest."""
        ident = Identities().read(2**22 + 7, None)
        assert (None, None) == (ident.exe["sha256"], ident.script)


class TestNamespace:
    @pytest.mark.parametrize(
        ("ns", "expected"), [(f"pid:[{PROC_PID_INIT_INO}]", "initial"), ("pid:[4026532601]", "other")]
    )
    def test_initial_or_not(self, tmp_path: Path, ns: str, expected: str) -> None:
        """The initial PID namespace is known by its fixed inode; markers of a container are listed."""
        (tmp_path / "proc" / "self" / "ns").mkdir(parents=True)
        (tmp_path / "proc" / "self" / "ns" / "pid").symlink_to(ns)
        (tmp_path / "proc" / "self" / "status").write_text("Name:\tx\nNSpid:\t1\n")
        (tmp_path / "proc" / "1").mkdir()
        (tmp_path / "proc" / "1" / "cgroup").write_text("0::/kubepods/besteffort/pod1\n")
        (tmp_path / ".dockerenv").write_text("")
        facts = namespace_facts({"container": "podman"}, root=str(tmp_path))
        assert (expected, ns, None, [1]) == (facts["pid"], facts["ns"], facts["pid1_ns"], facts["nspid"])
        assert ["/.dockerenv", "/proc/1/cgroup: kubepods", "container=podman"] == facts["markers"]

    def test_here(self) -> None:
        """On this machine the answer is one of the three, never an exception."""
        assert namespace_facts(os.environ)["pid"] in ("initial", "other", "unknown")


class TestUnexplained:
    GPU = GpuReading(index=0, minor=0, uuid="GPU-0", name="H200", memory=GIB, memory_used=900 << 20, utilization=30)

    def _gpu(self, reading: DeviceReading, recent: tuple[str, ...] = ()) -> dict[str, Any]:
        attrs = observation("sample", NoObserver(), reading, Tree(), [], baseline={}, mask=str, recent=recent)
        gpu: dict[str, Any] = attrs["gpus"][0]
        return gpu

    def test_memory_and_activity_with_no_process_listed(self) -> None:
        """No process listed: all memory in use and the utilisation are unexplained."""
        gpu = self._gpu(DeviceReading(gpus=[self.GPU]))
        assert (0, 900 << 20, 30) == (gpu["listed_memory"], gpu["unexplained_memory"], gpu["unexplained_utilization"])

    def test_listed_processes_explain_theirs(self) -> None:
        """Listed processes explain their memory and the activity; a GPU that listed one within 2 s too."""
        gpu = self._gpu(DeviceReading(gpus=[self.GPU], processes=[(7, "GPU-0", 600 << 20)]))
        assert (600 << 20, 300 << 20, 0) == (
            gpu["listed_memory"],
            gpu["unexplained_memory"],
            gpu["unexplained_utilization"],
        )
        assert 0 == self._gpu(DeviceReading(gpus=[self.GPU]), recent=("GPU-0",))["unexplained_utilization"]


def test_recording_names_what_each_gpu_process_executes(tmp_path: Path) -> None:
    """A real process on a simulated GPU, started as `exec -a owner-0` of a renamed copy of sleep, and a tenant the
    simulated NVML does not list: the observation has the copy's digest, the namespace, and the tenant's memory as
    unexplained."""
    copy = tmp_path / "worker"
    shutil.copy(SLEEP, copy)
    doc = {
        "driver": "580.159.04",
        "gpus": [{"index": 0, "minor": 0, "uuid": "GPU-0000", "name": "NVIDIA H200", "memory": 141 * GIB}],
        "processes": [
            {"gpu": "GPU-0000", "pid": "tree", "argv_contains": "owner-0", "used_memory": 600 << 20},
            {"gpu": "GPU-0000", "pid": 1, "used_memory": 1 << 30, "utilization": 20, "listed": False},
        ],
    }
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps(doc))
    proc, path = record(
        tmp_path,
        ["bash", "-c", f"exec -a owner-0 {copy} 1"],
        "--quiet",
        "--sample-interval",
        "0.05",
        env={"ALPHA_OBSERVE_SIMULATED_GPUS": str(sim)},
    )
    assert 0 == proc.returncode, proc.stderr
    observed = [e.attrs for e in events(path) if e.kind == "device.observed"]
    listed = [p for o in observed for p in o["processes"]]
    assert listed
    assert {(str(copy), _sha(SLEEP))} == {(p["exe"]["path"], p["exe"]["sha256"]) for p in listed}
    assert {"owner-0"} == {p["argv"][0] for p in listed}
    assert all(o["namespace"]["pid"] in ("initial", "other", "unknown") for o in observed)
    start = observed[0]["gpus"][0]
    assert ((1 << 30), "default") == (start["unexplained_memory"], start["compute_mode"])
    busy = next(o["gpus"][0] for o in observed if o["processes"])
    assert (600 << 20, 1 << 30) == (busy["listed_memory"], busy["unexplained_memory"])
