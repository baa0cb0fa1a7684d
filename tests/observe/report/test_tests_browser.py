"""The report shows captured test results failing first, and a failing step's output from its end (in Chromium)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gates.language import parse_gate_text
from gates.testing import SyntheticStream
from observe.report.write import write_report
from tests.helpers.browser import rendered

GATE = '[gate]\nname = "t"\n[[step]]\nname = "test"\n[[tests]]\njunit = "r/*.xml"\n'
JUNIT = (
    b'<testsuite name="s" tests="4" failures="0" errors="0">'
    b'<testcase classname="app" name="test_a"/><testcase classname="app" name="test_b"/>'
    b'<testcase classname="app" name="test_c"/>'
    b'<testcase classname="app" name="test_broken" file="app.py" line="9">'
    b'<failure message="1 != 2">tb</failure></testcase>'
    b"</testsuite>"
)
#: The output's last line, and its first: a reader must see the end without scrolling.
OUTPUT = b"FIRST-LINE\n" + b"".join(b"." * 70 + b"\n" for _ in range(400)) + b"FAILED app.py::test_broken LAST-LINE\n"

IN_VIEW = """([marker, box]) => {
    const el = document.querySelector(box);
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    while (walk.nextNode()) {
        const i = walk.currentNode.data.indexOf(marker);
        if (i < 0) continue;
        const range = document.createRange();
        range.setStart(walk.currentNode, i);
        range.setEnd(walk.currentNode, i + marker.length);
        const r = range.getBoundingClientRect(), b = el.getBoundingClientRect();
        return r.top >= b.top && r.bottom <= b.bottom;
    }
    return null;
}"""


def _stream(tmp_path: Path) -> Path:
    s = SyntheticStream()
    s.step_start("test")
    s.output("stdout", OUTPUT, step="test")
    s.artifact("r/junit.xml", JUNIT, step="test")
    s.step_end("test", exit_code=1)
    s.exit(1)
    v = s.evaluate(parse_gate_text(GATE, "t.toml"))
    s.add("verdict", v.to_attrs())
    path = tmp_path / "s.aos"
    s.write(path)
    return path


def test_failing_tests_first_and_output_at_its_end(browser: Any, tmp_path: Path) -> None:
    """The Tests section lists the failing test before the others, and the failing step's output shows its end."""
    page_path = tmp_path / "s.html"
    write_report(_stream(tmp_path), page_path)
    r = rendered(browser, page_path)
    try:
        page = r.page
        ids = page.locator("#tests .test-id")
        assert "app.test_broken" == ids.nth(0).inner_text()
        assert ids.nth(0).is_visible()
        assert ["app.test_broken"] == page.locator("#tests .failing-tests .test-id").all_inner_texts()
        assert "app.py:9" in page.inner_text("#tests .failing-tests")
        box = "details.step .stdout .term"
        page.locator(box).scroll_into_view_if_needed()
        assert [True, False] == [page.evaluate(IN_VIEW, [m, box]) for m in ("LAST-LINE", "FIRST-LINE")]
        assert [] == r.problems
    finally:
        r.close()
