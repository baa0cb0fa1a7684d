"""tests/helpers/node_key_probe.py finds a node's key wherever its account can reach it: the controls that keep the
fleet recipes' "found nowhere" (test_sshd.py, test_slurm.py, test_kubernetes.py) from passing on a blind probe.

Each control runs the probe as the suite's lane account with the key put in one place that account can reach: a
key file it may read, its own environment, another of its processes' memory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.signing import generate_keypair
from tests.helpers import node_key_probe
from tests.helpers.key_reach import REPORT, lane_scratch, probe_training
from tests.helpers.sshd import LANE_USER, lane_account

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the probe runs as the lane account (runuser: root)")


@pytest.fixture
def lane_folder() -> Iterator[Path]:
    """A folder of the lane account's: the probe, its report, and (for one control) a key file it may read."""
    with lane_scratch("aos-probe-control-") as folder:
        yield folder


def _probe(folder: Path, key: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the probe as the lane account against ``key``; its report."""
    report = folder / REPORT
    report.unlink(missing_ok=True)
    words = probe_training(folder, key).split()
    done = subprocess.run(
        ["runuser", "-u", LANE_USER, "--", *words],
        env={"PATH": os.environ["PATH"], **(env or {})},
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    found = json.loads(report.read_text())
    assert isinstance(found, dict)
    return found


def _key(folder: Path) -> Path:
    generate_keypair(folder / "node")
    return folder / "node.key"


def test_a_key_file_it_may_read(lane_folder: Path) -> None:
    """A key the lane account may read (as a node's key is when its command runs as the recorder's account)."""
    key = _key(lane_folder)
    key.chmod(0o644)
    found = _probe(lane_folder, key)
    assert "read" == found["key_file"]
    assert node_key_probe.out_of_reach(lane_account().pw_uid, "node-0") != found


def test_a_key_file_it_may_not_read(tmp_path: Path, lane_folder: Path) -> None:
    """The same probe on a key of root's, mode 0600 in a folder of 0700: denied, and no node recorder above it
    (the suite itself may run under ``alpha observe gate``, as .ci/run runs it: that one is found, not a node's)."""
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    found = _probe(lane_folder, _key(keys))
    assert "denied: PermissionError" == found["key_file"]
    assert found["recorder_command"] is None or found["recorder_command"][:2] != ["observe", "node"], found


def test_the_key_in_its_environment(tmp_path: Path, lane_folder: Path) -> None:
    """A key in the command's own environment (a recorder that did not remove its variable)."""
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    key = _key(keys)
    found = _probe(lane_folder, key, {"ALPHA_NODE_KEY": key.read_text()})
    assert found["own_environ"] is True


@pytest.mark.parametrize("script", ["holder.py", "node_key_probe.py"])
def test_the_key_in_another_process_of_its_account(tmp_path: Path, lane_folder: Path, script: str) -> None:
    """A process of the lane account that holds the key in its memory (dumpable, the account's own) is named; but
    not another node's probe (``node_key_probe.py``), which holds what it read of this probe's memory when the
    suite's nodes probe side by side on one machine (test_sshd.py's sixteen: one in a loaded run), and is read for
    its environment only."""
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    key = _key(keys)
    (lane_folder / "other").mkdir(mode=0o755)
    holding = lane_folder / "other" / script
    holding.write_text("import sys, time\nk = sys.stdin.read()\nprint('ready', flush=True)\ntime.sleep(60)\n")
    holding.chmod(0o644)
    holder = subprocess.Popen(
        ["runuser", "-u", LANE_USER, "--", "python3", str(holding)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdin is not None
        assert holder.stdout is not None
        holder.stdin.write(key.read_text())
        holder.stdin.close()
        assert "ready" == holder.stdout.readline().strip()
        found = _probe(lane_folder, key)
    finally:
        # runuser (root's) and its child, the lane's python: each by its own pid
        children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text().split()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        holder.wait(timeout=30)
    held = [h["where"] for h in found["holders"] if h["pid"] in {int(p) for p in children}]
    assert (["memory"] if script == "holder.py" else []) == held, found
