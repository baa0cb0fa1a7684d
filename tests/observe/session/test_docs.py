"""docs/NODES.md's "Fleet sessions": the spec, the launcher and the commands run as the page shows them."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.helpers.paths import ROOT
from tests.helpers.run import ALPHA, child_env

SECTION = "## Fleet sessions"


def _blocks(kind: str) -> list[str]:
    text = (ROOT / "docs" / "NODES.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    end = section.find("\n## ", 1)  # the section ends where the next begins
    section = section if end < 0 else section[:end]
    return re.findall(rf"```{kind}\n(.*?)```", section, flags=re.S)


class TestFleetSessionsPage:
    """Each block of the section runs as written and does what the page says."""

    def test_the_page_runs_as_written(self, tmp_path: Path) -> None:
        """The keys made as shown; session run, verify and gate each exit 3 naming node-2, the one node the
        launcher never started; node-0 and node-1 proven by the keys the spec declares."""
        (spec,) = _blocks("json")
        # the SSH recipe's two blocks are run by tests/observe/session/test_sshd.py, over real sshd nodes
        ssh = [b for b in _blocks("sh") if b.startswith(("ssh root@", "ALPHA_NODE_KEY="))]
        assert 2 == len(ssh)
        keygen, launcher, commands = [b for b in _blocks("sh") if b not in ssh]
        (tmp_path / "fleet.json").write_text(spec)
        (tmp_path / "launch.sh").write_text(launcher)
        (tmp_path / "launch.sh").chmod(0o755)
        for i in range(2):
            gpus = [
                {"index": g, "minor": g, "uuid": f"GPU-{i}{g}", "name": "NVIDIA H200", "memory": 1 << 30}
                for g in (0, 1)
            ]
            (tmp_path / f"gpus-{i}.json").write_text(json.dumps({"driver": "580", "gpus": gpus}))
        env = child_env({"PATH": f"{Path(ALPHA).parent}:{os.environ['PATH']}"})
        for line in keygen.strip().splitlines():
            done = subprocess.run(
                ["sh", "-c", line], cwd=tmp_path, env=env, capture_output=True, timeout=60, check=False
            )
            assert 0 == done.returncode, (line, done.stderr)
        lines = commands.strip().splitlines()
        assert 3 == len(lines)
        for line in lines:
            done = subprocess.run(
                ["sh", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
            )
            assert 3 == done.returncode, (line, done.stdout, done.stderr)
            assert "node-2" in done.stdout + done.stderr, line
        assert "did-not-run: no stream at nodes/node-2.aos" in done.stdout
        from aos.signing import load_public_key
        from observe.session.verify import verify_session

        report = verify_session(tmp_path / "run-7", load_public_key(tmp_path / "session.pub"))
        proven = {m.path: m.key_id for m in report.members if m.status == "proven"}
        assert {n: load_public_key(tmp_path / f"{n}.pub").key_id for n in ("node-0", "node-1")} == proven
