"""Fleet sessions over four and sixteen real sshd nodes, each running its own node recorder over SSH.

The launcher runs docs/NODES.md's SSH recipe as written (its two blocks, the node's name, folders, key path,
lane account and training filled in): the node recorder logs in as the node's observer account (root),
reads its node's key from a file only root can read into ``--sign-key-env``, and runs the training as the
suite's lane account (``runuser``). The training is tests/helpers/node_key_probe.py: it tries the key file,
its own environment and its recorder's ``/proc/PID/environ`` and ``/proc/PID/mem``, and finds the key
nowhere (on a recipe that ran the training as root, or signed with a key file it can read, it would).
Here the lane account could not run the recorder at all, since this installation's interpreter is a venv
whose base Python lies under /root (mode 0700; pyvenv.cfg's ``home``), which no other account can enter;
a node recorder run as the lane account would also be one the lane could speak for, the two-account
rule's concern."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import stat
from pathlib import Path
from typing import Any

from aos.signing import generate_keypair, load_public_key
from observe.session.verify import verify_session
from tests.aos.test_session_format import independent_session_check
from tests.helpers.key_reach import assert_out_of_reach, fill, probe_training
from tests.helpers.paths import ROOT
from tests.helpers.run import ALPHA, alpha
from tests.helpers.sshd import LANE_USER

#: The recipe's placeholders (docs/NODES.md, "Fleet sessions"): node, key file, node's folder, training.
NODE, KEY, FOLDER, TRAIN = "node-3", "/etc/alpha-observe/node-3.key", "/tmp/run-7", "/srv/train/train.sh"


def _recipe() -> tuple[str, str]:
    """docs/NODES.md's SSH recipe: the launcher's lines for ``node-3``, and ``node-3.sh``, the node's recorder."""
    text = (ROOT / "docs" / "NODES.md").read_text(encoding="utf-8")
    section = text[text.index("## Fleet sessions\n") : text.index("## Fleet sessions under Slurm")]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    launch = next(b for b in blocks if b.startswith("ssh root@node-3 "))
    node = next(b for b in blocks if b.startswith("ALPHA_NODE_KEY="))
    return launch, node


def _key(tmp: Path, label: str) -> Path:
    """Node ``label``'s key pair, as its operator provisions it: the private half readable by the observer account
    only (mode 0600, root's: the lane account cannot sign as the node), the public half named in the spec."""
    (tmp / "keys").mkdir(mode=0o700, exist_ok=True)
    if not (tmp / "keys" / f"{label}.key").exists():
        generate_keypair(tmp / "keys" / label)
    return tmp / "keys" / f"{label}.key"


def _members(tmp: Path, names: list[str], prefix: str = "") -> list[dict[str, Any]]:
    """The spec's members: each name with its own public key (made now)."""
    return [{"name": n, "key": str(_key(tmp, prefix + n).with_suffix(".pub"))} for n in names]


def _node_line(tmp: Path, name: str, folder: Path, command: str, origin: str = '"$1"', key: str = "") -> str:
    """The page's ``node-3.sh`` line for node ``name`` on ``folder``, signing with ``keys/KEY.key`` (KEY the
    node's name unless given), its training ``command`` run as the lane account; the installation's ``alpha``
    (with its checkout on PYTHONPATH) and no device observer (the nodes have no GPU)."""
    return fill(
        _recipe()[1],
        [
            (KEY, str(_key(tmp, key or name))),
            (FOLDER, str(folder)),
            (NODE, name),
            ("exec alpha ", f"PYTHONPATH={ROOT} exec {ALPHA} "),
            ("--quiet", "--observe-devices off --quiet"),
            ("runuser -u lane ", f"runuser -u {LANE_USER} "),
            (TRAIN, command),
            ('"$1"', origin),
        ],
    )


def _node_script(tmp: Path, name: str, folder: Path, command: str, origin: str = '"$1"', key: str = "") -> Path:
    """``NAME.sh``: the page's node recorder line (:func:`_node_line`), which the launcher pipes to the node."""
    script = tmp / f"{name}.sh"
    script.write_text(_node_line(tmp, name, folder, command, origin, key))
    return script


