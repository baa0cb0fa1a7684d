"""docs/NODES.md's "Try it without a GPU": samples/pod/local-pod.sh runs as the page shows it.

Each ``sh`` block of that section runs as written (only its output folder moved under the test's
temporary folder) from the repository root, as root, against the real sshd the script starts: the
coordinate-device lane over SSH on the CPU test doubles is ``inconclusive``, scope physical, open on
``devices-observed`` for simulated cards; with the lane account's planted ``usercustomize.py`` it is
still not a pass, and the plant was live for the lane account while the observer (root) never loaded it.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aos.reader import read_stream
from tests.helpers.paths import ROOT
from tests.helpers.run import ALPHA, child_env
from tests.helpers.sshd import sshd_available
from tests.helpers.workers import LANES_OVER_SSH

SECTION = "## Try it without a GPU"
pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.slow,  # a pod of real sshds and the lane over them
    LANES_OVER_SSH,
    pytest.mark.skipif(os.geteuid() != 0, reason="local-pod.sh makes an account and serves two: root only"),
    pytest.mark.skipif(sshd_available() is not None, reason=str(sshd_available())),
]


def _blocks() -> list[str]:
    text = (ROOT / "docs" / "NODES.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))] if "\n## " in section[len(SECTION) :] else section
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", section, flags=re.S)]


def _shown_gate() -> str:
    """The gate command the page says the script runs (the plain ``` block)."""
    text = (ROOT / "docs" / "NODES.md").read_text(encoding="utf-8")
    return re.findall(r"```\n(alpha observe gate .*?)\n```", text[text.index(SECTION) :])[0]


def _run(block: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A block as written, its output folder (the last word) moved into ``tmp_path``."""
    written = block.split()[-1]
    out = tmp_path / Path(written).name
    script = block.replace(written, str(out))
    env = child_env({"PATH": f"{Path(ALPHA).parent}:{os.environ['PATH']}"})
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=280
    )
    return done, out


def _verdict(stream: Path) -> dict[str, Any]:
    shown = subprocess.run([ALPHA, "observe", "verdict", str(stream), "--json"], capture_output=True, text=True)
    return json.loads(shown.stdout)


def _open(verdict: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in verdict["checks"] if c["status"] != "pass"}


def test_the_page_shows_two_runs_of_the_script() -> None:
    """The section's commands are the plain run and the plant control, both of samples/pod/local-pod.sh."""
    blocks = _blocks()
    assert [b.split()[:3] for b in blocks] == [
        ["bash", "samples/pod/local-pod.sh", "/tmp/local-pod"],
        ["bash", "samples/pod/local-pod.sh", "--plant"],
    ]


def test_try_it_without_a_gpu(tmp_path: Path) -> None:
    """Every lane step runs over SSH as the lane account; devices-observed stays open (simulated cards), and
    the recorder logged into the node as root with its key from the environment."""
    done, out = _run(_blocks()[0], tmp_path)
    output = done.stdout + done.stderr
    assert 3 == done.returncode, output[-4000:]
    assert _shown_gate().replace("OUT", str(out)) in output
    verdict = _verdict(out / "pod.aos")
    assert ("inconclusive", "physical") == (verdict["verdict"], verdict["scope"])
    # the rebuild is open too where this checkout has uncommitted files
    assert set(_open(verdict)) - {"rebuild"} == {"devices-observed"}, _open(verdict)
    reason = next(c["reason"] for c in verdict["checks"] if c["name"] == "devices-observed")
    assert "simulated" in reason
    config = json.loads((out / "lane-config.json").read_text())
    assert config["host"].startswith("alpha-lane@127.0.0.1")
    assert config["observer"] == {"user": "root", "python": "/usr/bin/python3"}
    assert not (out / "pod" / "observer_key").exists()
    steps = {
        e.attrs["name"]: e.attrs.get("exit_code") for e in read_stream(out / "pod.aos").events if e.kind == "step.end"
    }
    assert 0 == steps["uninterrupted-run.owner-1"]
    assert f"local-pod: stream {out}/pod.aos: inconclusive (scope physical)" in output


def test_the_plant_is_not_a_pass(tmp_path: Path) -> None:
    """The lane account's usercustomize.py ran in the lane's own Python processes, never in the observer (no
    uid 0 line in its log), and the verdict is not a pass; the plant is gone afterwards."""
    done, out = _run(_blocks()[1], tmp_path)
    output = done.stdout + done.stderr
    assert 0 != done.returncode, output[-4000:]
    verdict = _verdict(out / "pod.aos")
    assert "pass" != verdict["verdict"]
    assert "devices-observed" in _open(verdict)
    loads = (out / "plant.log").read_text().splitlines()
    uids = {int(line.split()[1]) for line in loads}
    assert uids, loads
    assert 0 not in uids, loads
    # the roles' own processes loaded it (where none did, the lane stopped before its roles: say where)
    assert any(".pyz" in line for line in loads), (loads, output[-4000:])
    home = Path(pwd.getpwnam("alpha-lane").pw_dir)
    planted = list((home / ".local" / "lib").glob("python3*/site-packages/usercustomize.py"))
    assert [] == planted
