"""The three device lanes at N GPUs per run, end to end under their gates (DESIGN "Any number of GPUs").

Each lane runs from a committed copy of the repository (so the recorder's rebuild of every role runs), on the
CPU test doubles (samples/lane/testing: a fake nvidia-smi listing N cards, a fake torch), observed by the
recorder's simulated observer: every check passes but ``devices-observed``, which a simulation never passes.
At N = 4 on this machine (``loopback``) and over two real sshd nodes carrying two roles each (``ssh-tunnel``,
``"minors": [0, 1]`` per node); at N = 8 on this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aos.reader import read_stream
from tests.helpers.eagain import retry_eagain
from tests.helpers.paths import ROOT
from tests.helpers.run import ALPHA, child_env
from tests.helpers.sshd import lane_readable, observer_args, observer_env

TESTING = ROOT / "samples" / "lane" / "testing"
VARIABLE = {
    "distributed-device": "ALPHA_PARTITIONED_DEVICE_CONFIG",
    "coordinate-device": "ALPHA_COORDINATE_DEVICE_CONFIG",
    "independent-device": "ALPHA_INDEPENDENT_DEVICE_CONFIG",
}
GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # the lanes run for real under their gates


def cards(count: int, tag: int = 0) -> list[dict[str, Any]]:
    """``count`` fake cards (minors 0..count-1); ``tag`` tells the cards of one host from another's."""
    return [
        {
            "minor": i,
            "uuid": f"GPU-fa4e{tag:04d}-0000-4000-8000-{i:012d}",
            "product": "NVIDIA GeForce RTX 3090",
            "driver": "580.65.06",
        }
        for i in range(count)
    ]


#: Session-scoped, as the lanes below: a worker builds them once, however its tests are ordered.
@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed copy of what the lanes run from (scripts, samples/lane, the one config reader)."""
    root = tmp_path_factory.mktemp("n-gpu-repo") / "repo"
    for part in ("scripts", "samples/lane"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "observe" / "devices").mkdir(parents=True)
    shutil.copyfile(ROOT / "observe" / "devices" / "lane_config.py", root / "observe" / "devices" / "lane_config.py")
    (root / ".gitignore").write_text("runs/\n__pycache__/\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "lane"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env={**os.environ, **GIT})
    return root


def start(repo: Path, gate: str, name: str, config: dict[str, Any], env: dict[str, str]) -> subprocess.Popen[str]:
    """Start ``gate`` over its lane script in ``repo`` (output and stream under ``repo/runs/NAME``)."""
    folder = repo / "runs" / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    simulated = subprocess.check_output([sys.executable, str(TESTING / "gpus.py"), "--simulated"], env=env)
    (folder / "simulated.json").write_bytes(simulated)
    full = {
        **env,
        VARIABLE[gate]: str(folder / "config.json"),
        "ALPHA_OBSERVE_SIMULATED_GPUS": str(folder / "simulated.json"),
    }
    argv = [ALPHA, "observe", "gate", gate, "--out", str(folder / "lane.aos"), "--quiet"]
    if any(isinstance(n, dict) and n.get("host") for n in config.get("nodes", [])):
        argv += observer_args()
        full.update(observer_env())
    argv += ["--", "bash", f"scripts/ci/{gate}.sh", f"runs/{name}/out"]
    return retry_eagain(
        lambda: subprocess.Popen(
            argv, cwd=repo, env=child_env(full), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ),
        f"the {gate} lane",
    )


def finish(repo: Path, name: str, proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The run's exit code, verdict, events and output folder."""
    output, _ = proc.communicate(timeout=280)
    stream = repo / "runs" / name / "lane.aos"
    shown = subprocess.run([ALPHA, "observe", "verdict", str(stream), "--json"], capture_output=True, text=True)
    assert shown.stdout, output[-3000:]
    return {
        "code": proc.returncode,
        "verdict": json.loads(shown.stdout),
        "events": read_stream(stream).events,
        "out": repo / "runs" / name / "out",
    }


def local_env(count: int) -> dict[str, str]:
    """This machine as a pod of ``count`` fake cards."""
    return {
        "PATH": f"{TESTING / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(TESTING), os.environ.get("PYTHONPATH")) if p),
        "FAKE_GPUS": json.dumps(cards(count)),
    }


def local_config(repo: Path, count: int) -> dict[str, Any]:
    remote = repo.parent / f"remote-{count}"
    return {
        "owner": "test",
        "pod_ids": ["pod"],
        "host": "local",
        "minors": list(range(count)),
        "remote_root": str(remote),
        "transport": "loopback",
    }


def open_checks(run: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in run["verdict"]["checks"] if c["status"] != "pass"}


def reason(run: dict[str, Any], name: str) -> str:
    return str(next(c["reason"] for c in run["verdict"]["checks"] if c["name"] == name))


def receipts(run: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e.attrs["fields"] for e in run["events"] if e.kind == "receipt" and e.attrs.get("name") == name]