def _killed_script(tmp: Path, name: str, folder: Path, key: str = "") -> Path:
    """``NAME.sh``: the page's node recorder line in the background, killed before it seals."""
    script = tmp / f"{name}.sh"
    line = _node_line(tmp, name, folder, "sleep 2", key=key).strip().replace(" exec ", " ")
    script.write_text(
        f"{line} &\n"
        f"p=$!\nfor _ in $(seq 100); do [ -s {folder}/nodes/.{name}.aos.partial ] && break; sleep 0.1; done\n"
        # its command ends 2 s later, and the next node's recording removes the empty cgroup it left
        "sleep 0.5\nkill -KILL $p\nsleep 2.5\n"
    )
    return script


def _probe(tmp: Path, folder: Path, key: str) -> str:
    """The training that tries to take node ``key``'s key, reporting into the node's ``folder``."""
    return probe_training(folder, _key(tmp, key))


def _launch(node: Any, name: str, folder: Path, script: Path) -> str:
    """The page's launcher lines for ``node``: pipe ``script`` to it over SSH, then bring its stream back."""
    ssh = " ".join(shlex.quote(a) for a in node.observer_argv())
    return fill(
        _recipe()[0], [("ssh root@node-3", ssh), ("node-3.sh", str(script)), (FOLDER, str(folder)), (NODE, name)]
    )


class TestOverSshd:
    """Four sshd nodes: two seal, one is killed before its seal, one seals for another session."""

    def test_four_sshd_nodes(self, ssh_fleet: list[Any], tmp_path: Path) -> None:
        """The did-not-run / not-proven set is exactly n2 (unsealed) and n3 (another session's); the rest
        verify offline, by the CLI and independently, once the nodes' own folders are gone."""
        folders = [node.lane_folder(f"session-{tmp_path.name}") for node in ssh_fleet]
        scripts = [
            _node_script(tmp_path, "n0", folders[0], _probe(tmp_path, folders[0], "n0")),
            _node_script(tmp_path, "n1", folders[1], _probe(tmp_path, folders[1], "n1")),
            _killed_script(tmp_path, "n2", folders[2]),
            _node_script(tmp_path, "n3", folders[3], "hostname", "example.com/another-session/1"),
        ]
        body = "".join(_launch(node, f"n{i}", folders[i], scripts[i]) for i, node in enumerate(ssh_fleet))
        body = body.replace("nodes/n2.aos", "nodes/.n2.aos.partial")  # n2 never sealed: its partial stream
        launcher = tmp_path / "launch.sh"
        launcher.write_text("#!/bin/sh\n" + body)
        launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
        spec = tmp_path / "spec.json"
        members = _members(tmp_path, [f"n{i}" for i in range(4)])
        spec.write_text(json.dumps({"origin": "example.com/sshd", "members": members}))
        proc = alpha(
            "observe",
            "session",
            "run",
            str(spec),
            "--dir",
            str(tmp_path / "S"),
            "--quiet",
            "--",
            str(launcher),
            cwd=tmp_path,
            text=True,
            timeout=240,
        )
        assert 3 == proc.returncode, proc.stderr
        for i in (0, 1):
            assert_out_of_reach(folders[i], f"n{i}")
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        report = verify_session(tmp_path / "S")
        assert {"n2": "not-proven", "n3": "not-proven"} == {m.path: m.status for m in report.not_proven}
        reasons = {m.path: m.reason or "" for m in report.not_proven}
        assert "stream-unsealed" in reasons["n2"]
        assert "it names session 'example.com/another-session/1'" in reasons["n3"]  # its own key: not enough
        declared = {f"n{i}": _key(tmp_path, f"n{i}") for i in (0, 1)}
        assert {n: load_public_key(k.with_suffix(".pub")).key_id for n, k in declared.items()} == {
            m.path: m.key_id for m in report.members if m.status == "proven"
        }
        assert {"n0", "n1"} == independent_session_check(tmp_path / "S")
        proc = alpha("observe", "session", "verify", str(tmp_path / "S"), text=True)
        assert 3 == proc.returncode


def _launch_bg(node: Any, name: str, folder: Path, script: Path, stream: str) -> str:
    """Launcher lines: on ``node`` over SSH, in the background, run ``script``, then bring ``stream`` (the
    node's sealed stream, or its partial one) back under a temporary name and rename it whole (the page's
    launcher lines, run in parallel: a rack's coordinator takes a stream only once whole)."""
    ssh = " ".join(shlex.quote(a) for a in node.observer_argv())
    back = f'"$ALPHA_FLEET_DIR/nodes/{stream}"'
    return (
        f'( {ssh} sh -s -- "$ALPHA_FLEET_ORIGIN" < {script}; '
        f"{ssh} cat {folder}/nodes/{stream} > {back}.copy && mv {back}.copy {back} ) &\n"
    )


