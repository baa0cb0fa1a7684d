"""``alpha observe nodes check`` and the lane's own ``check``, against a real sshd node (tests/helpers/sshd.py).

The suite's node serves two accounts, as a pod is set up: the observer (root, the session's
observer key, given as ``--observer-key-env``) and the unprivileged lane account with a key
of its own. The lane's CPU doubles (samples/lane/testing, copied where the lane account can
read them) stand in for the GPUs: ``nvidia-smi`` and ``torch`` through ``node_env``, and the
recorder's simulated observer (``ALPHA_OBSERVE_SIMULATED_GPUS``) for NVML. Each wrong config
(an unknown host key, a minor the node lacks, no torch, one account for lane and observer) is
named before anything is recorded: the working folder holds nothing new afterwards.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.run import alpha, child_env
from tests.helpers.sshd import LANE_USER, OBSERVER_KEY_ENV, lane_readable, observer_env, observer_key

LANE = ROOT / "samples" / "lane"

pytestmark = pytest.mark.timeout(180)


@dataclass
class Pod:
    """The suite's sshd node (observer root, lane ``aos-lane``) and the files a config names."""

    node: Any
    remote_root: Path
    testing: Path
    simulated: Path

    @property
    def lane_key(self) -> Path:
        return Path(self.node.ssh_key)

    def config(self, **extra: Any) -> dict[str, Any]:
        """A good one-pod config: both roles on the node, the lane as its own account."""
        return {
            "owner": "test",
            "pod_ids": ["pod"],
            "transport": "loopback",
            "minors": [0, 1],
            "host": f"{LANE_USER}@127.0.0.1",
            "port": self.node.port,
            "ssh_key": str(self.lane_key),
            "known_hosts": str(self.node.known_hosts),
            "remote_root": str(self.remote_root),
            "node_env": {"PATH": f"{self.testing / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(self.testing)},
            "observer": {"user": "root"},
            **extra,
        }

    def env(self, **extra: str | None) -> dict[str, str | None]:
        """The environment of a check: the observer's key in a variable, the simulated GPUs."""
        return {**observer_env(), "ALPHA_OBSERVE_SIMULATED_GPUS": str(self.simulated), **extra}


@pytest.fixture(scope="module")
def pod(ssh_node: Any, tmp_path_factory: pytest.TempPathFactory) -> Pod:
    folder = tmp_path_factory.mktemp("nodes-check")
    simulated = folder / "simulated-gpus.json"
    simulated.write_bytes(subprocess.check_output([sys.executable, str(LANE / "testing" / "gpus.py"), "--simulated"]))
    return Pod(ssh_node, ssh_node.lane_folder("nodes-check"), lane_readable(LANE / "testing"), simulated)


def _ancestors(pid: int) -> set[int]:
    chain: set[int] = set()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return chain


def _own_problems(out: str, *nodes: Any) -> list[str]:
    """The problem lines of nodes check's output but the root sessions of SSH servers other than the reporting
    node's own: a node's observer sees every session of its machine's process table, and here every node shares
    one machine, so it sees other tests' sessions (on CI there are none) and, checking two nodes at once, the
    check's own logins to the other node (on a pod, another machine's)."""
    ours = {node.port: node.process.pid for node in nodes if node.process is not None}
    assert ours, "the suite's sshd servers are not running"
    kept = []
    for line in out.splitlines():
        if not line.startswith("  - "):
            continue
        said = re.search(r"another session of (?:\S+ or )?\S+ is open on the node \(([\d, ]+)\)", line)
        port = re.match(r"  - \S+ port (\d+):", line)
        own = {ours[int(port.group(1))]} if port and int(port.group(1)) in ours else set(ours.values())
        if said is None or any(_ancestors(int(pid)) & own for pid in said.group(1).split(", ")):
            kept.append(line)  # not a session, or a session of the reporting node's own sshd: a real problem
    return kept


def _observed_all(code: int, out: str, *nodes: Any) -> bool:
    """Whether nodes check found every node observable: exit 0, or exit 1 whose only problems are root sessions
    of other SSH servers (:func:`_own_problems`)."""
    if code == 0:
        return "every node would be observed; nothing was recorded" in out
    problems = [line for line in out.splitlines() if line.startswith("  - ")]
    return code == 1 and bool(problems) and not _own_problems(out, *nodes)


def _check(pod: Pod, folder: Path, config: dict[str, Any], *args: str, **env: str | None) -> tuple[int, str]:
    """``alpha observe nodes check CONFIG --observer-key-env OBSERVER_KEY`` in ``folder``; its exit and output.
    Asserts nothing was recorded: the folder holds the config alone afterwards."""
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=1))
    before = sorted(p.name for p in folder.iterdir())
    done = alpha(
        "observe",
        "nodes",
        "check",
        *(args or (str(path), "--observer-key-env", OBSERVER_KEY_ENV)),
        cwd=folder,
        env=pod.env(**env),
        text=True,
        timeout=150,
    )
    assert sorted(p.name for p in folder.iterdir()) == before, "nodes check wrote into the working folder"
    assert not list(folder.rglob("*.aos"))
    return done.returncode, done.stdout + done.stderr


