"""A command whose argv fills the kernel's ARG_MAX with text that is not UTF-8 is recorded, its stream.open within
the event bound: long items cut with their length and SHA-256, items past the budget noted by length."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from aos.bounds import ARGV_BUDGET, ARGV_ITEM
from aos.text import display
from aos.verify import verify_stream
from tests.helpers.recorder import events, one, record

ITEM = b"\xff" * 120_000
ITEMS = 14  # 1.68 MB: with base64 (4/3) and recorded twice (argv, recorder_argv), over the 4 MiB event bound


def test_a_huge_non_utf8_argv_is_recorded_within_the_bound(tmp_path: Path) -> None:
    """The recording ends sealed and verifying with the command's own exit code; each cut item names its digest."""
    arg = os.fsdecode(ITEM)
    proc, out = record(tmp_path, ["python3", "-c", "import sys; sys.exit(7)", *[arg] * ITEMS])
    assert 7 == proc.returncode, proc.stderr[-2000:]
    assert verify_stream(out).events > 0
    argv = one(events(out), "stream.open").attrs["argv"]
    shown = [display(v) for v in argv[3:]]
    note = f"{len(ITEM)} bytes, sha256 {hashlib.sha256(ITEM).hexdigest()}"
    recorded = ARGV_BUDGET // ARGV_ITEM  # the items after python3 -c CODE begun within the budget
    assert ITEMS == len(shown)
    assert all(s.endswith(f"[CUT: {note}]") for s in shown[:recorded]), shown[0][-200:]
    assert [f"[NOT RECORDED: {note}]"] * (ITEMS - recorded) == shown[recorded:]
