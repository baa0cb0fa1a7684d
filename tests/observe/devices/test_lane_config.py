"""One reader of the lane config (observe/devices/lane_config.py): the lane and the recorder take the same defaults.

The README's two-host config (samples/lane/README.md, "Two hosts") is written as the README shows it, its
placeholders filled with the suite's two sshd nodes, and recorded: both nodes are observed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.recorder import events, record
from tests.helpers.sshd import LANE_USER, SshNode, observer_args, observer_env

README = ROOT / "samples" / "lane" / "README.md"
UUID = "GPU-11111111-2222-3333-4444-555555555555"


def readme_block(after: str) -> str:
    """The first ```json block of the lane README after the line starting with ``after``."""
    text = README.read_text()
    start = text.index("\n" + after)
    found = re.search(r"```json\n(.*?)```", text[start:], re.S)
    assert found, after
    return found.group(1)


def fill(text: str, values: dict[str, str]) -> dict[str, Any]:
    """The README's config with each placeholder replaced (every one must occur)."""
    for placeholder, value in values.items():
        assert placeholder in text, placeholder
        text = text.replace(placeholder, value)
    return dict(json.loads(text))


TOP = {
    "owner": "o",
    "pod_ids": ["a", "b"],
    "transport": "ssh-tunnel",
    "port": 2222,
    "ssh_key": "/keys/lane",
    "known_hosts": "/keys/known",
    "remote_root": "/srv/lane",
    "python": "/opt/py/bin/python3",
    "node_env": {"A": "1", "B": "2"},
    "observer": {"user": "watch"},
}


def test_each_ssh_tunnel_node_takes_the_top_levels_defaults() -> None:
    from observe.devices.lane_config import node_entries, observer_of

    config = {
        **TOP,
        "nodes": [
            {"host": "lane@a", "minors": [0]},
            {"host": "lane@b", "port": 22, "node_env": {"B": "3"}, "observer": {"python": "/usr/bin/python3.12"}},
        ],
    }
    a, b = node_entries(config)
    assert (2222, "/keys/lane", "/keys/known", "/srv/lane", {"A": "1", "B": "2"}) == tuple(
        a[k] for k in ("port", "ssh_key", "known_hosts", "remote_root", "node_env")
    )
    assert (22, {"A": "1", "B": "3"}) == (b["port"], b["node_env"])
    assert ("watch", "/usr/bin/python3") == tuple(vars(observer_of(a)).values())
    assert ("watch", "/usr/bin/python3.12") == tuple(vars(observer_of(b)).values())
    assert ("root", "/usr/bin/python3") == tuple(vars(observer_of({})).values())


def test_the_recorder_knows_which_roles_each_node_carries(tmp_path: Path) -> None:
    """ssh-tunnel nodes carrying two roles each: one connection per node, naming its roles, and nodes check's
    minors per node are the lane's (observe.devices.lane_nodes and observe.devices.check)."""
    from observe.devices.check import _minors
    from observe.devices.lane_nodes import lane_nodes

    config = {**TOP, "nodes": [{"host": "lane@a", "minors": [0, 1]}, {"host": "lane@b", "minors": [3, 2]}]}
    nodes, problems = lane_nodes(config, str(tmp_path), str(tmp_path))
    assert ([], [(0, 1), (2, 3)]) == (problems, [n.roles for n in nodes])
    assert [("owner-2", 3), ("owner-3", 2)] == _minors(config, nodes[1].roles)
    assert [("owner-0", 0), ("owner-1", 1)] == _minors({**config, "transport": "loopback", "minors": [0, 1]}, ())


@pytest.mark.parametrize(
    ("observer", "message"),
    [
        ("root", "observer must be an object"),
        ({"user": "root", "key": "/k"}, "observer must be an object"),
        ({"user": "a@b"}, "is not an account name"),
        ({"python": "python3"}, "must be an absolute path"),
    ],
)
def test_a_malformed_observer_is_named_by_both_readers(observer: Any, message: str, tmp_path: Path) -> None:
    """The lane refuses it (ConfigError) and the recorder says it, with one message: the config never names a key."""
    from observe.devices.lane_nodes import lane_nodes

    config = {**TOP, "minors": [0, 0], "nodes": [{"host": "lane@a"}, {"host": "lane@b"}], "observer": observer}
    nodes, problems = lane_nodes(config, str(tmp_path), str(tmp_path))
    assert ([], 2) == (nodes, len(problems))
    assert all(message in p for p in problems), problems
    path = tmp_path / "lane.json"
    path.write_text(json.dumps(config))
    lane = _lanekit(
        "from lanekit.config import load_config, ConfigError\n"
        f"try:\n load_config({str(path)!r})\nexcept ConfigError as e:\n print(e)"
    )
    assert message in lane, lane
    assert lane.startswith("node 0: "), lane


def _lanekit(code: str) -> str:
    """Run ``code`` as the lane runs (PYTHONPATH=samples/lane only, from another folder); its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT / "samples" / "lane")
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {env['PYTHONPATH']!r})\n{code}"],
        capture_output=True,
        text=True,
        cwd="/",
        env=env,
        timeout=60,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    return done.stdout.strip()


def test_the_lane_and_the_recorder_read_the_readme_config_alike(tmp_path: Path) -> None:
    """The README's two-host config: the lane (with only samples/lane on its path) and the recorder name the same
    nodes, ports, known_hosts and observer account."""
    from observe.devices.lane_nodes import lane_nodes

    path = tmp_path / "lane.json"
    path.write_text(readme_block("Two hosts"))
    lane = json.loads(
        _lanekit(
            "import json\nfrom lanekit.config import load_config, parse_nodes\n"
            f"print(json.dumps([[n.host, n.port, n.known_hosts, n.remote_root, n.observer_user, n.ssh_key]"
            f" for n in parse_nodes(load_config({str(path)!r}))]))"
        )
    )
    nodes, problems = lane_nodes(json.loads(path.read_text()), str(tmp_path), str(tmp_path))
    assert [] == problems
    assert [[n.host, n.port, n.known_hosts, n.user] for n in nodes] == [[h, p, k, o] for h, p, k, _r, o, _s in lane]
    assert {"/absolute/known_hosts"} == {n.known_hosts for n in nodes}
    assert {("/absolute/private-key-path", "root")} == {(s, o) for *_, o, s in lane}


def test_the_readmes_four_gpu_config_binds_two_roles_per_host(tmp_path: Path) -> None:
    """The README's four-GPU config: the lane binds owner-0 and owner-1 to pod-a's minors 0 and 1, owner-2 and owner-3
    to pod-b's; the recorder connects once per node, naming the roles it carries."""
    from observe.devices.lane_nodes import lane_nodes

    path = tmp_path / "lane.json"
    path.write_text(readme_block("Four GPUs on two hosts"))
    lane = json.loads(
        _lanekit(
            "import json\nfrom lanekit.config import load_config\n"
            f"c = load_config({str(path)!r}); print(json.dumps([c['minors'], c['role_nodes']]))"
        )
    )
    nodes, problems = lane_nodes(json.loads(path.read_text()), str(tmp_path), str(tmp_path))
    assert [[0, 1, 0, 1], [0, 0, 1, 1]] == lane
    assert ([], [("lane@pod-a", (0, 1)), ("lane@pod-b", (2, 3))]) == (problems, [(n.host, n.roles) for n in nodes])
    assert "python3 samples/lane/oracle.py coordinates 5 4" in README.read_text()
    shown = subprocess.run(
        [sys.executable, str(ROOT / "samples" / "lane" / "oracle.py"), "coordinates", "5", "4"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert {"momentum", "param"} == set(json.loads(shown.stdout)[-1]["chunks"])
    assert 4 == len(json.loads(shown.stdout)[-1]["chunks"]["param"])


def readme_config(after: str, nodes: list[SshNode], folder: Path) -> Path:
    """The README's config after the line ``after``, its placeholders filled with the suite's nodes (the lane key of
    the first, authorised for the lane account of every node; one known_hosts listing them all)."""
    known = folder / "known_hosts"
    known.write_text("".join(n.known_hosts.read_text() for n in nodes))
    text = readme_block(after)
    names = ["pod-a", "pod-b"] if len(nodes) > 1 else ["pod-address"]
    values = {"/absolute/private-key-path": str(nodes[0].ssh_key), "/absolute/known_hosts": str(known)}
    for name, node in zip(names, nodes, strict=True):
        text = re.sub(rf'("host": "lane@{name}",\s*"port": )22', rf"\g<1>{node.port}", text)
        values[f"lane@{name}"] = node.host
    roots = re.findall(r'"(/tmp/alpha-[a-z-]+-your-unique-run)"', text)
    for root, node in zip(roots, nodes, strict=True):
        values[root] = str(node.lane_folder(folder.name))
    path = folder / "lane.json"
    path.write_text(json.dumps(fill(text, values)))
    return path


def observed(config: Path, tmp_path: Path) -> list[Any]:
    """Record ``sleep`` with ``config`` as the partitioned lane's and simulated GPUs; its events."""
    sim = tmp_path / "gpus.json"
    gpu = {"index": 0, "minor": 0, "uuid": UUID, "name": "NVIDIA H200", "memory": 141 << 30}
    sim.write_text(json.dumps({"driver": "580.159.04", "gpus": [gpu], "processes": []}))
    env = {"ALPHA_PARTITIONED_DEVICE_CONFIG": str(config), "ALPHA_OBSERVE_SIMULATED_GPUS": str(sim), **observer_env()}
    proc, path = record(tmp_path, ["sleep", "0.5"], *observer_args(), "--sample-interval", "0.2", env=env)
    assert 0 == proc.returncode, proc.stderr.decode()
    return events(path)


def assert_observed(evs: list[Any], node: SshNode) -> None:
    """``node`` observed start to end by the simulated observer, over the observer account with the env key."""
    mine = [e for e in evs if e.kind == "device.observed" and (e.attrs.get("node") or {}).get("port") == node.port]
    assert ["simulated", "simulated"] == [mine[0].attrs["observer"], mine[-1].attrs["observer"]], mine[0].attrs
    assert ["start", "end"] == [mine[0].attrs["phase"], mine[-1].attrs["phase"]]
    facts = mine[0].attrs["node"]
    assert facts["host_key_verified"]
    accounts = (facts["user"], facts["observer_uid"], facts["lane_user"], facts["key"])
    assert ("root", 0, LANE_USER, "env") == accounts


def test_the_readmes_two_host_config_observes_both_nodes(ssh_nodes: tuple[SshNode, SshNode], tmp_path: Path) -> None:
    """Recorded with the README's two-host config (port per node; key, known_hosts and observer at the top level
    only): each node's start and end observation, its host key verified, through its observer account."""
    evs = observed(readme_config("Two hosts", list(ssh_nodes), tmp_path), tmp_path)
    for node in ssh_nodes:
        assert_observed(evs, node)


def test_the_readmes_one_pod_config_observes_its_node(ssh_node: SshNode, tmp_path: Path) -> None:
    """The README's one-pod config, filled with the suite's node: observed through its observer account."""
    assert_observed(observed(readme_config("One pod, two GPUs", [ssh_node], tmp_path), tmp_path), ssh_node)