@pytest.fixture(scope="session")
def local_runs(repo: Path) -> dict[str, dict[str, Any]]:
    """The three lanes at N = 4 and the coordinate lane at N = 8 on this machine, started at once."""
    plan = {f"{gate}-4": (gate, 4) for gate in VARIABLE} | {"coordinate-device-8": ("coordinate-device", 8)}
    started = {
        name: start(repo, gate, name, local_config(repo, count), local_env(count))
        for name, (gate, count) in plan.items()
    }
    return {name: {"count": plan[name][1], **finish(repo, name, proc)} for name, proc in started.items()}


@pytest.mark.parametrize("name", [*(f"{g}-4" for g in sorted(VARIABLE)), "coordinate-device-8"])
def test_n_gpus_on_one_node_open_only_on_devices_observed(name: str, local_runs: dict[str, dict[str, Any]]) -> None:
    """N roles on this machine: every check passes (the oracle's bytes for N, the rebuild of all N roles) but
    devices-observed, open for the simulated cards."""
    run = local_runs[name]
    count = run["count"]
    assert (3, "inconclusive", "physical") == (run["code"], run["verdict"]["verdict"], run["verdict"]["scope"])
    assert {"devices-observed": "inconclusive"} == open_checks(run), run["verdict"]["summary"]
    assert "simulated" in reason(run, "devices-observed")
    assert f"out/static/owner-{count - 1}.pyz" in reason(run, "rebuild")
    roles = [f"owner-{i}" for i in range(count)]
    assert roles == [r["role"] for r in receipts(run, "static-build")] == [r["role"] for r in receipts(run, "build")]
    (pre,) = receipts(run, "preflight")
    assert [c["uuid"] for c in cards(count)] == [g["uuid"] for g in pre["gpus"]]
    binding = json.loads((run["out"] / "binding.json").read_text())
    assert roles == sorted(binding["roles"], key=lambda r: int(r.split("-")[1]))
    # the refusal controls for every role: each built wrong in turn, each refused by name, nothing written
    for control in receipts(run, "refusal-control"):
        refused = [(r["role"], r["exit_name"], r["checkpoint_written"], r["output_bytes"]) for r in control["roles"]]
        assert [(role, control["expected"], False, 0) for role in roles] == refused


# -- over two sshd nodes, two roles each ----------------------------------------------------------------


@pytest.fixture(scope="session")
def tunnel_runs(repo: Path, ssh_nodes: list[Any]) -> dict[str, dict[str, Any]]:
    """The three lanes at N = 4 over two sshd nodes (ssh-tunnel), each node carrying two roles on its own two
    fake cards (minors 0 and 1 on each host), started at once."""
    testing = lane_readable(TESTING)
    started = {}
    for gate in sorted(VARIABLE):
        name = f"tunnel-{gate}"
        entries = []
        for k, node in enumerate(ssh_nodes):
            env = {"FAKE_GPUS": json.dumps(cards(2, tag=k + 1))}
            entries.append(node.config(remote_root=str(node.lane_folder(name)), minors=[0, 1], node_env=env))
        node_env = {"PATH": f"{testing / 'bin'}:/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(testing)}
        config = {"owner": "t", "pod_ids": ["a", "b"], "transport": "ssh-tunnel", "node_env": node_env}
        config["nodes"] = entries
        started[name] = start(repo, gate, name, config, {"FAKE_GPUS": json.dumps(cards(2, tag=1))})
    return {name: finish(repo, name, proc) for name, proc in started.items()}


@pytest.mark.parametrize("gate", sorted(VARIABLE))
def test_four_gpus_over_two_nodes_open_only_on_devices_observed(
    gate: str, tunnel_runs: dict[str, dict[str, Any]], ssh_nodes: list[Any]
) -> None:
    """Four roles over two sshd nodes of two roles each: every check passes but devices-observed; each node's
    roles ran there (their executables uploaded to it alone), and each node was observed start to end."""
    run = tunnel_runs[f"tunnel-{gate}"]
    assert (3, "inconclusive") == (run["code"], run["verdict"]["verdict"]), run["verdict"]["summary"]
    assert {"devices-observed": "inconclusive"} == open_checks(run), run["verdict"]["summary"]
    nodes = {f"owner-{i}": ssh_nodes[i // 2] for i in range(4)}
    for b in receipts(run, "build"):
        node = nodes[b["role"]]
        assert b["node"].endswith(f":{node.port}"), b
        assert b["remote"].startswith(str(node.root))
    observed = [e.attrs for e in run["events"] if e.kind == "device.observed" and e.attrs.get("node")]
    for node in ssh_nodes:
        mine = [o for o in observed if o["node"]["port"] == node.port]
        assert ["start", "end"] == [mine[0]["phase"], mine[-1]["phase"]]
        assert [[0, 1], [2, 3]][ssh_nodes.index(node)] == mine[0]["node"]["roles"]
