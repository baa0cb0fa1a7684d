"""The repository is self-contained: its own docs carry the contract, and nothing in it points outside."""

from __future__ import annotations

import re
import subprocess

from tests.helpers.paths import ROOT

#: A reference to a file outside the repository: the product brief, or a sibling folder (spelled in
#: parts, so that this file does not match itself).
BRIEF = b"DESIGN" + b".md"
SIBLING = b"../" + b"shared"
OUTSIDE = re.compile(re.escape(BRIEF) + b"|" + re.escape(SIBLING) + rb"\b")


def tracked_files() -> list[str]:
    """Return every file git tracks in the checkout."""
    done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in done.stdout.decode("utf-8", "surrogateescape").split("\0") if name]


def test_nothing_refers_to_files_outside_the_repository() -> None:
    """No tracked file names the product brief or the sibling shared folder: a fresh clone follows every reference."""
    found = [name for name in tracked_files() if (ROOT / name).is_file() and OUTSIDE.search((ROOT / name).read_bytes())]
    assert [] == found


def test_the_check_sees_a_reference() -> None:
    """The pattern finds both spellings (a check that cannot fail proves nothing)."""
    assert OUTSIDE.search(b"see " + SIBLING + b"/" + BRIEF)
    assert OUTSIDE.search(b"the contract is " + BRIEF)
    assert not OUTSIDE.search(b"docs/ARCHITECTURE.md")