def test_a_good_two_account_node_passes_and_reads_simulated(pod: Pod, tmp_path: Path) -> None:
    code, out = _check(pod, tmp_path, pod.config())
    assert _observed_all(code, out, pod.node), out
    assert "NVML and driver" in out
    assert "simulated (" in out
    assert "never physical evidence" in out
    assert f"lane account          {LANE_USER} uid {pwd.getpwnam(LANE_USER).pw_uid}" in out
    assert "observer login        root uid 0, key from the environment" in out
    assert "-I -S" in out
    assert "minor 0 (owner-0)" in out
    assert "minor 1 (owner-1)" in out
    assert "torch 0.0-fake" in out
    assert f"{pod.remote_root} writable" in out


def test_the_help_examples_run(pod: Pod, tmp_path: Path) -> None:
    """``nodes check --help``'s examples, as written (the config's path and the key's variable filled): the
    config named, then the one the environment names."""
    from observe.cli.nodes import nodes_check_command

    path = tmp_path / "config.json"
    path.write_text(json.dumps(pod.config()))
    lines = [line.strip() for line in str(nodes_check_command.epilog).splitlines() if "alpha observe" in line]
    assert len(lines) == 2
    said = []
    for line in lines:
        script = line.replace("config.json", str(path)).replace("OBSERVER_KEY", OBSERVER_KEY_ENV)
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=child_env(pod.env()),
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
        assert _observed_all(done.returncode, done.stdout, pod.node), done.stdout + done.stderr
        said.append(done.stdout)
    assert any(f"config ALPHA_COORDINATE_DEVICE_CONFIG ({path})" in out for out in said), said


def test_a_minor_bound_twice_on_one_host_is_refused(tmp_path: Path) -> None:
    """Two roles on one minor of one node (its ``minors`` naming it twice): refused before any node is reached."""
    nodes = [{"host": "lane@10.0.0.1", "minors": [0, 1]}, {"host": "lane@10.0.0.2", "minors": [1, 1]}]
    config = tmp_path / "pod.json"
    config.write_text(json.dumps({"owner": "t", "transport": "ssh-tunnel", "remote_root": "/r", "nodes": nodes}))
    done = alpha("observe", "nodes", "check", str(config), cwd=tmp_path, text=True)
    assert (1, "") == (done.returncode, done.stdout)
    said = f"refused: minor-bound-twice: {config}: minor 1 of lane@10.0.0.2 is bound to owner-2 and owner-3"
    assert done.stderr.startswith(said)


