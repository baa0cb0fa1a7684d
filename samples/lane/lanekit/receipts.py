"""Report to the recording: receipts and artifacts through the ``alpha observe`` CLI.

Paths are written the way the recorder's ``artifact`` event writes them:
relative to the recording's working directory (this process's cwd; the lane
scripts never change directory), normalised. Every field value is passed as
JSON text, so a string that happens to look like a number stays a string.

Outside a recording (no ``AOS_RECEIPTS``) nothing is sent; the receipt is
printed on stderr instead, so the phases can be run and tested by hand.
``ALPHA_LANE_LEDGER`` (set by scripts/ci/lane-common.sh) names a file outside
OUT that lists what was already captured, so the qualification phase captures
each file once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

__all__ = ["artifact", "captured", "receipt", "rel"]


def rel(path: str | os.PathLike[str]) -> str:
    """A path as receipts and artifact events name it."""
    full = os.path.abspath(path)
    cwd = os.getcwd()
    if full == cwd or full.startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(full, cwd)
    return os.path.normpath(full)


def _alpha() -> list[str]:
    exe = shutil.which("alpha")
    return [exe] if exe else [sys.executable, "-m", "observe.cli.root"]


def _recording() -> bool:
    return bool(os.environ.get("AOS_RECEIPTS"))


def receipt(name: str, status: str, **fields: Any) -> None:
    """Emit one receipt (``alpha observe receipt NAME --status S --field K=V ...``)."""
    if not _recording():
        print(
            f"receipt (not recording): {json.dumps({'name': name, 'status': status, 'fields': fields})}",
            file=sys.stderr,
            flush=True,
        )
        return
    argv = [*_alpha(), "observe", "receipt", name, "--status", status]
    for key, value in fields.items():
        argv += ["--field", f"{key}={json.dumps(value, sort_keys=True)}"]
    # In a process group of its own: an interrupt sent to the phase's group stops the phase, not a client
    # half way through its start (a Python interrupted while it imports dies with a fatal error, not quietly).
    done = subprocess.run(argv, check=False, process_group=0)
    if done.returncode != 0:
        raise RuntimeError(f"alpha observe receipt {name} exited {done.returncode}")


def captured() -> set[str]:
    """The paths already captured in this lane (from the ledger)."""
    ledger = os.environ.get("ALPHA_LANE_LEDGER")
    if not ledger or not os.path.exists(ledger):
        return set()
    with open(ledger, encoding="utf-8") as fh:
        return {line.rstrip("\n") for line in fh if line.strip()}


def artifact(*paths: str | os.PathLike[str]) -> None:
    """Capture files now (``alpha observe artifact PATH...``) and note them in the ledger."""
    names = [rel(p) for p in paths]
    if not names:
        return
    if not _recording():
        for name in names:
            print(f"artifact (not recording): {name}", file=sys.stderr, flush=True)
    else:
        done = subprocess.run([*_alpha(), "observe", "artifact", *names], check=False, process_group=0)
        if done.returncode != 0:
            raise RuntimeError(f"alpha observe artifact exited {done.returncode}")
    ledger = os.environ.get("ALPHA_LANE_LEDGER")
    if ledger:
        with open(ledger, "a", encoding="utf-8") as fh:
            for name in names:
                fh.write(name + "\n")
