"""The trust boundary on a node (docs/TRUST.md, "Remote nodes"): what the lane's account can do there never speaks
for the recorder's observer, and what the recorder cannot trust is named.

Real sshd servers (tests/helpers/sshd.py) serve the observer account (root) and the unprivileged lane account
(``aos-lane``). Each attack is the lane account's own doing before the recording, as a command recorded with the
lane's key could do: on a recorder that logs into the lane's account and runs a bare ``python3``, every plant
below runs inside the digest-checked observer and relabels the simulated cards as NVML.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.event import Event
from gates.devices_nodes import node_account_findings
from gates.typing import Findings
from tests.helpers.recorder import events, record, wait_for
from tests.helpers.relay import TcpFront
from tests.helpers.sshd import (
    LANE_USER,
    SshNode,
    as_lane,
    authorize_lane_key,
    lane_home,
    observer_args,
    observer_env,
    observer_key,
)

VAR = "ALPHA_PARTITIONED_DEVICE_CONFIG"
UUID = "GPU-11111111-2222-3333-4444-555555555555"


def lane_env(tmp_path: Path, node: SshNode, **extra: Any) -> dict[str, str]:
    """A loopback lane config naming ``node`` (the lane's account and key), simulated GPUs, the observer key."""
    cfg = tmp_path / "lane.json"
    cfg.write_text(json.dumps(node.config(minors=[0], transport="loopback", **extra)))
    sim = tmp_path / "gpus.json"
    gpu = {"index": 0, "minor": 0, "uuid": UUID, "name": "NVIDIA H200", "memory": 141 << 30}
    sim.write_text(json.dumps({"driver": "580.159.04", "gpus": [gpu], "processes": []}))
    return {VAR: str(cfg), "ALPHA_OBSERVE_SIMULATED_GPUS": str(sim), **observer_env()}


def of_node(evs: list[Event], node: SshNode, kind: str = "device.observed") -> list[Event]:
    return [e for e in evs if e.kind == kind and (e.attrs.get("node") or {}).get("port") == node.port]


def account_reason(evs: list[Event], node: SshNode) -> str | None:
    """What the devices-observed rule on accounts (gates.devices_nodes) says of the recorded node; None: nothing."""
    f = Findings()
    node_account_findings(node.host, of_node(evs, node), of_node(evs, node, "node.lost"), f)
    return None if f.ok else f.outcome("").reason


# -- what the lane account plants ------------------------------------------------------------------


def _user_site() -> Path:
    version = subprocess.check_output(
        ["/usr/bin/python3", "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"], text=True
    ).strip()
    return lane_home() / ".local" / "lib" / f"python{version}" / "site-packages"


RELABEL = """
import json
open({mark!r}, "w").write("ran")
_dumps = json.dumps
def dumps(o, *a, **k):
    return _dumps(o, *a, **k).replace('"observer":"simulated"', '"observer":"nvml"')
json.dumps = dumps
"""


@contextlib.contextmanager
def planted(kind: str, mark: Path, node: SshNode) -> Iterator[None]:
    """The lane account's plant of ``kind`` in its own home, removed afterwards; it writes ``mark`` when it runs."""
    made: list[Path] = []
    restore: dict[Path, str] = {}
    try:
        if kind in ("usercustomize", "pth"):
            site = _user_site()
            site.mkdir(parents=True, exist_ok=True)
            as_lane(lane_home() / ".local")
            made.append(lane_home() / ".local")
            if kind == "usercustomize":
                (site / "usercustomize.py").write_text(RELABEL.format(mark=str(mark)))
            else:
                (site / "aos-plant.pth").write_text(f"import os; open({str(mark)!r}, 'w').write('pth')\n")
            as_lane(lane_home() / ".local")
        elif kind == "bashrc":
            rc = lane_home() / ".bashrc"
            restore[rc] = rc.read_text() if rc.exists() else ""
            rc.write_text(f'python3() {{ echo ran > {mark}; command python3 "$@"; }}\n' + restore[rc])
            as_lane(rc)
        elif kind == "command":
            keys = lane_home() / ".ssh" / "authorized_keys"
            restore[keys] = keys.read_text()
            pub = (node.folder / "id_ed25519.pub").read_text().strip()
            forced = f'command="echo ran > {mark}; exec sh -c \\"$SSH_ORIGINAL_COMMAND\\"" {pub}'
            keys.write_text("".join(f"{forced if line == pub else line}\n" for line in restore[keys].splitlines()))
            as_lane(keys)
        yield
    finally:
        for path, text in restore.items():
            path.write_text(text)
            as_lane(path)
        for path in made:
            subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.mark.parametrize("kind", ["usercustomize", "pth", "bashrc", "command"])
def test_nothing_the_lane_account_plants_runs_in_the_observer(kind: str, ssh_node: SshNode, tmp_path: Path) -> None:
    """The lane account plants start-up code (a usercustomize.py relabelling the cards as NVML, a .pth, a ~/.bashrc
    shadowing python3, an authorized_keys command=): the lane's own login still runs it (the plant is live), but the
    observer logs into root and runs an isolated interpreter by absolute path: the plant never runs there, every
    observation stays simulated."""
    mark = ssh_node.lane_folder(f"marks-{tmp_path.name}") / "ran"  # where the lane account can write
    with planted(kind, mark, ssh_node):
        # the plant is live: the lane's own login runs it
        done = subprocess.run(ssh_node.ssh_argv("python3 -c pass"), capture_output=True, timeout=30, check=False)
        assert 0 == done.returncode, done.stderr
        assert mark.exists()
        mark.unlink()
        proc, path = record(tmp_path, ["sleep", "0.5"], *observer_args(), env=lane_env(tmp_path, ssh_node))
    assert 0 == proc.returncode, proc.stderr.decode()
    mine = of_node(events(path), ssh_node)
    assert ["start", "end"] == [mine[0].attrs["phase"], mine[-1].attrs["phase"]]
    assert {"simulated"} == {e.attrs["observer"] for e in mine}
    assert not mark.exists(), "the plant ran in the observer"
    facts = mine[0].attrs["node"]  # the node's facts are written once, in its first observation
    assert (True, "root", LANE_USER, "/usr/bin/python3") == (
        facts["isolated"],
        facts["user"],
        facts["lane_user"],
        facts["observer_python"],
    )
    assert facts["executable_sha256"] == _sha256(facts["executable"])
    assert account_reason(events(path), ssh_node) in (None, _other_root_sessions_only(events(path), ssh_node))


def _sha256(path: str) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _other_root_sessions_only(evs: list[Event], node: SshNode) -> str | None:
    """The account rule's reason when this machine (which serves every test node) had other root sessions open:
    that is all it may say of a node set up right."""
    reason = account_reason(evs, node)
    return reason if reason is not None and reason.count("node ") == 1 and "other SSH sessions" in reason else None


# -- what the recorder cannot trust, named --------------------------------------------------------


def test_observer_and_lane_sharing_one_account_is_inconclusive_named(ssh_node: SshNode, tmp_path: Path) -> None:
    """observer.user is the lane's account: observed (the recorder logged in there), and the rule says why it is not
    physical evidence, with the fix."""
    authorize_lane_key((observer_key().parent / "id_ed25519.pub").read_text().strip())
    try:
        env = lane_env(tmp_path, ssh_node, observer={"user": LANE_USER})
        proc, path = record(tmp_path, ["sleep", "0.3"], *observer_args(), env=env)
    finally:
        keys = lane_home() / ".ssh" / "authorized_keys"
        pub = (observer_key().parent / "id_ed25519.pub").read_text().strip()
        keys.write_text("".join(f"{line}\n" for line in keys.read_text().splitlines() if line != pub))
    assert 0 == proc.returncode, proc.stderr.decode()
    evs = events(path)
    facts = of_node(evs, ssh_node)[0].attrs["node"]
    assert (LANE_USER, LANE_USER) == (facts["user"], facts["lane_user"])
    assert facts["observer_uid"] == facts["lane_uid"] != 0
    reason = account_reason(evs, ssh_node)
    assert reason is not None
    assert f"the observer and the lane share the account {LANE_USER}" in reason
    assert "useradd" in reason


def test_a_lane_running_as_root_is_inconclusive_named(ssh_node: SshNode, tmp_path: Path) -> None:
    """The lane's host user is root on the node: root can forge anything there."""
    env = lane_env(tmp_path, ssh_node, host="root@127.0.0.1")
    proc, path = record(tmp_path, ["true"], *observer_args(), env=env)
    assert 0 == proc.returncode, proc.stderr.decode()
    evs = events(path)
    assert 0 == of_node(evs, ssh_node)[0].attrs["node"]["lane_uid"]
    reason = account_reason(evs, ssh_node)
    assert reason is not None
    assert "the lane's account root is root (uid 0) on the node" in reason


def test_an_observer_key_from_a_file_is_recorded_and_not_physical(ssh_node: SshNode, tmp_path: Path) -> None:
    """--observer-key FILE: the node is observed, its key recorded as a file, and the rule names the fix."""
    env = lane_env(tmp_path, ssh_node)
    proc, path = record(tmp_path, ["true"], "--observer-key", str(observer_key()), env=env)
    assert 0 == proc.returncode, proc.stderr.decode()
    evs = events(path)
    mine = of_node(evs, ssh_node)
    assert ("simulated", "file") == (mine[0].attrs["observer"], mine[0].attrs["node"]["key"])
    reason = account_reason(evs, ssh_node)
    assert reason is not None
    assert "the observer's key came from file" in reason
    assert "--observer-key-env NAME" in reason


def test_the_observer_key_never_reaches_the_command(ssh_node: SshNode, tmp_path: Path) -> None:
    """--observer-key-env NAME: the variable is gone from the command's environment, and its value from the stream."""
    script = "import os, sys; sys.stdout.write(repr(os.environ.get(sys.argv[1])))"
    argv = [sys.executable, "-c", script, "AOS_TEST_OBSERVER_KEY"]
    proc, path = record(tmp_path, argv, *observer_args(), env=lane_env(tmp_path, ssh_node))
    assert 0 == proc.returncode, proc.stderr.decode()
    assert b"None" == b"".join(e.data or b"" for e in events(path) if e.kind == "stdout")
    key_line = observer_key().read_text().splitlines()[1].encode()
    assert key_line not in path.read_bytes()


def test_an_unset_observer_key_variable_is_a_usage_error(tmp_path: Path) -> None:
    proc, _path = record(tmp_path, ["true"], "--observer-key-env", "AOS_NO_SUCH_VARIABLE_HERE")
    assert 2 == proc.returncode
    assert b"AOS_NO_SUCH_VARIABLE_HERE: the variable is not set or empty" in proc.stderr


def test_another_root_session_during_the_run_is_recorded_and_named(ssh_node: SshNode, tmp_path: Path) -> None:
    """Root logs into the node during the recording (another session than the observer's): recorded by account and
    pid, and the rule names it; the lane's own session is recorded too, and is not a reason."""
    ready = tmp_path / "ready"
    lane_ready = ssh_node.lane_folder(f"ready-{tmp_path.name}") / "lane"
    other = subprocess.Popen(ssh_node.observer_argv(f"touch {ready}; sleep 20"), stdin=subprocess.DEVNULL)
    lane = subprocess.Popen(ssh_node.ssh_argv(f"touch {lane_ready}; sleep 20"), stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (ready.exists() and lane_ready.exists()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc, path = record(
            tmp_path, ["sleep", "0.5"], *observer_args(), "--sample-interval", "0.2", env=lane_env(tmp_path, ssh_node)
        )
    finally:
        for client in (other, lane):  # the sessions end with their clients
            client.kill()
            client.wait(timeout=30)
    assert 0 == proc.returncode, proc.stderr.decode()
    evs = events(path)
    sessions = of_node(evs, ssh_node)[-1].attrs["node"]["sessions"]
    users = {s["user"] for s in sessions}
    assert {"root", LANE_USER} <= users, sessions
    assert all(isinstance(s["pid"], int) and isinstance(s["uid"], int) for s in sessions)
    reason = account_reason(evs, ssh_node)
    assert reason is not None
    assert "other SSH sessions of root or of the observer's account were open during the recording" in reason
    assert LANE_USER not in reason.split("recording:")[1].split(";")[0]


# -- bounded output ------------------------------------------------------------------------------------

START = {
    "phase": "start",
    "observer": "simulated",
    "library": None,
    "driver": "580.159.04",
    "cuda_driver": None,
    "namespace": None,
    "gpus": [],
    "gpu_events": [],
    "processes": [],
    "attribution": "pids",
    "simulated_from": {"path": "/s.json", "sha256": "0" * 64},
    "error": None,
}

FLOODS = {
    "endless-line": ("exec tr -d '\\n' < /dev/zero", "the observer sent a line longer than 1048576 bytes"),
    "message-flood": (
        """while :; do echo '{"type":"telemetry","attrs":{"gpus":[]}}'; done""",
        "the observer sent more than 64 messages per sample interval",
    ),
    "not-the-schema": (
        "echo '" + json.dumps({"type": "device.observed", "attrs": {**START, "phase": "sample", "extra": 1}}) + "'"
        "; sleep 30",
        "the observer sent a device.observed not of the recorder's schema",
    ),
}


def _peak_kib(proc: subprocess.Popen[bytes]) -> int:
    """The child's own peak resident set size (KiB, ``VmHWM`` of its memory after exec), read until it ends.

    Not ``wait4``'s ``ru_maxrss``: a child started by vfork keeps its parent's high-water mark across exec, so a
    suite grown to 2 GiB would be measured, not the recorder."""
    peak = 0
    while proc.poll() is None:
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{proc.pid}/status") as f:
            peak = max([peak, *(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))])
        time.sleep(0.05)
    return peak


@pytest.mark.parametrize("flood", sorted(FLOODS))
def test_an_observer_beyond_its_bounds_is_node_lost_and_memory_stays_bounded(
    flood: str, ssh_node: SshNode, tmp_path: Path
) -> None:
    """The node's observer (here a program at observer.python that answers the hello and a start observation, then
    floods) sends an endless line, too many messages, or attrs of another schema: node.lost naming the bound; the
    recorder's memory stays bounded; the recording goes on."""
    body, reason = FLOODS[flood]
    fake = tmp_path / "fake-python"
    hello = {"type": "hello", "sha256": "SHA", "python": "3", "kernel": None, "namespace": None}
    start = json.dumps({"type": "device.observed", "attrs": START})
    fake.write_text(f"#!/bin/sh\necho '{json.dumps(hello)}' | sed \"s/SHA/$5/\"\necho '{start}'\n{body}\n")
    fake.chmod(0o755)
    out = tmp_path / "flood.aos"
    env = lane_env(tmp_path, ssh_node, observer={"python": str(fake)})
    from tests.helpers.run import ALPHA, child_env

    rec = subprocess.Popen(
        [ALPHA, "observe", "record", *observer_args(), "--quiet", "--out", str(out), "--", "sleep", "3"],
        env=child_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peak_kib = _peak_kib(rec)
    evs = events(out)
    (lost,) = of_node(evs, ssh_node, "node.lost")
    assert reason in lost.attrs["reason"]
    assert ["start"] == [e.attrs["phase"] for e in of_node(evs, ssh_node)]
    assert peak_kib < 400 * 1024, peak_kib
    assert any(e.kind == "process.exit" for e in evs)


def test_observe_once_opens_the_observers_connection_and_closes_it(ssh_node: SshNode, tmp_path: Path) -> None:
    """observe.devices.remote.observe_once (what a check of the nodes before a recording uses): the start and end
    observation through the observer account; a refused node says why."""
    from observe.devices.lane_nodes import lane_nodes
    from observe.devices.remote import ObserverKey, observe_once

    (node,), problems = lane_nodes(ssh_node.config(transport="loopback"), str(tmp_path), str(tmp_path))
    assert [] == problems
    key = ObserverKey("env", "$KEY", observer_key().read_text())
    found = observe_once(node, key)
    phases = [(kind, a.get("phase"), a.get("observer")) for kind, a in found if kind == "device.observed"]
    assert ("start", "end") == (phases[0][1], phases[-1][1]), phases
    assert {"root"} == {a["node"]["user"] for _kind, a in found}
    (refused,) = observe_once(node, None)
    assert ("none", "no-key") == (refused[1]["observer"], refused[1]["node"]["refused"])


def test_nodes_without_an_observer_key_are_refused_and_said_at_start(ssh_node: SshNode, tmp_path: Path) -> None:
    """No --observer-key-env: the node is refused (no-key) in the stream, and stderr says what to give."""
    proc, path = record(tmp_path, ["true"], env=lane_env(tmp_path, ssh_node))
    assert 0 == proc.returncode, proc.stderr.decode()
    (start,) = of_node(events(path), ssh_node)
    assert ("none", "no-key") == (start.attrs["observer"], start.attrs["node"]["refused"])
    assert b"no observer key was given" in proc.stderr
    assert b"--observer-key-env NAME" in proc.stderr


# -- two hosts that are one machine ----------------------------------------------------------------------


def test_two_nodes_of_one_machine_see_each_others_observer_as_an_observer(
    ssh_nodes: tuple[SshNode, SshNode], tmp_path: Path
) -> None:
    """Two sshd of one machine (the suite's two hosts, and a four-GPU machine tried as two hosts): each node's
    observer sees the other's root session, whose process runs this very observer; it is recorded as
    ``observer: true`` and is no reason, while a root session running anything else still is (test above)."""
    a, b = ssh_nodes
    config = tmp_path / "two-hosts.json"
    config.write_text(
        json.dumps(
            {
                "owner": "t",
                "pod_ids": ["a", "b"],
                "transport": "ssh-tunnel",
                "minors": [0, 0],
                "nodes": [a.config(minors=[0]), b.config(minors=[0])],
            }
        )
    )
    env = {**lane_env(tmp_path, a), VAR: str(config)}
    proc, path = record(tmp_path, ["sleep", "1.5"], *observer_args(), "--sample-interval", "0.2", env=env)
    assert 0 == proc.returncode, proc.stderr.decode()
    evs = events(path)
    for node in ssh_nodes:
        sessions = of_node(evs, node)[-1].attrs["node"]["sessions"]
        siblings = [s for s in sessions if s.get("observer") is True]
        assert siblings, sessions  # the other node's observer, a root session of this machine
        assert all(s["user"] == "root" for s in siblings), siblings
        reason = account_reason(evs, node) or ""
        assert not any(f"(pid {s['pid']})" in reason for s in siblings), reason


@pytest.mark.parametrize(("drops", "observed"), [(3, True), (6, False)])
def test_a_node_that_drops_connections_is_tried_again_with_bounded_back_off(
    ssh_node: SshNode, tmp_path: Path, drops: int, observed: bool
) -> None:
    """A node whose first connections are dropped before the SSH banner (MaxStartups) is tried again with back-off
    and reached, the tries recorded (``connect_attempts``); past CONNECT_ATTEMPTS it is observer none, unreachable,
    after exactly that many tries."""
    from observe.devices.lane_nodes import lane_nodes
    from observe.devices.remote import CONNECT_ATTEMPTS, ObserverKey, observe_once

    front = TcpFront(ssh_node.port, drops=drops)
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{front.port} {ssh_node.host_key_pub}\n")
    config = ssh_node.config(transport="loopback", port=front.port, known_hosts=str(known))
    (node,), problems = lane_nodes(config, str(tmp_path), str(tmp_path))
    assert [] == problems
    found = observe_once(node, ObserverKey("env", "$KEY", observer_key().read_text()))
    start = next(a for kind, a in found if kind == "device.observed")
    if observed:
        assert (drops + 1, drops + 1) == (start["node"]["connect_attempts"], len(front.accepted))
        # connected, verified and logged in: the observer ran there (no NVML on this machine: observer none, saying so)
        assert start["node"]["host_key_verified"] is True
        assert start["node"]["observer_sha256"] is not None, start.get("error")
    else:
        assert (CONNECT_ATTEMPTS, CONNECT_ATTEMPTS) == (start["node"]["connect_attempts"], len(front.accepted))
        assert "none" == start["observer"]
        assert "unreachable" in start["error"]
    front.close()


def _link_through(ssh_node: SshNode, tmp_path: Path, front: TcpFront, found: list[tuple[str, dict[str, Any]]]) -> Any:
    """A started NodeLink to ``ssh_node`` through ``front``, appending to ``found``, with simulated GPUs."""
    import base64

    from observe.devices.bundle import build_bundle
    from observe.devices.lane_nodes import lane_nodes
    from observe.devices.remote import NodeLink, ObserverKey

    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{front.port} {ssh_node.host_key_pub}\n")
    config = ssh_node.config(transport="loopback", port=front.port, known_hosts=str(known))
    (node,), _ = lane_nodes(config, str(tmp_path), str(tmp_path))
    gpu = {"index": 0, "minor": 0, "uuid": "GPU-late", "name": "NVIDIA H200", "memory": 1 << 30}
    sim = json.dumps({"driver": "580.1", "gpus": [gpu], "processes": []}).encode()
    link = NodeLink(
        node,
        build_bundle(),
        interval=0.2,
        simulated={"path": "/sim.json", "data_b64": base64.b64encode(sim).decode()},
        config={},
        append=lambda kind, attrs: found.append((kind, attrs)),
        key=ObserverKey("env", "$KEY", observer_key().read_text()),
    )
    link.start()
    return link


def test_a_late_start_and_a_late_end_are_recorded_as_late(ssh_node: SshNode, tmp_path: Path) -> None:
    """The recorder stopped waiting for a node's start (the command started) and for its end (the end wait was
    over): both still come and are appended, each marked ``late``, never dropped."""
    found: list[tuple[str, dict[str, Any]]] = []
    front = TcpFront(ssh_node.port)
    link = _link_through(ssh_node, tmp_path, front, found)
    assert [] == link.take_start(0.0)  # not ready at once: the node's start follows when it comes
    wait_for(lambda: any(a.get("phase") == "start" for _k, a in found), 30)
    link.end_is_late()
    link.end()
    assert link.done.wait(30)
    link.close()
    phases = [(a.get("phase"), a.get("late")) for kind, a in found if kind == "device.observed"]
    assert ("start", True) == phases[0]
    assert ("end", True) == phases[-1]
    assert all(late is None for _phase, late in phases[1:-1])
    front.close()


def test_a_node_that_never_answers_its_end_is_named(ssh_node: SshNode, tmp_path: Path) -> None:
    """A node whose connection goes silent after its start (nothing relayed, nothing closed): no end comes, and
    the recorder names it, ``node.lost`` saying it never answered, instead of ending without a word."""
    found: list[tuple[str, dict[str, Any]]] = []
    front = TcpFront(ssh_node.port)
    link = _link_through(ssh_node, tmp_path, front, found)
    assert link.take_start(30)
    front.frozen.set()
    link.end()
    assert not link.done.wait(3)
    link.end_is_late()
    link.never_answered(3)
    link.close()
    lost = [a for kind, a in found if kind == "node.lost"]
    assert 1 == len(lost)
    assert "no end observation in the 3 s the recorder waited for it: the node never answered" == lost[0]["reason"]
    assert front.port == lost[0]["node"]["port"]
    assert not [a for kind, a in found if kind == "device.observed" and a.get("phase") == "end"]
    front.close()


def _switches(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches:"))


def test_an_idle_connection_wakes_the_recorder_once_a_second_not_ten_times(ssh_node: SshNode, tmp_path: Path) -> None:
    """The thread of each node's connection (paramiko's) woke every 0.1 s, idle or not: at 256 nodes 2,560
    wake-ups a second of the recorder's. It now wakes each IDLE_WAKE (1 s), a node's lines still coming at once."""
    from observe.devices.remote import IDLE_WAKE

    found: list[tuple[str, dict[str, Any]]] = []
    front = TcpFront(ssh_node.port)
    link = _link_through(ssh_node, tmp_path, front, found)
    try:
        assert link.take_start(30)
        assert IDLE_WAKE >= 1.0
        tid = link.transport.native_id
        before = _switches(tid)
        time.sleep(3.0)  # 15 intervals of 0.2 s: the node sends little (its telemetry moved not at all)
        woke = _switches(tid) - before
        assert woke < 15, woke  # 30 and more at paramiko's 0.1 s
        link.end()
        assert link.done.wait(30)
        assert "end" == [a.get("phase") for kind, a in found if kind == "device.observed"][-1]
    finally:
        link.close()
        front.close()