def test_no_config_is_refused(tmp_path: Path) -> None:
    done = alpha("observe", "nodes", "check", cwd=tmp_path, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith("refused: nodes-config: no CONFIG given")
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"owner": "t", "host": "local", "minors": [0, 1]}))
    done = alpha("observe", "nodes", "check", str(local), cwd=tmp_path, text=True)
    assert done.returncode == 1
    assert "refused: nodes-config:" in done.stderr
    assert "names no remote node" in done.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    done = alpha("observe", "nodes", "check", str(broken), cwd=tmp_path, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith(f"refused: nodes-config: {broken}: {broken} is not JSON")
    done = alpha("observe", "nodes", "check", str(tmp_path / "missing.json"), cwd=tmp_path, text=True)
    assert done.returncode == 1
    assert "refused: nodes-config:" in done.stderr
    assert "cannot read" in done.stderr


def test_an_unknown_host_key_names_the_keyscan_line_which_works(pod: Pod, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    code, out = _check(pod, tmp_path, pod.config(known_hosts=str(known)))
    assert code == 1, out
    port = pod.node.port
    line = f"ssh-keyscan -p {port} 127.0.0.1 >> {known}"
    assert "host-key-unknown" in out
    assert line in out
    assert f"[127.0.0.1]:{port}" in out
    assert "every node would be observed" not in out
    said = (
        f"refused (host-key-unknown): {known} lists no host key for [127.0.0.1]:{port}; check its fingerprint, "
        f"then: ssh-keyscan -p {port} 127.0.0.1 >> {known} (known_hosts names it [127.0.0.1]:{port})"
    )
    assert said in out
    shown = _doc_blocks("text")[2].split("-> ", 1)[1].strip()  # as docs/NODES.md shows it
    for placeholder, value in (
        ("lane@pod-address", f"{LANE_USER}@127.0.0.1"),
        ("pod-address", "127.0.0.1"),
        ("2222", str(port)),
        ("/home/you/known_hosts", str(known)),
    ):
        shown = shown.replace(placeholder, value)
    assert shown in out
    assert "not tried: the node was not reached with a verified host key" in out  # one cause, said once
    # The hint as printed adds the key; the node then checks out.
    subprocess.run(line, shell=True, check=True, capture_output=True, timeout=30)
    code, out = _check(pod, tmp_path, pod.config(known_hosts=str(known)))
    assert _observed_all(code, out, pod.node), out


def test_a_minor_the_node_lacks(pod: Pod, tmp_path: Path) -> None:
    code, out = _check(pod, tmp_path, pod.config(minors=[0, 3]))
    assert code == 1, out
    minor = "the config binds owner-1 to minor 3; the node has 0, 1"
    assert [minor] == [line.split(": ", 1)[1] for line in _own_problems(out, pod.node)], out


def test_no_torch_without_pythonpath(pod: Pod, tmp_path: Path) -> None:
    """The CPU doubles' torch is on the node only through node_env's PYTHONPATH: without it, missing."""
    env = {"PATH": f"{pod.testing / 'bin'}:/usr/bin:/bin"}
    code, out = _check(pod, tmp_path, pod.config(node_env=env))
    assert code == 1, out
    assert "No module named 'torch'" in out
    assert "PYTHONPATH" in out


def test_one_account_for_lane_and_observer(pod: Pod, tmp_path: Path) -> None:
    """The lane logging in as the observer's account (root here): named, never a pass."""
    config = pod.config(host="root@127.0.0.1", ssh_key=str(observer_key()))
    code, out = _check(pod, tmp_path, config)
    assert code == 1, out
    assert "the lane's account is the observer's (root)" in out


def test_a_root_lane_under_another_observer(pod: Pod, tmp_path: Path) -> None:
    """The lane as root with the observer another account: the lane's uid 0 is named (root can forge NVML)."""
    from tests.helpers.sshd import authorize_lane_key, lane_home

    config = pod.config(host="root@127.0.0.1", ssh_key=str(observer_key()), observer={"user": LANE_USER})
    keys = lane_home() / ".ssh" / "authorized_keys"
    before = keys.read_bytes()
    authorize_lane_key((observer_key().parent / "id_ed25519.pub").read_text().strip())  # the observer logs in there
    try:
        code, out = _check(pod, tmp_path, config)
    finally:
        keys.write_bytes(before)
    assert code == 1, out
    assert "the lane's account root is root (uid 0) on the node" in out


def test_an_observer_key_file_is_named(pod: Pod, tmp_path: Path) -> None:
    """--observer-key FILE logs in, but a recording so is never physical: named, with the fix."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(pod.config()))
    code, out = _check(pod, tmp_path, pod.config(), str(path), "--observer-key", str(observer_key()))
    assert code == 1, out
    assert "the observer's key is a file the recorded command could read" in out
    assert "--observer-key-env NAME" in out


def test_no_observer_key_is_named(pod: Pod, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(pod.config()))
    code, out = _check(pod, tmp_path, pod.config(), str(path))
    assert code == 1, out
    assert "no observer key" in out


def test_an_observer_key_that_is_not_given_is_a_usage_error(pod: Pod, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(pod.config()))
    done = alpha("observe", "nodes", "check", str(path), "--observer-key-env", "NO_SUCH_KEY", cwd=tmp_path, text=True)
    assert done.returncode == 2
    assert "NO_SUCH_KEY" in done.stderr


# -- the lane's own check (samples/lane/lanekit/check.py) ----------------------------------------


def _lane_check(folder: Path, config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``PYTHONPATH=samples/lane python3 -m lanekit check coordinates OUT CONFIG``, as the docs show it."""
    path = folder / "lane-config.json"
    path.write_text(json.dumps(config))
    return subprocess.run(
        [sys.executable, "-m", "lanekit", "check", "coordinates", str(folder / "out"), str(path)],
        cwd=ROOT,
        env=child_env({"PYTHONPATH": "samples/lane"}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_lane_check_passes_on_a_good_node(pod: Pod, tmp_path: Path) -> None:
    done = _lane_check(tmp_path, pod.config())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the coordinates lane could run on every node" in done.stdout
    assert f"(uid {pwd.getpwnam(LANE_USER).pw_uid})" in done.stdout


def test_lane_check_names_missing_torch_and_minor(pod: Pod, tmp_path: Path) -> None:
    done = _lane_check(tmp_path, pod.config(minors=[0, 3], node_env={"PATH": f"{pod.testing / 'bin'}:/usr/bin:/bin"}))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the config binds owner-1 to minor 3; there: 0, 1" in done.stdout
    assert "No module named 'torch'" in done.stdout
    assert "2 problems; the coordinates lane would not run" in done.stdout


def test_lane_check_names_an_unwritable_remote_root(pod: Pod, tmp_path: Path) -> None:
    done = _lane_check(tmp_path, pod.config(remote_root="/root/not-the-lanes"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot write there" in done.stdout


def test_lane_check_refuses_an_unknown_host_key_with_the_keyscan_line(pod: Pod, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    done = _lane_check(tmp_path, pod.config(known_hosts=str(known)))
    port = pod.node.port
    assert done.returncode == 27, done.stdout + done.stderr
    assert done.stderr.startswith("refused: host-key-unknown:")
    assert f"ssh-keyscan -p {port} 127.0.0.1 >> {known}" in done.stderr
    assert f"[127.0.0.1]:{port}" in done.stderr


# -- docs/NODES.md, as written (placeholders filled) -----------------------------------------------

DOC = ROOT / "docs" / "NODES.md"


def _doc_blocks(kind: str) -> list[str]:
    import re

    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Check before you rent minutes") :]
    section = section.split("\n## ", 1)[0]  # the page's other sections belong to tests/samples/test_local_pod.py
    return re.findall(rf"```{kind}\n(.*?)```", section, flags=re.S)


def _filled(text: str, pod: Pod, folder: Path) -> str:
    """A block of the doc with its placeholders filled for the test node."""
    for placeholder, value in (
        ("lane@pod-address", f"{LANE_USER}@127.0.0.1"),
        ('"port": 22', f'"port": {pod.node.port}'),
        ("/absolute/lane-key-path", str(pod.lane_key)),
        ("/absolute/known_hosts", str(pod.node.known_hosts)),
        ("/tmp/alpha-your-unique-run", str(pod.remote_root)),
        ("/absolute/checkout/samples/lane/testing", str(pod.testing)),
        ("/absolute/observer-key-path", str(observer_key())),
        ("config.json", str(folder / "config.json")),
        (" out ", f" {folder / 'out'} "),
    ):
        text = text.replace(placeholder, value)
    return text


def _labels(table: str) -> list[str]:
    """The row labels of a printed table (a label is words one space apart, then two spaces)."""
    return [m.group(1) for m in re.finditer(r"^  (?:ok {5}|PROBLEM)  (\S+(?: \S+)*)  ", table, flags=re.M)]


def _bash(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=child_env({"TMPDIR": str(folder)}),
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


def test_the_docs_commands_and_configs_run(pod: Pod, tmp_path: Path) -> None:
    """Each config and command docs/NODES.md shows runs as written: on a node without GPUs the pod config
    is named (no NVML, no torch, no nvidia-smi) by both checks; with the CPU doubles both exit 0 and the
    output has every row the doc shows."""
    pod_config, doubles_config = _doc_blocks("json")
    both, doubles = _doc_blocks("sh")
    export, nodes_line, lane_line = _filled(both, pod, tmp_path).strip().splitlines()
    (tmp_path / "config.json").write_text(_filled(pod_config, pod, tmp_path))
    done = _bash(f"{export}\n{nodes_line}", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no NVML on the node" in done.stdout
    done = _bash(lane_line, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "nvidia-smi cannot be queried" in done.stdout

    (tmp_path / "config.json").write_text(_filled(doubles_config, pod, tmp_path))
    *prepare, lane_again = _filled(doubles, pod, tmp_path).strip().splitlines()
    done = _bash("\n".join([export, *prepare]), tmp_path)
    assert _observed_all(done.returncode, done.stdout, pod.node), done.stdout + done.stderr
    lane = _bash(lane_again, tmp_path)
    assert lane.returncode == 0, lane.stdout + lane.stderr
    assert "the coordinates lane could run on every node" in lane.stdout
    nodes_shown, lane_shown = _doc_blocks("text")[:2]
    for shown in (nodes_shown, lane_shown):  # every row the doc shows, in its order, and no other
        rows = _labels(shown)
        ran = _labels(done.stdout + lane.stdout)
        assert rows == ran[: len(rows)] or rows == ran[-len(rows) :], (rows, ran)


def test_a_recording_names_the_keyscan_line_too(pod: Pod, tmp_path: Path) -> None:
    """The recorder's own reason for an unknown host key (device.observed of observer none) names the same line."""
    from aos.reader import read_stream

    known = tmp_path / "known_hosts"
    known.write_text("")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(pod.config(known_hosts=str(known))))
    stream = tmp_path / "run.aos"
    done = alpha(
        "observe", "record", "--quiet", "--out", str(stream), "--", "true",
        cwd=tmp_path, env={"ALPHA_COORDINATE_DEVICE_CONFIG": str(path)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    errors = [
        e.attrs.get("error") or ""
        for e in read_stream(stream).events
        if e.kind == "device.observed" and isinstance(e.attrs.get("node"), dict)
    ]
    port = pod.node.port
    assert any(
        f"ssh-keyscan -p {port} 127.0.0.1 >> {known} (known_hosts names it [127.0.0.1]:{port})" in e for e in errors
    )


def test_two_hosts_as_the_lane_readme_writes_them(ssh_nodes: list[Any], pod: Pod, tmp_path: Path) -> None:
    """``ssh-tunnel`` over two hosts, port, ssh_key and known_hosts given once at the top level (as the lane
    README writes the config): both nodes checked, each with its own minor; one the host lacks is named."""
    a, b = ssh_nodes
    known = tmp_path / "known_hosts"
    known.write_text(a.known_hosts.read_text() + b.known_hosts.read_text())
    from tests.helpers.sshd import authorize_lane_key

    authorize_lane_key((Path(str(a.ssh_key)).parent / "id_ed25519.pub").read_text().strip())  # one lane key for both
    config = {
        "owner": "test",
        "pod_ids": ["a", "b"],
        "transport": "ssh-tunnel",
        "ssh_key": str(a.ssh_key),
        "known_hosts": str(known),
        "node_env": pod.config()["node_env"],
        "nodes": [
            {"host": f"{LANE_USER}@127.0.0.1", "port": a.port, "minors": [0], "remote_root": str(a.lane_folder("nc"))},
            {"host": f"{LANE_USER}@127.0.0.1", "port": b.port, "minors": [1], "remote_root": str(b.lane_folder("nc"))},
        ],
    }
    code, out = _check(pod, tmp_path, config)
    assert _observed_all(code, out, a, b), out
    assert f"node {LANE_USER}@127.0.0.1 port {a.port}" in out
    assert f"node {LANE_USER}@127.0.0.1 port {b.port}" in out
    assert "minor 0 (owner-0)" in out
    assert "minor 1 (owner-1)" in out
    config["nodes"][1]["minors"] = [5]
    code, out = _check(pod, tmp_path, config)
    assert code == 1, out
    assert f"port {b.port}: the config binds owner-1 to minor 5; the node has 0, 1" in out


def test_another_root_session_on_the_node_is_named(pod: Pod, tmp_path: Path) -> None:
    """A root session open on the node beside the observer's (someone who could forge what NVML says) is named."""
    session = subprocess.Popen(
        pod.node.observer_argv("echo open; sleep 60"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    try:
        assert session.stdout is not None
        assert session.stdout.readline() == b"open\n"  # the session is open on the node
        code, out = _check(pod, tmp_path, pod.config())
    finally:
        session.kill()
        session.wait()
    assert code == 1, out
    assert "another session of root is open on the node" in out


def test_a_node_that_does_not_answer(pod: Pod, tmp_path: Path) -> None:
    """Nothing listens at the port: unreachable, named; the lane's login is not tried (one cause, said once)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    code, out = _check(pod, tmp_path, pod.config(port=closed))
    assert code == 1, out
    assert "PROBLEM  reachable" in out
    assert "ConnectionRefusedError" in out
    assert "not tried: the node was not reached with a verified host key" in out
    assert "1 problem;" in out


def test_lane_check_on_this_machine(tmp_path: Path) -> None:
    """A config whose roles run here (``host: local``): the same table for this machine, with the doubles on the
    lane's own PATH and PYTHONPATH (a local lane runs in its own environment); without them, named."""
    testing = LANE / "testing"
    config = {
        "owner": "test",
        "pod_ids": ["pod"],
        "transport": "loopback",
        "host": "local",
        "minors": [0, 1],
        "remote_root": str(tmp_path / "root"),
    }
    path = tmp_path / "lane-config.json"
    path.write_text(json.dumps(config))
    argv = [sys.executable, "-m", "lanekit", "check", "coordinates", str(tmp_path / "out"), str(path)]
    doubles = {"PATH": f"{testing / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": f"samples/lane:{testing}"}
    done = subprocess.run(argv, cwd=ROOT, env=child_env(doubles), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node local" in done.stdout
    bare = subprocess.run(
        argv, cwd=ROOT, env=child_env({"PYTHONPATH": "samples/lane"}), capture_output=True, text=True, timeout=120
    )
    assert bare.returncode == 1, bare.stdout + bare.stderr
    assert "No module named 'torch'" in bare.stdout
