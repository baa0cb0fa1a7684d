"""Running tests/helpers/node_key_probe.py as a fleet recipe's training, and filling a recipe's placeholders.

docs/NODES.md's fleet recipes (SSH, Slurm, Kubernetes) are run as written with their placeholders filled
(:func:`fill`), and with a training that tries to take the node's key (:func:`probe_training`, in a folder of
the lane account's, :func:`lane_scratch`); :func:`assert_out_of_reach` reads what it found.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import key_probe, node_key_probe
from tests.helpers.sshd import as_lane, lane_account

#: Where in its folder the probe writes what it found.
REPORT = "probe.json"


def fill(text: str, pairs: list[tuple[str, str]]) -> str:
    """``text`` with each placeholder replaced, in order; each must be there (the page changed otherwise)."""
    for placeholder, value in pairs:
        assert placeholder in text, (placeholder, text)
        text = text.replace(placeholder, value)
    return text


@contextlib.contextmanager
def lane_scratch(prefix: str = "aos-key-reach-") -> Iterator[Path]:
    """A folder of the lane account's (mode 0755, under the temporary folder), removed after."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    try:
        yield as_lane(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def probe_training(folder: Path, key: Path) -> str:
    """The shell words of a training that tries to take ``key``: the probe, copied into ``folder`` (one the lane
    account can read and write), reporting to ``folder/probe.json``."""
    probe = folder / "node_key_probe.py"
    shutil.copyfile(Path(node_key_probe.__file__), probe)
    shutil.copyfile(Path(key_probe.__file__), folder / "key_probe.py")  # its memory scan
    for copied in (probe, folder / "key_probe.py"):
        copied.chmod(0o644)
    return node_key_probe.command(probe, key, folder / REPORT)


def assert_out_of_reach(folder: Path, node: str) -> None:
    """The probe of ``folder`` ran as the lane account, under node ``node``'s recorder, and found the key nowhere."""
    found = json.loads((folder / REPORT).read_text())
    assert isinstance(found["recorder"], int), found
    expected = node_key_probe.out_of_reach(lane_account().pw_uid, node)
    assert expected == {k: v for k, v in found.items() if k not in ("recorder", "scanned")}, (found, expected)
