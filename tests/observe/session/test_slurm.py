"""docs/NODES.md's "Fleet sessions under Slurm", run as written: Debian's slurm-wlm and munge on 127.0.0.1,
one ``srun`` task per node, each a node recorder; skipped, with the reason, where Slurm cannot start here."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.key_reach import assert_out_of_reach, fill, lane_scratch, probe_training
from tests.helpers.paths import ROOT
from tests.helpers.run import ALPHA, child_env
from tests.helpers.sshd import LANE_USER

SECTION = "## Fleet sessions under Slurm"
#: The folder and ports the page's slurm.conf names.
FOLDER = Path("/tmp/alpha-slurm")
PORTS = (46817, 46818)
DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/srun", "/usr/bin/sinfo")


def _blocks() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "NODES.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    return re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)


def _why_not() -> str | None:
    """Why Slurm cannot start here (None: it can be tried)."""
    missing = [d for d in DAEMONS if not os.access(d, os.X_OK)]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)}: apt-get install -y slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the recipe runs slurmd and munged as root"
    if not os.path.exists("/etc/munge/munge.key"):
        return "no /etc/munge/munge.key (munge's package makes it)"
    for port in PORTS:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return f"port {port}, the page's slurm.conf's, is in use here"
    return None


def _pids() -> list[int]:
    pids = []
    for name in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int((FOLDER / name).read_text().strip()))
    return pids


@pytest.fixture
def slurm() -> Iterator[dict[str, str]]:
    """The page's cluster started as it says (conf, then munged, slurmctld, slurmd); its daemons stopped after."""
    why = _why_not()
    if why is not None:
        pytest.skip(why)
    blocks = _blocks()
    conf = next(body for kind, body in blocks if kind == "conf")
    start = next(body for kind, body in blocks if kind == "sh" and "slurmctld" in body)
    shutil.rmtree(FOLDER, ignore_errors=True)
    for sub in ("", "state", "spool"):
        (FOLDER / sub).mkdir(parents=True, exist_ok=True)
    (FOLDER / "slurm.conf").write_text(conf)
    env = child_env({"PATH": f"/usr/sbin:{os.environ['PATH']}"})
    try:
        for line in start.strip().splitlines():
            done = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True, timeout=60, check=False)
            if done.returncode != 0:
                pytest.skip(
                    f"Slurm did not start here: {line.split()[0]} exited {done.returncode}: {done.stderr[-300:]}"
                )
        deadline = time.monotonic() + 30
        while True:
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%t", "-n", "node-0"],
                env={**env, "SLURM_CONF": str(FOLDER / "slurm.conf")},
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            if state.stdout.strip() == "idle":
                break
            if time.monotonic() > deadline:
                log = (
                    (FOLDER / "slurmd.log").read_text(errors="replace")[-500:]
                    if (FOLDER / "slurmd.log").exists()
                    else ""
                )
                pytest.skip(
                    f"Slurm's node-0 never became idle ({state.stdout.strip()!r} {state.stderr.strip()}): {log}"
                )
            time.sleep(0.5)
        yield env
    finally:
        for pid in _pids():  # the daemons this fixture started, each by its own pid file
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        time.sleep(1)
        shutil.rmtree(FOLDER, ignore_errors=True)


@pytest.mark.slow(reason="starts munged, slurmctld and slurmd")
def test_the_slurm_recipe_runs_as_written(slurm: dict[str, str], tmp_path: Path) -> None:
    """The page's keys, spec, launcher and commands as written: the session and its verification exit 0, node-0
    (the one Slurm node, its recorder an srun task signing with its declared key) proven; its training, run as
    the lane account, found the key in neither the key file, its environment, nor its recorder's."""
    blocks = _blocks()
    (spec,) = [body for kind, body in blocks if kind == "json"]
    launcher = next(body for kind, body in blocks if kind == "sh" and body.startswith("#!/bin/sh"))
    keygen = next(body for kind, body in blocks if kind == "sh" and "keygen" in body)
    commands = next(body for kind, body in blocks if kind == "sh" and "session run" in body)
    (tmp_path / "fleet-slurm.json").write_text(spec)
    env = {**slurm, "PATH": f"{Path(ALPHA).parent}:{slurm['PATH']}"}
    lines = commands.strip().splitlines()
    assert 2 == len(lines)
    for line in keygen.strip().splitlines():
        done = subprocess.run(
            ["sh", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert 0 == done.returncode, (line, done.stderr)
    # the page's lane account is the suite's (each xdist worker has its own), and its training the probe that
    # tries to take node-0's key (tests/helpers/node_key_probe.py, where the lane account can read it)
    with lane_scratch("aos-slurm-lane-") as share:
        training = probe_training(share, tmp_path / "keys" / "node-0.key")
        lane = ("runuser -u lane ", f"runuser -u {LANE_USER} ")
        filled = fill(launcher, [lane, ('echo training on "$SLURMD_NODENAME"', training)])
        (tmp_path / "launch-slurm.sh").write_text(filled)
        (tmp_path / "launch-slurm.sh").chmod(0o755)
        for line in lines:
            done = subprocess.run(
                ["sh", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False
            )
            assert 0 == done.returncode, (line, done.stdout, done.stderr)
        assert_out_of_reach(share, "node-0")
    assert "1 proven, 0 did not run or not proven" in done.stdout
    assert (tmp_path / "run-8" / "nodes" / "node-0.aos").is_file()
    from aos.signing import load_public_key
    from aos.verify import verify_stream

    node_key = load_public_key(tmp_path / "keys" / "node-0.pub")
    assert node_key.key_id == verify_stream(tmp_path / "run-8" / "nodes" / "node-0.aos", node_key).key_id
