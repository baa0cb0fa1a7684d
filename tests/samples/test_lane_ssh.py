"""The reference lane over SSH, against the suite's own OpenSSH servers (tests/helpers/sshd.py).

The nodes are real ``sshd`` instances on 127.0.0.1 with throwaway keys, set up as a pod
is: the lane logs into the unprivileged lane account, the recorder into root, the
observer account, with a key the command never sees (``--observer-key-env``); the roles run
there on the lane's CPU test doubles (samples/lane/testing, set for every node command by
the config's ``node_env``), so every physical step runs, and the gate stays open on
``devices-observed``: nothing the recorder observed is a GPU. Each lane runs once
end to end (one node with ``loopback``, two hosts with ``ssh-tunnel``); the refusals
(an unknown or changed host key, an executable replaced on the node, a node lost
between steps) run the lane's phases by hand against a node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aos.reader import read_stream
from tests.helpers.eagain import retry_eagain
from tests.helpers.paths import ROOT
from tests.helpers.run import ALPHA, child_env
from tests.helpers.sshd import LANE_USER, as_lane, lane_readable, observer_args, observer_env
from tests.helpers.workers import LANES_OVER_SSH

LANE = ROOT / "samples" / "lane"
TESTING = LANE / "testing"
VARIABLE = {
    "distributed-device": "ALPHA_PARTITIONED_DEVICE_CONFIG",
    "coordinate-device": "ALPHA_COORDINATE_DEVICE_CONFIG",
    "independent-device": "ALPHA_INDEPENDENT_DEVICE_CONFIG",
}
LANE_OF = {"distributed-device": "partitioned", "coordinate-device": "coordinates", "independent-device": "independent"}
# The lanes run in a temporary folder, which no git repository holds: nothing to rebuild from.
NO_REPOSITORY = {"rebuild": "inconclusive"}

pytestmark = [pytest.mark.timeout(240), LANES_OVER_SSH]


def _node_env() -> dict[str, str]:
    """What every command on a test node sees: the fake nvidia-smi and torch first (test doubles only, in a copy the
    lane account can read)."""
    testing = lane_readable(TESTING)
    return {"PATH": f"{testing / 'bin'}:/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(testing)}


def _loopback(node: Any, root: Path, **extra: Any) -> dict[str, Any]:
    """A one-pod config: both roles on ``node``, outputs under ``root`` there (the lane account's)."""
    root.mkdir(parents=True, exist_ok=True)
    as_lane(root)
    return {
        "owner": "test",
        "pod_ids": ["pod"],
        "minors": [0, 1],
        "transport": "loopback",
        "node_env": _node_env(),
        **node.config(remote_root=str(root)),
        **extra,
    }


def _tunnel(nodes: list[Any], name: str) -> dict[str, Any]:
    """A two-host config: owner-i (and, for owner-0, the coordinator) on ``nodes[i]``, its GPU minor i."""
    entries = []
    for i, node in enumerate(nodes):
        root = node.lane_folder(name)
        entries.append(node.config(remote_root=str(root), minors=[i]))
    env = _node_env()
    return {"owner": "test", "pod_ids": ["a", "b"], "transport": "ssh-tunnel", "node_env": env, "nodes": entries}


def _write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config, indent=1))
    return path


def _simulated(folder: Path) -> str:
    """The lane's fake cards as a simulated-observer file (samples/lane/testing/gpus.py), forged to claim NVML:
    the recorder sends it to each node's observer."""
    path = folder / "simulated-gpus.json"
    path.write_bytes(subprocess.check_output([sys.executable, str(TESTING / "gpus.py"), "--simulated", "--claim-nvml"]))
    return str(path)


def _start_gate(gate: str, folder: Path, config: Path) -> subprocess.Popen[str]:
    """Start a lane under its gate in ``folder`` (its stream: ``folder/GATE.aos``), each node observed by the
    recorder with the simulated observer, through the node's observer account."""
    script = ROOT / "scripts" / "ci" / f"{gate}.sh"
    stream = folder / f"{gate}.aos"
    options = ["--out", str(stream), "--quiet", *observer_args()]
    env = {VARIABLE[gate]: str(config), "ALPHA_OBSERVE_SIMULATED_GPUS": _simulated(folder), **observer_env()}
    return retry_eagain(
        lambda: subprocess.Popen(
            [ALPHA, "observe", "gate", gate, *options, "--", "bash", str(script), "out"],
            cwd=folder,
            env=child_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        f"the {gate} lane",
    )


def _finish_gate(gate: str, folder: Path, proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any], Path]:
    """Wait for a started gate; its exit code, the verdict and the stream."""
    output, _ = proc.communicate(timeout=220)
    stream = folder / f"{gate}.aos"
    verdict = subprocess.run(
        [ALPHA, "observe", "verdict", str(stream), "--json"], capture_output=True, text=True, check=False
    )
    assert verdict.stdout, output[-3000:]
    return proc.returncode, json.loads(verdict.stdout), stream