class TestSixteenOverSshd:
    """Sixteen sshd nodes in four racks of four, each node's recorder started over SSH."""

    def test_sixteen_sshd_nodes(self, ssh_fleet16: list[Any], tmp_path: Path) -> None:
        """rack-1/n2 killed before its seal, rack-2/n3 sealed for another session: the set is exactly those two;
        rack-3/n0's stream edited after the session sealed it: named as changed since; the other 13 nodes and
        the four racks verify offline, by the CLI and independently, once the nodes' folders are gone."""
        folders = [node.lane_folder(f"session16-{tmp_path.name}") for node in ssh_fleet16]
        racks = []
        probed: list[tuple[Path, str]] = []  # the nodes whose training tries to take their key
        for r in range(4):
            lines = []
            for i in range(4):
                k = 4 * r + i
                node, folder, name = ssh_fleet16[k], folders[k], f"n{i}"
                if (r, i) == (1, 2):  # killed before it seals
                    script = _killed_script(tmp_path, name, folder, f"r{r}{name}").rename(tmp_path / f"r{r}{name}.sh")
                    lines.append(_launch_bg(node, name, folder, script, f".{name}.aos.partial"))
                    continue
                if (r, i) == (2, 3):  # sealed for another session
                    origin, command = "example.com/another-session/1", "hostname"
                else:
                    origin, command = '"$1"', _probe(tmp_path, folder, f"r{r}{name}")
                    probed.append((folder, name))
                script = _node_script(tmp_path, name, folder, command, origin, f"r{r}{name}")
                script = script.rename(tmp_path / f"r{r}{name}.sh")
                lines.append(_launch_bg(node, name, folder, script, f"{name}.aos"))
            rack = tmp_path / f"rack-{r}.sh"
            rack.write_text("#!/bin/sh\n" + "".join(lines) + "wait\n")
            rack.chmod(rack.stat().st_mode | stat.S_IXUSR)
            spec = tmp_path / f"rack-{r}.json"
            members = _members(tmp_path, [f"n{i}" for i in range(4)], f"r{r}")
            spec.write_text(json.dumps({"origin": "example.com/rack", "members": members}))
            sign = f"--sign-key {_key(tmp_path, f'rack-{r}')}"
            racks.append(f"{ALPHA} observe session run {spec} --member rack-{r} {sign} --quiet -- {rack} &\n")
        launcher = tmp_path / "launch.sh"
        launcher.write_text("#!/bin/sh\n" + "".join(racks) + "wait\n")
        launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
        top = tmp_path / "top.json"
        members = [{**m, "session": True} for m in _members(tmp_path, [f"rack-{r}" for r in range(4)])]
        top.write_text(json.dumps({"origin": "example.com/sshd16", "members": members}))
        proc = alpha("observe", "session", "run", str(top), "--dir", str(tmp_path / "S"), "--quiet", "--",
                     str(launcher), cwd=tmp_path, text=True, timeout=480)  # fmt: skip
        assert 0 == proc.returncode, proc.stderr  # every rack sealed: the top's members are proven
        assert 14 == len(probed)
        for folder, name in probed:
            assert_out_of_reach(folder, name)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        report = verify_session(tmp_path / "S")
        assert 20 == len(report.members)
        assert {"rack-1/n2": "not-proven", "rack-2/n3": "not-proven"} == {m.path: m.status for m in report.not_proven}
        reasons = {m.path: m.reason or "" for m in report.not_proven}
        assert "stream-unsealed" in reasons["rack-1/n2"]
        assert "it names session 'example.com/another-session/1'" in reasons["rack-2/n3"]
        proven = {m.path for m in report.members if m.status == "proven"}
        assert proven == independent_session_check(tmp_path / "S")
        assert 3 == alpha("observe", "session", "verify", str(tmp_path / "S"), text=True).returncode
        edited = tmp_path / "S" / "sessions" / "rack-3" / "nodes" / "n0.aos"
        data = bytearray(edited.read_bytes())
        data[len(data) // 2] ^= 0xFF
        edited.write_bytes(bytes(data))
        report = verify_session(tmp_path / "S")
        changed = [m for m in report.not_proven if not m.sealed]
        assert ["rack-3/n0"] == [m.path for m in changed]
        assert 1 == report.exit_code
        proc = alpha("observe", "session", "verify", str(tmp_path / "S"), text=True)
        assert 1 == proc.returncode
        assert "not-proven (since the session sealed): rack-3/n0" in proc.stdout
