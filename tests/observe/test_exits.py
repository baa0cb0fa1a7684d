"""Exit codes: each one ``alpha`` gives is a member of observe.exits.Exit, never a number written elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

from observe.exits import Exit
from tests.helpers.paths import ROOT

#: The packages that give exit codes (aos and gates give none: they cannot import observe).
PACKAGES = ("observe", "tracker")
#: The codes that only an exit status means (0 to 3 are too common to scan for).
CODES = {int(member) for member in Exit if member >= Exit.RESTORED}
#: Where such a number, written in decimal, is no exit code.
ELSEWHERE = {
    "observe/exits.py": "the one place they are named",
    "observe/report/model.py": "128 characters: how long a text shown in the report may be",
    "observe/report/page.py": "128 characters of attrs: what the page's last cut but one keeps",
}


def decimal_codes(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of each integer written in decimal in ``path`` that is one of CODES."""
    source = path.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value in CODES:
            text = ast.get_source_segment(source, node) or ""
            if text.isdigit():  # 0x7F is a control character, not 127
                found.append((node.lineno, text))
    return sorted(found)


def test_no_module_writes_an_exit_code_as_a_number() -> None:
    """123 to 128 (and 128+N) are spelled ``Exit.RESTORED`` ... ``Exit.SIGNAL + N`` everywhere."""
    found = {
        rel: codes
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (rel := str(path.relative_to(ROOT))) not in ELSEWHERE and (codes := decimal_codes(path))
    }
    assert {} == found


def test_the_scan_finds_a_planted_code(tmp_path: Path) -> None:
    """The scan is not blind: a planted ``return 127`` is found, a ``0x7F`` is not."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f(c):\n    return 127 if c == 0x7F else 126\n")
    assert [(2, "126"), (2, "127")] == decimal_codes(planted)