def _gate(gate: str, folder: Path, config: Path) -> tuple[int, dict[str, Any], Path]:
    """Run a lane under its gate in ``folder``; the exit code, the verdict and the stream."""
    return _finish_gate(gate, folder, _start_gate(gate, folder, config))


def _phase(phase: str, lane: str, out: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """One lane phase by hand, outside a recording (receipts go to stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "lanekit", phase, lane, str(out), str(config)],
        env=child_env({"PYTHONPATH": str(LANE)}),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _receipts(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    prefix = "receipt (not recording): "
    found = [json.loads(line[len(prefix) :]) for line in done.stderr.splitlines() if line.startswith(prefix)]
    return {r["name"]: r for r in found}


def _open_checks(verdict: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in verdict["checks"] if c["status"] != "pass"}


# -- the three lanes end to end over SSH -------------------------------------------------------

RUNS = [("coordinate-device", "loopback"), ("distributed-device", "ssh-tunnel"), ("independent-device", "ssh-tunnel")]


@pytest.fixture(scope="module")
def lane_runs(
    ssh_node: Any, ssh_nodes: list[Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each lane recorded under its gate with its roles on SSH nodes, the three at once (shared by the tests)."""
    started = {}
    for gate, transport in RUNS:
        folder = tmp_path_factory.mktemp(f"ssh-{gate}")
        name = f"run-{folder.name}"
        nodes = [ssh_node] if transport == "loopback" else ssh_nodes
        config = _loopback(ssh_node, ssh_node.root / name) if transport == "loopback" else _tunnel(ssh_nodes, name)
        proc = _start_gate(gate, folder, _write(folder / "config.json", config))
        started[gate, transport] = (folder, nodes, config, proc)
    runs = {}
    for (gate, transport), (folder, nodes, config, proc) in started.items():
        code, verdict, stream = _finish_gate(gate, folder, proc)
        runs[gate, transport] = {
            "gate": gate,
            "transport": transport,
            "nodes": nodes,
            "roots": [Path(n["remote_root"]) for n in config.get("nodes", [config])],
            "code": code,
            "verdict": verdict,
            "events": read_stream(stream).events,
            "out": folder / "out",
        }
    return runs


@pytest.fixture(params=RUNS, ids=[f"{g}-{t}" for g, t in RUNS])
def lane_run(request: pytest.FixtureRequest, lane_runs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """One of the three lane runs."""
    run: dict[str, Any] = lane_runs[request.param]
    return run


class TestLanesOverSsh:
    def test_open_only_on_devices_observed(self, lane_run: dict[str, Any]) -> None:
        """Every check passes but devices-observed (no GPU observed: test doubles) and the rebuild (no repository)."""
        verdict = lane_run["verdict"]
        expected = {"devices-observed": "inconclusive", **NO_REPOSITORY}
        assert (3, "inconclusive", "physical", expected) == (
            lane_run["code"],
            verdict["verdict"],
            verdict["scope"],
            _open_checks(verdict),
        ), verdict["summary"]

    def test_each_node_is_observed_by_the_recorder_and_named_in_the_reason(self, lane_run: dict[str, Any]) -> None:
        """The recorder observed every node of the config over its own connection (the node's host key verified,
        the simulated observer there, from start to end); devices-observed names the simulated observer."""
        observed = [e.attrs for e in lane_run["events"] if e.kind == "device.observed" and e.attrs.get("node")]
        ports = {n.port for n in lane_run["nodes"]}
        assert ports == {o["node"]["port"] for o in observed}
        for port in ports:
            mine = [o for o in observed if o["node"]["port"] == port]
            assert ["start", "end"] == [mine[0]["phase"], mine[-1]["phase"]]
            assert all(o["node"]["host_key_verified"] and o["simulated_from"] for o in mine)
            first = mine[0]["node"]
            assert ("root", LANE_USER, True) == (first["user"], first["lane_user"], first["lane_uid"] != 0)
            # the node's facts are written once, in its first observation; later ones name the node and its key
            assert all("lane_user" not in o["node"] and o["node"]["user"] == "root" for o in mine[1:])
        reason = next(c["reason"] for c in lane_run["verdict"]["checks"] if c["name"] == "devices-observed")
        assert "simulated" in reason, reason

    def test_each_role_runs_on_its_node_as_a_recorder_step(self, lane_run: dict[str, Any]) -> None:
        """Each participant of every run is a step the recorder ran: ssh to its node, exit 0, nested in its phase."""
        events = lane_run["events"]
        starts = {e.step: e.attrs for e in events if e.kind == "step.start"}
        ends = {e.step: e.attrs for e in events if e.kind == "step.end"}
        nodes = lane_run["nodes"]
        where = {"coordinator": 0, "owner-0": 0, "owner-1": 0 if lane_run["transport"] == "loopback" else 1}
        runs = ("uninterrupted-run", "split-run.before", "split-run.after")
        seen = set()
        for span, start in starts.items():
            phase, _, member = str(start["name"]).rpartition(".")
            if phase not in runs or member not in where:
                continue
            argv = start["argv"]
            node = nodes[where[member]]
            assert ("recorder", "ssh", node.host, str(node.port)) == (
                start["runner"],
                os.path.basename(argv[0]),
                argv[argv.index("--") - 1],
                argv[argv.index("-p") + 1],
            )
            assert starts[start["parent"]]["name"] == phase.split(".")[0]
            assert 0 == ends[span]["exit_code"]
            seen.add((phase, member))
        assert {(p, m) for p in runs for m in where} == seen

    def test_executables_on_the_nodes_and_outputs_copied_back(self, lane_run: dict[str, Any]) -> None:
        """Each node holds its roles' built executables; the run's outputs there equal the copies the gate judged."""
        lane = LANE_OF[lane_run["gate"]]
        out = lane_run["out"]
        roots = lane_run["roots"]
        for role in ("owner-0", "owner-1"):
            root = roots[0 if len(roots) == 1 else int(role[-1])] / lane
            assert (out / "build" / f"{role}.pyz").read_bytes() == (root / f"{role}.pyz").read_bytes()
        if len(roots) == 2:
            assert not (roots[1] / lane / "owner-0.pyz").exists()  # each host gets its own role's only
        (run,) = (roots[0] / lane / "runs").glob("uninterrupted-run-*")
        for name in ("checkpoint", "trajectory", "membership"):
            assert (run / f"{name}.json").read_bytes() == (out / "uninterrupted" / f"{name}.json").read_bytes()


# -- refusals ------------------------------------------------------------------------------------


class TestHostKeys:
    def test_unknown_host_key_is_refused_under_the_gate(self, ssh_node: Any, tmp_path: Path) -> None:
        """A node whose host key the named known_hosts does not hold: preflight refuses by name, the lane stops."""
        empty = tmp_path / "known_hosts"
        empty.write_text("")
        config = _loopback(ssh_node, ssh_node.root / "unknown", known_hosts=str(empty))
        config_path = _write(tmp_path / "config.json", config)
        code, verdict, stream = _gate("coordinate-device", tmp_path, config_path)
        events = read_stream(stream).events
        (span,) = [e.step for e in events if e.kind == "step.start" and e.attrs["name"] == "preflight"]
        stderr = b"".join(e.data or b"" for e in events if e.kind == "stderr" and e.step == span)
        end = next(e.attrs for e in events if e.kind == "step.end" and e.step == span)
        assert (27, True) == (end["exit_code"], b"refused: host-key-unknown: " in stderr)
        # A refusal of the lane's own setup before anything else ran: not a fail, it did not run (issue 31).
        assert (3, "inconclusive") == (code, verdict["verdict"]), verdict["summary"]
        assert "did not run: host-key-unknown" in verdict["summary"]
        assert not [c["name"] for c in verdict["checks"] if c["status"] == "fail"]
        (pre,) = [e.attrs for e in events if e.kind == "receipt" and e.attrs["name"] == "preflight"]
        assert ("inconclusive", []) == (pre["status"], pre["fields"]["gpus"])
        assert "refused: host-key-unknown: " in pre["fields"]["reason"]
        # Nothing ran on the node, and what the lane had made is kept.
        assert not (ssh_node.root / "unknown" / "coordinates").exists()
        assert (tmp_path / "out" / "static" / "owner-0.pyz").exists()
        assert (tmp_path / "out" / "lane-config.json").exists()

    def test_changed_host_key_is_refused(self, ssh_nodes: list[Any], tmp_path: Path) -> None:
        """known_hosts holds another key for the node (a re-keyed or impersonated host): refused, never accepted."""
        a, b = ssh_nodes
        other_key = " ".join(b.host_key_pub.split()[:2])
        changed = tmp_path / "known_hosts"
        changed.write_text(f"[127.0.0.1]:{a.port} {other_key}\n")
        config = _write(tmp_path / "config.json", _loopback(a, a.root / "changed", known_hosts=str(changed)))
        done = _phase("preflight", "coordinates", tmp_path / "out", config)
        assert 28 == done.returncode, done.stderr
        assert "refused: host-key-changed: " in done.stderr
        assert "inconclusive" == _receipts(done)["preflight"]["status"]
        assert not (tmp_path / "out" / "binding.json").exists()
        assert (tmp_path / "out" / "lane-config.json").exists()


def _built(node: Any, folder: Path, lane: str) -> tuple[Path, Path, Path]:
    """Preflight and build by hand on ``node`` (loopback): the config, OUT and the lane's folder on the node."""
    folder.mkdir(parents=True, exist_ok=True)
    config = _write(folder / "config.json", _loopback(node, node.root / folder.name))
    out = folder / "out"
    for phase in ("preflight", "build"):
        done = _phase(phase, lane, out, config)
        assert 0 == done.returncode, done.stderr
    return config, out, node.root / folder.name / lane


class TestOnTheNode:
    def test_replaced_executable_is_refused_and_nothing_runs(self, ssh_node: Any, tmp_path: Path) -> None:
        """An executable replaced on the node after its upload: refused (remote-digest) before any role starts."""
        config, out, remote = _built(ssh_node, tmp_path, "independent")
        shutil.copyfile(remote / "owner-0.pyz", remote / "owner-1.pyz")  # a real executable, not the one built
        done = _phase("uninterrupted-run", "independent", out, config)
        assert 26 == done.returncode, done.stderr
        assert "refused: remote-digest: " in done.stderr
        assert "owner-1.pyz is " in done.stderr
        assert [] == sorted((remote / "runs").rglob("*.json"))
        assert not (out / "uninterrupted" / "checkpoint.json").exists()
        assert (out / "build" / "owner-1.pyz").exists()

    def test_node_lost_mid_run_stops_the_lane_and_keeps_outputs(self, ssh_node: Any, tmp_path: Path) -> None:
        """The node goes away (its sessions too) once the build is made: a step refuses (node-unreachable), none
        after it runs, and what was made stays."""
        from tests.helpers.sshd import running_node  # ssh_node above: the suite's skip-or-fail policy for sshd

        with running_node(tmp_path / "node", "lost") as node:
            config = _write(tmp_path / "config.json", _loopback(node, node.root / "lane"))
            proc = _start_gate("distributed-device", tmp_path, config)
            built = tmp_path / "out" / "build" / "owner-1.pyz.sha256"
            while not built.exists() and proc.poll() is None:
                time.sleep(0.01)
            node.stop()  # the node and every session it serves end: mid-phase, or before the next
            code, verdict, stream = _finish_gate("distributed-device", tmp_path, proc)
        events = read_stream(stream).events
        phases = [e for e in events if e.kind == "step.start" and e.attrs["parent"] is None]
        ends = {e.step: e.attrs for e in events if e.kind == "step.end"}
        lost = [e for e in phases if ends[e.step]["exit_code"] == 29]
        assert lost, [(e.attrs["name"], ends[e.step]["exit_code"]) for e in phases]
        stderr = b"".join(e.data or b"" for e in events if e.kind == "stderr" and e.step == lost[0].step)
        assert b"refused: node-unreachable: " in stderr
        assert phases[-1] is lost[0]  # no step after the refusal
        assert (1, "fail") == (code, verdict["verdict"])
        assert (tmp_path / "out" / "build" / "owner-0.pyz").exists()


class TestLink:
    def test_fetch_copies_back_what_exists_and_refuses_links(self, ssh_node: Any, tmp_path: Path) -> None:
        """Copy-back brings every plain file of a node's folder (a partial run's too) and refuses a link among them."""
        sys.path.insert(0, str(LANE))
        try:
            from lanekit.placement import parse_nodes
            from lanekit.refusals import NodeUnreachable
            from lanekit.remote import Link
        finally:
            sys.path.pop(0)
        folder = ssh_node.root / f"fetch-{tmp_path.name}"
        (folder / "sub").mkdir(parents=True)
        (folder / "checkpoint.json").write_text("{}")
        (folder / "sub" / "note.txt").write_text("partial")
        (node,) = parse_nodes(_loopback(ssh_node, folder))
        with Link(node) as link:
            got = link.fetch(str(folder), str(tmp_path / "back"))
            assert [str(tmp_path / "back" / "checkpoint.json"), str(tmp_path / "back" / "sub" / "note.txt")] == got
            assert [] == link.fetch(str(folder / "missing"), str(tmp_path / "none"))
            (folder / "sub" / "escape").symlink_to("/etc/passwd")
            with pytest.raises(NodeUnreachable, match="not a plain file"):
                link.fetch(str(folder), str(tmp_path / "again"))
