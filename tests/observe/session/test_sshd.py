"""A fleet session over four real sshd nodes, each running its own node recorder over SSH.

The node recorder logs in as the node's observer account (the recorder's, as docs/NODES.md's two accounts
say), the account that can run this installation's interpreter here."""

from __future__ import annotations

import json
import shlex
import shutil
import stat
from pathlib import Path
from typing import Any

from observe.session.verify import verify_session
from tests.aos.test_session_format import independent_session_check
from tests.helpers.paths import ROOT
from tests.helpers.run import ALPHA, alpha


def _node_script(tmp: Path, name: str, folder: Path, share: Path, command: str, origin: str = '"$1"') -> Path:
    """A script the launcher runs on a node through ``ssh NODE sh -s -- ORIGIN``: the node's recorder."""
    script = tmp / f"{name}.sh"
    script.write_text(
        f"PYTHONPATH={share} exec {ALPHA} observe node {name} --session-dir {folder} --origin {origin} "
        f"--observe-devices off --quiet -- {command}\n"
    )
    return script


def _launch(node: Any, name: str, folder: Path, script: Path) -> str:
    """Launcher lines: run ``script`` on ``node`` over SSH, then bring the node's stream back."""
    ssh = " ".join(shlex.quote(a) for a in node.observer_argv())
    run = f'{ssh} sh -s -- "$ALPHA_FLEET_ORIGIN" < {script}'
    return f'{run}\n{ssh} cat {folder}/nodes/{name}.aos > "$ALPHA_FLEET_DIR/nodes/{name}.aos"\n'


class TestOverSshd:
    """Four sshd nodes: two seal, one is killed before its seal, one seals for another session."""

    def test_four_sshd_nodes(self, ssh_fleet: list[Any], tmp_path: Path) -> None:
        """The did-not-run / not-proven set is exactly n2 (unsealed) and n3 (another session's); the rest
        verify offline, by the CLI and independently, once the nodes' own folders are gone."""
        share = ROOT
        folders = [node.lane_folder(f"session-{tmp_path.name}") for node in ssh_fleet]
        scripts = [
            _node_script(tmp_path, "n0", folders[0], share, "hostname"),
            _node_script(tmp_path, "n1", folders[1], share, "hostname"),
            tmp_path / "n2.sh",
            _node_script(tmp_path, "n3", folders[3], share, "hostname", "example.com/another-session/1"),
        ]
        scripts[2].write_text(  # the node's recorder killed before it seals
            f'PYTHONPATH={share} {ALPHA} observe node n2 --session-dir {folders[2]} --origin "$1" '
            "--observe-devices off --quiet -- sleep 2 &\n"
            f"p=$!\nfor _ in $(seq 100); do [ -s {folders[2]}/nodes/.n2.aos.partial ] && break; sleep 0.1; done\n"
            # its command ends 2 s later, and the next node's recording removes the empty cgroup it left
            "sleep 0.5\nkill -KILL $p\nsleep 2.5\n"
        )
        body = "".join(_launch(node, f"n{i}", folders[i], scripts[i]) for i, node in enumerate(ssh_fleet))
        body = body.replace("nodes/n2.aos", "nodes/.n2.aos.partial")  # n2 never sealed: its partial stream
        launcher = tmp_path / "launch.sh"
        launcher.write_text("#!/bin/sh\n" + body)
        launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"origin": "example.com/sshd", "members": [{"name": f"n{i}"} for i in range(4)]}))
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
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        report = verify_session(tmp_path / "S")
        assert {"n2": "not-proven", "n3": "not-proven"} == {m.path: m.status for m in report.not_proven}
        reasons = {m.path: m.reason or "" for m in report.not_proven}
        assert "stream-unsealed" in reasons["n2"]
        assert "it names session 'example.com/another-session/1'" in reasons["n3"]
        assert {"n0", "n1"} == independent_session_check(tmp_path / "S")
        proc = alpha("observe", "session", "verify", str(tmp_path / "S"), text=True)
        assert 3 == proc.returncode
